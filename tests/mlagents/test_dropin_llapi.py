"""mlagents-envs' documented low-level API (ml-agents docs/Python-LLAPI.md and its "Run" notebook), written as
those docs use it, with only the import changed, over the reference ML-Agents game (``file_name="builtin"``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from unirender.mlagents import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    BehaviorSpec,
    DecisionStep,
    DecisionSteps,
    DimensionProperty,
    ObservationType,
    TerminalStep,
    TerminalSteps,
    UnityActionException,
    UnityEnvironment,
    UnityEnvironmentException,
)
from unirender.mlagents.side_channel.engine_configuration_channel import EngineConfigurationChannel

MAX_STEP = 12


@pytest.fixture(scope="module")
def env():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UNIRENDER_MLAGENTS_MAX_STEP", str(MAX_STEP))  # the game's knobs (a build has them baked in)
        mp.setenv("UNIRENDER_MLAGENTS_AGENTS", "2")
        channel = EngineConfigurationChannel()
        channel.set_configuration_parameters(time_scale=100.0)  # no real-time pacing
        env = UnityEnvironment(file_name="builtin", seed=1, side_channels=[channel], timeout_wait=60)
    yield env
    if env._loaded:
        env.close()


def test_reset_and_behavior_specs(env):
    assert isinstance(env, BaseEnv)
    env.reset()
    behavior_names = list(env.behavior_specs.keys())
    assert behavior_names == ["ReachTarget?team=0"]
    spec = env.behavior_specs[behavior_names[0]]
    assert isinstance(spec, BehaviorSpec)
    assert [s.name for s in spec.observation_specs] == ["CameraSensor", "VectorSensor_size8"]
    camera, vector = spec.observation_specs
    assert len(camera.shape) == 3 and 3 in camera.shape and vector.shape == (8,)
    assert all(isinstance(p, DimensionProperty) for p in camera.dimension_property)
    assert vector.dimension_property == (DimensionProperty.NONE,)
    assert camera.observation_type is ObservationType.DEFAULT
    assert spec.action_spec == ActionSpec(2, (3,))
    assert spec.action_spec.continuous_size == 2 and spec.action_spec.discrete_size == 1
    assert not spec.action_spec.is_continuous() and not spec.action_spec.is_discrete()
    with pytest.raises(TypeError):
        env.behavior_specs["x"] = spec  # read-only mapping


def test_decision_steps_index_like_mlagents_envs(env):
    env.reset()
    name = list(env.behavior_specs)[0]
    spec = env.behavior_specs[name]
    decision_steps, terminal_steps = env.get_steps(name)
    assert isinstance(decision_steps, DecisionSteps) and isinstance(terminal_steps, TerminalSteps)
    assert len(decision_steps) == 2 and len(terminal_steps) == 0
    assert decision_steps.agent_id.dtype == np.int32 and decision_steps.reward.dtype == np.float32
    assert isinstance(decision_steps.obs, list) and len(decision_steps.obs) == len(spec.observation_specs)
    for obs, obs_spec in zip(decision_steps.obs, spec.observation_specs, strict=True):
        assert obs.dtype == np.float32 and obs.shape == (2, *obs_spec.shape)  # the declared layout
    images = decision_steps.obs[0]
    assert 0.0 <= images.min() and images.max() <= 1.0 and images.max() > 0.0  # /255, cameras are real
    assert list(decision_steps) == list(decision_steps.agent_id)  # a Mapping over agent ids
    assert decision_steps.agent_id_to_index == {a: i for i, a in enumerate(decision_steps.agent_id)}
    agent_id = decision_steps.agent_id[1]
    assert agent_id in decision_steps and -1 not in decision_steps
    step = decision_steps[agent_id]
    assert isinstance(step, DecisionStep)
    assert step.agent_id == agent_id
    np.testing.assert_array_equal(step.obs[1], decision_steps.obs[1][1])
    assert len(step.action_mask) == 1 and step.action_mask[0].shape == (3,) and step.action_mask[0].dtype == bool
    assert len(decision_steps.action_mask) == 1 and decision_steps.action_mask[0].shape == (2, 3)
    with pytest.raises(KeyError, match="is not present in the DecisionSteps"):
        decision_steps[12345]
    # unirender extra: the exact uint8 pixels behind obs[0]
    frames = decision_steps.frames["CameraSensor"]
    assert frames.dtype == np.uint8 and frames.shape[0] == 2


def test_empty_steps_from_spec(env):
    spec = env.behavior_specs["ReachTarget?team=0"]
    empty = DecisionSteps.empty(spec)
    assert len(empty) == 0 and [o.shape[1:] for o in empty.obs] == [s.shape for s in spec.observation_specs]
    assert empty.action_mask is None and len(TerminalSteps.empty(spec)) == 0


def test_the_documented_episode_loop_with_random_actions(env):
    """The notebook's loop: random actions from the spec until the tracked agent's episode ends."""
    name = list(env.behavior_specs)[0]
    spec = env.behavior_specs[name]
    np.random.seed(0)
    lengths = []
    for _episode in range(2):
        env.reset()
        decision_steps, terminal_steps = env.get_steps(name)
        tracked_agent = -1
        done = False
        episode_rewards = 0.0
        steps = 0
        while not done:
            if tracked_agent == -1 and len(decision_steps) >= 1:
                tracked_agent = decision_steps.agent_id[0]
            action = spec.action_spec.random_action(len(decision_steps))
            assert isinstance(action, ActionTuple)
            assert action.continuous.dtype == np.float32 and action.discrete.dtype == np.int32
            env.set_actions(name, action)
            env.step()
            steps += 1
            decision_steps, terminal_steps = env.get_steps(name)
            if tracked_agent in decision_steps:
                episode_rewards += decision_steps[tracked_agent].reward
            if tracked_agent in terminal_steps:
                step = terminal_steps[tracked_agent]
                assert isinstance(step, TerminalStep)
                episode_rewards += step.reward
                done = True
            assert steps <= MAX_STEP, "the episode should have ended at max_step"
        lengths.append(steps)
        assert episode_rewards < 0.0 or step.reward > 0.5  # -0.001 per step, +1 on reaching the target
        if bool(step.interrupted):
            assert steps == MAX_STEP
    assert lengths


def test_terminal_steps_at_max_step(env):
    """Zero actions (the default for a behavior given none): every agent is interrupted at max_step, and the
    next decision of each (its new episode) comes in the same step."""
    name = list(env.behavior_specs)[0]
    env.reset()
    for _ in range(MAX_STEP - 1):
        env.step()  # no set_actions: all zeros, as documented
        decision_steps, terminal_steps = env.get_steps(name)
        assert len(terminal_steps) == 0 and len(decision_steps) == 2
    env.step()
    decision_steps, terminal_steps = env.get_steps(name)
    assert sorted(terminal_steps.agent_id) == [0, 1]
    assert terminal_steps.interrupted.all()
    assert set(terminal_steps) <= set(decision_steps)  # in both: the episode ended, the next one asks
    assert [o.shape[0] for o in terminal_steps.obs] == [2, 2]


def test_per_agent_actions(env):
    name = list(env.behavior_specs)[0]
    spec = env.behavior_specs[name]
    env.reset()
    decision_steps, _ = env.get_steps(name)
    before = decision_steps.obs[1].copy()
    mover, stander = decision_steps.agent_id
    # the mover walks forward, the other stands still (discrete choice 2 = stand, whatever the move value)
    env.set_action_for_agent(name, mover, ActionTuple(np.array([[1.0, 0.0]], np.float32), np.array([[0]], np.int32)))
    env.set_action_for_agent(name, stander, ActionTuple(np.array([[1.0, 0.0]], np.float32), np.array([[2]], np.int32)))
    env.step()
    decision_steps, _ = env.get_steps(name)
    after = decision_steps.obs[1]
    moved = np.hypot(*(after[:, :2] - before[:, :2]).T)
    assert moved[decision_steps.agent_id_to_index[mover]] > 0.01
    assert moved[decision_steps.agent_id_to_index[stander]] < 1e-6
    with pytest.raises(IndexError, match="did not request a decision"):
        env.set_action_for_agent(name, 999, spec.action_spec.empty_action(1))


def test_action_checks_and_their_messages(env):
    name = list(env.behavior_specs)[0]
    spec = env.behavior_specs[name]
    env.reset()
    with pytest.raises(UnityActionException, match=r"needs a continuous input of dimension \(2, 2\) for "
                       r"\(<number of agents>, <action size>\) but received input of dimension \(1, 2\)"):  # fmt: skip
        env.set_actions(name, ActionTuple(np.zeros((1, 2)), np.zeros((1, 1))))
    with pytest.raises(UnityActionException, match=r"needs a discrete input of dimension \(2, 1\)"):
        env.set_actions(name, ActionTuple(continuous=np.zeros((2, 2))))  # discrete left out: (2, 0)
    with pytest.raises(UnityActionException, match="does not correspond to an existing agent group"):
        env.set_actions("Nope?team=0", spec.action_spec.empty_action(2))
    with pytest.raises(UnityActionException, match="does not correspond to an existing agent group"):
        env.get_steps("Nope?team=0")
    # A value out of its branch: refused where it is set (mlagents-envs sends it and Unity then errs), in the words
    # the service's API uses for it too (protocol.mlagents.actions)
    with pytest.raises(UnityActionException, match=rf"actions\.{re.escape(name)}\.discrete\.0\.0: 7 is not a choice: "
                       "discrete branch 0 takes 0..2"):  # fmt: skip
        env.set_actions(name, ActionTuple(np.zeros((2, 2)), np.full((2, 1), 7)))
    env.set_actions(name, spec.action_spec.random_action(2))
    env.step()  # still usable
    assert len(env.get_steps(name)[0]) == 2


def test_close():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UNIRENDER_MLAGENTS_MAX_STEP", str(MAX_STEP))
        env = UnityEnvironment(file_name="builtin", timeout_wait=60)
    process = env.controller.process
    env.step()  # the first step resets, as mlagents-envs does
    assert len(env.get_steps("ReachTarget?team=0")[0]) == 2
    env.close()
    assert process.poll() is not None  # the player is gone
    with pytest.raises(UnityEnvironmentException, match="No Unity environment is loaded."):
        env.step()
    with pytest.raises(UnityEnvironmentException, match="No Unity environment is loaded."):
        env.close()


def test_file_name_that_matches_nothing(tmp_path):
    with pytest.raises(UnityEnvironmentException, match="Provided filename does not match any environments"):
        UnityEnvironment(file_name=str(tmp_path / "3DBall"))


def test_editor_needs_worker_0():
    with pytest.raises(UnityEnvironmentException, match="the worker-id must be 0"):
        UnityEnvironment(file_name=None, worker_id=1)
