"""The session-backend interface: the service, the jobs runner and the Gymnasium envs talk only to this.

A *session* is one player (one simulator of some family, ``unirender.simulator``) that somebody steps. Where it
lives is the backend's business: ``LocalBackend`` keeps a simulator per session in this process, ``RayBackend``
keeps one Ray actor per session, ``ServiceBackend`` a session of a running service. Either way the caller gets the
same :class:`Session` object and its family's events (``Session[EventT]``: AI2-THOR ``Event``, ML-Agents
``MLAgentsEvent``). A session passes the family's action to its simulator as it is: what an action is, and how it
is normalised, is the family adapter's business (AI2-THOR's: ``Controller``, and the client's ``RemoteSession``).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from unirender.errors import UnirenderError
from unirender.simulator import AI2THOR

if TYPE_CHECKING:
    from unirender.simulator import Description

EventT = TypeVar("EventT")  # a session's family's event (AI2-THOR ``Event``, ML-Agents ``MLAgentsEvent``, ...)

# The controllers' default: a crashed player is restarted (RestartError); the service backend's session bodies
# ask the service for the same.
DEFAULT_MAX_RESTARTS = 3


def refuse_kwargs(family: str, keys: list[str], why: str) -> None:
    """A family's session body refusing controller kwargs the service backend cannot send (none: nothing)."""
    if keys:
        raise ValueError(f"the service backend cannot start a {family} session with {sorted(keys)}: {why}")


# Session states, as reported by ``Session.info()["state"]``.
STARTING, READY, RESTARTING, LOST, STOPPED = "starting", "ready", "restarting", "lost", "stopped"


class CapacityError(UnirenderError, TimeoutError):
    """No room for another session (player budget, GPU or display slots) within the wait allowed."""


class SessionLostError(UnirenderError):
    """The session's player, actor or node is gone and was not restarted; ``session.restart()`` makes a new one."""


class SessionClosedError(UnirenderError):
    """The session was stopped (or its backend closed); it takes no more actions."""


@dataclass(frozen=True)
class Resources:
    """What one session asks for.

    ``gpu``: index of the GPU wanted (locally: one of the backend's ``gpus``; on Ray any value asks for
    ``num_gpus=1`` and Ray picks the device). ``None``: no preference (locally round-robin over the backend's GPUs
    when it has some). ``display``: the player needs an X display (counted against the display budget; on Ray the
    custom resource ``display``). ``cpu``: the CPU share the player needs (locally counted only against a configured
    ``cpu_budget``; on Ray only against a custom resource named by ``RayBackend(cpu_resource=...)``: actors
    always ask ``num_cpus=0``, see docs/cluster.md).
    """

    gpu: int | None = None
    display: bool = False
    cpu: float = 1.0

    def __post_init__(self) -> None:
        if self.gpu is not None and (not isinstance(self.gpu, int) or self.gpu < 0):
            raise ValueError(f"Resources.gpu must be a GPU index >= 0 or None, not {self.gpu!r}")
        if not self.cpu >= 0:
            raise ValueError(f"Resources.cpu must be >= 0, not {self.cpu!r}")

    def to_dict(self) -> dict:
        return asdict(self)


_counter = itertools.count(1)


def stop_quietly(player: Any) -> None:
    """``player.stop()`` if there is one, whatever it raises (a session that is stopping keeps stopping)."""
    if player is not None:
        try:
            player.stop()
        except Exception:
            pass


def new_session_id() -> str:
    return f"s{next(_counter)}-{uuid.uuid4().hex[:8]}"


class Session(Generic[EventT]):
    """One player that somebody steps; the same object whatever the backend.

    ``step(action)`` takes the family's action as it is (AI2-THOR: a name and parameters, or a dict; ML-Agents:
    ``{behavior: actions}``) and passes it on untouched. ``step``/``reset`` return the family's event and may
    raise the simulator's errors (``ActionError``,
    ``PlayerCrashedError``, ``RestartError`` when the player crashed and was restarted: the episode is lost,
    call ``reset``), ``SessionLostError`` when the player is gone for good, ``SessionClosedError`` after ``stop``.
    Calls on one session are serialised; different sessions run concurrently.
    """

    backend_name = "?"

    def __init__(self, session_id: str, resources: Resources, family: str = AI2THOR):
        self.id = session_id
        self.family = family  # the simulator family (unirender.simulator), fixed at creation
        self.resources = resources
        self.last_event: EventT | None = None
        self.created_at = time.time()
        self.steps = 0
        self.restarts = 0
        self.state = STARTING
        self._lock = threading.Lock()

    # -- what every backend implements ------------------------------------------------------------------
    def step(self, action: Any = None, **kwargs: Any) -> EventT:
        raise NotImplementedError

    def begin_step(self, action: Any = None, **kwargs: Any) -> Callable[[], EventT]:
        """:meth:`step` in two halves: started now, and the function returned gives its event (or raises what
        ``step`` would); call it before anything else on this session. Lets one thread start several sessions'
        steps before it waits for any (the service's batched steps). Here the step runs on a thread of its own
        (a backend whose player can be sent an action without waiting does better: ``LocalSession``)."""
        return _step_pool().submit(self.step, action, **kwargs).result

    def reset(self, scene: str | None = None, **initialize_params: Any) -> EventT:
        raise NotImplementedError

    def describe(self) -> Description:
        """The session's :class:`unirender.simulator.Description` (its player's actions and observations)."""
        raise NotImplementedError

    def _placement_info(self) -> dict:
        """platform, device, node, pid, ... as known to the backend."""
        return {}

    # -- the player's lifecycle: written once here, the backends fill in the hooks ---------------------------
    def _start_player(self) -> None:
        """Start a player for this session (bounded by the backend's timeouts): ``last_event`` its first event,
        ``state`` READY; raises what the player's start raises."""
        raise NotImplementedError

    def _detach_player(self) -> Any:
        """The session's player (None when it has none), no longer the session's (called under the lock)."""
        raise NotImplementedError

    def _discard_player(self, player: Any) -> None:
        """End a detached player at once, whatever state it is in (a restart's old player)."""
        stop_quietly(player)

    def _stop_player(self, player: Any) -> None:
        """End a detached player when the session stops (a backend may first ask it to stop cleanly)."""
        self._discard_player(player)

    def _released(self) -> None:
        """The session is over: give back what the backend holds for it (its registration, its slot)."""

    def restart(self) -> EventT:
        """Start a fresh player for this session (after ``SessionLostError``); returns its first event."""
        with self._lock:
            self._check_open()
            self.state = RESTARTING
            self._discard_player(self._detach_player())
            try:
                self._start_player()
            except BaseException:
                self.state = LOST
                raise
            self.restarts += 1
            return self.last_event

    def stop(self) -> None:
        """Stop the player and end the session; idempotent."""
        with self._lock:
            if self.state == STOPPED:
                return
            self.state = STOPPED
            player = self._detach_player()
        try:
            self._stop_player(player)
        finally:
            self._released()

    # -- shared ----------------------------------------------------------------------------------------
    def info(self) -> dict:
        info = {
            "id": self.id,
            "backend": self.backend_name,
            "family": self.family,
            "state": self.state,
            "steps": self.steps,
            "restarts": self.restarts,
            "created_at": self.created_at,
            "resources": self.resources.to_dict(),
            "platform": None,
            "device": None,
            "node": None,
            "pid": None,
        }
        info.update(self._placement_info())
        return info

    def _check_open(self) -> None:
        if self.state == STOPPED:
            raise SessionClosedError(f"session {self.id} is stopped")

    def __enter__(self) -> Session[EventT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.state} steps={self.steps}>"



_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _step_pool() -> ThreadPoolExecutor:
    """Threads for :meth:`Session.begin_step`'s steps: long-lived (a player a Controller restarts inside a step is
    a child of the stepping thread, PDEATHSIG), 64 at once (beyond: queued)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="unirender-step")
        return _pool


class SessionBackend:
    """Where sessions live. Thread-safe: the service creates and steps sessions from many threads."""

    name = "?"

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()
        self._closed = False
        self.controller_defaults: dict = {}  # merged under every session's Controller kwargs

    def create_session(
        self,
        controller_kwargs: dict,
        *,
        session_id: str | None = None,
        resources: Resources | None = None,
    ) -> Session:
        """Start a player of the family ``controller_kwargs["protocol"]`` names (AI2-THOR when absent; launched by
        ``unirender.cluster.simulators.launch``) and return its session.

        Raises ``CapacityError`` when the backend's budget stays full for its wait timeout, and whatever the
        simulator raises when the player cannot start (``PlatformError``, ``PlayerError``...).
        """
        self._check_open()
        kwargs = {**self.controller_defaults, **controller_kwargs}
        return self._create_session(kwargs, session_id or new_session_id(), resources)

    def _create_session(self, kwargs: dict, session_id: str, resources: Resources | None) -> Session:
        """:meth:`create_session` of this backend, once it is known open: ``kwargs`` are the session's Controller
        kwargs with the backend's ``controller_defaults`` merged under them (a copy the backend may change)."""
        raise NotImplementedError

    def sessions(self) -> list[Session]:
        with self._sessions_lock:
            return list(self._sessions.values())

    def get(self, session_id: str) -> Session:
        with self._sessions_lock:
            try:
                return self._sessions[session_id]
            except KeyError:
                raise KeyError(f"no session {session_id!r}") from None

    # Whether step_many is one call for all its sessions (the service: one request), so that a vector env steps
    # its envs through it; False: a vector env steps each env's session from a thread of its own instead.
    steps_together = False

    def step_many(self, steps: list[tuple[Session, Any]]) -> list[Any]:
        """Step each ``(session, action)`` once: each item of the answer, in order, is that session's event or
        the exception its ``step`` raised (one session's failure never fails the others'). Here one after the
        other; a backend with ``steps_together`` does it in one call."""
        results: list[Any] = []
        for session, action in steps:
            try:
                results.append(session.step(action))
            except Exception as exc:  # noqa: BLE001 - each step's outcome is its item
                results.append(exc)
        return results

    def info(self) -> dict:
        """Backend-level view: kind, capacity, sessions."""
        return {"backend": self.name, "sessions": [s.info() for s in self.sessions()]}

    def close(self) -> None:
        """Stop every session. Idempotent."""
        self._closed = True
        for session in self.sessions():
            try:
                session.stop()
            except Exception:  # keep stopping the others
                pass

    # -- helpers for subclasses ------------------------------------------------------------------------
    def _start_session(self, session: Session) -> None:
        """Register ``session`` and start its player; on any failure the session is stopped and released."""
        try:
            self._register(session)
        except BaseException:
            session._released()
            raise
        try:
            session._start_player()
        except BaseException:
            session.state = STOPPED
            session._released()
            raise

    def _start_checked(self, session: Session, check: Callable[[Any], Any]) -> None:
        """:meth:`_start_session`, then ``check(session)`` (the first frame's warnings, which may be errors); the
        session is stopped if the check raises."""
        self._start_session(session)
        try:
            check(session)
        except BaseException:  # warnings turned into errors
            session.stop()
            raise

    def _register(self, session: Session) -> None:
        with self._sessions_lock:
            if session.id in self._sessions:
                raise ValueError(f"session id {session.id!r} is already in use")
            self._sessions[session.id] = session

    def _forget(self, session: Session) -> None:
        with self._sessions_lock:
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"{self.name} backend is closed")

    def __enter__(self) -> SessionBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
