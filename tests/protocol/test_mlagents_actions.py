"""The one ML-Agents action check (``protocol.mlagents.actions``) and the three ways in that share it: the service's
step body and console (``ApiError`` 422) and the mlagents-envs drop-in (``UnityActionException``) say the same words
for the same wrong action."""

from __future__ import annotations

import numpy as np
import pytest

from unirender.protocol.mlagents.actions import ActionError, check_actions, check_behavior_action
from unirender.protocol.mlagents.steps import ActionSpec

SPEC = ActionSpec(2, (3, 4))


def _error(value, n=2, spec=SPEC) -> ActionError:
    with pytest.raises(ActionError) as info:
        check_behavior_action(value, spec, n, "B")
    return info.value


def test_what_is_taken_comes_out_float32_and_int32():
    for value in (
        {"continuous": [[0.5, -1], [0, 1]], "discrete": [[2, 3], [0, 0]]},
        {"continuous": np.array([[0.5, -1], [0, 1]], np.float64), "discrete": np.array([[2.0, 3.0], [0, 0]])},
    ):
        action = check_behavior_action(value, SPEC, 2, "B")
        assert action.continuous.dtype == np.float32 and action.discrete.dtype == np.int32
        assert action.continuous.tolist() == [[0.5, -1.0], [0.0, 1.0]] and action.discrete.tolist() == [[2, 3], [0, 0]]
    empty = check_behavior_action(None, SPEC, 3, "B")
    assert empty.continuous.shape == (3, 2) and empty.discrete.shape == (3, 2) and not empty.discrete.any()
    one = check_behavior_action(np.array([0.1, 0.2]), ActionSpec(2, ()), 1, "B")  # one agent's row on its own
    assert one.continuous.shape == (1, 2)


@pytest.mark.parametrize(
    ("value", "code", "path", "words"),
    [
        ({"continuous": [[0.5, 0.5]]}, "invalid_action_shape", "actions.B.continuous",
         "the behavior B needs a continuous input of dimension (2, 2) for (<number of agents>, <action size>) but "
         "received input of dimension (1, 2)"),
        ({"continuous": np.zeros((1, 2))}, "invalid_action_shape", "actions.B.continuous",
         "the behavior B needs a continuous input of dimension (2, 2) for (<number of agents>, <action size>) but "
         "received input of dimension (1, 2)"),
        ({"discrete": [[1], [0]]}, "invalid_action_shape", "actions.B.discrete.0", "received input of dimension (2, 1)"),
        ({"discrete": [[1, 1], [0]]}, "invalid_action_shape", "actions.B.discrete.1", "1 values, but the behavior B"),
        ({"discrete": [[1, 4], [0, 0]]}, "invalid_action", "actions.B.discrete.0.1",
         "4 is not a choice: discrete branch 1 takes 0..3"),
        ({"discrete": np.array([[1, 2**32], [0, 0]], np.int64)}, "invalid_action", "actions.B.discrete.0.1",
         "discrete branch 1 takes 0..3"),  # checked before the cast to int32 (which would wrap it to 0)
        ({"discrete": [[0.5, 1], [0, 0]]}, "invalid_action", "actions.B.discrete", "whole numbers"),
        ({"continuous": [[True, 0.5], [0, 0]]}, "invalid_action", "actions.B.continuous", "true/false"),
        ({"continuous": np.ones((2, 2), bool)}, "invalid_action", "actions.B.continuous", "actions are numbers"),
        ({"continuous": [["a", "b"], ["c", "d"]]}, "invalid_action", "actions.B.continuous", "actions are numbers"),
        ({"continuous": [[np.nan, 0], [0, 0]]}, "invalid_action", "actions.B.continuous", "NaN or infinite"),
        ({"continous": [[0, 0], [0, 0]]}, "invalid_action", "actions.B", "unknown keys ['continous']"),
        (np.zeros((2, 2)), "invalid_action", "actions.B", "has continuous and discrete actions"),
    ],
)
def test_what_is_refused_names_where_and_what(value, code, path, words):
    error = _error(value)
    assert (error.code, error.path) == (code, path) and words in str(error), str(error)
    assert str(error).startswith(f"{path}: ") and isinstance(error, ValueError)


def test_behaviors_and_the_agent_limit():
    specs = {"B": SPEC}
    assert set(check_actions({"B": None}, specs, {"B": 2}, max_agents=2)) == {"B"}
    with pytest.raises(ActionError, match=r"actions\.C: the game has no behavior 'C'; it has \['B'\]"):
        check_actions({"C": None}, specs, {"B": 2})
    with pytest.raises(ActionError, match="3 decision agents exceed the limit of 2") as info:
        check_actions({"B": None}, specs, {"B": 3}, max_agents=2)
    assert info.value.code == "too_many_agents"


def test_the_service_the_console_and_the_dropin_say_the_same_words():
    from unirender.mlagents import ActionTuple, UnityActionException
    from unirender.mlagents.base_env import ActionSpec as DropInActionSpec
    from unirender.service.errors import ApiError
    from unirender.service.mlagents_sessions import check_behavior_actions
    from unirender.service.ui.mlagents_console import CONSOLE
    from unirender.simulator import ActionDescription, BehaviorActions, Description

    spaces = {"B": BehaviorActions(2, (3, 4))}
    wrong = {"continuous": [[0.0, 0.0]], "discrete": [[9, 0]]}  # one agent deciding; 9 is outside branch 0
    expected = str(_error({k: np.array(v) for k, v in wrong.items()}, n=1))
    assert expected == "actions.B.discrete.0.0: 9 is not a choice: discrete branch 0 takes 0..2"
    with pytest.raises(ApiError) as api:
        check_behavior_actions({"B": wrong}, spaces, {"B": 1}, 8)
    assert (api.value.status, api.value.code, api.value.message) == (422, "invalid_action", expected)
    description = Description(family="mlagents", actions=ActionDescription(kind="behaviors", behaviors=spaces))
    with pytest.raises(ApiError) as console:
        CONSOLE.action({"behavior": "B", "continuous": [0.0, 0.0], "discrete": [9, 0]}, None, description)
    assert (console.value.status, console.value.message) == (422, expected)
    with pytest.raises(UnityActionException) as dropin:
        DropInActionSpec(2, (3, 4))._validate_action(ActionTuple(np.zeros((1, 2)), np.array([[9, 0]])), 1, "B")
    assert str(dropin.value) == expected
