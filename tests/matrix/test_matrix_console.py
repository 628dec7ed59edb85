"""The web console on every family and backend: a session's page lists each camera view (each camera sensor of
each agent for ML-Agents, the canvas for WebGL), the live view streams it, and the page's driving reaches the
player."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import requests
from PIL import Image

TOKEN = "matrix-console-token"


def _login(url: str) -> tuple[requests.Session, str]:
    http = requests.Session()
    page = http.get(url + "/ui/login", timeout=10).text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    resp = http.post(url + "/ui/login", data={"token": TOKEN, "csrf": csrf, "next": "/ui/"}, timeout=10)
    assert resp.status_code == 200, resp.text
    return http, re.search(r'name="csrf-token" content="([0-9a-f]+)"', resp.text).group(1)


def _one_frame(http: requests.Session, url: str) -> dict:
    with http.get(url, stream=True, timeout=30) as resp:
        assert resp.status_code == 200, resp.text
        buffer = b""
        for chunk in resp.iter_content(4096):
            buffer += chunk
            start = buffer.find(b"event: frame\ndata: ")
            if start >= 0 and b"\n\n" in buffer[start:]:
                line = buffer[start:].split(b"\n", 2)[1]
                return json.loads(line[len(b"data: "):])
    raise AssertionError("no frame")


def _pixels(frame: dict) -> np.ndarray:
    data = base64.b64decode(frame["image"].split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_the_console_shows_and_drives_a_session(case, tmp_path):
    url = case.service(tmp_path, tokens={"alice": TOKEN})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = requests.post(url + "/v1/sessions", json={"environment": case.environment}, headers=auth, timeout=180)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    http, csrf = _login(url)
    page = http.get(f"{url}/ui/sessions/{sid}", timeout=30)
    assert page.status_code == 200
    selector = re.search(r'<select id="view-select">(.*?)</select>', page.text, re.S).group(1)
    views = re.findall(r'<option value="([^"]+)">', selector)
    if case.family == "mlagents":
        # the reference game: two agents of one behavior, each with a camera sensor
        assert len(views) == 2 and all(v.rsplit("/", 2)[1] == "CameraSensor" for v in views), views
        assert 'data-behavior="ReachTarget?team=0"' in page.text and 'data-axis="1"' in page.text
        assert 'data-branch="0"' in page.text and "hold" in page.text  # the page says how keys drive it
    elif case.family == "webgl":
        # the canvas, and a button per declared action; a key action's button names its key
        assert views == ["rgb"], views
        buttons = dict(re.findall(r'<button type="button" class="act" data-action="([^"]+)"(?: data-key="([^"]+)")?',
                                  page.text))  # fmt: skip
        assert buttons == {"noop": "", "left": "ArrowLeft", "right": "ArrowRight", "up": "ArrowUp", "red": "",
                           "click": ""}, buttons  # fmt: skip
        red = re.search(r'data-action="red">(.*?)</button>', page.text, re.S).group(1)
        assert "<small>SendMessage Game.SetColor(&#39;1,0,0&#39;)</small>" in red, red  # what it does, in words
    else:
        assert views[0] == "frame" and "MoveAhead" in page.text
    frames = [_one_frame(http, f"{url}/ui/sessions/{sid}/stream?view={requests.utils.quote(v)}&fps=5")
              for v in views[:2]]
    for frame in frames:
        pixels = _pixels(frame)
        assert pixels.shape == (40, 48, 3) and np.ptp(pixels) > 0
    if case.family == "mlagents":
        assert not np.array_equal(_pixels(frames[0]), _pixels(frames[1]))  # each agent's own camera
        good = {"behavior": "ReachTarget?team=0", "continuous": [1.0, -0.5], "discrete": [2]}
        # the API's one action check (continuous values are not bounded there, as in mlagents-envs: Unity clips)
        bad = {"behavior": "ReachTarget?team=0", "continuous": [0.0, 0.0], "discrete": [3]}
    elif case.family == "webgl":
        good, bad = {"action": "right"}, {"action": "rihgt"}  # declared names only, as the API's step
    else:
        good, bad = {"action": "RotateRight"}, {"action": "RotateRight", "degrees": "lots"}
    headers = {"X-CSRF-Token": csrf}
    stepped = http.post(f"{url}/ui/sessions/{sid}/action", json=good, headers=headers, timeout=60)
    assert stepped.status_code == 200, stepped.text
    assert stepped.json()["steps"] == 1 and stepped.json()["success"] is True
    refused = http.post(f"{url}/ui/sessions/{sid}/action", json=bad, headers=headers, timeout=60)
    assert refused.status_code in (400, 422), refused.text
    info = requests.get(f"{url}/v1/sessions/{sid}", headers=auth, timeout=10).json()
    assert info["steps"] == 1 and info["family"] == case.family
