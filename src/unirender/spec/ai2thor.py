"""The AI2-THOR family's spec hooks (its models are :mod:`unirender.spec.models`): what is checked after loading.

With the builtin player a spec's scenes and action names are checked against what the player has, so a job
fails before any player starts; a Unity build's are its own business (unknown actions are only warned about).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

from unirender.deprecation import renamed
from unirender.spec.errors import did_you_mean
from unirender.spec.models import JobSpec
from unirender.spec.sources import raise_problems

if TYPE_CHECKING:
    from unirender.platforms import PlatformRequest


def check_builtin_scenes(spec: JobSpec) -> None:
    """With the builtin player, every episode's scene must be one it has (``FloorPlan1`` finds
    ``FloorPlan1_physics``) or look like a scene file path (the player opens it); SpecError otherwise."""
    if not spec.environment.is_builtin:
        return
    from unirender.player.scene import SCENE_SUFFIXES, builtin_scene_names

    known = builtin_scene_names()
    errors = [
        (
            f"episodes.{i}.scene",
            f"{episode.scene!r} is not a scene of the builtin player; built-in scenes: {', '.join(known)} "
            "(or give the path of a .yaml/.yml/.json scene file)",
        )
        for i, episode in enumerate(spec.episodes)
        if "/" not in episode.scene
        and PurePath(episode.scene).suffix.lower() not in SCENE_SUFFIXES
        and episode.scene not in known
        and f"{episode.scene}_physics" not in known
    ]
    raise_problems(spec, errors)


def check_action_names(spec: JobSpec) -> list[tuple[str, str]]:
    """Every action name in the episodes against the builtin player's actions. With the builtin player an
    unknown name is a SpecError (with a "did you mean"); a Unity build's actions cannot be known from here, so
    for one the same findings are returned as warnings and the job may go ahead."""
    from unirender.player.actions import ACTIONS

    known = sorted(ACTIONS)
    problems = []
    for i, episode in enumerate(spec.episodes):
        for j, action in enumerate(episode.action_dicts()):
            name = action["action"]
            if name in ACTIONS:
                continue
            guess = did_you_mean(name, known)
            hint = f"; did you mean {guess!r}?" if guess else ""
            problems.append(
                (f"episodes.{i}.actions.{j}", f"{name!r} is not an action of the builtin player{hint}")
            )
    if spec.environment.is_builtin:
        raise_problems(spec, problems)
        return []
    return [(path, f"{message} (a Unity build may have it)") for path, message in problems]


def platform_request(spec: JobSpec) -> PlatformRequest:
    """The :class:`~unirender.platforms.PlatformRequest` of the job's players."""
    from unirender.platforms import PlatformRequest

    env = spec.environment
    return PlatformRequest.of(env, headless=env.headless, builtin=env.is_builtin)


def platform_name(spec: JobSpec) -> str:
    """The platform the job's players are resolved for: the declared one, or ``WebGL`` where ``auto`` names a
    Unity WebGL build (a folder holding ``Build/*.loader.js``, a stored WebGL build), which the family runs
    through its WebGL bridge (docs/webgl.md, "AI2-THOR WebGL builds")."""
    from unirender.builds.resolve import names_webgl_build

    env = spec.environment
    if env.platform == "auto" and names_webgl_build({"executable": env.build_name, "platform": env.platform}):
        return "WebGL"
    return env.platform


__getattr__ = renamed(__name__, {"check_actions": "check_action_names"})
