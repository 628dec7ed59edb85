"""The one check of a step's ML-Agents actions, shared by every way actions arrive.

The trainer core (:class:`~unirender.protocol.mlagents.trainer.TrainerProtocol`), the mlagents-envs drop-in
(``ActionSpec._validate_action``: ``UnityActionException``), the service's step body and its console (``ApiError``
422) all call :func:`check_actions` / :func:`check_behavior_action` and map :class:`ActionError` to their own
error type, so a wrong action reads the same wherever it was sent: a path (``actions.<behavior>.<kind>[.<row>
[.<branch>]]``), what the behavior needs (mlagents-envs' own words for a wrong shape), what it got.

Accepted per behavior: ``None`` (zeros, mlagents-envs' default), an ``ActionTuple`` (anything with
``continuous``/``discrete``), a ``dict(continuous=, discrete=)`` of arrays or row lists, or one array for a purely
continuous or purely discrete behavior. Checked: known behaviors, at most ``max_agents`` decision agents, one row per
decision agent, row widths, numbers (a bool is neither a number nor a choice, as JSON's ``true`` is not), finite
continuous values, whole discrete values inside their branch. numpy only: no protobuf, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unirender.protocol.mlagents.steps import ActionSpec, ActionTuple

KINDS = ("continuous", "discrete")


class ActionError(ValueError):
    """An action the game cannot take. ``code``: ``unknown_behavior``, ``too_many_agents``,
    ``invalid_action_shape`` or ``invalid_action``; ``path``: where in ``{"actions": ...}`` it is wrong."""

    def __init__(self, code: str, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.code, self.path, self.message = code, path, message


def check_actions(
    actions: Mapping[str, Any] | None,
    specs: Mapping[str, ActionSpec],
    decision_counts: Mapping[str, int],
    max_agents: int | None = None,
) -> dict[str, ActionTuple]:
    """``{behavior: action}`` for the decision agents of the last step -> ``{behavior: ActionTuple}`` (float32
    ``(n, c)``, int32 ``(n, b)``) for every behavior named in ``actions``. Everything is checked before anything is
    returned; :class:`ActionError` on the first problem."""
    checked = {}
    for name, value in (actions or {}).items():
        at = f"actions.{name}"
        if name not in specs:
            raise ActionError("unknown_behavior", at, f"the game has no behavior {name!r}; it has {sorted(specs)}")
        n = decision_counts.get(name, 0)
        if max_agents is not None and n > max_agents:
            raise ActionError("too_many_agents", at, f"{n} decision agents exceed the limit of {max_agents}")
        checked[name] = check_behavior_action(value, specs[name], n, name)
    return checked


def check_behavior_action(value: Any, spec: ActionSpec, n_agents: int, behavior: str) -> ActionTuple:
    """One behavior's action for its ``n_agents`` decision agents -> a checked ``ActionTuple`` (a kind left out
    is zeros)."""
    at = f"actions.{behavior}"
    if value is None:
        return spec.empty(n_agents)
    if isinstance(value, Mapping):
        unknown = set(value) - set(KINDS)
        if unknown:
            raise ActionError("invalid_action", at, f"unknown keys {sorted(unknown)}; an action has {list(KINDS)}")
        continuous, discrete = value.get("continuous"), value.get("discrete")
    elif hasattr(value, "continuous") and hasattr(value, "discrete"):
        continuous, discrete = value.continuous, value.discrete
    elif spec.continuous_size and not spec.discrete_branches:
        continuous, discrete = value, None
    elif spec.discrete_branches and not spec.continuous_size:
        continuous, discrete = None, value
    else:
        raise ActionError("invalid_action", at, f"the behavior {behavior!r} has continuous and discrete actions; "
                          "pass ActionTuple(continuous, discrete) or {'continuous': ..., 'discrete': ...}")
    continuous = _rows(continuous, spec.continuous_size, n_agents, behavior, "continuous")
    discrete = _rows(discrete, spec.discrete_size, n_agents, behavior, "discrete")
    for b, size in enumerate(spec.discrete_branches):  # before the cast to int32, which would wrap 2**32 to 0
        bad = np.flatnonzero((discrete[:, b] < 0) | (discrete[:, b] >= size))
        if bad.size:
            i = int(bad[0])
            raise ActionError("invalid_action", f"{at}.discrete.{i}.{b}",
                              f"{discrete[i, b]} is not a choice: discrete branch {b} takes 0..{size - 1}")
    return ActionTuple(np.ascontiguousarray(continuous, np.float32), np.ascontiguousarray(discrete, np.int32))


def _rows(rows: Any, width: int, n: int, behavior: str, kind: str) -> np.ndarray:
    """One kind's rows (an array or a list of rows; ``None`` or an empty list = zeros) -> numbers ``(n, width)``."""
    at = f"actions.{behavior}.{kind}"
    expected = (n, width)
    if rows is None or (isinstance(rows, list | tuple) and not rows):
        return np.zeros(expected, np.float32 if kind == "continuous" else np.int32)
    if isinstance(rows, list | tuple):  # rows as sent in a JSON body
        widths = [len(row) if isinstance(row, list | tuple | np.ndarray) else None for row in rows]
        if len(set(widths)) > 1:  # ragged, or rows mixed with numbers: name the first wrong row
            i = next((i for i, w in enumerate(widths) if w != width), 0)
            got = "not a row" if widths[i] is None else f"{widths[i]} values"
            raise ActionError("invalid_action_shape", f"{at}.{i}", f"{got}, but {_needs(behavior, kind, expected)}")
        if any(type(v) is bool for row in rows if isinstance(row, list | tuple) for v in row):
            raise ActionError("invalid_action", at, f"true/false values; {kind} actions are numbers")
        try:
            rows = np.asarray(rows)
        except ValueError:  # deeper nesting of different depths
            raise ActionError("invalid_action_shape", at, f"not rows of numbers, but {_needs(behavior, kind, expected)}"
                              ) from None
    else:
        rows = np.asarray(rows)
    if rows.ndim == 1 and n == 1 and rows.shape[0] == width:  # one agent's row on its own
        rows = rows[None, :]
    if rows.shape != expected:  # the right number of rows, of the wrong width: named by the first row
        path = f"{at}.0" if rows.ndim == 2 and n and rows.shape[0] == n else at
        raise ActionError("invalid_action_shape", path,
                          f"{_needs(behavior, kind, expected)} but received input of dimension {rows.shape}")
    if rows.dtype.kind not in "iuf":  # whole floats are fine as discrete choices (mlagents-envs casts): see below
        what = "numbers" if kind == "continuous" else "whole numbers"
        raise ActionError("invalid_action", at, f"{rows.dtype} values; {kind} actions are {what}")
    if rows.dtype.kind == "f" and rows.size and not np.isfinite(rows).all():
        raise ActionError("invalid_action", at, "NaN or infinite values")
    if kind == "discrete" and rows.dtype.kind == "f" and not np.array_equal(rows, np.round(rows)):
        raise ActionError("invalid_action", at, f"discrete actions are whole numbers, got {rows.tolist()}")
    return rows


def _needs(behavior: str, kind: str, expected: tuple[int, int]) -> str:
    # mlagents-envs' own words (ActionSpec._validate_action), so code matching them keeps working.
    return f"the behavior {behavior} needs a {kind} input of dimension {expected} for (<number of agents>, <action size>)"
