"""The ML-Agents family as a session's simulator (registered in ``cluster.simulators``).

An :class:`MLAgentsSimulator` is an ``MLAgentsController`` reset once at start, so the session has a first event
as AI2-THOR sessions do. The session then steps it with ``{behavior: actions}``
(what ``MLAgentsController.step`` takes; a dict passes the backends' action handling untouched) and its events
are ``MLAgentsEvent``s.
"""

from __future__ import annotations

from typing import Any


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
