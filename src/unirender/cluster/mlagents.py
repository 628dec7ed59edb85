"""The ML-Agents family's cluster adapter: the family as a session's simulator (registered in
``cluster.simulators``) and its session body for the service backend (:func:`mlagents_session_body`, registered in
``cluster.service_backend.SESSION_BODIES``).

An :class:`MLAgentsSimulator` is an ``MLAgentsController`` reset once at start, so the session has a first event
as AI2-THOR sessions do. The session then steps it with ``{behavior: actions}``
(what ``MLAgentsController.step`` takes; a dict passes the backends' action handling untouched) and its events
are ``MLAgentsEvent``s.
"""

from __future__ import annotations

from typing import Any

from unirender.cluster.base import DEFAULT_MAX_RESTARTS, refuse_kwargs
from unirender.simulator import MLAGENTS


class MLAgentsSimulator:
    """An ``MLAgentsController`` as a session's controller: started and reset at once (``last_event``),
    ``step(actions)``, ``reset(scene=None, **environment_parameters)`` (new episodes; the parameters are sent
    with it), ``stop()``. Everything else (``behavior_specs``, ``resolution``, ``process``, ``log_path``, ...) is
    the controller's."""

    family = "mlagents"

    def __init__(self, **kwargs: Any):
        from unirender.mlagents import MLAgentsController

        self.controller = MLAgentsController(**kwargs)
        try:
            self.last_event = self.controller.reset()
        except BaseException:
            self.controller.close()
            raise

    def step(self, actions: Any = None):
        if isinstance(actions, dict) and not actions:
            actions = None  # {} = zeros for every behavior, as a missing behavior gets
        self.last_event = self.controller.step(actions)
        return self.last_event

    def reset(self, scene: str | None = None, **environment_parameters: Any):
        if scene is not None:
            raise ValueError(
                "an ML-Agents game has no scenes to reset to; reset() takes environment parameters"
            )
        if environment_parameters:
            self.controller.set_environment_parameters(**environment_parameters)
        self.last_event = self.controller.reset()
        return self.last_event

    def describe(self):
        return self.controller.describe()

    def stop(self) -> None:
        self.controller.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["controller"], name)


_MLAGENTS_ENVIRONMENT = ("executable", "build", "width", "height", "time_scale", "quality_level", "platform", "x_display",
                         "gpu_device", "timeout", "start_timeout", "max_restarts", "layout", "args", "env")


def mlagents_session_body(kwargs: dict) -> dict:
    """``MLAgentsController(**kwargs)`` as ``Client.session(...)`` arguments (``environment_parameters`` as
    numbers; a sampler draws on the service from the environment section, so give its spec there)."""
    kwargs = dict(kwargs)
    kwargs.pop("protocol", None)
    environment: dict[str, Any] = {"protocol": MLAGENTS}
    for key in _MLAGENTS_ENVIRONMENT:
        if key in kwargs:
            value = kwargs.pop(key)
            environment[key] = list(value) if key == "args" else dict(value) if key == "env" else value
    if environment.get("platform") is None:
        environment.pop("platform", None)
    parameters = kwargs.pop("environment_parameters", None) or {}
    bad = [k for k, v in parameters.items() if isinstance(v, bool) or not isinstance(v, int | float)]
    refuse_kwargs(MLAGENTS, [f"environment_parameters.{k}" for k in bad],
            "only numbers travel as environment parameters (a sampler: put its spec in the environment section)")
    if parameters:
        environment["environment_parameters"] = {k: float(v) for k, v in parameters.items()}
    seed = int(kwargs.pop("seed", 0) or 0)
    if kwargs.get("log_dir") is not None:
        refuse_kwargs(MLAGENTS, ["log_dir"], "the service keeps its players' logs under its data root")
    kwargs.pop("log_dir", None)
    refuse_kwargs(MLAGENTS, list(kwargs), "the service's ML-Agents environment has no such setting")
    restarts = environment.setdefault("max_restarts", DEFAULT_MAX_RESTARTS)
    body: dict[str, Any] = {"environment": environment, "auto_restart": restarts > 0}
    if seed:
        body["seed"] = seed  # the game's seed at launch (MLAgentsEnv's reset(seed=...) relaunches with it)
    return body
