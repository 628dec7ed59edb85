"""The core install: ``unirender.client`` and the Controller work with only ``[project].dependencies``.

The environment is built offline from this venv: the core requirements of pyproject.toml and their dependency
closure (markers evaluated, extras ignored) are linked into a target directory, and a child interpreter runs with
``-S`` (no site-packages) and only that directory plus ``src`` on its path. A module that needs an extra then
fails to import there exactly as in a fresh ``pip install unirender``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fixtures import fake_player_exe  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
# Modules an extra provides (or the service itself): none may be imported by the client or the Controller.
HEAVY = ["wgpu", "moderngl", "glcontext", "trimesh", "ray", "gymnasium", "werkzeug", "pydantic",
         "prometheus_client", "unirender.service", "unirender.player", "unirender.cluster.ray_backend"]


def _core_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def _closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions these requirements pull in (their own extras are not followed)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        if key in seen:
            continue
        dist = metadata.distribution(req.name)
        seen[key] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(seen.values())


def _top_level_paths(dist: metadata.Distribution) -> set[Path]:
    """The importable top-level packages and modules a distribution installed."""
    out = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".data", ".pth")):
            continue
        out.add(Path(dist.locate_file(first)))
    return out


@pytest.fixture(scope="module")
def core_path(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("core-site")
    for dist in _closure(_core_requirements()):
        for path in _top_level_paths(dist):
            link = target / path.name
            if path.exists() and not link.exists():
                link.symlink_to(path)
    return target


def run_core(core_path: Path, code: str, **env) -> dict:
    """Run ``code`` (which prints one JSON line) in an interpreter that sees only the core install."""
    prelude = f"import sys; sys.path[:0] = [{str(core_path)!r}, {str(ROOT / 'src')!r}]\n"
    proc = subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **env}, cwd=core_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_core_environment_lacks_the_extras(core_path):
    """The check below means something: heavy modules cannot even be imported in this environment."""
    result = run_core(core_path, """
import importlib, json
missing = []
for name in ["wgpu", "moderngl", "ray", "gymnasium", "werkzeug", "prometheus_client", "trimesh", "numpy"]:
    try:
        importlib.import_module(name)
    except ImportError:
        missing.append(name)
print(json.dumps(missing))
""")
    assert result == ["wgpu", "moderngl", "ray", "gymnasium", "werkzeug", "prometheus_client", "trimesh"]


def test_client_and_controller_import_with_core_dependencies_only(core_path):
    result = run_core(core_path, f"""
import json, sys
import unirender
from unirender.client import Client
from unirender import Controller, Event, http_format
body = http_format.encode_document({{"metadata": {{}}, "frames": {{}}}}, http_format.MSGPACK)[1]
assert http_format.decode_document(http_format.MSGPACK, body) == {{"metadata": {{}}, "frames": {{}}}}
print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
""")
    assert result == []


def test_a_remote_mlagents_event_builds_with_core_dependencies_only(core_path):
    """The client's ML-Agents events are the core MLAgentsEvent (issue 49): built here, where protobuf and grpc
    cannot even be imported."""
    result = run_core(core_path, """
import importlib, json, sys
import numpy as np
from unirender.client.mlagents import event_from_document
from unirender.protocol.mlagents import DecisionSteps, MLAgentsEvent
doc = {"metadata": {"step": 1, "behaviors": {"A": {"agents": [
    {"id": 5, "decision": True, "terminal": False, "reward": 0.5, "observations": {"v": [1.0, 2.0]}}]}}},
    "frames": {"cam.0": np.zeros((2, 2, 3), np.uint8)}}
event = event_from_document(doc)
assert isinstance(event, MLAgentsEvent) and isinstance(event.decision_steps["A"], DecisionSteps)
decision, _ = event.steps()
unavailable = []
for name in ["google.protobuf", "grpc"]:
    try:
        importlib.import_module(name)
    except ImportError:
        unavailable.append(name)
print(json.dumps([decision.agent_id.tolist(), decision.sensor_names, decision.obs[1][0].tolist(), event.step,
                  unavailable]))
""")
    assert result == [[5], ["cam", "v"], [1.0, 2.0], 1, ["google.protobuf", "grpc"]]


def test_controller_steps_a_player_with_core_dependencies_only(core_path, fake_player_exe, tmp_path):  # noqa: F811
    """Driving a (fake) Unity build over FIFO and WSGI needs nothing beyond the core install."""
    result = run_core(core_path, f"""
import json, sys
from unirender import Controller
shapes = []
for server in ("fifo", "wsgi"):
    c = Controller({fake_player_exe!r}, server=server, platform="Linux64", width=32, height=24,
                   log_dir={str(tmp_path)!r}, server_start_timeout=60, server_timeout=30)
    try:
        shapes.append(list(c.step("RotateRight").frame.shape))
    finally:
        c.stop()
print(json.dumps({{"shapes": shapes, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
""", FAKE_PLAYER_FLAVOUR="Linux64", DISPLAY="")
    assert result == {"shapes": [[24, 32, 3], [24, 32, 3]], "heavy": []}


def test_cli_in_a_core_install(core_path, tmp_path):
    """The CLI loads; `spec check` and `doctor` work; `serve` names the extra it needs instead of a traceback."""
    examples = ROOT / "examples" / "kitchen_tour.yaml"
    result = run_core(core_path, f"""
import contextlib, io, json, sys
from unirender.cli import main
out = {{}}
for name, argv in (("spec", ["spec", "check", {str(examples)!r}]), ("doctor", ["doctor", "--json", "--no-start"]),
                   ("doctor_text", ["doctor", "--no-start"]),
                   ("serve", ["serve", "--port", "0", "--data-root", {str(tmp_path)!r}])):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(argv)
    out[name] = [rc, stdout.getvalue()[:200], stderr.getvalue()]
    if name == "doctor_text":
        out[name][1] = stdout.getvalue().splitlines()
    if name == "doctor":
        out["doctor_player"] = json.loads(stdout.getvalue())["builtin_player"]
print(json.dumps(out))
""")
    assert result["spec"][0] == 0 and "valid" in result["spec"][1]
    assert result["doctor"][0] == 0 and result["doctor"][1].startswith("{")
    assert result["doctor_player"] == {"installed": False, "missing": ["moderngl", "glcontext", "wgpu", "trimesh"]}
    assert "    pip install 'unirender[player]'" in result["doctor_text"][1]
    assert result["serve"][0] == 2 and "pip install 'unirender[service]'" in result["serve"][2]

