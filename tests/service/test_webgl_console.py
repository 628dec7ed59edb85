"""The WebGL console adapter without a browser: which declared action each page key presses, and the page's
action checked by the service's own WebGL check (the same refusal as ``POST /v1/sessions/{id}/step``). The page
itself, in Chromium: tests/matrix/test_matrix_console_browser.py."""

from __future__ import annotations

import pytest

from fixtures.webgl import ACTIONS
from unirender.service.errors import ApiError, from_unirender_error
from unirender.service.ui.families import console_family
from unirender.service.webgl_sessions import check_declared
from unirender.simulator import ActionDescription, Description


def _description(names) -> Description:
    return Description(family="webgl", actions=ActionDescription("named", names=("noop", *names)))


def test_each_declared_action_has_a_button_and_a_one_key_action_its_key():
    console = console_family("webgl")
    actions = {**ACTIONS, "jump": {"key": "Space"}, "fire": {"key": "F", "send_message": ["Game", "Fire"]},
               "chord": {"keys": ["a", "b"]}, "one": {"keys": ["1"]}, "again": {"key": "ArrowLeft"},
               "focus": {"key": "Tab"}}  # fmt: skip
    controls = console.controls(_description(actions), {"protocol": "webgl", "actions": actions})
    keys = {a["name"]: a["key"] for a in controls["actions"]}
    assert list(keys) == ["noop", *actions]  # the declaration's order, noop first
    assert keys == {"noop": None, "left": "ArrowLeft", "right": "ArrowRight", "up": "ArrowUp", "red": None,
                    "click": None, "jump": " ", "fire": "f", "chord": None, "one": "1",
                    "again": None,  # ArrowLeft is left's, declared first; again keeps its button
                    "focus": None}  # Tab stays the page's (keyboard focus)  # fmt: skip
    inputs = {a["name"]: a["input"] for a in controls["actions"]}
    assert inputs["red"] == "SendMessage Game.SetColor('1,0,0')" and inputs["noop"] == "no input"
    assert inputs["click"] == "left click at (20, 20)" and inputs["chord"] == "key a + b"
    assert inputs["fire"] == "key F, SendMessage Game.Fire()"


def test_the_page_sends_declared_names_checked_as_the_api_checks_them():
    console = console_family("webgl")
    description = _description(ACTIONS)
    assert console.action({"action": "red"}, None, description) == ({"action": "red"}, "red")
    with pytest.raises(ApiError) as api:
        check_declared("rihgt", description.actions.names)
    with pytest.raises(ApiError) as page:
        console.action({"action": "rihgt"}, None, description)
    assert (page.value.status, page.value.message) == (api.value.status, api.value.message) == (422, api.value.message)
    assert "did you mean 'right'" in page.value.message
    # Raw input and malformed bodies: refused as the API refuses them (the console answers what the API would)
    for body, status in (({"action": {"key": "a"}}, 422), ({"send_message": ["Game", "Quit"]}, 422),
                         (["left"], 400), ({"action": ""}, 422)):  # fmt: skip
        with pytest.raises(Exception) as bad:
            console.action(body, None, description)
        assert from_unirender_error(bad.value).status == status, body
    with pytest.raises(ValueError, match="one view, 'rgb'"):
        console.check_view("frame")
