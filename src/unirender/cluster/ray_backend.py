"""RayBackend: one Ray actor per session, each owning its player (see ``ray_actor.py``).

Placement: actors ask ``num_cpus=0`` (a CPU-holding actor silently caps a node at its CPU count; docs/cluster.md),
``num_gpus=1`` when the session wants a GPU, and custom resources — ``display`` for players needing an X display, optionally a CPU-share resource — so that admission is counted by what nodes
declare. A session for which the cluster has no room within ``wait_timeout`` fails with ``CapacityError``.

Failures: a crashed actor is restarted by Ray (``max_restarts``; a lost node's actors too when ``replace_timeout``
is 0); the session notices (the call fails, or the actor's incarnation changed), waits for the new actor, starts a
fresh player and raises ``RestartError`` (episode lost, as locally). When Ray gives up, ``SessionLostError``;
``restart()`` then places a brand-new actor. Every ``ray.get`` is bounded.

A lost *node* is ridden through (docs/cluster.md, "When a Ray node is lost"): the session places a new actor
itself on a node with room (not Ray's restart, which would wait unbounded for room and use up ``max_restarts``,
the bound on an actor that keeps crashing on a live node), waiting up to ``replace_timeout``, and raises
:class:`ActorLostError` (``cause`` ``node_lost``); no room in time: one ``SessionLostError`` saying what it tried.
``backend.faults()`` counts it; each lost node is logged once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import ray  # the optional extra: this module is imported only for the "ray" backend

from unirender.builds.fetch import pin_build
from unirender.cluster.base import (
    LOST,
    READY,
    RESTARTING,
    CapacityError,
    EventT,
    Resources,
    Session,
    SessionBackend,
    SessionLostError,
)
from unirender.cluster.ray_actor import IncarnationChanged, SessionActor
from unirender.cluster.ray_builds import SERVER_CONCURRENCY, StoreServer
from unirender.cluster.simulators import RAY_RUNTIME_ENV, event_codec, flat_first_frame
from unirender.errors import PlayerError, PlayerTimeoutError, RestartError
from unirender.simulator import family_of

if TYPE_CHECKING:
    from unirender.simulator import Description

log = logging.getLogger(__name__)

# Ray system config that sends frames (up to 8 MiB per reply) inline in the actor's reply instead of through the
# object store: fewer round trips per step (measured in benchmarks/results-scale.md). Cluster-wide: give it to the
# head (``ray start --head --system-config='...'`` or ``_system_config=`` of ``ray.init``/``Cluster``).
INLINE_FRAMES_SYSTEM_CONFIG = {
    "max_direct_call_object_size": 8 * 2**20,
    "task_rpc_inlined_bytes_limit": 64 * 2**20,
}


class ActorLostError(RestartError):
    """The session's Ray actor died (``cause`` ``actor_lost``: restarted by Ray on its node) or its node did
    (``node_lost``: placed again on another node), and a new actor with a new player took over: the episode is
    lost, as after a player crash (a ``RestartError``: a gym env ends the episode truncated, ``info["restart_cause"]``
    is ``cause``)."""

    def __init__(self, message: str, *, cause: str):
        super().__init__(message)
        self.cause = cause


class RaySession(Session[EventT]):
    backend_name = "ray"

    def __init__(self, backend: RayBackend, session_id: str, resources: Resources, kwargs: dict):
        super().__init__(session_id, resources, family_of(kwargs))
        self._backend = backend
        self._kwargs = kwargs
        self._events = event_codec(self.family)  # how its events come back from the actor
        self._actor: Any = None
        self._incarnation: str | None = None
        self._placed: dict = {}
        self._build_fetch: dict | None = None  # how its actor gets the pinned build (RayBackend._fetch_spec)

    @property
    def actor(self) -> Any:
        """The session's Ray actor handle (Ray backend only)."""
        return self._actor

    # -- Session ---------------------------------------------------------------------------------------------
    def step(self, action: Any = None, **kwargs: Any) -> EventT:
        with self._lock:
            return self._call("step", action, kwargs)

    def reset(self, scene: str | None = None, **initialize_params: Any) -> EventT:
        with self._lock:
            try:
                return self._call("reset", scene, initialize_params)
            except ActorLostError:  # a new actor took over during the reset: a reset's new episode is what was asked
                return self._call("reset", scene, initialize_params)

    # -- the lifecycle's hooks (Session.restart/stop) ----------------------------------------------------------
    def _start_player(self) -> None:
        self._place_and_start()

    def _detach_player(self) -> Any:
        actor, self._actor = self._actor, None
        return actor

    def _discard_player(self, actor: Any) -> None:
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)  # the player goes with it (its process group)
            except Exception:
                pass

    def _stop_player(self, actor: Any) -> None:
        if actor is not None:
            try:
                ray.get(actor.stop.remote(), timeout=self._backend.stop_timeout)
            except Exception:
                pass  # dead, restarting or stuck: the kill below ends it, player included
        self._discard_player(actor)

    def _released(self) -> None:
        self._backend._forget(self)

    def describe(self) -> Description:
        with self._lock:
            self._check_open()
            if self.state == LOST or self._actor is None:
                raise SessionLostError(f"session {self.id} has no player; call restart()")
            return self._get(self._actor.describe.remote(self._incarnation), self._backend.step_timeout)

    def _placement_info(self) -> dict:
        keys = ("node", "node_ip", "actor_pid", "gpu_ids", "platform", "device", "software_device", "pid",
                "server_type")
        return {k: self._placed.get(k) for k in keys}

    # -- internals ---------------------------------------------------------------------------------------
    def _place_and_start(self, wait_timeout: float | None = None) -> None:
        """Wait for room (bounded by ``wait_timeout``), then for the actor and its player (``start_timeout``).

        An actor that dies before its player answers (Ray placed it on a node that was going away: a killed
        container or machine the cluster does not know is gone yet) is replaced by another, placed anew, until
        ``start_timeout``; a player that fails to start is the player's error, raised at once. ``wait_timeout``:
        how long to wait for room instead of the backend's."""
        backend = self._backend
        deadline = time.monotonic() + backend.start_timeout
        while True:
            backend._wait_for_room(self, wait_timeout)
            actor = backend._actor_class(self.resources, self._kwargs).remote(self._kwargs, self._build_fetch)
            try:
                try:
                    # Placement includes starting a Ray worker process (seconds on a busy node): start_timeout.
                    placed = ray.get(actor.placed.remote(), timeout=max(0.1, deadline - time.monotonic()))
                except ray.exceptions.GetTimeoutError:
                    raise CapacityError(
                        f"Ray did not place session {self.id} within {backend.start_timeout:g} s (another session "
                        f"may have taken the room seen free): it asks for {backend.actor_options(self.resources)}"
                    ) from None
                placed, first = self._get(actor.start.remote(placed["incarnation"]),
                                          max(0.1, deadline - time.monotonic()))  # fmt: skip
            except ray.exceptions.RayActorError as exc:
                ray.kill(actor, no_restart=True)
                if time.monotonic() >= deadline:
                    raise SessionLostError(
                        f"session {self.id}: every Ray actor placed for it within {backend.start_timeout:g} s died "
                        f"before its player started (last: {_first_line(exc)})"
                    ) from exc
                time.sleep(0.5)  # let the cluster notice the dead node before placing again
                continue
            except BaseException:
                ray.kill(actor, no_restart=True)
                raise
            self._actor = actor
            self._adopt(placed, first)
            return

    def _adopt(self, placed: dict, first: Any) -> None:
        self._placed = placed
        self._incarnation = placed["incarnation"]
        self.last_event = self._events.unpack(first) if first is not None else None
        self.state = READY

    def _get(self, ref: Any, timeout: float | None) -> Any:
        """``ray.get`` with the actor's own exceptions re-raised as themselves."""
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def _call(self, method: str, *args: Any) -> EventT:
        self._check_open()
        if self.state == LOST:
            raise SessionLostError(f"session {self.id}: its Ray actor is gone; call restart()")
        try:
            packed = self._get(
                getattr(self._actor, method).remote(self._incarnation, *args), self._backend.step_timeout
            )
        except IncarnationChanged:
            self._recover("its Ray actor was restarted (actor or node failure) since the last call")
        except ray.exceptions.RayActorError as exc:
            self._recover(f"its Ray actor died during {method}: {_first_line(exc)}")
        except ray.exceptions.GetTimeoutError:
            self.state = LOST  # the actor is stuck in that call; restart() replaces it
            raise PlayerTimeoutError(
                f"session {self.id}: no answer to {method} within {self._backend.step_timeout:g} s "
                f"(actor on node {self._placed.get('node')})"
            ) from None
        except RestartError:
            self.restarts += 1  # the Controller inside the actor restarted its player
            self._refresh_after_player_restart()
            raise
        except PlayerError:  # crashed beyond max_restarts, hung, garbled: the Controller stopped itself
            self.state = LOST
            raise
        event = self._events.unpack(packed)
        self.steps += 1
        self.last_event = event
        return event

    def _recover(self, reason: str) -> None:
        """Wait for Ray's restart of the actor, start its player, then raise ``RestartError`` (or lost)."""
        old_node = self._placed.get("node")
        self.state = RESTARTING
        backend = self._backend
        if backend.replace_timeout and not backend._node_alive(old_node):
            self._replace(reason, old_node)
        deadline = time.monotonic() + self._backend.start_timeout
        while True:
            try:
                placed, first = self._get(
                    self._actor.start.remote(None), max(0.1, deadline - time.monotonic())
                )
                break
            except ray.exceptions.ActorUnavailableError:  # restarting, or its node is going away: try again
                if backend.replace_timeout and not backend._node_alive(old_node):  # its node's loss now known
                    self._replace(reason, old_node)
                if time.monotonic() > deadline:
                    self.state = LOST
                    raise SessionLostError(
                        f"session {self.id}: {reason}; it did not come back in time"
                    ) from None
                time.sleep(0.2)
            except (ray.exceptions.ActorDiedError, ray.exceptions.GetTimeoutError) as exc:
                if backend.replace_timeout and not backend._node_alive(old_node):
                    self._replace(reason, old_node)
                self.state = LOST
                raise SessionLostError(
                    f"session {self.id}: {reason}; Ray did not restart it ({_first_line(exc)}); "
                    "call restart() to place a new actor"
                ) from None
            except Exception as exc:  # the new player did not start (platform, player error...)
                self.state = LOST
                raise SessionLostError(
                    f"session {self.id}: {reason}; Ray restarted the actor but its player did not start: {exc}"
                ) from exc
        self.restarts += 1
        self._adopt(placed, first)
        backend.count_fault("truncated:actor_lost")
        raise ActorLostError(
            f"session {self.id}: {reason}; restarted on node {placed['node']} (was {old_node}) with a new player. "
            "The episode is lost: call reset().",
            cause="actor_lost",
        )

    def _replace(self, reason: str, old_node: str | None) -> None:
        """The session's node is lost: a new actor and player on a node with room, waiting for room up to
        ``replace_timeout``; raises ``ActorLostError`` (``node_lost``), or ``SessionLostError`` saying what it
        tried when no node could take it."""
        backend = self._backend
        backend._node_lost(old_node, reason)
        self._discard_player(self._detach_player())  # and Ray's pending restart of it, if any: this session places its own
        started = time.monotonic()
        try:
            self._place_and_start(wait_timeout=backend.replace_timeout)
        except (CapacityError, SessionLostError) as exc:
            self.state = LOST
            backend.count_fault("gave_up")
            raise SessionLostError(
                f"session {self.id}: its Ray node {old_node} was lost ({reason}) and no other node took it: tried "
                f"for {time.monotonic() - started:.0f} s (replace_timeout={backend.replace_timeout:g}) to place an "
                f"actor asking for {backend.actor_options(self.resources)}: {exc}"
            ) from exc
        except BaseException:
            self.state = LOST
            raise
        self.restarts += 1
        backend.count_fault("replaced")
        backend.count_fault("truncated:node_lost")
        raise ActorLostError(
            f"session {self.id}: its Ray node {old_node} was lost ({reason}); restarted on node "
            f"{self._placed.get('node')} with a new actor and player. The episode is lost: call reset().",
            cause="node_lost",
        )

    def _refresh_after_player_restart(self) -> None:
        """New player pid and first event, after the actor's Controller restarted its player."""
        try:
            placed, packed = ray.get(
                [self._actor.placed.remote(), self._actor.last_event.remote()],
                timeout=self._backend.step_timeout,
            )
        except Exception:
            return  # the RestartError being raised says enough; the next call will tell more
        self._placed = placed
        self.last_event = self._events.unpack(packed) if packed is not None else None



def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class RayBackend(SessionBackend):
    """Sessions as Ray actors.

    ``address``: the cluster to join (``"auto"``, ``"HOST:6379"``); ``None`` joins the Ray instance this process
    already initialised or starts a local one (``init_options`` go to ``ray.init``; a local one started here
    sends frames inline, ``INLINE_FRAMES_SYSTEM_CONFIG``). ``max_restarts``: how often Ray
    restarts a session's actor after it or its node dies. ``wait_timeout``: seconds a session may wait to be
    placed. ``display_resource`` / ``cpu_resource``: names of the custom resources asked for ``Resources.display``
    and ``Resources.cpu`` (``cpu_resource=None``: CPU share not counted). ``replace_timeout``: seconds a session
    whose node was lost waits for another node to take it (``0``: no riding through, Ray's restart only).

    Builds (docs/cluster.md, "How builds reach players"): a session naming a stored build (``build=``, an
    ``executable`` reference or a path inside the driver's store, ``commit_id``) is pinned to its digest here, and its
    actor fetches that digest into its node's store when missing: from the driver's store through Ray by default,
    from the service at ``build_source`` (its ``GET /v1/builds/{digest}``, with ``token``) when given.
    ``fetch_builds=False``: no pinning or fetching (every node holds every build at the same path, as before).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        max_restarts: int = 1,
        wait_timeout: float = 30.0,
        start_timeout: float = 180.0,
        step_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        replace_timeout: float = 180.0,
        display_resource: str = "display",
        cpu_resource: str | None = None,
        controller_defaults: dict | None = None,
        init_options: dict | None = None,
        build_source: str | None = None,
        token: str | None = None,
        fetch_builds: bool = True,
    ):
        super().__init__()
        if replace_timeout < 0:
            raise ValueError(f"replace_timeout must be >= 0 seconds (0: no riding through lost nodes), "
                             f"got {replace_timeout!r}")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._owns_ray = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None and not os.environ.get("RAY_ADDRESS"):  # our own instance: frames inline
                options["_system_config"] = INLINE_FRAMES_SYSTEM_CONFIG
            options.update(init_options or {})
            try:
                ray.init(address=address, **options)
            except ValueError as exc:
                # No address given, but Ray found a cluster already running on this machine (its
                # ray_current_cluster file) and joins it: a joined cluster keeps its own system config.
                if "_system_config" not in options or "_system_config must not be provided" not in str(exc):
                    raise
                options.pop("_system_config")
                ray.init(address=address, **options)
            self._owns_ray = True
        self.max_restarts = max_restarts
        self.wait_timeout = wait_timeout
        self.start_timeout = start_timeout
        self.step_timeout = step_timeout
        self.stop_timeout = stop_timeout
        self.replace_timeout = float(replace_timeout)
        self._faults: dict[str, int] = {}
        self._faults_lock = threading.Lock()
        self._lost_nodes: set[str | None] = set()  # logged once each
        self.display_resource = display_resource
        self.cpu_resource = cpu_resource
        self.controller_defaults = dict(controller_defaults or {})
        self._remote_class = ray.remote(SessionActor)
        self.build_source = build_source.rstrip("/") if build_source else None
        self.token = token
        self.fetch_builds = fetch_builds
        self._store_server: Any = None  # (the driver's store served to nodes: ray_builds.StoreServer, its endpoint)
        self._store_server_lock = threading.Lock()

    # -- builds (docs/cluster.md, "How builds reach players") ---------------------------------------------------
    def _fetch_spec(self, digest: str) -> dict:
        """What a session's actor needs to fetch ``digest`` into its node's store."""
        spec: dict[str, Any] = {"digest": digest, "timeout": self.step_timeout}
        if self.build_source:
            spec.update(url=self.build_source, token=self.token)
            return spec
        with self._store_server_lock:
            if self._store_server is None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                from unirender.builds import BuildStore

                # On the driver's node (soft=False: never elsewhere, where the driver's store is not), no CPU held.
                here = ray.get_runtime_context().get_node_id()
                server = ray.remote(StoreServer).options(
                    num_cpus=0, max_concurrency=SERVER_CONCURRENCY,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
                ).remote(str(BuildStore().root))  # fmt: skip
                self._store_server = (server, ray.get(server.endpoint.remote(), timeout=self.start_timeout))
        server, endpoint = self._store_server
        spec.update(server=server, server_name=f"{endpoint['name']} (the driver's, served at {endpoint['url']})",
                    endpoint={"url": endpoint["url"], "token": endpoint["token"]})
        return spec

    def build_fetches(self) -> dict[str, dict[str, int]]:
        """Per Ray node id, what the driver's store served it: ``manifests`` (one per fetch) and blob ``bytes``."""
        if self._store_server is None:
            return {}
        return ray.get(self._store_server[0].served.remote(), timeout=self.step_timeout)

    def actor_options(self, resources: Resources) -> dict:
        """The Ray options a session with these ``resources`` is placed with."""
        options: dict[str, Any] = {"num_cpus": 0, "max_restarts": self.max_restarts, "max_task_retries": 0}
        if resources.gpu is not None:
            options["num_gpus"] = 1
        custom = {}
        if resources.display:
            custom[self.display_resource] = 1
        if self.cpu_resource and resources.cpu:
            custom[self.cpu_resource] = resources.cpu
        if custom:
            options["resources"] = custom
        return options

    def _needs(self, resources: Resources) -> dict[str, float]:
        options = self.actor_options(resources)
        needs = dict(options.get("resources", {}))
        if options.get("num_gpus"):
            needs["GPU"] = options["num_gpus"]
        return needs

    def _wait_for_room(self, session: RaySession, wait_timeout: float | None = None) -> None:
        """Until the cluster has the session's resources free, up to ``wait_timeout`` (the argument, else the
        backend's); else ``CapacityError``.

        Checked on the cluster's resource view rather than by waiting on a pending actor, so that a slow worker
        start is not mistaken for a full cluster (and a full cluster fails in ``wait_timeout``, not later)."""
        needs = self._needs(session.resources)
        if not needs:
            return
        wait_timeout = self.wait_timeout if wait_timeout is None else wait_timeout
        deadline = time.monotonic() + wait_timeout
        while True:
            available = ray.available_resources()
            short = {k: v for k, v in needs.items() if available.get(k, 0.0) + 1e-9 < v}
            if not short:
                return
            if time.monotonic() >= deadline:
                total = ray.cluster_resources()
                detail = ", ".join(
                    f"{k}: needs {v:g}, {available.get(k, 0.0):g} free of {total.get(k, 0.0):g}"
                    for k, v in short.items()
                )
                waited = f" within {wait_timeout:g} s" if wait_timeout else ""
                raise CapacityError(f"no Ray node could take session {session.id}{waited}: {detail}")
            time.sleep(0.1)

    # -- riding through lost nodes (docs/cluster.md, "When a Ray node is lost") ---------------------------------
    def _node_alive(self, node_id: str | None) -> bool:
        """Whether the cluster still lists ``node_id`` as alive (unknown: assumed alive, Ray's restart decides)."""
        if node_id is None:
            return True
        try:
            nodes = ray.nodes()
        except Exception:  # noqa: BLE001 - the GCS unreachable: nothing to tell
            return True
        return next((bool(n.get("Alive")) for n in nodes if n.get("NodeID") == node_id), True)

    def _node_lost(self, node_id: str | None, reason: str) -> None:
        """Counted and logged once per node, however many sessions it held."""
        with self._faults_lock:
            if node_id in self._lost_nodes:
                return
            self._lost_nodes.add(node_id)
            self._faults["nodes_lost"] = self._faults.get("nodes_lost", 0) + 1
        log.warning("Ray node %s was lost (%s); placing its sessions on other nodes for up to %g s", node_id,
                    reason, self.replace_timeout)

    def count_fault(self, what: str) -> None:
        with self._faults_lock:
            self._faults[what] = self._faults.get(what, 0) + 1

    def faults(self) -> dict[str, int]:
        """What this backend rode through: ``nodes_lost``, ``replaced`` (sessions placed again after their node was
        lost), ``truncated:<cause>`` (episodes lost: ``node_lost``, ``actor_lost``), ``gave_up``."""
        with self._faults_lock:
            return dict(self._faults)

    def _actor_class(self, resources: Resources, kwargs: dict | None = None) -> Any:
        options = self.actor_options(resources)
        runtime_env = RAY_RUNTIME_ENV.get(family_of(kwargs or {}))
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        return self._remote_class.options(**options)

    def _create_session(self, kwargs: dict, session_id: str, resources: Resources | None) -> RaySession:
        digest = None
        if self.fetch_builds:
            kwargs, digest = pin_build(kwargs)  # on the driver, before placing: a moved tag cannot change it
        session = RaySession(self, session_id, resources or Resources(), kwargs)
        if digest is not None:
            session._build_fetch = self._fetch_spec(digest)
        self._start_checked(session, flat_first_frame)
        return session

    def info(self) -> dict:
        info = super().info()
        info["cluster_resources"] = ray.cluster_resources()
        info["available_resources"] = ray.available_resources()
        info["faults"] = self.faults()
        return info

    def close(self) -> None:
        super().close()
        if self._store_server is not None:
            server, self._store_server = self._store_server[0], None
            try:
                ray.kill(server, no_restart=True)
            except Exception:  # noqa: BLE001 - Ray already gone: so is the actor
                pass
        if self._owns_ray:
            self._owns_ray = False
            ray.shutdown()
