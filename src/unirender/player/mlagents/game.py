"""The built-in ML-Agents game, "ReachTarget": agents on a 10 m floor drive to a red target cube.

One behavior, ``ReachTarget?team=0``. Per agent and decision:

- observations, sorted by sensor name like Unity sorts them: ``CameraSensor`` (an RGB first-person camera,
  screen-sized, PNG) and ``VectorSensor_size8`` = ``[x, z, yaw, target_x, target_z, dx, dz, step/max_step]``
  (yaw in degrees; the state is kept in float32, so these are the exact values the frame was rendered from);
- actions: continuous ``(move, turn)`` in [-1, 1] (metres and degrees per step scaled by ``MOVE_M``/``TURN_DEG``)
  and one discrete branch of 3: 0 = walk, 1 = sprint (double distance), 2 = stand still. Sprint is masked within
  ``EDGE_M`` of the floor's edge;
- reward: ``STEP_PENALTY`` per step, +1 and the episode ends on reaching the target (a new target is placed);
  after ``max_step`` steps the episode is interrupted (``max_step_reached``). An agent whose episode ended
  requests its next decision in the same step, so it is in both the terminal and the decision steps.

Environment parameters: ``light_intensity`` (the sun, default 1) and ``target_red``/``target_green``/
``target_blue`` (the target's colour), read at each episode start and on every float update.

:func:`render_scene` turns the observable state into what the renderer draws; tests use it to render the same pose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BEHAVIOR = "ReachTarget?team=0"
CAMERA_SENSOR = "CameraSensor"
VECTOR_SENSOR = "VectorSensor_size8"
DISCRETE_BRANCHES = (3,)
ARENA_HALF_M = 5.0
EDGE_M = 1.0
MOVE_M = 0.25
TURN_DEG = 15.0
REACH_M = 0.8
STEP_PENALTY = -0.001
AGENT_COLORS = ((0.2, 0.4, 1.0), (0.2, 0.9, 0.3), (1.0, 0.8, 0.1), (0.8, 0.3, 0.9))
DEFAULT_PARAMETERS = {"light_intensity": 1.0, "target_red": 1.0, "target_green": 0.15, "target_blue": 0.1}
_f32 = np.float32


@dataclass
class Agent:
    id: int
    x: np.float32
    z: np.float32
    yaw: np.float32  # degrees in [-180, 180)
    steps: int = 0
    reward: float = 0.0  # since the last decision
    episode_reward: float = 0.0


@dataclass
class AgentResult:
    agent: Agent
    done: bool = False
    interrupted: bool = False


def _wrap(deg: float) -> np.float32:
    return _f32((deg + 180.0) % 360.0 - 180.0)


class ReachTargetGame:
    def __init__(self, agents: int = 2, max_step: int = 500, seed: int = 0):
        self.max_step = max_step
        self.rng = np.random.default_rng(seed)
        self.parameters = dict(DEFAULT_PARAMETERS)
        self.agents = [self._spawn(Agent(i, _f32(0), _f32(0), _f32(0))) for i in range(agents)]
        self.target = self._place_target()

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    # -- episodes -------------------------------------------------------------------------------------------
    def _spawn(self, agent: Agent) -> Agent:
        agent.x, agent.z = (_f32(v) for v in self.rng.uniform(-3.5, 3.5, 2))
        agent.yaw = _wrap(float(self.rng.uniform(-180.0, 180.0)))
        agent.steps, agent.reward, agent.episode_reward = 0, 0.0, 0.0
        return agent

    def _place_target(self) -> tuple[np.float32, np.float32]:
        return tuple(_f32(v) for v in self.rng.uniform(-3.5, 3.5, 2))  # type: ignore[return-value]

    def reset(self) -> None:
        """RESET: every agent starts a new episode (no terminal steps, as in Unity)."""
        self.target = self._place_target()
        for agent in self.agents:
            self._spawn(agent)

    # -- one Academy step -----------------------------------------------------------------------------------
    def action_mask(self, agent: Agent) -> list[bool]:
        near_edge = max(abs(float(agent.x)), abs(float(agent.z))) > ARENA_HALF_M - EDGE_M
        return [False, near_edge, False]

    def step(self, actions: dict[int, tuple[list[float], list[int]]]) -> list[AgentResult]:
        """Apply each agent's (continuous, discrete) action (missing = no action); who ended their episode."""
        results = []
        for agent in self.agents:
            continuous, discrete = actions.get(agent.id, ([0.0, 0.0], [0]))
            move = float(np.clip(continuous[0], -1.0, 1.0)) if continuous else 0.0
            turn = float(np.clip(continuous[1], -1.0, 1.0)) if len(continuous) > 1 else 0.0
            gear = int(discrete[0]) if discrete else 0
            if gear == 1 and self.action_mask(agent)[1]:
                gear = 0  # a masked choice is not taken (a trainer honouring the mask never sends it)
            distance = 0.0 if gear == 2 else MOVE_M * move * (2.0 if gear == 1 else 1.0)
            agent.yaw = _wrap(float(agent.yaw) + TURN_DEG * turn)
            rad = math.radians(float(agent.yaw))
            limit = ARENA_HALF_M - 0.25
            agent.x = _f32(np.clip(float(agent.x) + distance * math.sin(rad), -limit, limit))
            agent.z = _f32(np.clip(float(agent.z) + distance * math.cos(rad), -limit, limit))
            agent.steps += 1
            agent.reward += STEP_PENALTY
            result = AgentResult(agent)
            if math.hypot(float(agent.x - self.target[0]), float(agent.z - self.target[1])) < REACH_M:
                agent.reward += 1.0
                result.done = True
            elif agent.steps >= self.max_step:
                result.done = result.interrupted = True
            agent.episode_reward += agent.reward
            results.append(result)
        return results

    def end_episodes(self, results: list[AgentResult]) -> None:
        """After the terminal observations were taken: finished agents respawn; a reached target moves."""
        if any(r.done and not r.interrupted for r in results):
            self.target = self._place_target()
        for r in results:
            if r.done:
                self._spawn(r.agent)

    def vector_observation(self, agent: Agent) -> list[float]:
        tx, tz = self.target
        return [agent.x, agent.z, agent.yaw, tx, tz, _f32(tx - agent.x), _f32(tz - agent.z),
                _f32(agent.steps / self.max_step)]  # fmt: skip

    def target_color(self) -> tuple[float, float, float]:
        p = self.parameters
        return (float(p["target_red"]), float(p["target_green"]), float(p["target_blue"]))


def render_scene(poses, target, light_intensity: float = 1.0, target_color=(1.0, 0.15, 0.1)):
    """``(meshes, instances, lights, ambient, background)`` for ``renderer.set_scene``: the floor, the target and
    one box per agent. ``poses`` = ``[(x, z, yaw), ...]`` in agent order, ``target`` = ``(x, z)``."""
    from unirender.player.render import Instance, Light, trs
    from unirender.player.render import mesh as M

    meshes = {"floor": M.box((2 * ARENA_HALF_M, 0.1, 2 * ARENA_HALF_M)), "cube": M.box((1.0, 1.0, 1.0))}
    instances = [Instance("floor", trs((0, -0.05, 0)), (0.55, 0.55, 0.5), 1),
                 Instance("cube", trs((float(target[0]), 0.3, float(target[1])), scale=0.6), target_color, 2)]  # fmt: skip
    for i, (x, z, yaw) in enumerate(poses):
        instances.append(Instance("cube", trs((float(x), 0.25, float(z)), (0, float(yaw), 0), 0.5),
                                  AGENT_COLORS[i % len(AGENT_COLORS)], 3 + i))  # fmt: skip
    lights = [Light("directional", direction=(0.3, -1.0, 0.5), intensity=float(light_intensity))]
    return meshes, instances, lights, (0.25, 0.25, 0.25), (0.45, 0.65, 0.9)


def agent_camera(x, z, yaw):
    """The first-person camera of an agent at (x, z) facing ``yaw``: just in front of its box, looking a bit down."""
    from unirender.player.render import Camera

    rad = math.radians(float(yaw))
    ahead = 0.3
    return Camera((float(x) + ahead * math.sin(rad), 0.5, float(z) + ahead * math.cos(rad)), (10.0, float(yaw), 0.0),
                  fov=70.0, near=0.05, far=30.0)  # fmt: skip


def frame_from_render(rgb_bottom_up: np.ndarray) -> np.ndarray:
    """Renderer output (row 0 = bottom, RGB) -> the image a camera sensor sends (row 0 = top), contiguous."""
    return np.ascontiguousarray(rgb_bottom_up[::-1, :, :3])
