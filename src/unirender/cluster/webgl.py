"""The WebGL family's cluster adapter: its session body for the service backend (:func:`webgl_session_body`,
registered in ``cluster.service_backend.SESSION_BODIES``).

The family's launcher and camera reader live with its controller (``unirender.webgl.controller:launch`` and
``:camera_frames``, ``cluster.simulators``); what this module adds is ``launch(**kwargs)`` as the service's session
body: ``{"environment": {"protocol": "webgl", ...}, "auto_restart"}``, the inverse of
``service.webgl_sessions``. A build folder of this machine has already been replaced by its digest
(``ServiceBackend.bring_build``) when this runs.
"""

from __future__ import annotations

from typing import Any

from unirender.cluster.base import DEFAULT_MAX_RESTARTS, refuse_kwargs
from unirender.simulator import WEBGL

# WebGLController kwargs the service's WebGLEnvironmentSpec sets, by the same names.
_WEBGL_ENVIRONMENT = ("executable", "build", "width", "height", "actions", "fps", "frames_per_step", "readback",
                      "host_script", "wait_for", "reset_message", "config", "platform", "gpu_device", "boot_timeout",
                      "step_timeout", "max_restarts")  # fmt: skip


def webgl_session_body(kwargs: dict) -> dict:
    """``launch(**kwargs)`` (``WebGLController``'s arguments) as ``Client.session(...)`` arguments."""
    kwargs = dict(kwargs)
    kwargs.pop("protocol", None)
    environment: dict[str, Any] = {"protocol": WEBGL}
    for key in _WEBGL_ENVIRONMENT:
        value = kwargs.pop(key, None)
        if value is None:
            continue
        if key == "executable":
            value = str(value)
        elif key == "actions":
            value = {name: dict(action) for name, action in dict(value).items()}
        elif key in ("reset_message",):
            value = list(value)
        elif key == "config":
            value = dict(value)
        environment[key] = value
    if environment.get("platform") == "auto":
        environment.pop("platform")
    if kwargs.get("log_dir") is not None:
        refuse_kwargs(WEBGL, ["log_dir"], "the service keeps its players' logs under its data root")
    kwargs.pop("log_dir", None)
    refuse_kwargs(WEBGL, list(kwargs), "the service's WebGL environment has no such setting")
    restarts = environment.setdefault("max_restarts", DEFAULT_MAX_RESTARTS)
    return {"environment": environment, "auto_restart": restarts > 0}


__all__ = ["webgl_session_body"]
