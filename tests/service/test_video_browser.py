"""Videos in the web console, in a real headless Chromium against a real ``unirender serve``: the jobs page plays
an episode's video beside its contact sheet (the ``<video>`` reports its duration and no error), and a session's
record button records what the page shows into a video the API then serves."""

from __future__ import annotations

import io
import os
from urllib.parse import urlsplit

import pytest
import requests

from unirender.client import Client

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(f"missing dependency: Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}; "
                "./dev setup installs them)", allow_module_level=True)
pytest.importorskip("selenium.webdriver")  # the test extra
av = pytest.importorskip("av")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from fixtures.browser import chromium  # noqa: E402

TOKEN = "video-console-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"alice": TOKEN}, "limits": {"sessions_per_token": 2, "total_players": 4}})


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, TOKEN) as client:
        yield client


@pytest.fixture(scope="module")
def browser(service):
    with chromium() as driver:
        driver.get(service.url + "/ui/")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait(driver, lambda d: urlsplit(d.current_url).path.rstrip("/").endswith("/ui"))
        yield driver


def wait(driver, condition, timeout=30.0, message=""):
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d), message)


def test_the_jobs_page_plays_an_episodes_video_beside_its_contact_sheet(service, alice, browser):
    job = alice.submit_job({
        "name": "video-tour",
        "environment": {"width": 96, "height": 72},
        "render": {"modalities": ["rgb", "depth"]},
        "episodes": [{"scene": "FloorPlan1", "actions": ["RotateRight"] * 9}],
        "output": {"directory": "runs/video-tour", "video": {"fps": 5}},
        "workers": 1,
    })
    browser.get(f"{service.url}/ui/jobs/{job.id}")
    wait(browser, lambda d: d.find_elements(By.ID, "episode-video"), timeout=90, message="no video on the page")
    video = browser.find_element(By.ID, "episode-video")
    assert browser.find_element(By.ID, "contact-sheet").is_displayed() and video.is_displayed()
    state = wait(browser, lambda d: d.execute_script(
        "const v = arguments[0]; if (v.error) return {error: v.error.code + ': ' + v.error.message};"
        "return v.readyState >= 1 && isFinite(v.duration) ? {duration: v.duration, width: v.videoWidth} : null;",
        video), message="the video never loaded its metadata")  # fmt: skip
    assert state == {"duration": pytest.approx(10 / 5, abs=0.05), "width": 96}, state
    browser.execute_script("arguments[0].currentTime = 1.5", video)  # seeking: Range requests answered
    wait(browser, lambda d: d.execute_script("return arguments[0].readyState >= 2 && !arguments[0].seeking", video))
    assert browser.execute_script("return arguments[0].error", video) is None
    assert "agent, rgb; 10 frames at 5.0 frames/s" in browser.find_element(By.CSS_SELECTOR, "#video-h + video + p").text


def test_the_record_button_records_what_the_page_shows(service, alice, browser):
    with alice.session({"width": 96, "height": 72}, scene="FloorPlan1") as session:
        browser.get(f"{service.url}/ui/sessions/{session.id}")
        wait(browser, lambda d: d.find_element(By.ID, "live").get_attribute("data-seq"), message="no live view")
        button = browser.find_element(By.ID, "record")
        assert button.text == "Record" and not browser.find_element(By.ID, "record-file").is_displayed()
        button.click()
        wait(browser, lambda d: button.get_attribute("aria-pressed") == "true", message="recording did not start")
        pad = browser.find_element(By.CSS_SELECTOR, 'button.act[data-action="RotateRight"]')
        for n in range(3):
            pad.click()
            wait(browser, lambda d, n=n: f"(step {n + 1})" in d.find_element(By.ID, "last-action").text)
        button.click()
        wait(browser, lambda d: button.get_attribute("aria-pressed") == "false", message="recording did not stop")
        link = browser.find_element(By.ID, "record-file")
        assert link.is_displayed() and "4 frames recorded" in browser.find_element(By.ID, "record-state").text
        resp = requests.get(service.url + f"/v1/sessions/{session.id}/video", headers=AUTH, timeout=30)
        assert resp.status_code == 200
        with av.open(io.BytesIO(resp.content)) as container:
            frames = list(container.decode(video=0))
        assert len(frames) == 4 and (frames[0].width, frames[0].height) == (96, 72)
