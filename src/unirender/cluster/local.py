"""LocalBackend: one player per session on this machine, a ``unirender.Controller`` per session in this process.

The step path is a lock and a method call on the Controller: nothing is copied, the Event is the Controller's.
Players are launched on the backend's own long-lived threads because ``PR_SET_PDEATHSIG`` (which every player gets
from ``ManagedProcess``) fires when the *thread* that started the child exits: a session created from a
short-lived worker thread would otherwise lose its player when that thread ends.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from unirender.cluster.base import (
    LOST,
    READY,
    EventT,
    Resources,
    Session,
    SessionBackend,
    SessionLostError,
    stop_quietly,
)
from unirender.cluster.placement import LocalPlacement, Slot, placement_info
from unirender.cluster.simulators import flat_first_frame
from unirender.errors import PlayerError, RestartError
from unirender.simulator import SplitStepSimulator, family_of

if TYPE_CHECKING:
    from unirender.simulator import Description



class LocalSession(Session[EventT]):
    backend_name = "local"

    def __init__(
        self, backend: LocalBackend, session_id: str, resources: Resources, slot: Slot, kwargs: dict
    ):
        super().__init__(session_id, resources, family_of(kwargs))
        self._backend = backend
        self._slot = slot
        self._kwargs = kwargs
        self._controller: Any = None
        self._begin_step: Callable[..., Callable[[], EventT]] | None = None  # the controller's, if it has one
        self._node = socket.gethostname()

    @property
    def gpu(self) -> int | None:
        return self._slot.gpu

    @property
    def controller(self) -> Any:
        """The session's ``unirender.Controller`` (local backend only)."""
        return self._controller

    def _attach(self, controller: Any) -> None:
        self._controller = controller
        # Whether its step splits in two (SplitStepSimulator), asked once per player, not per step.
        self._begin_step = controller.begin_step if isinstance(controller, SplitStepSimulator) else None
        self.last_event = getattr(controller, "last_event", None)
        self.state = READY

    # -- Session ---------------------------------------------------------------------------------------------
    def step(self, action: Any = None, **kwargs: Any) -> EventT:
        with self._lock:
            return self._call("step", action, **kwargs)

    def begin_step(self, action: Any = None, **kwargs: Any) -> Callable[[], EventT]:
        """The action is sent to the player now (a :class:`~unirender.simulator.SplitStepSimulator`'s
        ``begin_step``: AI2-THOR's Controller), the function returned receives its event; the session is locked in
        between. A simulator without it (ML-Agents): the whole step on a thread, as :meth:`Session.begin_step`."""
        self._lock.acquire()
        begin_step = self._begin_step
        if begin_step is None:
            self._lock.release()
            return super().begin_step(action, **kwargs)
        try:
            self._check_usable()
            receive = begin_step(action, **kwargs)
        except BaseException:
            self._lock.release()
            raise

        def finish() -> EventT:
            try:
                return self._outcome(receive)
            finally:
                self._lock.release()

        return finish

    def reset(self, scene: str | None = None, **initialize_params: Any) -> EventT:
        with self._lock:
            return self._call("reset", scene, **initialize_params)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> EventT:
        self._check_usable()
        return self._outcome(lambda: getattr(self._controller, method)(*args, **kwargs))

    def _check_usable(self) -> None:
        self._check_open()
        if self.state == LOST:
            raise SessionLostError(
                f"session {self.id}: its player crashed and was not restarted; call restart()"
            )

    def _outcome(self, call: Callable[[], EventT]) -> EventT:
        """``call()``'s event, the session's state following it (a restart counted, a lost player marked)."""
        try:
            event = call()
        except RestartError:
            self.restarts += 1  # the Controller restarted the player: episode lost, new player ready
            self.last_event = getattr(self._controller, "last_event", None)
            raise
        except PlayerError:  # crashed beyond max_restarts, hung, garbled: the Controller stopped itself
            self.state = LOST
            raise
        self.steps += 1
        self.last_event = event
        return event

    # -- the lifecycle's hooks (Session.restart/stop) ----------------------------------------------------------
    def _start_player(self) -> None:
        self._attach(self._backend._launch(self._kwargs))

    def _detach_player(self) -> Any:
        controller, self._controller, self._begin_step = self._controller, None, None
        return controller

    def _released(self) -> None:
        self._backend._release(self)

    def describe(self) -> Description:
        with self._lock:
            self._check_open()
            if self._controller is None:
                raise SessionLostError(f"session {self.id} has no player; call restart()")
            return self._controller.describe()

    def _placement_info(self) -> dict:
        info = placement_info(self._controller) if self._controller is not None else {}
        info["node"] = self._node
        info["gpu"] = self._slot.gpu
        return info



class LocalBackend(SessionBackend):
    """Players on this machine. Budget options are those of :class:`LocalPlacement` (``max_sessions``, ``gpus``,
    ``sessions_per_gpu``, ``max_display_sessions``, ``cpu_budget``, ``wait_timeout``); ``controller_defaults`` are
    merged under every session's Controller kwargs."""

    name = "local"

    def __init__(
        self,
        *,
        max_sessions: int | None = None,
        gpus: list[int] | None = None,
        sessions_per_gpu: int | None = None,
        max_display_sessions: int | None = None,
        cpu_budget: float | None = None,
        wait_timeout: float | None = 0.0,
        controller_defaults: dict | None = None,
        launch_threads: int | None = None,
    ):
        super().__init__()
        self.placement = LocalPlacement(
            max_sessions=max_sessions,
            gpus=gpus,
            sessions_per_gpu=sessions_per_gpu,
            max_display_sessions=max_display_sessions,
            cpu_budget=cpu_budget,
            wait_timeout=wait_timeout,
        )
        self.controller_defaults = dict(controller_defaults or {})
        # Long-lived launcher threads: the players' parent-death signal is tied to them (see module doc).
        self._launcher = ThreadPoolExecutor(
            max_workers=launch_threads or max(2, min(8, os.cpu_count() or 2)),
            thread_name_prefix="unirender-launch",
        )

    def _create_session(self, kwargs: dict, session_id: str, resources: Resources | None) -> LocalSession:
        if resources is None:
            gpu = kwargs.get("gpu_device")
            resources = Resources(gpu=gpu if isinstance(gpu, int) else None)
        slot = self.placement.acquire(resources)
        if slot.gpu is not None:
            kwargs["gpu_device"] = slot.gpu
        session = LocalSession(self, session_id, resources, slot, kwargs)
        self._start_checked(session, flat_first_frame)
        return session

    def _launch(self, kwargs: dict) -> Any:
        """The session's simulator (``cluster.simulators.launch``: the family ``kwargs["protocol"]`` names) on a
        launcher thread; a caller interrupted while waiting never leaks it."""
        from unirender.cluster.simulators import launch

        future = self._launcher.submit(launch, kwargs)
        try:
            return future.result()
        except BaseException:
            future.add_done_callback(lambda f: f.exception() is None and stop_quietly(f.result()))
            raise

    def _release(self, session: LocalSession) -> None:
        self._forget(session)
        self.placement.release(session._slot)

    def info(self) -> dict:
        info = super().info()
        info["capacity"] = self.placement.usage()
        return info

    def close(self) -> None:
        super().close()
        self._launcher.shutdown(wait=True, cancel_futures=True)
