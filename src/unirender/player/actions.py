"""The reference player's actions: a table of handlers with declared arguments.

Each handler gets the session, the acting agent and its validated arguments and returns an
:class:`ActionResult`. Argument problems raise :class:`ActionFailure`, which the dispatcher turns into a failed
result with AI2-THOR's ``errorCode`` (``InvalidAction``, ``InvalidArgument``, ``MissingArguments``). Any other
exception inside a handler also becomes a failed result: a bad action never kills the player.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unirender.player import geometry
from unirender.player.scene import SceneError, builtin_scene_names

# Unity's quality levels (ai2thor/_quality_settings.py); index 0 "DONOTUSE" is rejected.
QUALITY_NAMES = (
    "Very Low",
    "Low",
    "Medium",
    "MediumCloseFitShadows",
    "High",
    "Very High",
    "Ultra",
    "High WebGL",
)
# Keys every action may carry (protocol.md 6.6); the per-step render flags switch a modality on for one step.
GLOBAL_KEYS = {
    "action", "sequenceId", "agentId", "renderImage", "renderInstanceSegmentation", "renderObjectImage",
    "renderClassImage", "renderSemanticSegmentation", "renderNormalsImage", "renderDepthImage", "renderFlowImage",
    "visibilityDistance",
}  # fmt: skip
HORIZON_MIN, HORIZON_MAX = -30.0, 60.0  # AI2-THOR's default look limits (up 30, down 60)
MAX_RESOLUTION = 4096  # per side; Unity allows more, but one 4096^2 frame of every modality is ~0.5 GB


class ActionFailure(Exception):
    """A handler's clean refusal: becomes lastActionSuccess false with this code and message."""

    def __init__(self, message: str, error_code: str = "InvalidArgument"):
        super().__init__(message)
        self.error_code = error_code


@dataclass
class ActionResult:
    success: bool = True
    error_message: str = ""
    error_code: str = "Undefined"
    action_return: Any = None
    query: bool = False  # changes nothing visible: may be answered with a metadata patch (protocol.md 3.6)
    collided_objects: list[str] = field(default_factory=list)


# --- argument types -----------------------------------------------------------------------------------


def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ActionFailure(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _integer(name: str, value) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not value.is_integer())  # also NaN and infinities
    ):
        raise ActionFailure(f"{name} must be an integer, got {value!r}")
    return int(value)


def _boolean(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ActionFailure(f"{name} must be true or false, got {value!r}")
    return value


def _vector(name: str, value) -> np.ndarray:
    if isinstance(value, dict):
        extra = set(value) - {"x", "y", "z"}
        if extra:
            raise ActionFailure(f"{name} has unknown keys {sorted(extra)} (expected x, y, z)")
        value = [value.get("x", 0.0), value.get("y", 0.0), value.get("z", 0.0)]
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise ActionFailure(f"{name} must be {{x, y, z}} or a list of 3 numbers, got {value!r}")
    return np.array([_number(f"{name}.{axis}", v) for axis, v in zip("xyz", value, strict=True)])


def _rotation(name: str, value) -> np.ndarray:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return np.array([0.0, _number(name, value), 0.0])
    return _vector(name, value)


def _string(name: str, value) -> str:
    if not isinstance(value, str):
        raise ActionFailure(f"{name} must be a string, got {value!r}")
    return value


def _accepted(name: str, value):  # accepted for AI2-THOR compatibility, no effect here
    return value


REQUIRED = object()


@dataclass
class ActionSpec:
    name: str
    handler: Callable
    params: dict[str, tuple[Callable, Any]]  # name -> (converter, default or REQUIRED)
    query: bool = False


ACTIONS: dict[str, ActionSpec] = {}


def action(name: str, *, query: bool = False, **params):
    def register(fn):
        ACTIONS[name] = ActionSpec(name, fn, params, query)
        return fn

    return register


def parse_arguments(spec: ActionSpec, raw: dict) -> dict:
    unknown = sorted(k for k in raw if k not in spec.params and k not in GLOBAL_KEYS)
    if unknown:
        allowed = ", ".join(sorted(spec.params)) or "none"
        raise ActionFailure(f"{spec.name}: unknown argument(s) {', '.join(unknown)} (allowed: {allowed})")
    args = {}
    missing = []
    for key, (convert, default) in spec.params.items():
        if key in raw and raw[key] is not None:
            args[key] = convert(key, raw[key])
        elif default is REQUIRED:
            missing.append(key)
        else:
            args[key] = default
    if missing:
        raise ActionFailure(
            f"{spec.name}: missing required argument(s) {', '.join(missing)}", "MissingArguments"
        )
    return args


def dispatch(session, raw: dict) -> tuple[int, ActionResult]:
    """Run one action; returns (acting agent id, result). Never raises for a bad action."""
    name = raw.get("action")
    agent_id = 0
    try:
        if "agentId" in raw:
            requested = _integer("agentId", raw["agentId"])
            if not 0 <= requested < len(session.world.agents):
                count = len(session.world.agents)
                raise ActionFailure(f"agentId {requested} out of range (agentCount {count})")
            agent_id = requested
        spec = ACTIONS.get(name) if isinstance(name, str) else None
        if spec is None:
            raise ActionFailure(
                f"Invalid action: {name!r} is not an action of the reference player", "InvalidAction"
            )
        args = parse_arguments(spec, raw)
        result = spec.handler(session, session.world.agents[agent_id], **args)
        result.query = spec.query and result.success
        return agent_id, result
    except ActionFailure as exc:
        return agent_id, ActionResult(False, str(exc), exc.error_code)
    except SceneError as exc:
        return agent_id, ActionResult(False, str(exc), "InvalidArgument")
    except Exception as exc:  # a bug in a handler must not kill the player: report it to the controller
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return agent_id, ActionResult(
            False, f"{name}: internal error in the reference player: {detail}", "Undefined"
        )


# --- AgentManager-level actions ------------------------------------------------------------------------


@action(
    "Initialize",
    gridSize=(_number, None), fieldOfView=(_number, None), cameraNearPlane=(_number, None),
    cameraFarPlane=(_number, None), renderDepthImage=(_boolean, None), renderInstanceSegmentation=(_boolean, None),
    renderSemanticSegmentation=(_boolean, None), renderClassImage=(_boolean, None),
    renderObjectImage=(_boolean, None), renderNormalsImage=(_boolean, None), renderFlowImage=(_boolean, None),
    agentCount=(_integer, None), fastActionEmit=(_boolean, None), rotateStepDegrees=(_number, None),
    agentMode=(_string, None), visibilityDistance=(_number, None),
    snapToGrid=(_accepted, None), continuous=(_accepted, None), autoSimulation=(_accepted, None),
    makeAgentsVisible=(_accepted, None), fixedDeltaTime=(_accepted, None), targetFrameRate=(_accepted, None),
    visibilityScheme=(_accepted, None),
)  # fmt: skip
def initialize(session, agent, **args) -> ActionResult:
    s = session.settings.copy()
    if args["agentMode"] not in (None, "default"):
        raise ActionFailure(
            f"agentMode {args['agentMode']!r} is not supported by the reference player (only 'default')"
        )
    for key, attr in (
        ("gridSize", "grid_size"), ("fieldOfView", "field_of_view"), ("cameraNearPlane", "near"),
        ("cameraFarPlane", "far"), ("rotateStepDegrees", "rotate_step"), ("visibilityDistance", "visibility_distance"),
        ("renderDepthImage", "render_depth"), ("renderNormalsImage", "render_normals"), ("renderFlowImage", "render_flow"),
        ("fastActionEmit", "fast_action_emit"),
    ):  # fmt: skip
        if args[key] is not None:
            setattr(s, attr, args[key])
    if args["renderInstanceSegmentation"] is not None or args["renderObjectImage"] is not None:
        s.render_instance = bool(args["renderInstanceSegmentation"] or args["renderObjectImage"])
    if args["renderSemanticSegmentation"] is not None or args["renderClassImage"] is not None:
        s.render_semantic = bool(args["renderSemanticSegmentation"] or args["renderClassImage"])
    if s.grid_size <= 0:
        raise ActionFailure(f"gridSize must be > 0, got {s.grid_size}")
    if not 0 < s.field_of_view < 180:
        raise ActionFailure(f"fieldOfView must be in (0, 180), got {s.field_of_view}")
    if s.near <= 0 or s.far <= s.near:
        raise ActionFailure(f"need 0 < cameraNearPlane < cameraFarPlane, got {s.near} and {s.far}")
    if s.visibility_distance <= 0:
        raise ActionFailure(f"visibilityDistance must be > 0, got {s.visibility_distance}")
    count = args["agentCount"]
    if count is not None and not 1 <= count <= 16:
        raise ActionFailure(f"agentCount must be in 1..16, got {count}")
    session.settings = s
    if count is not None and count != len(session.world.agents):
        session.set_agent_count(count)
    return ActionResult(action_return={"cameraNearPlane": s.near, "cameraFarPlane": s.far})


@action("Reset", sceneName=(_string, None))
def reset(session, agent, sceneName) -> ActionResult:
    session.load_scene(sceneName or session.world.scene.path or session.world.scene.name)
    return ActionResult()


@action("GetScenesInBuild", query=True)
def get_scenes_in_build(session, agent) -> ActionResult:
    return ActionResult(action_return=builtin_scene_names())


@action("ChangeResolution", x=(_integer, REQUIRED), y=(_integer, REQUIRED))
def change_resolution(session, agent, x, y) -> ActionResult:
    if not (1 <= x <= MAX_RESOLUTION and 1 <= y <= MAX_RESOLUTION):
        raise ActionFailure(f"resolution must be within 1..{MAX_RESOLUTION} per side, got {x}x{y}")
    session.resize(x, y)
    return ActionResult()


@action("ChangeQuality", quality=(_string, REQUIRED))
def change_quality(session, agent, quality) -> ActionResult:
    if quality not in QUALITY_NAMES:
        raise ActionFailure(f"unknown quality {quality!r} (one of: {', '.join(QUALITY_NAMES)})")
    session.quality = quality
    return ActionResult()


@action(
    "AddThirdPartyCamera",
    position=(_vector, REQUIRED), rotation=(_rotation, REQUIRED), fieldOfView=(_number, 90.0),
    nearClippingPlane=(_number, None), farClippingPlane=(_number, None),
)  # fmt: skip
def add_third_party_camera(
    session, agent, position, rotation, fieldOfView, nearClippingPlane, farClippingPlane
):
    from unirender.player.world import ThirdPartyCamera

    _check_camera(fieldOfView, nearClippingPlane, farClippingPlane)
    cams = session.world.cameras
    cams.append(
        ThirdPartyCamera(
            len(cams), position, tuple(rotation), fieldOfView, nearClippingPlane, farClippingPlane
        )
    )
    return ActionResult()


@action(
    "UpdateThirdPartyCamera",
    thirdPartyCameraId=(_integer, REQUIRED), position=(_vector, None), rotation=(_rotation, None),
    fieldOfView=(_number, None), nearClippingPlane=(_number, None), farClippingPlane=(_number, None),
)  # fmt: skip
def update_third_party_camera(
    session, agent, thirdPartyCameraId, position, rotation, fieldOfView, nearClippingPlane, farClippingPlane
):
    cams = session.world.cameras
    if not 0 <= thirdPartyCameraId < len(cams):
        raise ActionFailure(f"thirdPartyCameraId {thirdPartyCameraId} does not exist ({len(cams)} camera(s))")
    cam = cams[thirdPartyCameraId]
    _check_camera(
        fieldOfView if fieldOfView is not None else cam.field_of_view,
        nearClippingPlane if nearClippingPlane is not None else cam.near,
        farClippingPlane if farClippingPlane is not None else cam.far,
    )
    if position is not None:
        cam.position = position
    if rotation is not None:
        cam.rotation = tuple(rotation)
    if fieldOfView is not None:
        cam.field_of_view = fieldOfView
    if nearClippingPlane is not None:
        cam.near = nearClippingPlane
    if farClippingPlane is not None:
        cam.far = farClippingPlane
    return ActionResult()


def _check_camera(fov, near, far) -> None:
    if not 0 < fov < 180:
        raise ActionFailure(f"fieldOfView must be in (0, 180), got {fov}")
    if near is not None and near <= 0:
        raise ActionFailure(f"nearClippingPlane must be > 0, got {near}")
    if near is not None and far is not None and far <= near:
        raise ActionFailure(f"farClippingPlane must exceed nearClippingPlane, got {near} and {far}")


# --- agent actions --------------------------------------------------------------------------------------


@action("Pass")
def pass_(session, agent) -> ActionResult:
    return ActionResult()


ACTIONS["Done"] = ActionSpec("Done", pass_, {})


def _move(session, agent, forward: float, right: float, force: bool) -> ActionResult:
    yaw = agent.rotation
    delta = geometry.forward_vector(yaw) * forward + geometry.right_vector(yaw) * right
    moved = session.world.move_agent(agent, float(delta[0]), float(delta[1]), force=force)
    return ActionResult(moved.success, moved.message, "Undefined", collided_objects=moved.blocking)


def _magnitude(session, value) -> float:
    magnitude = session.settings.grid_size if value is None else value
    if magnitude < 0:
        raise ActionFailure(f"moveMagnitude must be >= 0, got {magnitude}")
    return magnitude


_MOVE_PARAMS = {"moveMagnitude": (_number, None), "forceAction": (_boolean, False)}


@action("MoveAhead", **_MOVE_PARAMS)
def move_ahead(session, agent, moveMagnitude, forceAction) -> ActionResult:
    return _move(session, agent, _magnitude(session, moveMagnitude), 0.0, forceAction)


@action("MoveBack", **_MOVE_PARAMS)
def move_back(session, agent, moveMagnitude, forceAction) -> ActionResult:
    return _move(session, agent, -_magnitude(session, moveMagnitude), 0.0, forceAction)


@action("MoveRight", **_MOVE_PARAMS)
def move_right(session, agent, moveMagnitude, forceAction) -> ActionResult:
    return _move(session, agent, 0.0, _magnitude(session, moveMagnitude), forceAction)


@action("MoveLeft", **_MOVE_PARAMS)
def move_left(session, agent, moveMagnitude, forceAction) -> ActionResult:
    return _move(session, agent, 0.0, -_magnitude(session, moveMagnitude), forceAction)


_ROTATE_PARAMS = {"degrees": (_number, None), "forceAction": (_boolean, False)}


@action("RotateRight", **_ROTATE_PARAMS)
def rotate_right(session, agent, degrees, forceAction) -> ActionResult:
    step = session.settings.rotate_step if degrees is None else degrees
    agent.rotation = geometry.normalize_degrees(agent.rotation + step)
    return ActionResult()


@action("RotateLeft", **_ROTATE_PARAMS)
def rotate_left(session, agent, degrees, forceAction) -> ActionResult:
    step = session.settings.rotate_step if degrees is None else degrees
    agent.rotation = geometry.normalize_degrees(agent.rotation - step)
    return ActionResult()


def _look(agent, delta: float) -> ActionResult:
    target = round(agent.horizon + delta, 4)
    if not HORIZON_MIN - 1e-6 <= target <= HORIZON_MAX + 1e-6:
        which = "up" if delta < 0 else "down"
        limit = -HORIZON_MIN if delta < 0 else HORIZON_MAX
        return ActionResult(
            False, f"can't look {which} beyond {limit:g} degrees (horizon would be {target:g})"
        )
    agent.horizon = target
    return ActionResult()


@action("LookUp", degrees=(_number, 30.0), forceAction=(_boolean, False))
def look_up(session, agent, degrees, forceAction) -> ActionResult:
    return _look(agent, -degrees)


@action("LookDown", degrees=(_number, 30.0), forceAction=(_boolean, False))
def look_down(session, agent, degrees, forceAction) -> ActionResult:
    return _look(agent, degrees)


@action("Crouch")
def crouch(session, agent) -> ActionResult:
    if not agent.standing:
        return ActionResult(False, "already crouching")
    agent.standing = False
    return ActionResult()


@action("Stand")
def stand(session, agent) -> ActionResult:
    if agent.standing:
        return ActionResult(False, "already standing")
    agent.standing = True
    return ActionResult()


def _teleport(session, agent, position, rotation, horizon, standing, force) -> ActionResult:
    if horizon is not None and not HORIZON_MIN - 1e-6 <= horizon <= HORIZON_MAX + 1e-6:
        raise ActionFailure(f"horizon must be within [{HORIZON_MIN:g}, {HORIZON_MAX:g}], got {horizon}")
    if position is not None:
        placed = session.world.place_agent(agent, position, force=force)
        if not placed.success:
            return ActionResult(False, placed.message, collided_objects=placed.blocking)
    if rotation is not None:
        agent.rotation = geometry.normalize_degrees(rotation[1])
    if horizon is not None:
        agent.horizon = float(horizon)
    if standing is not None:
        agent.standing = standing
    return ActionResult()


@action(
    "Teleport",
    position=(_vector, None), rotation=(_rotation, None), horizon=(_number, None), standing=(_boolean, None),
    forceAction=(_boolean, False),
)  # fmt: skip
def teleport(session, agent, position, rotation, horizon, standing, forceAction) -> ActionResult:
    return _teleport(session, agent, position, rotation, horizon, standing, forceAction)


@action(
    "TeleportFull",
    position=(_vector, REQUIRED), rotation=(_rotation, REQUIRED), horizon=(_number, REQUIRED),
    standing=(_boolean, REQUIRED), forceAction=(_boolean, False),
)  # fmt: skip
def teleport_full(session, agent, position, rotation, horizon, standing, forceAction) -> ActionResult:
    return _teleport(session, agent, position, rotation, horizon, standing, forceAction)


@action("GetReachablePositions", query=True, gridSize=(_number, None))
def get_reachable_positions(session, agent, gridSize) -> ActionResult:
    grid = session.settings.grid_size if gridSize is None else gridSize
    if grid <= 0:
        raise ActionFailure(f"gridSize must be > 0, got {grid}")
    return ActionResult(action_return=session.world.reachable_positions(agent, grid))
