"""Runs INSIDE the mlagents-envs 0.28.0 venv (see benchmarks/mlagents.py): times ``UnityEnvironment`` stepping a
"Unity build" and prints one JSON line. ``python mlagents_envs_driver.py BUILD PORT STEPS WIDTH HEIGHT``."""

import json
import sys
import time

from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel

WARMUP = 10


def main() -> None:
    build, port, steps, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    engine = EngineConfigurationChannel()
    engine.set_configuration_parameters(width=width, height=height, time_scale=100.0)
    env = UnityEnvironment(file_name=build, base_port=port, side_channels=[engine], additional_args=["-batchmode"],
                           timeout_wait=30)
    try:
        env.reset()
        (name,) = list(env.behavior_specs)
        spec = env.behavior_specs[name]
        wall = cpu = 0.0
        for i in range(WARMUP + steps):
            if i == WARMUP:
                wall, cpu = time.perf_counter(), time.process_time()
            decision, _ = env.get_steps(name)
            env.set_actions(name, spec.action_spec.random_action(len(decision)))
            env.step()
            decision, _ = env.get_steps(name)
            _ = decision.obs[0], decision.obs[1]  # what a trainer reads
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"steps": steps, "wall_s": wall, "cpu_s": cpu, "shape": list(decision.obs[0].shape)}))
    except Exception as exc:  # noqa: BLE001 - reported to the benchmark, which expects refusals at 1024x1024
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}))
    finally:
        env.close()


if __name__ == "__main__":
    main()
