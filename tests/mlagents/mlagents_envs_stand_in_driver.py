"""Runs INSIDE an mlagents-envs venv, 0.28.0 or 1.1.0 (no unirender imports): drive the stand-in game
(``tests/fixtures/mlagents_game.py``, launched as a "Unity build") with the official client and save every
observation it decodes. ``python mlagents_envs_stand_in_driver.py BUILD PORT STEPS OUT.npz``; prints the behavior
specs as one JSON line. The actions are :func:`actions` (test_mlagents_envs.py sends the same with unirender).
"""

import json
import sys

import numpy as np

COLLECTOR, SCOUT = "Collector?team=0", "Scout?team=1"


def actions(step: int, behavior: str, n: int):
    """(continuous (n, c), discrete (n, b)) of ``step`` for ``behavior``'s ``n`` decision agents."""
    if behavior == COLLECTOR:
        return (np.array([[0.25 * i] for i in range(n)], np.float32),
                np.array([[0, (step + i) % 3] for i in range(n)], np.int32))
    return np.zeros((n, 0), np.float32), np.array([[3 if i == 0 else 1] for i in range(n)], np.int32)


def dump(env, arrays: dict, tag: str) -> None:
    for name in env.behavior_specs:
        decision, terminal = env.get_steps(name)
        for kind, steps in (("decision", decision), ("terminal", terminal)):
            arrays[f"{tag}/{name}/{kind}/agent_id"] = np.asarray(steps.agent_id)
            arrays[f"{tag}/{name}/{kind}/reward"] = np.asarray(steps.reward)
            for i, obs in enumerate(steps.obs):
                arrays[f"{tag}/{name}/{kind}/obs{i}"] = obs
        for b, mask in enumerate(decision.action_mask or []):
            arrays[f"{tag}/{name}/decision/mask{b}"] = mask


def main() -> None:
    # imported here: the tests import actions() from this file without mlagents-envs installed
    from mlagents_envs.base_env import ActionTuple
    from mlagents_envs.environment import UnityEnvironment
    from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel
    from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel

    build, port, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    engine, params = EngineConfigurationChannel(), EnvironmentParametersChannel()
    engine.set_configuration_parameters(time_scale=5.0)
    params.set_float_parameter("reward_scale", 2.0)
    env = UnityEnvironment(file_name=build, base_port=port, seed=11, num_areas=2, side_channels=[engine, params],
                           timeout_wait=60)
    arrays = {}
    try:
        env.reset()
        dump(env, arrays, "0")
        for k in range(1, steps + 1):
            for name in env.behavior_specs:
                decision, _ = env.get_steps(name)
                continuous, discrete = actions(k, name, len(decision))
                env.set_actions(name, ActionTuple(continuous=continuous, discrete=discrete))
            env.step()
            dump(env, arrays, str(k))
        specs = {name: [[list(o.shape), [int(d) for d in o.dimension_property], o.observation_type.value, o.name]
                        for o in spec.observation_specs] for name, spec in env.behavior_specs.items()}
    finally:
        env.close()
    np.savez(out, **arrays)
    print(json.dumps(specs))


if __name__ == "__main__":
    main()
