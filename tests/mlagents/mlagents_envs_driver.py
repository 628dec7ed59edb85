"""Runs INSIDE an mlagents-envs venv, 0.28.0 or 1.1.0 (no unirender imports): drive a "Unity build" with the
official client and print one JSON summary. ``python mlagents_envs_driver.py BUILD PORT STEPS`` (see
test_mlagents_envs.py). Camera shapes are reported as the client gives them (0.28: HWC, 1.1: CHW).
"""

import json
import sys

import mlagents_envs
import numpy as np
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel


def main() -> None:
    build, port, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    engine, params, stats = EngineConfigurationChannel(), EnvironmentParametersChannel(), StatsSideChannel()
    engine.set_configuration_parameters(width=64, height=48, time_scale=20.0)
    params.set_float_parameter("light_intensity", 0.5)
    env = UnityEnvironment(file_name=build, base_port=port, seed=3, side_channels=[engine, params, stats],
                           additional_args=["-batchmode"], timeout_wait=60)  # fmt: skip
    out = {"both": False, "episode_lengths": [], "envs_version": mlagents_envs.__version__}
    try:
        env.reset()
        (name,) = list(env.behavior_specs)
        spec = env.behavior_specs[name]
        out["behavior"] = name
        out["observation_shapes"] = [list(o.shape) for o in spec.observation_specs]
        out["observation_names"] = [o.name for o in spec.observation_specs]
        out["dimension_properties"] = [[int(d) for d in o.dimension_property] for o in spec.observation_specs]
        out["continuous_size"] = spec.action_spec.continuous_size
        out["discrete_branches"] = list(spec.action_spec.discrete_branches)
        decision, _ = env.get_steps(name)
        out["first_pixels"] = float(decision.obs[0].mean())
        out["first_mask_shape"] = [list(m.shape) for m in decision.action_mask]
        first_images = decision.obs[0].copy()
        for _ in range(steps):
            decision, _ = env.get_steps(name)
            env.set_actions(name, spec.action_spec.random_action(len(decision)))
            env.step()
            decision, terminal = env.get_steps(name)
            out["both"] |= bool(set(decision.agent_id) & set(terminal.agent_id))
        out["stats"] = {k: len(v) for k, v in stats.get_and_reset_stats().items()}
        out["last_obs_shapes"] = [list(o.shape) for o in decision.obs]
        out["frames_change"] = bool(np.abs(decision.obs[0] - first_images).max() > 0.05)
        out["last_vector"] = decision.obs[1].tolist()
        env.reset()
        decision, terminal = env.get_steps(name)
        out["after_reset_step_fraction"] = decision.obs[1][:, 7].tolist()
        out["after_reset_terminal"] = len(terminal)
        out["ok"] = bool(np.isfinite(decision.obs[1]).all())
    finally:
        env.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
