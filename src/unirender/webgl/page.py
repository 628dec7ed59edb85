"""The host page unirender serves for a WebGL build, in place of the build's own ``index.html``: a canvas at the
declared size with nothing around it (so canvas and page coordinates agree), the contract script (``host.js``),
the spec's host script (the objects a build's jslib expects on ``window``), then the build's loader and
``createUnityInstance`` with the build's files."""

from __future__ import annotations

import html
import json
from importlib import resources

from unirender.webgl.build import WebGLBuild

WAIT_FOR = ("instance", "ready")  # boot ends when createUnityInstance resolves, or when the page calls ready()


def host_js() -> bytes:
    return resources.files("unirender.webgl").joinpath("host.js").read_bytes()


def host_page(build: WebGLBuild, width: int, height: int, *, host_script: str = "", wait_for: str = "instance",
              config: dict | None = None) -> bytes:
    """The page's HTML. ``config``: extra ``createUnityInstance`` config entries (company/product names, ...)."""
    if wait_for not in WAIT_FOR:
        raise ValueError(f"wait_for must be one of {', '.join(WAIT_FOR)}, got {wait_for!r}")
    unity_config = {**build.urls(), "devicePixelRatio": 1, "matchWebGLToCanvasSize": False,
                    "webglContextAttributes": {"preserveDrawingBuffer": True}, **(config or {})}
    unity_config = {k: ("/" + v if k.endswith("Url") else v) for k, v in unity_config.items()}
    # </script> inside JSON or a host script would end the script element early.
    config_js = json.dumps(unity_config).replace("</", "<\\/")
    host_script = host_script.replace("</script", "<\\/script")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>unirender: {html.escape(build.name)}</title>
<style>html,body{{margin:0;padding:0;overflow:hidden;background:#000}}
#unity-canvas{{display:block;width:{width}px;height:{height}px;outline:none}}</style></head>
<body><canvas id="unity-canvas" width="{width}" height="{height}" tabindex="-1"></canvas>
<script src="/__unirender__/host.js"></script>
<script>{host_script}</script>
<script src="/{build.loader}"></script>
<script>unirender.boot({config_js}, {json.dumps(wait_for)});</script>
</body></html>
""".encode()
