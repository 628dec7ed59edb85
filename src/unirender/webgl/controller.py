"""``WebGLController``: a Unity WebGL build as a unirender simulator, in headless Chromium (docs/webgl.md).

unirender serves the build's files on 127.0.0.1 with the headers Unity's docs require, opens its own host page
(the canvas at the declared size, ``window.unirender``'s contract, the spec's host script) in a Chromium it
starts on the WebGL platform (SwiftShader or the GPU through ANGLE), and steps it: one action's input events,
then ``frames_per_step`` frames on the page's virtual clock, then the frame read back in the same task with
everything the build emitted. A crashed or hung tab, or a dead browser, is a player crash: the browser's whole
process group is killed, and it is restarted within the restart budget (``RestartError``), as the other
families' players are.
"""

from __future__ import annotations

import base64
import collections
import io
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from unirender._process import RestartBudget, RestartWindow
from unirender.errors import ActionError, PlayerCrashedError, PlayerError, PlayerTimeoutError, RestartError
from unirender.protocol.webgl_event import WebGLEvent
from unirender.simulator import ActionDescription, Description, ObservationDescription
from unirender.webgl import actions as webgl_actions
from unirender.webgl.browser import Browser
from unirender.webgl.build import WebGLBuild, find_build
from unirender.webgl.cdp import CDPError, evaluate
from unirender.webgl.page import host_js, host_page
from unirender.webgl.server import BuildFiles, BuildServer

FAMILY = "webgl"
READBACKS = ("pixels", "png", "screenshot")


def launch(executable: str | os.PathLike | None = None, **kwargs: Any) -> WebGLController:
    """The family's launcher (``cluster.simulators.LAUNCHERS``): a session's controller kwargs, ``executable``
    naming the build folder; started and reset once, so the session has a first event as the other families'
    sessions do."""
    build = kwargs.pop("build", None) or executable
    if build is None:
        raise ValueError("a webgl session needs the build folder (environment.executable)")
    return reset_once(WebGLController(build_folder(build), **kwargs))


def reset_once(controller: WebGLController) -> WebGLController:
    """A launched controller reset once, so its session has a first event as the other families' sessions do;
    stopped if that fails (the launchers of this module and ``webgl.ai2thor``)."""
    try:
        controller.reset()
    except BaseException:
        controller.stop()
        raise
    return controller


def build_folder(build: str | os.PathLike) -> str:
    """The folder holding ``Build/`` that a build name stands for: a path as it is, a store reference
    (``name:tag``, ``sha256:<digest>``) the stored folder."""
    from unirender.builds.store import is_reference

    if not is_reference(os.fspath(build)):
        return os.fspath(build)
    from unirender.builds.resolve import resolve_build

    return os.path.dirname(resolve_build(os.fspath(build), platform="WebGL").executable)


def camera_frames(event: WebGLEvent) -> dict:
    """The registry's camera reader for this family: ``{"frame": (H, W, 3) uint8}``."""
    return {"frame": event.frame}


class WebGLController(RestartWindow):
    """One Unity WebGL build in one headless Chromium tab.

    ``build``: the build folder (holding ``Build/``). ``actions``: named actions (see
    :mod:`unirender.webgl.actions`). ``host_script``: JavaScript run before the loader (the host objects a
    build's jslib calls, e.g. ``window.DCL``); ``wait_for``: ``"instance"`` (boot ends when
    ``createUnityInstance`` resolves) or ``"ready"`` (when the page calls ``unirender.ready()``).
    ``reset_message``: a ``[gameObject, method(, argument)]`` SendMessage that starts a new episode; without it
    ``reset()`` reloads the page (a full reboot of the build). ``readback``: ``png`` (``canvas.toDataURL`` in the
    step's own task: the cheapest end to end, benchmarks/README.md "WebGL"), ``pixels`` (``gl.readPixels`` +
    base64: cheaper in the page, but 4x the bytes through DevTools) or ``screenshot`` (DevTools
    ``Page.captureScreenshot``: the composited page, one frame later in the compositor).
    """

    family = FAMILY

    def __init__(
        self,
        build: str | os.PathLike,
        width: int = 300,
        height: int = 300,
        actions: Mapping[str, Mapping] | None = None,
        *,
        fps: float = 60.0,
        frames_per_step: int = 1,
        readback: str = "png",
        host_script: str = "",
        wait_for: str = "instance",
        reset_message: list | tuple | None = None,
        config: Mapping[str, Any] | None = None,
        platform: str | None = "WebGL",
        gpu_device: int | str | None = None,
        boot_timeout: float = 120.0,
        step_timeout: float = 60.0,
        max_restarts: int = 3,
        log_dir: str | os.PathLike | None = None,
        require_code: bool = True,
    ) -> None:
        from unirender.controller import new_log_path

        if readback not in READBACKS:
            raise ValueError(f"readback must be one of {', '.join(READBACKS)}, got {readback!r}")
        if int(frames_per_step) < 1 or fps <= 0:
            raise ValueError("frames_per_step must be >= 1 and fps > 0")
        if platform not in (None, "auto", "WebGL"):
            raise ValueError(f"a WebGL build runs only on the WebGL platform, not {platform!r}")
        self.build: WebGLBuild = find_build(build, require_code=require_code)
        self.width, self.height = int(width), int(height)
        self.declared = webgl_actions.parse_declared(actions, self.width, self.height)
        self.reset_input = (webgl_actions.parse_action({"send_message": list(reset_message)}, self.width, self.height)
                            if reset_message else None)
        self.fps, self.frames_per_step, self.readback = float(fps), int(frames_per_step), readback
        self.wait_for, self.host_script = wait_for, host_script
        self.boot_timeout, self.step_timeout = float(boot_timeout), float(step_timeout)
        self.gpu_device = gpu_device
        self.max_restarts = int(max_restarts)
        self.restarts = RestartBudget(self.max_restarts)
        self.log_path = new_log_path(log_dir, "webgl")
        self.last_event: WebGLEvent | None = None
        self.steps = 0
        self.console: collections.deque[str] = collections.deque(maxlen=50)
        self.boot_seconds: float | None = None
        self.renderer: str | None = None
        self.browser: Browser | None = None
        self.server: BuildServer | None = None
        self._closed = False
        self._booted = False
        self._lock = threading.RLock()
        self._loaded = threading.Event()
        page = host_page(self.build, self.width, self.height, host_script=host_script, wait_for=wait_for,
                         config=dict(config or {}))
        self._app = BuildFiles(self.build.root, {
            "index.html": ("text/html; charset=utf-8", page),
            "host.js": ("application/javascript", host_js()),
        })
        self.resolution = self._resolve_platform()
        try:
            self._launch()
        except BaseException:
            self.stop()
            raise

    # -- the Simulator port ---------------------------------------------------------------------------------
    @property
    def process(self):
        """The browser process (what ``describe_placement`` and crash tests look at)."""
        return self.browser.process if self.browser else None

    def reset(self, scene: Any = None, **params: Any) -> WebGLEvent:
        """A new episode: the ``reset_message`` (then one step's frames), or a reload of the page."""
        if scene is not None or params:
            raise ActionError("a webgl build takes no scene or reset parameters (declare a reset_message)")
        with self._lock:
            return self._guarded(self._reset)

    def step(self, action: Any = None) -> WebGLEvent:
        """One action (a declared name, a mapping, or None for no input), then ``frames_per_step`` frames and
        the frame after them."""
        step_input = self._input(action)
        with self._lock:
            return self._guarded(lambda: self._step(step_input, action))

    def describe(self) -> Description:
        from unirender.simulator import describe_placement

        placement = describe_placement(self)
        placement["device"] = self.renderer or placement["device"]
        return Description(
            family=FAMILY,
            actions=ActionDescription("named", names=tuple(self.declared)),
            observations=(ObservationDescription("frame", "image", (self.height, self.width, 3), "uint8",
                                                 camera=True),),
            build_version=self.build.name,
            **placement,
        )

    def stop(self) -> None:
        self._closed = True
        self._shutdown()
        resolution, self.resolution = getattr(self, "resolution", None), None
        if resolution is not None:
            resolution.release()

    close = stop

    def send_message(self, game_object: str, method: str, argument: Any = None) -> None:
        """Unity's ``SendMessage`` now (no frame runs)."""
        with self._lock:
            self._guarded(lambda: self._send_message((game_object, method) + (() if argument is None else (argument,))))

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        """JavaScript in the page, its value returned (tests and host integrations)."""
        with self._lock:
            return self._guarded(lambda: evaluate(self.browser.page, expression, await_promise=await_promise,
                                                  timeout=self.step_timeout))

    def __enter__(self) -> WebGLController:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<WebGLController {self.build.root} {self.width}x{self.height} pid={getattr(self.browser, 'pid', None)}>"

    # -- launching --------------------------------------------------------------------------------------------
    x_display = None  # PlatformRequest.of reads it: a browser needs no X display

    def _resolve_platform(self):
        from unirender.platforms import PlatformRequest, resolve

        return resolve(PlatformRequest.of(self, headless=True, builtin=False), "WebGL")

    def _launch(self) -> None:
        from unirender.platforms import chromium

        self._booted = False
        self.server = BuildServer(self._app)
        renderer = chromium.GPU if self.gpu_device is not None else chromium.SWIFTSHADER
        binary = self.resolution.env[chromium.ENV_VAR]
        self.browser = Browser(binary, renderer, self.width, self.height, log_path=self.log_path,
                               start_timeout=self.boot_timeout, command_timeout=self.step_timeout)
        page = self.browser.page
        page.listen(self._on_event)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Log.enable")  # network failures (a file that would not decode) are reported only there
        # The viewport is the canvas (a headless window has a minimum width and its own idea of height).
        page.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False})
        self._boot()

    def _boot(self) -> None:
        """Open the host page and wait (bounded) until the build is up."""
        started = time.monotonic()
        page = self.browser.page
        self._loaded.clear()
        navigation = page.send("Page.navigate", {"url": f"{self.server.url}/__unirender__/index.html"})
        if navigation.get("errorText"):
            raise PlayerError(f"the host page did not load: {navigation['errorText']}", log_path=self.log_path)
        remaining = self.boot_timeout - (time.monotonic() - started)
        if not self._wait_loaded(remaining):
            raise PlayerTimeoutError(f"the host page did not finish loading within {self.boot_timeout:g} s"
                                     + self._console_tail())
        remaining = max(1.0, self.boot_timeout - (time.monotonic() - started))
        answer = evaluate(page, f"unirender.whenBooted({int(remaining * 1000)})", await_promise=True,
                          timeout=remaining + 10)
        if not answer.get("ok"):
            errors = "; ".join(answer.get("errors") or [])
            if answer.get("timeout"):
                waited = "createUnityInstance neither resolved nor failed" if self.wait_for == "instance" else \
                    "the page never called unirender.ready()"
                raise PlayerTimeoutError(f"the WebGL build {self.build.root} did not start within "
                                         f"{self.boot_timeout:g} s ({waited})"
                                         + (f"; page errors: {errors}" if errors else "") + self._console_tail(),
                                         log_path=self.log_path)
            raise PlayerError(f"the WebGL build {self.build.root} failed to start: {answer.get('error')}"
                              + (f"; page errors: {errors}" if errors else "") + self._console_tail(),
                              log_path=self.log_path)
        evaluate(page, f"unirender.frameMs = {1000.0 / self.fps!r}")
        if self.renderer is None:
            self.renderer = evaluate(page, "(() => { const c = document.createElement('canvas').getContext('webgl2');"
                                           " const i = c && c.getExtension('WEBGL_debug_renderer_info');"
                                           " return c ? (i ? c.getParameter(i.UNMASKED_RENDERER_WEBGL) : "
                                           "c.getParameter(c.RENDERER)) : null; })()")
        self.boot_seconds = time.monotonic() - started
        self._booted = True

    def _wait_loaded(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._loaded.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
            if self.browser.page.closed_reason is not None or not self.browser.alive():
                raise self.browser.crash_error("loading the host page")
            if time.monotonic() >= deadline:
                return False
        return True

    def _on_event(self, method: str, params: dict) -> None:  # the CDP reader thread
        if method == "Page.domContentEventFired":
            self._loaded.set()
        elif method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append(f"console.{params.get('type')}: {text[:500]}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.console.append(f"{entry.get('source')} {entry.get('level')}: {str(entry.get('text'))[:300]} "
                                f"{entry.get('url', '')}".rstrip())
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append("exception: " + str(details.get("exception", {}).get("description")
                                                    or details.get("text"))[:500])
        elif method in ("Inspector.targetCrashed", "Inspector.detached"):
            browser = self.browser  # None once shut down (this runs on the reader thread)
            page = browser.page if browser is not None else None
            if page is None:
                return
            page._fail_all("the tab crashed" if method == "Inspector.targetCrashed"
                           else f"DevTools detached ({params.get('reason')})")

    def _console_tail(self) -> str:
        lines = list(self.console)[-10:]
        return ("\n  last page console lines:\n" + "\n".join("    " + line for line in lines)) if lines else ""

    # -- stepping ---------------------------------------------------------------------------------------------
    def _input(self, action: Any) -> webgl_actions.Input:
        if action is None:
            return self.declared["noop"]
        if isinstance(action, Mapping) and set(action) == {"action"}:  # a session's form of step("name")
            action = action["action"]
        if isinstance(action, str):
            try:
                return self.declared[action]
            except KeyError:
                raise ActionError(f"unknown action {action!r}; declared: {', '.join(self.declared)}") from None
        if isinstance(action, int | np.integer) and not isinstance(action, bool):
            names = list(self.declared)
            if not 0 <= int(action) < len(names):
                raise ActionError(f"action index {action} out of range 0..{len(names) - 1}")
            return self.declared[names[int(action)]]
        return webgl_actions.parse_action(action, self.width, self.height)

    def _reset(self) -> WebGLEvent:
        if self.reset_input is None:
            if self._booted and self.steps:
                self._boot()
            self.steps = 0
            return self._step(webgl_actions.Input(), None, frames=1)
        self.steps = 0
        return self._step(self.reset_input, None)

    def _send_message(self, message: tuple) -> None:
        import json

        evaluate(self.browser.page, f"unirender.sendMessage(...{json.dumps(list(message))})", timeout=self.step_timeout)

    def _step(self, step_input: webgl_actions.Input, action: Any, frames: int | None = None,
              until: str | None = None) -> WebGLEvent:
        """The step's input, then ``frames`` frames (with ``until``: at most that many, ending after the first
        frame that emitted a value carrying the key ``until``), the readback, the releases."""
        import json

        page = self.browser.page
        for method, params in webgl_actions.press_events(step_input):
            page.send(method, params)
        if step_input.send_message is not None:
            self._send_message(step_input.send_message)
        page_readback = self.readback if self.readback != "screenshot" else "none"
        result = evaluate(page, f"unirender.step({frames or self.frames_per_step}, {json.dumps(page_readback)}, "
                                f"{json.dumps(until)})", timeout=self.step_timeout)
        frame = self._decode(result.get("frame")) if self.readback != "screenshot" else self._screenshot()
        for method, params in webgl_actions.release_events(step_input):
            page.send(method, params)
        self.steps += 1
        self.last_event = WebGLEvent.from_page(frame, result.get("messages") or [], result.get("errors") or [],
                                               self.steps, action)
        return self.last_event

    def _decode(self, frame: dict | None) -> np.ndarray:
        if frame is None:
            raise PlayerError("the page has no WebGL canvas to read (the build created no WebGL context)",
                              log_path=self.log_path)
        width, height = int(frame["width"]), int(frame["height"])
        if "data" in frame:
            rgba = np.frombuffer(base64.b64decode(frame["data"]), np.uint8).reshape(height, width, 4)
            image = rgba[::-1, :, :3]  # GL's rows start at the bottom
        else:
            from PIL import Image

            image = np.asarray(Image.open(io.BytesIO(base64.b64decode(frame["png"]))).convert("RGB"))
        return self._sized(np.ascontiguousarray(image))

    def _screenshot(self) -> np.ndarray:
        from PIL import Image

        shot = self.browser.page.send("Page.captureScreenshot", {
            "format": "png", "clip": {"x": 0, "y": 0, "width": self.width, "height": self.height, "scale": 1},
        })
        return self._sized(np.asarray(Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")))

    def _sized(self, image: np.ndarray) -> np.ndarray:
        """The frame at the declared size (a build that sizes its own drawing buffer is scaled to it)."""
        if image.shape[:2] == (self.height, self.width):
            return image
        from PIL import Image

        return np.asarray(Image.fromarray(image).resize((self.width, self.height), Image.BILINEAR))

    # -- failure handling -------------------------------------------------------------------------------------
    # Crash supervision (RestartWindow._supervised): a crashed tab, a dead browser or a hung step is a crash,
    # restarted within the budget (a hung tab cannot be told from a dead one from outside, so both relaunch).
    _crash_error, _restarted_error, _unusable_errors = (PlayerCrashedError, PlayerTimeoutError), RestartError, ()

    def _guarded(self, operation):
        if self._closed:
            raise PlayerError("this WebGLController is stopped; create a new one", log_path=self.log_path)
        if self.browser is None:
            raise PlayerError("the browser is gone (a failed restart); create a new controller",
                              log_path=self.log_path)
        return self._supervised(lambda: self._in_page(operation))

    def _in_page(self, operation):
        """``operation`` with a crash named by the browser (what died, its exit, the console's tail) and a call
        the page refused as a ``PlayerError``."""
        try:
            return operation()
        except (PlayerCrashedError, PlayerTimeoutError) as failure:
            if isinstance(failure, PlayerCrashedError) or self.browser.page.closed_reason is not None:
                raise self.browser.crash_error("stepping") from failure
            raise
        except CDPError as exc:
            raise PlayerError(f"the page refused the step: {exc}" + self._console_tail(),
                              log_path=self.log_path) from exc

    def _shutdown_player(self) -> None:
        self._shutdown()

    def _relaunch(self) -> None:
        self._launch()

    def _end(self) -> None:
        self.stop()

    def _restarted_message(self, crash: BaseException) -> str:
        return (f"the WebGL player crashed or hung and was restarted ({len(self.restarts)} of max "
                f"{self.max_restarts} within {self.restart_window_s:g} s); call reset() to start a new episode. "
                f"Cause: {crash}")

    def _shutdown(self) -> None:
        browser, self.browser = self.browser, None
        if browser is not None:
            browser.close()
        server, self.server = self.server, None
        if server is not None:
            server.close()
        self._booted = False
