"""Runs the same few lines with mlagents-envs (inside its venv) or with unirender's drop-in: play the stand-in game
(``tests/fixtures/mlagents_game.py`` as a "Unity build") with one environment parameter set, and print as one JSON
line the exception ``reset()``/``step()`` raise (type, its bases' names, message) and at which call, or ``null``.
``python mlagents_envs_error_driver.py mlagents_envs|unirender.mlagents BUILD PORT KEY VALUE STEPS``.
"""

import importlib
import json
import sys

from mlagents_envs_stand_in_driver import actions


def main() -> None:
    package, build, port, key, value, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], \
        float(sys.argv[5]), int(sys.argv[6])  # fmt: skip
    ActionTuple = importlib.import_module(f"{package}.base_env").ActionTuple
    UnityEnvironment = importlib.import_module(f"{package}.environment").UnityEnvironment
    channels = importlib.import_module(f"{package}.side_channel.environment_parameters_channel")
    params = channels.EnvironmentParametersChannel()
    params.set_float_parameter(key, value)
    env = UnityEnvironment(file_name=build, base_port=port, side_channels=[params], timeout_wait=60)
    raised, call = None, 0
    try:
        env.reset()
        for call in range(1, steps + 1):
            for name in env.behavior_specs:
                decision, _ = env.get_steps(name)
                continuous, discrete = actions(call, name, len(decision))
                env.set_actions(name, ActionTuple(continuous=continuous, discrete=discrete))
            env.step()
    except Exception as exc:  # what a user's code would catch
        raised = {"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc),
                  "call": call}  # fmt: skip
    finally:
        try:
            env.close()
        except Exception:  # noqa: S110 - closing after the failure is best effort; the failure is the result
            pass
    print(json.dumps(raised))


if __name__ == "__main__":
    main()
