"""Every limit the service puts on what a player is asked to do, applied in one place to every action, whichever
endpoint it came from: a session's step, a one-shot render's episode, a job's episodes. (An ML-Agents step's
actions are checked against the game's action spaces by its family, ``service.mlagents_sessions.check_behavior_actions``.)

Episodes are checked before any player starts, by walking their actions the way the episode driver
(``jobs.episodes.run_unit``) will run them: a reset (its cameras re-added), then each action in order. So a
``ChangeResolution`` to 1000x1000 or a ninth ``AddThirdPartyCamera`` is refused with 422 whether it is a step, a
``/v1/render`` episode or a job's, and numbers a player would silently wrap or overflow never reach it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from unirender.service.config import ServiceConfig
from unirender.service.errors import ApiError

# Sane ranges of the numbers actions take (AI2-THOR's own; beyond them a player wraps, clamps or overflows).
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "degrees": (-360.0, 360.0),
    "horizon": (-90.0, 90.0),
    "fieldOfView": (0.0, 180.0),
    "moveMagnitude": (-1000.0, 1000.0),
}
_MAX_NESTING = 64  # deeper than any request the API defines
MAX_ITEMS = 100_000  # items in one list or mapping of a request (an episode's actions or poses: 100,000 frames)


@dataclass
class PlayerState:
    """What the limits depend on, as the actions so far leave it."""

    cameras: int = 0


def check_body(value: Any) -> None:
    """The shape of any decoded request body: every number finite (JSON's ``1e400`` and ``NaN`` decode to
    inf/nan), nesting at most ``_MAX_NESTING`` deep, no list or mapping over ``MAX_ITEMS`` items (validating a
    million bad items costs seconds, whoever sends them). One pass; key paths are spelled out only for errors."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        container, where = stack.pop()
        if len(where) >= _MAX_NESTING:
            path = ".".join(map(str, where))
            raise ApiError(422, "too_deeply_nested", f"{path}: nested deeper than {_MAX_NESTING} levels", path=path)
        if len(container) > MAX_ITEMS:
            path = ".".join(map(str, where)) or "(body)"
            raise ApiError(422, "too_many_items", f"{path}: {len(container)} items, more than the {MAX_ITEMS} a "
                           "request may hold in one list or mapping (split a job into more episodes)", path=path)
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in items:
            if isinstance(item, float):
                if not math.isfinite(item):
                    path = ".".join(map(str, (*where, key)))
                    raise ApiError(422, "invalid_number", f"{path}: {item} is not a finite number", path=path)
            elif isinstance(item, dict | list):
                stack.append((item, (*where, key)))


UPLOADED = "uploaded"  # the name an upload is tagged with: uploaded:<token name>-<digest prefix>


def build_allowed(allowed: list[str], reference: str, stored) -> bool:
    """Whether ``allowed_builds`` lets a client launch ``stored`` (named ``reference``): by its digest, by the
    name:tag it was asked by or any of its names, or by a bare name (every tag of it)."""
    names = {reference, stored.digest, *stored.names}
    names |= {name.split(":")[0] for name in stored.names}
    return any(entry in names for entry in allowed)


class ActionPolicy:
    """The service's limits (``config.limits``, allowed executables, scene names) over environments and
    actions."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.limits = config.limits
        self._build_store = None

    # -- what a player is started with ---------------------------------------------------------------------
    def check_game(self, env) -> None:
        """Any family's environment: an allowed executable, a resolution within the pixel limit."""
        self._check_build(env)
        self._check_pixels(env.width, env.height, "environment.width")

    def check_environment(self, env, render=None) -> PlayerState:
        """An AI2-THOR session's or job's environment and render spec; returns the state right after its reset."""
        self._check_build(env)
        cameras = len(render.cameras) if render is not None else 0
        if cameras > self.limits.cameras:
            raise ApiError(422, "too_many_cameras", f"{cameras} cameras exceed the limit of "
                           f"{self.limits.cameras} per session", path="render.cameras")
        self._check_pixels(env.width, env.height, "environment.width")
        return PlayerState(cameras=cameras)

    # -- what it is asked to do ------------------------------------------------------------------------------
    def check_action(self, action: dict, state: PlayerState, path: str = "") -> None:
        """One action, against the state the earlier actions left (updated for the next one)."""
        at = f"{path}." if path else ""
        name = action.get("action")
        for key, (low, high) in NUMBER_RANGES.items():
            value = action.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not low <= value <= high):
                raise ApiError(422, "invalid_parameter", f"{name} {key}={value!r}: must be a number in "
                               f"[{low:g}, {high:g}]", path=f"{at}{key}")
        if name == "Reset":
            self.check_scene(action.get("sceneName"), f"{at}sceneName")
            state.cameras = 0  # third-party cameras do not survive a reset
        elif name == "ChangeResolution":
            x, y = action.get("x"), action.get("y")
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (x, y)):
                raise ApiError(422, "invalid_parameter", f"ChangeResolution x={x!r} y={y!r}: positive integers",
                               path=f"{at}x")
            self._check_pixels(x, y, f"{at}x")
        elif name == "AddThirdPartyCamera":
            if state.cameras >= self.limits.cameras:
                raise ApiError(422, "too_many_cameras", f"{path or 'this session'}: a camera beyond the "
                               f"{state.cameras} there are; the limit is {self.limits.cameras}", path=path)
            state.cameras += 1

    def check_episode(self, episode, render, path: str) -> None:
        """An episode as ``run_unit`` drives it: reset + cameras, then each action (poses are teleports)."""
        self.check_scene(episode.scene, f"{path}.scene")
        state = PlayerState(cameras=len(render.cameras))
        for i, action in enumerate(episode.action_dicts()):
            self.check_action(action, state, f"{path}.actions.{i}")

    def check_job(self, spec) -> None:
        """A job spec (or a one-shot render's): its environment, then every episode."""
        self.check_environment(spec.environment, spec.render)
        for i, episode in enumerate(spec.episodes):
            self.check_episode(episode, spec.render, f"episodes.{i}")

    @staticmethod
    def session_state(session) -> PlayerState:
        """A running session's state, from its last event."""
        event = session.last_event
        cameras = (event.metadata.get("thirdPartyCameras") if event is not None else None) or []
        return PlayerState(cameras=len(cameras))

    @staticmethod
    def check_scene(scene: str | None, path: str) -> None:
        """Scenes by name only: the reference player also loads scene *files* by path, which would let a client
        make it read (and quote in errors) any .yaml/.json file the service can read."""
        if not isinstance(scene, str):
            return
        if "/" in scene or "\\" in scene or scene.startswith("~") or \
                scene.lower().endswith((".yaml", ".yml", ".json")):
            raise ApiError(422, "scene_path_not_allowed", f"scene {scene!r} looks like a file path; the service "
                           "takes scene names only (GET a session's metadata for the player's scenes)", path=path)

    def _check_build(self, env) -> None:
        """``environment.build`` (a store reference) must be allowed by ``allowed_builds``; it is then pinned to
        its digest, so a tag moved after this check cannot change what is launched. Otherwise the executable."""
        reference = getattr(env, "build", None)
        if reference is None:
            self._check_executable(env.executable)
            return
        from unirender.builds import BuildError

        try:
            stored = self.build_store.resolve(reference, platform=getattr(env, "platform", None))
        except BuildError as exc:
            raise ApiError(404, "build_not_found", f"environment.build: {exc}", path="environment.build") from None
        if not self.may_launch(reference, stored):
            raise ApiError(403, "build_not_allowed", f"build {reference!r} ({stored.digest}) is not allowed here; "
                           f"allowed: {self.config.allowed_builds} (GET /v1/builds lists them)")
        env.build = stored.digest

    def may_launch(self, reference: str, stored) -> bool:
        """``allowed_builds`` lets a client launch ``stored``, or it was uploaded here (``allow_uploaded_builds``:
        the upload needed ``builds:write``, the operator's trust decision)."""
        if build_allowed(self.config.allowed_builds, reference, stored):
            return True
        return self.config.allow_uploaded_builds and any(n.startswith(UPLOADED + ":") for n in stored.names)

    @property
    def build_store(self):
        from unirender.builds import BuildStore

        if self._build_store is None:
            bound = getattr(self.config, "build_store_max_bytes", None)
            self._build_store = (BuildStore(self.config.build_store) if bound is None
                                 else BuildStore(self.config.build_store, max_bytes=bound))  # fmt: skip
        return self._build_store

    def _check_executable(self, executable: str) -> None:
        if executable not in self.config.allowed_executables:
            raise ApiError(403, "executable_not_allowed", f"executable {executable!r} is not allowed here; allowed: "
                           f"{self.config.allowed_executables}")

    def _check_pixels(self, width: int, height: int, path: str) -> None:
        pixels = width * height
        if pixels > self.limits.pixels:
            raise ApiError(422, "resolution_too_large", f"{width}x{height} = {pixels} pixels exceeds the limit "
                           f"of {self.limits.pixels}", path=path)
