"""The service's sessions: who owns each one, its limits, idle reaping and crash handling.

The backend (``unirender.cluster``) owns the players; this registry only adds what HTTP needs on top: an
owner per session (anyone else gets 404), a steps-per-second bucket, an idle clock, and what to do when a
player crashes (restart it if the session asked for that, otherwise end the session and say why).

Sessions cannot outlive their players, and players never outlive the service (``PR_SET_PDEATHSIG``). What does
outlive it is a record of each live session in the service's database: a service that starts and finds
records still live (the last one was killed, or shut down while they ran) lists those sessions as ``lost``,
with the reason, until their owner deletes them or ``lost_session_retention_s`` passes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unirender.cluster import Session, SessionBackend, SessionClosedError, SessionLostError
from unirender.cluster.base import new_session_id
from unirender.errors import PlayerError, RestartError, raising
from unirender.protocol import ProtocolError
from unirender.service.errors import ApiError, from_unirender_error
from unirender.service.frame_slot import FrameSlot
from unirender.service.limits import PlayerSlots, TokenBucket
from unirender.service.metrics import ServiceMetrics
from unirender.service.store import ServiceStore, SessionRecord

log = logging.getLogger(__name__)


@dataclass
class SessionEntry:
    id: str
    owner: str
    session: Session
    environment: dict
    auto_restart: bool
    bucket: TokenBucket
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0  # requests in flight on this session; the reaper leaves busy sessions alone
    frames: FrameSlot = field(default_factory=FrameSlot)  # latest event for viewers (the web console)
    adapter: Any = None  # its family's SessionAdapter (service.families), set by the family that created it

    def describe(self) -> dict:
        info = self.session.info()
        info.update(
            id=self.id,
            auto_restart=self.auto_restart,
            idle_s=round(time.monotonic() - self.last_used, 3),
            environment=self.environment,
        )
        return info


class SessionRegistry:
    """Thread-safe map of session id -> SessionEntry, enforcing per-token and global limits."""

    _TOMBSTONES = 1024  # remember why recently ended sessions ended (410 instead of a bare 404)

    def __init__(
        self,
        backend: SessionBackend,
        *,
        slots: PlayerSlots,
        metrics: ServiceMetrics,
        sessions_per_token: int,
        steps_per_second: float,
        idle_timeout_s: float,
        store: ServiceStore | None = None,
        lost_retention_s: float = 24 * 3600.0,
    ):
        self.backend = backend
        self.slots = slots
        self.metrics = metrics
        self.sessions_per_token = sessions_per_token
        self.steps_per_second = steps_per_second
        self.idle_timeout_s = idle_timeout_s
        self._sessions: dict[str, SessionEntry] = {}
        self._ended: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (owner, reason)
        self._pending: dict[str, int] = {}  # owner -> sessions being created
        self._lock = threading.Lock()
        self.store = store
        self.lost_retention_s = lost_retention_s
        self._lost: dict[str, SessionRecord] = {}  # live when the previous service stopped; see recover()

    # -- records of sessions a previous service left ------------------------------------------------------
    LOST_CRASHED = ("the service stopped unexpectedly (killed or crashed) while this session was live; its "
                    "player was stopped with it")
    LOST_SHUTDOWN = "the service was shut down while this session was live; its player was stopped"

    def recover(self, now: float | None = None) -> None:
        """At start: every record still ``live`` belonged to a service that died; they become ``lost``."""
        if self.store is None:
            return
        now = time.time() if now is None else now
        live = len(self.store.sessions("live"))
        self.store.mark_sessions_lost(self.LOST_CRASHED, now)
        self.store.expire_sessions(now - self.lost_retention_s)
        with self._lock:
            self._lost = {r.id: r for r in self.store.sessions("lost")}
        if live:
            self.metrics.sessions_lost.inc(live)

    def _lost_doc(self, record: SessionRecord) -> dict:
        doc = {k: v for k, v in record.info.items() if k != "idle_s"}
        doc.update(id=record.id, state="lost", reason=record.reason, created_at=record.created_at,
                   lost_at=record.ended_at)
        return doc

    def describe(self, owner: str, session_id: str) -> dict:
        """GET /v1/sessions/{id}: a live session, or the record of one lost in a restart."""
        with self._lock:
            record = self._lost.get(session_id)
        if record is not None and record.owner == owner:
            return self._lost_doc(record)
        return self.get(owner, session_id).describe()

    def describe_all(self, owner: str) -> list[dict]:
        """GET /v1/sessions: the owner's live sessions, then those lost in a restart (oldest first)."""
        with self._lock:
            lost = [r for r in self._lost.values() if r.owner == owner]
        return [s.describe() for s in self.list(owner)] + [self._lost_doc(r) for r in lost]

    def expire_lost(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        with self._lock:
            old = [r.id for r in self._lost.values() if (r.ended_at or 0) < now - self.lost_retention_s]
            for session_id in old:
                del self._lost[session_id]
        if old and self.store is not None:
            self.store.expire_sessions(now - self.lost_retention_s)
        return len(old)

    def _record(self, entry: SessionEntry) -> None:
        if self.store is None:
            return
        try:
            self.store.insert_session(SessionRecord(entry.id, entry.owner, "live", None, entry.describe(),
                                                    time.time(), None))
        except Exception:  # the record is a courtesy; the session itself works without it
            log.exception("recording session %s", entry.id)

    def _forget(self, session_id: str) -> None:
        if self.store is None:
            return
        try:
            self.store.delete_session(session_id)
        except Exception:
            log.exception("removing the record of session %s", session_id)

    # -- lookup ----------------------------------------------------------------------------------------
    def get(self, owner: str, session_id: str) -> SessionEntry:
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None and s.owner == owner:
                return s
            ended = self._ended.get(session_id)
            lost = self._lost.get(session_id)
        if lost is not None and lost.owner == owner:
            raise ApiError(410, "session_ended", f"session {session_id} was lost: {lost.reason}")
        if ended is not None and ended[0] == owner:
            raise ApiError(410, "session_ended", f"session {session_id} has ended: {ended[1]}")
        # Another owner's session is indistinguishable from a missing one.
        raise ApiError(404, "session_not_found", f"no session {session_id!r}")

    def list(self, owner: str) -> list[SessionEntry]:
        with self._lock:
            return [s for s in self._sessions.values() if s.owner == owner]

    def count(self) -> int:
        with self._lock:
            return len(self._sessions)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def create(self, owner: str, controller_kwargs: dict, environment: dict, *, auto_restart: bool,
               adapt: Callable[[SessionEntry], Any] | None = None, failure: str = "") -> SessionEntry:
        """A new session of ``owner``'s, its player started with ``controller_kwargs``; ``adapt(entry)`` makes its
        family's adapter (``entry.adapter``): a session whose adapter cannot be made is deleted (``failure``: why,
        as its record says) and the error raised."""
        with self._lock:
            mine = sum(1 for s in self._sessions.values() if s.owner == owner) + self._pending.get(owner, 0)
            if mine >= self.sessions_per_token:
                raise ApiError(
                    429, "too_many_sessions",
                    f"this token already has {mine} sessions (limit {self.sessions_per_token}); delete one first",
                )
            self._pending[owner] = self._pending.get(owner, 0) + 1
        try:
            self.slots.acquire()
            try:
                session = self.backend.create_session(dict(controller_kwargs), session_id=new_session_id())
            except BaseException:
                self.slots.release()
                raise
        finally:
            with self._lock:
                self._pending[owner] -= 1
        entry = SessionEntry(
            id=session.id, owner=owner, session=session, environment=environment,
            auto_restart=auto_restart, bucket=TokenBucket(self.steps_per_second),
        )
        if session.last_event is not None:
            entry.frames.publish(session.last_event)
        with self._lock:
            self._sessions[entry.id] = entry
        self._record(entry)
        self._update_gauges()
        if adapt is not None:
            try:
                entry.adapter = adapt(entry)
            except BaseException:
                self.delete(owner, entry.id, failure)
                raise
        return entry

    def delete(self, owner: str, session_id: str, reason: str = "deleted by its owner") -> None:
        with self._lock:
            record = self._lost.get(session_id)
            if record is not None and record.owner == owner:  # a lost session's record: deleting removes it
                del self._lost[session_id]
        if record is not None and record.owner == owner:
            self._forget(session_id)
            return
        entry = self.get(owner, session_id)
        self._end(entry, reason)

    def _end(self, entry: SessionEntry, reason: str, *, shutdown: bool = False) -> None:
        with self._lock:
            if self._sessions.pop(entry.id, None) is None:
                return  # somebody else ended it already
            self._ended[entry.id] = (entry.owner, reason)
            while len(self._ended) > self._TOMBSTONES:
                self._ended.popitem(last=False)
        if shutdown and self.store is not None:  # listed as lost by the next service
            try:
                self.store.mark_sessions_lost(self.LOST_SHUTDOWN, time.time(), [entry.id])
            except Exception:
                log.exception("recording session %s as lost", entry.id)
        else:
            self._forget(entry.id)
        entry.frames.close()  # its viewers' streams end
        try:
            entry.session.stop()
        except Exception:
            log.exception("stopping session %s", entry.id)
        finally:
            self.slots.release()
            self._update_gauges()

    def stop_all(self, reason: str) -> None:
        with self._lock:
            entries = list(self._sessions.values())
        threads = [threading.Thread(target=self._end, args=(e, reason), kwargs={"shutdown": True}, daemon=True)
                   for e in entries]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

    def reap_idle(self, now: float | None = None) -> list[str]:
        """Stop sessions idle for longer than ``idle_timeout_s``; returns their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [e for e in self._sessions.values() if not e.busy and now - e.last_used > self.idle_timeout_s]
        for entry in idle:
            log.info("reaping idle session %s (owner %s)", entry.id, entry.owner)
            self._end(entry, f"idle for more than {self.idle_timeout_s:g} s")
            self.metrics.reaped.inc()
        self.expire_lost()
        return [e.id for e in idle]

    @contextlib.contextmanager
    def hold(self, entry: SessionEntry):
        """Mark a session busy while driving it directly (one-shot renders): the reaper leaves it alone."""
        with self._lock:
            entry.busy += 1
        try:
            yield entry.session
        finally:
            with self._lock:
                entry.busy -= 1
                entry.last_used = time.monotonic()

    # -- actions ---------------------------------------------------------------------------------------
    def begin_step(self, owner: str, session_id: str, action: dict) -> Callable[[], Any]:
        """One step in two halves (``Session.begin_step``): checked and started now, the function returned
        gives the event (or raises the step's ``ApiError``). Call it in any case: the session is busy until
        then."""
        entry = self._enter(owner, session_id, rate_limited=True)
        started = time.perf_counter()
        try:
            receive = entry.session.begin_step(action)
        except Exception as exc:  # noqa: BLE001 - the second half raises it, as the whole step would
            receive = raising(exc)
        return lambda: self._leave(entry, started, receive)

    def reset(self, owner: str, session_id: str, scene: str | None, init: dict):
        return self._call(owner, session_id, lambda s: s.reset(scene, **init), rate_limited=False)

    def _call(self, owner: str, session_id: str, fn, *, rate_limited: bool):
        entry = self._enter(owner, session_id, rate_limited=rate_limited)
        return self._leave(entry, time.perf_counter(), lambda: fn(entry.session))

    def _enter(self, owner: str, session_id: str, *, rate_limited: bool) -> SessionEntry:
        """The caller's session, within its rate limit, marked busy (the reaper leaves it alone)."""
        entry = self.get(owner, session_id)
        if rate_limited:
            wait = entry.bucket.take()
            if wait:
                raise ApiError(
                    429, "rate_limited",
                    f"more than {self.steps_per_second:g} steps per second on session {session_id}",
                    headers={"Retry-After": str(max(1, round(wait)))}, retry_after_s=round(wait, 3),
                )
        with self._lock:
            entry.busy += 1
        return entry

    def _leave(self, entry: SessionEntry, started: float, call: Callable[[], Any]):
        """``call()``'s event (the session's step or reset), counted and shown to the console's viewers; a failure
        as the API's error; the session no longer busy."""
        try:
            event = call()
        except (RestartError, PlayerError, ProtocolError, SessionLostError) as exc:
            self.metrics.steps.labels("player_failure").inc()
            raise self._after_crash(entry, exc) from exc
        except SessionClosedError as exc:
            raise ApiError(410, "session_ended", str(exc)) from exc
        except Exception as exc:
            self.metrics.steps.labels("error").inc()
            raise from_unirender_error(exc) from exc
        finally:
            with self._lock:
                entry.busy -= 1
                entry.last_used = time.monotonic()
        self.metrics.step_seconds.observe(time.perf_counter() - started)
        self.metrics.steps.labels("ok").inc()
        entry.frames.publish(event)
        return event

    def _after_crash(self, entry: SessionEntry, exc: BaseException) -> ApiError:
        """The player failed during this request. The Controller restarts a crashed player itself when the
        session asked for that (``max_restarts``) and raises RestartError; anything else ends the session."""
        error = from_unirender_error(exc)
        if isinstance(exc, RestartError):
            self.metrics.player_restarts.inc()
            return error
        if entry.auto_restart and isinstance(exc, SessionLostError):  # e.g. a lost Ray actor
            try:
                entry.session.restart()
                self.metrics.player_restarts.inc()
                return ApiError(502, "player_restarted", f"the player was lost and restarted; the episode is "
                                f"lost, reset and continue ({exc})")
            except Exception as restart_exc:
                error.message += f"; restart failed: {restart_exc}"
        self._end(entry, f"its player failed: {error.message}")
        error.message = f"session {entry.id} has ended: {error.message}"
        return error

    def _update_gauges(self) -> None:
        self.metrics.sessions.set(self.count())
        self.metrics.players.set(self.slots.used)


class IdleReaper:
    """Background thread calling ``registry.reap_idle()`` every ``interval`` seconds until stopped."""

    def __init__(self, registry: SessionRegistry, interval: float):
        self.registry = registry
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="unirender-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.registry.reap_idle()
            except Exception:
                log.exception("idle reaper")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
