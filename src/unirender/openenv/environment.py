"""``UnirenderEnvironment``: one OpenEnv session driving one unirender session (one player) of the declared
environment, on any session backend.

``reset`` launches the player on first use (OpenEnv's HTTP ``/state`` and ``/metadata`` make an environment per
call: making one launches nothing) and starts an episode; ``step`` takes a
:class:`~unirender.openenv.models.UnirenderAction`; ``state`` is kept current by both, so reading it (OpenEnv reads
it on its event loop) never reaches the player. The family's parts (actions, observations) are its adapter's
(:mod:`unirender.openenv.families`), chosen once per server.

Players are bounded by the server's ``max_sessions`` for WebSocket sessions and OpenEnv's one-shot HTTP
``/reset`` alike (a slot is taken at launch, given back when the player has stopped): past it a reset waits at
most :data:`SLOT_WAIT_S` for a closing session's player to stop, then is refused with :class:`SessionLimitError`.
OpenEnv itself refuses a WebSocket session past the same number at once (``CAPACITY_REACHED``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from unirender.cluster.base import SessionBackend
from unirender.errors import RestartError
from unirender.openenv.families import Outcome, adapter_class
from unirender.openenv.images import image_fields, png16_depth_scale
from unirender.openenv.models import IMAGE_FORMATS, UnirenderAction, UnirenderObservation, UnirenderState


class SessionLimitError(RuntimeError):
    """Every player slot of the server is taken."""


class NoPlayerError(RuntimeError):
    """A step before any reset (OpenEnv's one-shot HTTP ``/step`` always is one: each call is a fresh env)."""


# How long a launch waits for a player slot before it is refused. OpenEnv counts a WebSocket session gone as soon
# as its client closes it, before the session's close() has stopped the player (about a second for the reference
# player, up to close_grace_s for a Unity build): a client that closes one session and opens the next meets that
# window. The wait ends the moment a slot is given back; past it the refusal is immediate and clear.
SLOT_WAIT_S = 15.0


@dataclass
class ServedEnvironment:
    """What one ``unirender openenv serve`` serves, shared by its sessions: the declaration, the backend the
    players run on, and the slots that bound them."""

    family: str
    env_id: str
    controller_kwargs: dict
    declaration: dict
    backend: SessionBackend
    max_sessions: int
    modalities: list[str] = field(default_factory=lambda: ["rgb"])
    behavior: str | None = None  # ML-Agents: the behavior observed (the game's first when None)

    def __post_init__(self) -> None:
        self.adapter_class = adapter_class(self.family)  # an unknown family fails here, before serving
        # A depth PNG holds what a dataset's png16 depth holds for the player's unit (render.depth_format):
        # millimetres from metres or millimetres alike.
        self.depth_scale = png16_depth_scale(self.controller_kwargs.get("depth_format", "Meters"))
        self._slots = threading.BoundedSemaphore(self.max_sessions)

    def take_slot(self) -> None:
        if not self._slots.acquire(timeout=SLOT_WAIT_S):
            raise SessionLimitError(
                f"all {self.max_sessions} player slots of this server are in use (--max-sessions): close a "
                "session, or try again later"
            )

    def give_slot(self) -> None:
        self._slots.release()


class UnirenderEnvironment(Environment[UnirenderAction, UnirenderObservation, UnirenderState]):
    """See the module doc. Made by OpenEnv's server through ``functools.partial(UnirenderEnvironment, served)``."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance has a player of its own

    def __init__(self, served: ServedEnvironment):
        super().__init__()
        self._served = served
        self._session: Any = None
        self._adapter: Any = None
        self._last_event: Any = None
        self._lock = threading.Lock()  # reset/step/close of one session never overlap (HTTP and close paths)
        self._state = UnirenderState(
            family=served.family, env_id=served.env_id, declaration=served.declaration
        )

    # -- OpenEnv's verbs -------------------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        include_visual: bool = False,
        image_format: str = "png",
        env_id: str | None = None,
        scene: str | None = None,
        environment_parameters: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> UnirenderObservation:
        """A new episode. ``include_visual`` and ``image_format`` (png, jpeg, array) say how images come for
        the rest of the session; ``scene`` (AI2-THOR) or ``environment_parameters`` (ML-Agents) shape the
        episode; ``seed`` (ML-Agents) starts a fresh game seeded with it. ``env_id``, as OpenEnv's Unity
        environment takes it, may only name the served environment (one declaration per server)."""
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {', '.join(IMAGE_FORMATS)}, not {image_format!r}")
        if env_id is not None and env_id != self._served.env_id:
            raise ValueError(
                f"this server serves {self._served.env_id!r} only (env_id {env_id!r}); start a server per environment"
            )
        if kwargs:
            raise ValueError(f"unknown reset arguments {sorted(kwargs)}")
        with self._lock:
            launched = False
            if self._session is not None and self._adapter.reseeds(seed):
                self._stop_session()
            if self._session is None:
                self._launch(seed)
                launched = True
            try:
                event = self._adapter.first_event(
                    self._session,
                    launched,
                    {"scene": scene, "environment_parameters": environment_parameters},
                )
                outcome = self._adapter.outcome(self._session, event, bool(include_visual))
            except Exception as exc:
                raise self._player_failed(exc) from exc
            self._state = self._state.model_copy(
                update={
                    "episode_id": episode_id or str(uuid.uuid4()),
                    "step_count": 0,
                    "include_visual": bool(include_visual),
                    "image_format": image_format,
                }
            )
            return self._observe(outcome)

    def step(
        self, action: UnirenderAction, timeout_s: float | None = None, **kwargs: Any
    ) -> UnirenderObservation:
        with self._lock:
            if self._session is None:
                raise NoPlayerError(
                    "no player in this session: call reset() first (OpenEnv's HTTP /step is one-shot, a fresh "
                    "environment per call: step over the WebSocket session, /ws)"
                )
            session_action = self._adapter.session_action(
                action, self._last_event
            )  # ValueError: nothing sent
            try:
                event = self._session.step(session_action)
                outcome = self._adapter.outcome(self._session, event, self._state.include_visual)
            except Exception as exc:
                raise self._player_failed(exc) from exc
            self._state.step_count += 1
            return self._observe(outcome)

    @property
    def state(self) -> UnirenderState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        from unirender import __version__

        return EnvironmentMetadata(
            name=f"unirender:{self._served.env_id}",
            description=f"a unirender {self._served.family} environment ({self._served.env_id}), rendered headless",
            version=__version__,
            documentation_url="docs/openenv.md",
        )

    def close(self) -> None:
        with self._lock:
            self._stop_session()

    # -- internals ------------------------------------------------------------------------------------------
    def _launch(self, seed: int | None) -> None:
        served = self._served
        served.take_slot()
        try:
            kwargs = dict(served.controller_kwargs)
            kwargs.update(served.adapter_class.launch_overrides(seed))
            session = served.backend.create_session(kwargs)
        except BaseException:
            served.give_slot()
            raise
        try:
            description = session.describe()
            self._adapter = served.adapter_class(description, served.modalities, **_behavior(served))
        except BaseException:
            session.stop()
            served.give_slot()
            raise
        self._session = session
        self._state = self._state.model_copy(
            update={
                "behavior_name": self._adapter.behavior_name,
                "action_spec": self._adapter.action_spec,
                "observation_spec": self._adapter.observation_spec,
                "player": {
                    "pid": description.pid,
                    "platform": description.platform,
                    "device": description.device,
                    "log_path": description.log_path,
                },
            }
        )

    def _stop_session(self) -> None:
        session, self._session, self._last_event = self._session, None, None
        if session is not None:
            try:
                session.stop()
            finally:
                self._served.give_slot()
                self._state = self._state.model_copy(update={"player": {}})

    def _player_failed(self, exc: Exception) -> Exception:
        """The error a failed reset or step reports. A bad argument is the caller's (the session is as it was);
        anything else lost the episode: the player is stopped (its slot given back) and the next reset launches
        a new one."""
        if isinstance(exc, ValueError) and not isinstance(exc, RestartError):
            return exc
        self._stop_session()
        what = "crashed and was restarted" if isinstance(exc, RestartError) else "failed"
        return RuntimeError(
            f"the player of this session {what}, and the episode is lost ({type(exc).__name__}: {exc}); "
            "reset() starts a new player"
        )

    def _observe(self, outcome: Outcome) -> UnirenderObservation:
        self._last_event = outcome.event
        state = self._state
        fields = (
            image_fields(outcome.images, state.image_format, self._served.depth_scale)
            if state.include_visual
            else {}
        )
        return UnirenderObservation(
            done=outcome.done,
            reward=outcome.reward,
            info=outcome.metadata,
            vector_observations=outcome.vector,
            behavior_name=self._adapter.behavior_name,
            action_spec_info=self._adapter.action_spec,
            observation_spec_info=self._adapter.observation_spec,
            **fields,
        )


def _behavior(served: ServedEnvironment) -> dict:
    return {"behavior": served.behavior} if served.behavior is not None else {}
