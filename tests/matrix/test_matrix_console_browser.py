"""Driving sessions from the console page in a real headless Chromium. ML-Agents: the digit keys choose
discrete branch 0 and step, a held arrow key steps with continuous axis 0 at +1, the Step button sends the
sliders. WebGL: a declared key action's key steps it and the live canvas changes, a key no action declares does
nothing, a declared SendMessage action's button steps it, and Record records the canvas. Each reaches the game (the session's step count and the
page's status line say so)."""

from __future__ import annotations

import time

import pytest
import requests

from fixtures.browser import chromium

TOKEN = "matrix-browser-token"


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def _steps(url: str, sid: str) -> int:
    info = requests.get(f"{url}/v1/sessions/{sid}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    return info.json()["steps"]


def _session_page(case, tmp_path, browser) -> tuple[str, str]:
    """A service of ``case`` with a new session of its environment, its console page open (logged in): (url, id)."""
    from selenium.webdriver.common.by import By

    url = case.service(tmp_path, tokens={"alice": TOKEN})
    created = requests.post(url + "/v1/sessions", json={"environment": case.environment},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=180)  # fmt: skip
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    browser.get(url + "/ui/login")
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.NAME, "token").submit()
    browser.get(f"{url}/ui/sessions/{sid}")
    return url, sid


def _wait(predicate, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_keys_and_controls_drive_an_mlagents_game(mlagents_case, tmp_path, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, sid = _session_page(mlagents_case, tmp_path, browser)
    status = browser.find_element(By.ID, "last-action")
    _wait(lambda: browser.find_element(By.ID, "live").get_attribute("src"), what="the live view's first frame")

    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys("2")  # discrete branch 0 = choice 2, one step
    _wait(lambda: _steps(url, sid) == 1, what="the digit key's step")
    _wait(lambda: "succeeded" in status.text, what="the page's status line")
    assert browser.find_element(By.CSS_SELECTOR, 'select[data-branch="0"]').get_attribute("value") == "2"
    assert "+1.00" not in status.text

    ActionChains(browser).key_down(Keys.ARROW_RIGHT).pause(0.3).key_up(Keys.ARROW_RIGHT).perform()
    _wait(lambda: _steps(url, sid) >= 2, what="the held arrow's steps")
    _wait(lambda: "+1.00" in status.text, what="axis 0 at +1 in the status line")

    # A key typed into a form field is the field's, not a step.
    before = _steps(url, sid)
    browser.find_element(By.CSS_SELECTOR, 'select[data-branch="0"]').send_keys("1")
    time.sleep(0.5)  # an absence is tested (no step): a window for one to show; the Step button's below counts too
    assert _steps(url, sid) == before

    browser.find_element(By.CSS_SELECTOR, "form.behavior button.step").click()
    _wait(lambda: _steps(url, sid) == before + 1, what="the Step button's step")


def test_declared_keys_and_buttons_drive_a_webgl_game(webgl_case, tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, sid = _session_page(webgl_case, tmp_path, browser)
    status = browser.find_element(By.ID, "last-action")
    live = browser.find_element(By.ID, "live")
    _wait(lambda: live.get_attribute("src"), what="the live canvas's first frame")
    booted = live.get_attribute("src")

    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.ARROW_RIGHT)  # declared as {"key": "ArrowRight"}, named "right"
    _wait(lambda: "right: succeeded" in status.text, what="the right key's step in the status line")
    assert _steps(url, sid) == 1
    _wait(lambda: live.get_attribute("src") != booted, what="the moved square on the live canvas")

    # A key no action declares sends nothing: had it sent a step, it would have completed before the declared
    # key's (the page sends one action at a time, in order), and the count would be 3.
    body.send_keys("d")
    body.send_keys(Keys.ARROW_LEFT)
    _wait(lambda: "left: succeeded" in status.text, what="the left key's step in the status line")
    assert _steps(url, sid) == 2

    # A SendMessage action (no key) has its button; so has noop. Both recorded with the canvas they showed.
    record = browser.find_element(By.ID, "record")
    record.click()
    _wait(lambda: record.get_attribute("aria-pressed") == "true", what="the recording's start")
    browser.find_element(By.CSS_SELECTOR, 'button.act[data-action="red"]').click()
    _wait(lambda: "red: succeeded" in status.text, what="the red button's step in the status line")
    browser.find_element(By.CSS_SELECTOR, 'button.act[data-action="noop"]').click()
    _wait(lambda: "noop: succeeded" in status.text, what="the noop button's step in the status line")
    assert _steps(url, sid) == 4
    record.click()
    _wait(lambda: record.get_attribute("aria-pressed") == "false", what="the recording's end")
    # the frame shown when it started, then one a step
    assert "3 frames recorded" in browser.find_element(By.ID, "record-state").text
