"""The web console in a real headless Chromium (Debian's, driven by Selenium through the system chromedriver)
against a real ``unirender serve``: log in, watch a session's live view change after a key press, follow a job
to 100 % and its contact sheet, a second token sees none of it, a cross-site form POST is refused.

Screenshots are saved under ``$UNIRENDER_TEST_ARTIFACTS`` (default: the test's tmp dir) as test artifacts.
"""

from __future__ import annotations

import io
import os
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import requests
from PIL import Image

from unirender.client import Client

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(f"missing dependency: Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}; "
                "./dev setup installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")  # the test extra
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ALICE, BOB = "alice-console-token", "bob-console-token"
SIZE = 160


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"alice": ALICE, "bob": BOB},
                         "limits": {"sessions_per_token": 2, "total_players": 4}})


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, ALICE) as client:
        yield client


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    path = Path(os.environ.get("UNIRENDER_TEST_ARTIFACTS") or tmp_path_factory.mktemp("console-screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    FAILURE_SHOTS[:] = [path]
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    # Selenium Manager must never download a driver or phone home: the driver path is given, and offline.
    offline = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", f"--user-data-dir={profile}", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--disable-features=Translate,OptimizationHints,MediaRouter",
                "--metrics-recording-only"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        if offline is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = offline


FAILURE_SHOTS: list[Path] = []  # where wait() saves the page when it gives up (set by the artifacts fixture)


def wait(driver, condition, timeout=20.0, message=""):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d), message)
    except TimeoutException:
        if FAILURE_SHOTS:
            driver.save_screenshot(str(FAILURE_SHOTS[0] / f"timeout-{int(time.time() * 1000)}.png"))
        raise


def login(driver, url: str, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(url + "/ui/")
    assert "/ui/login" in driver.current_url  # not logged in: the console asks for the token
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    # The path, not the whole URL: the login page's own URL (…/ui/login?next=/ui/) ends in "/ui/" too.
    wait(driver, lambda d: urlsplit(d.current_url).path.rstrip("/").endswith("/ui"), message="login did not land on /ui/")


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def painted(driver) -> None:
    """Returns once the page has painted what it shows now: the second animation frame from here comes after a
    paint of the first (a fixed sleep stood in for this and lost under load)."""
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "requestAnimationFrame(() => requestAnimationFrame(() => done(true)));")


def shown_view(driver, live, view: str, path: Path) -> np.ndarray:
    """Select ``view`` and return what the live image shows once the stream has re-sent the current frame in it
    (no step in between: the same pose). The image's ``src`` must change unless it already shows that view."""
    before = live.get_attribute("src")
    select = driver.find_element(By.ID, "view-select")
    if select.get_attribute("value") == view:
        return pixels(live.screenshot_as_png)
    seq = live.get_attribute("data-seq")
    select.find_element(By.CSS_SELECTOR, f'option[value="{view}"]').click()
    wait(driver, lambda d: live.get_attribute("src") != before, message=f"the live view never showed {view}")
    wait(driver, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", live))
    assert live.get_attribute("data-seq") == seq  # the same frame, not a new step
    painted(driver)
    png = live.screenshot_as_png
    path.write_bytes(png)
    return pixels(png)


def test_live_view_follows_a_key_press(service, alice, browser, artifacts):
    session = alice.session({"width": SIZE, "height": SIZE}, render={"modalities": ["rgb", "depth"]},
                            scene="FloorPlan1")
    try:
        login(browser, service.url, ALICE)
        browser.save_screenshot(str(artifacts / "index-with-session.png"))
        browser.find_element(By.LINK_TEXT, session.id).click()
        live = browser.find_element(By.ID, "live")
        wait(browser, lambda d: live.get_attribute("data-seq"), message="no frame reached the live view")
        browser.save_screenshot(str(artifacts / "session-page.png"))
        before_seq = int(live.get_attribute("data-seq"))
        before = live.screenshot_as_png
        (artifacts / "live-before.png").write_bytes(before)
        # Two status polls with no step between them: the page has a baseline for steps/s (checked below).
        wait(browser, lambda d: d.find_element(By.ID, "steps-rate").text == "idle", message="steps/s not idle")

        browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_RIGHT)  # RotateRight
        wait(browser, lambda d: int(live.get_attribute("data-seq")) > before_seq
             and "RotateRight" in d.find_element(By.ID, "last-action").text, message="no new frame after the key")
        painted(browser)
        after = live.screenshot_as_png
        (artifacts / "live-after.png").write_bytes(after)
        a, b = pixels(before), pixels(after)
        assert a.shape == b.shape
        assert np.abs(a - b).mean() > 5.0, "the live view did not change after RotateRight"
        assert "succeeded" in browser.find_element(By.ID, "last-action").text
        assert session.info()["steps"] >= 1  # the key press stepped the session itself

        def rate(d) -> float | None:
            text = d.find_element(By.ID, "steps-rate").text
            return float(text) if text.replace(".", "", 1).isdigit() else None

        # steps/s over the last seconds, not the last poll: the one step still shows a rate at the next poll, a
        # second later, instead of 0.0
        wait(browser, lambda d: rate(d), message="no steps/s after the key press")
        first = browser.find_element(By.ID, "steps-rate").text
        wait(browser, lambda d: d.find_element(By.ID, "steps-rate").text != first, message="steps/s never updated")
        assert rate(browser), browser.find_element(By.ID, "steps-rate").text

        # The frame rate and latency are shown; the view selector re-streams the same frame (the same pose) in
        # another view: depth through its colour map differs from the colour frame, and back again is the same.
        wait(browser, lambda d: d.find_element(By.ID, "latency").text.endswith("ms"))
        colour = shown_view(browser, live, "frame", artifacts / "live-colour.png")
        depth = shown_view(browser, live, "depth_frame", artifacts / "live-depth.png")
        again = shown_view(browser, live, "frame", artifacts / "live-colour-again.png")
        assert np.abs(depth - colour).mean() > 5.0, "the depth view shows the colour frame"
        assert np.abs(again - colour).mean() < 1.0, "the same pose in the same view looks different"
        browser.set_window_size(420, 800)  # a narrow window: the page still works
        browser.save_screenshot(str(artifacts / "session-page-narrow.png"))
        browser.set_window_size(1280, 800)
    finally:
        session.stop()


def open_session_page(driver, url: str, session) -> None:
    login(driver, url, ALICE)
    driver.get(f"{url}/ui/sessions/{session.id}")
    wait(driver, lambda d: d.find_element(By.ID, "live").get_attribute("data-seq"), message="no live frame")


def last_action(driver) -> str:
    return driver.find_element(By.ID, "last-action").text


def body_keys(driver, *keys) -> None:
    """Keys typed on the page itself (whatever had the focus loses it first)."""
    driver.execute_script("document.activeElement && document.activeElement.blur()")
    driver.find_element(By.TAG_NAME, "body").send_keys(*keys)


def press(driver, *keys, expect: str, step: int | None = None) -> None:
    """Press keys on the page; the last one's action ends with ``expect`` as the last action shown (a prefix and
    a step number when the outcome may vary: a move can be blocked)."""
    action = expect.split(":")[0]
    body_keys(driver, *keys)
    wait(driver, lambda d: last_action(d).startswith(action + ":"), message=f"{keys} did not send {action}")
    if step is None:
        assert last_action(driver) == expect
    else:
        assert last_action(driver).startswith(expect) and last_action(driver).endswith(f"(step {step})")


def test_the_fps_cap_spaces_the_frames_a_viewer_gets(service, alice, browser):
    """``?fps=2`` on the stream: frames at least ~0.5 s apart while the session steps far faster.

    Counted, not timed: the session steps until the capped stream has brought ``frames`` more frames, and it
    must have stepped at least ``skipped`` times as often as frames came (an uncapped stream brings about one a
    step), however fast or slow the machine is."""
    frames, skipped, most = 5, 3, 5000
    session = alice.session({"width": 64, "height": 64}, scene="FloorPlan1")
    steps = 0
    try:
        open_session_page(browser, service.url, session)
        browser.execute_script("""
            window.__arrivals = [];
            window.__capped = new EventSource(arguments[0] + "?view=frame&fps=2");
            window.__capped.addEventListener("frame", () => window.__arrivals.push(performance.now()));
        """, f"/ui/sessions/{session.id}/stream")
        wait(browser, lambda d: d.execute_script("return window.__arrivals.length") >= 1)
        before = browser.execute_script("return window.__arrivals.length")
        came = 0
        while came < frames and steps < most:
            session.step("RotateRight")
            steps += 1
            if steps % 10 == 0:
                came = browser.execute_script("return window.__arrivals.length") - before
        arrivals = browser.execute_script("window.__capped.close(); return window.__arrivals")
    finally:
        session.stop()
    came = len(arrivals) - before
    assert came >= frames, f"only {came} frames in {steps} steps under ?fps=2"
    assert steps >= skipped * came, f"{steps} steps for {came} frames: too few to show a cap of 2 frames/s"
    gaps = np.diff(arrivals) / 1000.0
    assert len(gaps) >= 3 and gaps.min() >= 0.3, f"frames {gaps.round(3)} s apart under ?fps=2 ({steps} steps)"


def test_remapped_keys_drive_the_session_and_form_fields_keep_theirs(service, alice, browser):
    session = alice.session({"width": 64, "height": 64}, scene="FloorPlan1")
    try:
        open_session_page(browser, service.url, session)
        browser.find_element(By.CSS_SELECTOR, "details.keymap summary").click()
        field = browser.find_element(By.CSS_SELECTOR, 'input[name="MoveAhead"]')
        field.clear()
        field.send_keys("m")
        browser.find_element(By.CSS_SELECTOR, '#keymap-form button[type="submit"]').click()
        wait(browser, lambda d: last_action(d) == "Keys saved in this browser.")

        # After each key that must do nothing, a key that steps: its step number says whether the first one sent.
        press(browser, "w", Keys.ARROW_LEFT, expect="RotateLeft: succeeded (step 1)")  # w is no longer bound
        press(browser, "m", expect="MoveAhead: succeeded (step 2)")
        browser.refresh()  # the keys are kept in this browser
        wait(browser, lambda d: d.find_element(By.ID, "live").get_attribute("data-seq"), message="no live frame")
        assert browser.find_element(By.CSS_SELECTOR, 'input[name="MoveAhead"]').get_attribute("value") == "m"
        press(browser, "w", Keys.ARROW_RIGHT, expect="RotateRight: succeeded (step 3)")
        press(browser, "m", expect="MoveAhead: ", step=4)

        # A key typed into a form field is text, not an action (d is MoveRight on the page).
        browser.find_element(By.CSS_SELECTOR, "details.keymap summary").click()
        field = browser.find_element(By.CSS_SELECTOR, 'input[name="MoveRight"]')
        field.click()
        field.send_keys(Keys.END, "d")
        assert field.get_attribute("value") == "dd"
        press(browser, Keys.ARROW_LEFT, expect="RotateLeft: succeeded (step 5)")
        assert session.info()["steps"] == 5
    finally:
        browser.execute_script("localStorage.clear()")
        session.stop()


# Holds every action POST of the page until released, and records what each one asked for.
HOLD_ACTIONS = """
window.__sent = []; window.__held = [];
const realFetch = window.fetch.bind(window);
window.fetch = (url, opts) => {
  if (!opts || opts.method !== "POST") return realFetch(url, opts);
  window.__sent.push(JSON.parse(opts.body).action);
  return new Promise(resolve => window.__held.push(() => resolve(realFetch(url, opts))));
};
"""


def test_one_action_in_flight_and_one_queued(service, alice, browser):
    """Keys pressed while a step is in flight: the last one waits, the ones between are dropped."""
    session = alice.session({"width": 64, "height": 64}, scene="FloorPlan1")
    try:
        open_session_page(browser, service.url, session)
        browser.execute_script(HOLD_ACTIONS)
        # RotateLeft goes out; LookUp, LookDown, RotateRight queue in turn, each replacing the one before.
        body_keys(browser, Keys.ARROW_LEFT, Keys.ARROW_UP, Keys.ARROW_DOWN, Keys.ARROW_RIGHT)
        wait(browser, lambda d: d.execute_script("return window.__held.length") == 1)
        assert browser.execute_script("return window.__sent") == ["RotateLeft"]
        browser.execute_script("window.__held.shift()()")
        wait(browser, lambda d: d.execute_script("return window.__held.length") == 1)
        assert browser.execute_script("return window.__sent") == ["RotateLeft", "RotateRight"]
        browser.execute_script("window.__held.shift()()")
        wait(browser, lambda d: last_action(d).startswith("RotateRight: "))
        assert last_action(browser) == "RotateRight: succeeded (step 2)"
        assert browser.execute_script("return window.__sent") == ["RotateLeft", "RotateRight"]
        assert session.info()["steps"] == 2
    finally:
        session.stop()


def test_job_progress_reaches_100_and_shows_the_contact_sheet(service, alice, browser, artifacts):
    job = alice.submit_job({
        "name": "console-tour",
        "environment": {"width": 64, "height": 48},
        "render": {"modalities": ["rgb", "depth", "instance_segmentation"]},
        "episodes": [{"scene": "FloorPlan1", "actions": ["RotateRight"] * 6 + ["MoveAhead"] * 4}],
        "output": {"directory": "runs/console-tour"},
        "workers": 1,
    })
    login(browser, service.url, ALICE)
    browser.get(f"{service.url}/ui/jobs/{job.id}")
    # The page refreshes its bar every second and reloads once the job has ended.
    wait(browser, lambda d: d.find_elements(By.ID, "contact-sheet"), timeout=60, message="job never finished")
    assert browser.find_element(By.ID, "job-progress").get_attribute("value") == "100"
    assert "11/11 frames (100.0%)" in browser.find_element(By.CSS_SELECTOR, '[data-field="frames"]').text
    sheet = browser.find_element(By.ID, "contact-sheet")
    wait(browser, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", sheet))
    assert "worker 0" in browser.find_element(By.CSS_SELECTOR, '[data-field="workers"]').text
    browser.save_screenshot(str(artifacts / "job-page.png"))
    # The frame browser: another frame and modality.
    browser.get(f"{service.url}/ui/jobs/{job.id}?index=5&key=depth_frame#browse")
    frame = browser.find_element(By.ID, "dataset-frame")
    wait(browser, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", frame))
    assert "frame 5" in browser.find_element(By.TAG_NAME, "figcaption").text
    browser.save_screenshot(str(artifacts / "frame-browser.png"))
    browser.get(service.url + "/ui/")
    bar = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{job.id}"] progress')
    assert bar.get_attribute("value") == "100"
    browser.save_screenshot(str(artifacts / "index-page.png"))


def test_a_second_token_sees_none_of_it(service, alice, browser, artifacts):
    session = alice.session({"width": 64, "height": 64}, scene="FloorPlan1")
    try:
        jobs = [j["id"] for j in alice.request("GET", "/v1/jobs").json()["jobs"]]
        login(browser, service.url, BOB)
        page = browser.page_source
        assert session.id not in page and not any(j in page for j in jobs)
        assert "No sessions" in page and "No jobs" in page
        browser.get(f"{service.url}/ui/sessions/{session.id}")
        assert "404" in browser.title and session.id in browser.page_source  # only the id bob typed himself
        assert "FloorPlan1" not in browser.page_source
        browser.save_screenshot(str(artifacts / "bob-404.png"))
    finally:
        session.stop()


class _EvilSite(BaseHTTPRequestHandler):
    """Another origin (same host, another port) whose page posts to the console with the victim's cookie."""

    target = ""

    def do_GET(self):
        page = (f'<form id="f" method="post" action="{self.target}" enctype="text/plain">'
                '<input name=\'{"action":"MoveAhead","x":"\' value=\'"}\'></form>'
                '<script>document.getElementById("f").submit()</script>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


def test_a_cross_site_post_is_refused(service, alice, browser, artifacts):
    session = alice.session({"width": 64, "height": 64}, scene="FloorPlan1")
    evil = ThreadingHTTPServer(("127.0.0.1", 0), type("Evil", (_EvilSite,), {
        "target": f"{service.url}/ui/sessions/{session.id}/action"}))
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        login(browser, service.url, ALICE)
        browser.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        wait(browser, lambda d: "csrf_failed" in d.page_source, message="the forged POST was not refused")
        browser.save_screenshot(str(artifacts / "cross-site-refused.png"))
        assert session.info()["steps"] == 0  # the forged action never reached the player
        # The same POST from a script without the page's token is refused as well.
        resp = requests.post(f"{service.url}/ui/sessions/{session.id}/action", json={"action": "MoveAhead"},
                             cookies={"unirender_console": ALICE}, timeout=10)
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "csrf_failed"
        assert session.info()["steps"] == 0
    finally:
        evil.shutdown()
        evil.server_close()
        session.stop()
