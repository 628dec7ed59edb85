"""Probe worker: ``python -m unirender.platforms._probe_worker OUT.json vulkan egl glx=:1.0``.

Loads graphics drivers in a throw-away process (a broken ICD may segfault) and writes one JSON object with
one entry per probe to OUT.json. stdout/stderr are the caller's log file (drivers chatter there).
"""

from __future__ import annotations

import json
import sys


def run(probes: list[str]) -> dict:
    out: dict = {}
    for name in probes:
        if name == "vulkan":
            from unirender.platforms.vulkan import probe_vulkan

            out[name] = probe_vulkan()
        elif name == "egl":
            from unirender.platforms.egl import probe_egl

            out[name] = probe_egl()
        elif name.startswith("glx="):
            from unirender.platforms.egl import probe_glx

            out[name] = probe_glx(name[4:])
        else:
            out[name] = {"error": f"unknown probe {name!r}"}
    return out


def main(argv: list[str]) -> int:
    out_path, probes = argv[0], argv[1:]
    result = run(probes)
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f)
    import os

    os.replace(out_path + ".tmp", out_path)  # atomic: the parent never reads half a file
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
