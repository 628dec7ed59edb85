"""The AI2-THOR family's cluster adapter: its session body for the service backend.

AI2-THOR's launcher is ``Controller`` itself and its camera reader ``controller.camera_frames``
(``cluster.simulators``); what this module adds is :func:`ai2thor_session_body`, ``Controller(**kwargs)`` as the
service's session body (``cluster.service_backend.SESSION_BODIES``).
"""

from __future__ import annotations

from typing import Any

from unirender.cluster.base import DEFAULT_MAX_RESTARTS, refuse_kwargs
from unirender.simulator import AI2THOR

# AI2-THOR: Controller kwargs the service's EnvironmentSpec sets (Controller name -> spec name).
_AI2THOR_ENVIRONMENT = {
    "executable": "executable", "build": "build", "width": "width", "height": "height", "server": "transport", "quality": "quality",
    "platform": "platform", "headless": "headless", "gpu_device": "gpu_device", "x_display": "x_display",
    "server_timeout": "server_timeout", "server_start_timeout": "server_start_timeout",
    "max_restarts": "max_restarts",
}  # fmt: skip
# Controller kwargs that name this machine's things (a hub, a log directory, a port): meaningless on the service.
_AI2THOR_LOCAL_ONLY = ("player_hub", "log_dir", "start_unity", "host", "port", "wsgi_fast_path")


def ai2thor_session_body(kwargs: dict) -> dict:
    """``Controller(**kwargs)`` as ``Client.session(...)`` arguments: the environment, the render section (its
    modalities from the Initialize flags, ``depth_format``), ``scene`` and ``auto_restart`` (``max_restarts`` > 0,
    as the Controller restarts a crashed player)."""
    from unirender.spec.models import MODALITY_INITIALIZE_FLAG

    kwargs = dict(kwargs)
    kwargs.pop("protocol", None)
    refuse_kwargs(AI2THOR, [k for k in _AI2THOR_LOCAL_ONLY if kwargs.get(k) not in (None, True)
                      or (k == "start_unity" and kwargs.get(k) is False)],  # fmt: skip
            "they name things of this machine; the service starts and serves its players itself")
    for key in _AI2THOR_LOCAL_ONLY:
        kwargs.pop(key, None)
    environment = {spec: kwargs.pop(name) for name, spec in _AI2THOR_ENVIRONMENT.items() if name in kwargs}
    if isinstance(environment.get("transport"), str):
        environment["transport"] = environment["transport"].lower()
    if environment.get("platform") is None:
        environment.pop("platform", None)
    restarts = environment.setdefault("max_restarts", DEFAULT_MAX_RESTARTS)
    modalities = ["rgb"]
    for modality, flag in MODALITY_INITIALIZE_FLAG.items():
        if flag is not None and kwargs.pop(flag, False):
            modalities.append(modality)
    render: dict[str, Any] = {"modalities": modalities, "depth_format": kwargs.pop("depth_format", "Meters")}
    if "flow" in modalities:
        render["flow_policy"] = "previous_step"
    scene = kwargs.pop("scene", None)
    if scene is not None and not isinstance(scene, str):
        raise ValueError(f"the service backend takes a scene name, not {scene!r}")
    if kwargs:  # the rest are Initialize parameters, as the Controller takes them
        environment["initialize"] = kwargs
    return {"environment": environment, "render": render, "scene": scene, "auto_restart": restarts > 0}


__all__ = ["ai2thor_session_body"]
