"""Where mlagents-envs 1.1.0's own test suite found the drop-in behaving differently (issue 32), checked from the
behaviour, with tests of our own: the PettingZoo wrappers over an environment not reset yet, ``UnityAECEnv``'s
``possible_agents`` as agents appear, PettingZoo's API checkers, and what a game sending NaN or infinite values
raises (compared with what mlagents-envs 1.1 itself raises on the same game). docs/mlagents.md has the run of
mlagents-envs' suite and what the drop-in deliberately does not mirror."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from mlagents_envs_venv import client_python
from pettingzoo.test import api_test, parallel_api_test

from fixtures import mlagents_game as game
from unirender.mlagents import UnityEnvironment
from unirender.mlagents.base_env import (
    ActionSpec,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)
from unirender.mlagents.envs.unity_aec_env import UnityAECEnv
from unirender.mlagents.envs.unity_parallel_env import UnityParallelEnv

ERROR_DRIVER = Path(__file__).with_name("mlagents_envs_error_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"


class Walkers(BaseEnv):
    """A game of our own behind the ``BaseEnv`` interface (the wrappers take any): one behavior, known from the
    start as a ``UnityEnvironment``'s are once it has connected, and no steps before ``reset()`` (``get_steps``
    raises ``KeyError`` then, as ``UnityEnvironment``'s does). Agent 0 walks from ``reset()``; with ``spawn``,
    agent 1 appears at the first step. Each agent's episode ends after ``LIFE`` of its steps (a true terminal),
    and an agent whose episode ended stays gone until ``reset()``."""

    NAME = "Walker?team=0"
    LIFE = 3

    def __init__(self, spawn: bool = True):
        position = ObservationSpec(shape=(2,), dimension_property=(DimensionProperty.NONE,),
                                   observation_type=ObservationType.DEFAULT, name="Position")  # fmt: skip
        self.spec = BehaviorSpec([position], ActionSpec.create_continuous(1))
        self.spawn = spawn
        self.resets = self.t = 0
        self.ages: dict[int, int] = {}
        self.state: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
        self.actions = []

    @property
    def behavior_specs(self):
        return BehaviorMapping({self.NAME: self.spec})

    def _observe(self, ended: list[int]) -> None:
        alive = sorted(self.ages)

        def rows(ids):
            return [np.array([[i, self.ages.get(i, self.LIFE)] for i in ids], np.float32).reshape(len(ids), 2)]

        n, m = len(alive), len(ended)
        decision = DecisionSteps(rows(alive), np.full(n, -0.1, np.float32), np.array(alive, np.int32), None,
                                 np.zeros(n, np.int32), np.zeros(n, np.float32))  # fmt: skip
        terminal = TerminalSteps(rows(ended), np.ones(m, np.float32), np.zeros(m, bool), np.array(ended, np.int32),
                                 np.zeros(m, np.int32), np.zeros(m, np.float32))  # fmt: skip
        self.state[self.NAME] = (decision, terminal)

    def reset(self) -> None:
        self.resets += 1
        self.t, self.ages = 0, {0: 0}
        self._observe([])

    def step(self) -> None:
        if not self.state:
            return self.reset()
        self.t += 1
        self.ages = {i: age + 1 for i, age in self.ages.items()}
        ended = sorted(i for i, age in self.ages.items() if age >= self.LIFE)
        for i in ended:
            del self.ages[i]
        if self.spawn and self.t == 1:
            self.ages[1] = 0
        self._observe(ended)

    def set_actions(self, behavior_name, action) -> None:
        decision, _ = self.state[behavior_name]
        assert action.continuous.shape == (len(decision), 1)
        self.actions.append(action.continuous.copy())

    def set_action_for_agent(self, behavior_name, agent_id, action) -> None:
        raise NotImplementedError

    def get_steps(self, behavior_name):
        return self.state[behavior_name]  # KeyError before the first reset()

    def close(self) -> None:
        pass


def agent(i: int) -> str:
    return f"{Walkers.NAME}?agent_id={i}"


@pytest.mark.parametrize("wrapper", [UnityParallelEnv, UnityAECEnv])
def test_pettingzoo_wrappers_wrap_an_env_before_its_first_reset(wrapper):
    walkers = Walkers()
    env = wrapper(walkers)  # mlagents-envs' wrappers read no steps when the behaviors are known
    assert walkers.resets == 0 and env.possible_agents == []  # agents come with reset()
    assert env.observation_space(agent(0)) == spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert env.action_space(agent(0)) == spaces.Box(-1.0, 1.0, (1,), np.float32)
    env.reset(seed=0)
    assert walkers.resets == 1 and env.agents == [agent(0)]


def test_aec_possible_agents_follow_agents_that_appear_after_reset():
    env = UnityAECEnv(Walkers(), seed=0)
    env.reset(seed=0)
    assert env.possible_agents == [agent(0)]
    turns = []
    for name in env.agent_iter(max_iter=50):
        assert set(env.agents) <= set(env.possible_agents)
        _, _, termination, truncation, _ = env.last()
        turns.append(name)
        env.step(None if termination or truncation else env.action_space(name).sample())
    assert agent(1) in turns and env.agents == []
    assert env.possible_agents == [agent(0), agent(1)]
    assert env.max_num_agents == 2


@pytest.mark.parametrize("spawn", [False, True])
def test_pettingzoo_api_tests_pass(spawn):
    api_test(UnityAECEnv(Walkers(spawn), seed=0), num_cycles=20)
    parallel_api_test(UnityParallelEnv(Walkers(spawn), seed=0), num_cycles=20)


@pytest.mark.timeout(120)
def test_aec_possible_agents_over_a_game_whose_behavior_appears_mid_run(tmp_path):
    """The stand-in game over real gRPC: ``Scout?team=1`` enables its agent from the game's third step on."""
    env = UnityAECEnv(UnityEnvironment(file_name=game.write_build(tmp_path, "4.x"), timeout_wait=60), seed=0)
    try:
        env.reset(seed=0)
        assert env.possible_agents == [f"{game.COLLECTOR}?agent_id={i}" for i in (0, 1)]
        seen = set()
        for name in env.agent_iter(max_iter=40):
            assert set(env.agents) <= set(env.possible_agents)
            seen.add(name)
            observation, _, termination, truncation, _ = env.last()
            if termination or truncation:
                env.step(None)
            else:
                env.step(env.action_space(name).sample(mask=observation["action_mask"]))
        scouts = [a for a in env.possible_agents if a.startswith(game.SCOUT)]
        assert scouts and set(scouts) <= seen
    finally:
        env.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_error_driver(python, package: str, build: str, key: str, value: str, cwd: Path) -> dict | None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if package == "unirender.mlagents":
        env["PYTHONPATH"] = str(SRC)
    done = subprocess.run([str(python), str(ERROR_DRIVER), package, build, str(free_port()), key, value, "6"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)  # the first run builds mlagents-envs 1.1's venv
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("observation_scale", "inf", "The observations provided had NaN values."),  # agent 0's id 0 * inf
        ("reward_scale", "inf", "The rewards provided had Infinite values."),
        ("group_reward_scale", "inf", "The group_rewards provided had Infinite values."),  # at max_step
    ],
)
def test_non_finite_values_from_the_game_raise_what_mlagents_envs_raises(key, value, message, tmp_path):
    build = game.write_build(tmp_path, "4.x")[: -len(".x86_64")]
    theirs = run_error_driver(client_python("1.1"), "mlagents_envs", build, key, value, tmp_path)
    ours = run_error_driver(sys.executable, "unirender.mlagents", build, key, value, tmp_path)
    assert theirs is not None and theirs["type"] == "RuntimeError" and theirs["message"] == message
    assert ours == theirs  # the type (a bare RuntimeError), the message and the call that raised it
