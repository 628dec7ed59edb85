"""Every fenced code block in README.md and docs/*.md runs as written, so a doc that drifts fails CI.

The convention (announced to every doc author; this docstring is its reference):

* ```` ```python ```` blocks run in a fresh interpreter, ```` ```bash ```` (or ``sh``, ``shell``) blocks in
  ``bash -euo pipefail``; both in a scratch directory holding ``examples/`` and the few files a reader would have
  of their own (``FILES``), with the venv's ``bin`` first on ``PATH``. ```` ```yaml ```` and ```` ```json ````
  blocks must parse. Untagged (or ``text``) fences are diagrams and sample output, not code.
* A block that cannot run here says why on the line just above its opening fence:
  ``<!-- not-run: needs a Unity build -->``.
* Placeholders a reader replaces (a port, an output path, a training length) are replaced here, by
  ``SUBSTITUTIONS``, never by hand-edited copies of the block.
* A bash block that starts servers (``unirender serve``, ``gunicorn``) starts each line (each is another way to
  start it) as a server on a free loopback port, one after another, waits until it answers ``/healthz``, runs
  the python block that follows it (the client example) against the first one, and stops it.

Every process a block starts is in its own process group, killed at the end (also on a timeout).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[^`\s]*)\s*$")
RUN = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
PARSE = {"yaml": yaml.safe_load, "yml": yaml.safe_load, "json": json.loads}
PROSE = {"", "text", "console-output"}
BLOCK_TIMEOUT = 180
SERVER_PORT = "8200"  # the documented port: every server block gets a free one instead

# Files a reader has of their own, which blocks name: a task's reward (docs/gym.md) and an environment file.
FILES = {
    "mytask.py": "def reward(previous_event, action, event):\n"
                 "    return float(event.metadata['lastActionSuccess'])\n",
    "env.yaml": "executable: builtin\nwidth: 64\nheight: 64\n",
}

# (doc, text in the block, replacement, why). Each must match a block of that doc (checked).
SUBSTITUTIONS = [
    ("README.md", "source .venv/bin/activate", f"source {shlex.quote(sys.prefix)}/bin/activate",
     "the venv this suite runs in (./dev's .venv in CI)"),
    ("docs/service.md", "data_root: /srv/unirender", "data_root: srv", "a directory of the reader's"),
    ("docs/jobs.md", "--out /data/kitchen", "--out data/kitchen", "an output directory of the reader's"),
    ("docs/gym.md", ".learn(100_000)", ".learn(32)", "the training length: CI runs one short rollout"),
    ("docs/gym.md", 'PPO("CnnPolicy", venv, device="cpu")', 'PPO("CnnPolicy", venv, n_steps=16, batch_size=32, '
     'n_epochs=1, device="cpu")', "the training length: CI runs one short rollout"),
    ("docs/gym.md", 'PPO("MultiInputPolicy", venv, device="cpu")', 'PPO("MultiInputPolicy", venv, n_steps=16, '
     'batch_size=32, n_epochs=1, device="cpu")', "the training length: CI runs one short rollout"),
]


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason, when the line above the fence is a not-run marker

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    doc = str(path.relative_to(REPO))
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        assert end is not None, f"{doc}:{i + 1}: unclosed code fence"
        body = "\n".join(line[indent:] if not line[:indent].strip() else line for line in lines[i + 1:end])
        marker = NOT_RUN.match(lines[i - 1]) if i else None
        blocks.append(Block(doc, i + 1, m["lang"].lower(), body + "\n", marker[1] if marker else None))
        i = end + 1
    return blocks


ALL = [b for path in DOCS for b in read_blocks(path)]


def substituted(block: Block, port: str | None = None) -> str:
    text = block.text
    for doc, old, new, _why in SUBSTITUTIONS:
        if doc == block.doc:
            text = text.replace(old, new)
    if port is not None:
        text = text.replace(f"127.0.0.1:{SERVER_PORT}", f"127.0.0.1:{port}")
    return text


def is_server_block(block: Block) -> bool:
    commands = [c for c in commands_of(block.text)]
    return RUN.get(block.lang) == "bash" and bool(commands) and all(
        re.search(r"(^|\s)(unirender serve|gunicorn)(\s|$)", c) for c in commands)


def commands_of(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = text.replace("\\\n", " ")
    return [c for line in joined.splitlines() if (c := line.split(" #")[0].strip()) and not c.startswith("#")]


def client_of(block: Block) -> Block | None:
    """The python block right after a server block, when it talks to the documented port."""
    blocks = [b for b in ALL if b.doc == block.doc]
    later = blocks[blocks.index(block) + 1:]
    if later and RUN.get(later[0].lang) == "python" and f"127.0.0.1:{SERVER_PORT}" in later[0].text:
        return later[0]
    return None


CLIENTS = {client_of(b) for b in ALL if is_server_block(b)} - {None}
RUNNABLE = [b for b in ALL if b.not_run is None and b not in CLIENTS and b.lang in RUN]


def service_yaml() -> str:
    """docs/service.md's configuration block is the ``service.yaml`` its commands start the service with."""
    block = next(b for b in ALL if b.doc == "docs/service.md" and b.lang == "yaml" and "data_root:" in b.text)
    return substituted(block)


@pytest.fixture
def scratch(tmp_path):
    """The directory a block runs in: the repository's examples, the reader's own files, nothing else."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    for name, text in {**FILES, "service.yaml": service_yaml()}.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def block_env(scratch: Path) -> dict:
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "XDG_DATA_HOME": str(scratch / "share"), "HOME": str(scratch / "home")}
    (scratch / "home").mkdir(exist_ok=True)
    return env


def kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the block's process group (its servers, players, Ray), SIGKILL what is left after a grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + grace  # the leader is gone: wait for the rest of its group too
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def run_block(block: Block, text: str, scratch: Path, env: dict) -> subprocess.CompletedProcess:
    if RUN[block.lang] == "python":
        script = scratch / f"block_{block.line}.py"
        script.write_text(text)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", text]
    proc = subprocess.Popen(argv, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        pytest.fail(f"{block.id}: still running after {BLOCK_TIMEOUT} s\n{out[-4000:]}")
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out)


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def server_command(command: str, port: str) -> str:
    """One server line on a free loopback port (tests never bind other addresses)."""
    command = command.replace("0.0.0.0", "127.0.0.1").replace(f":{SERVER_PORT}", f":{port}")
    if "unirender serve" in command:
        if "--port" in command:
            command = re.sub(r"--port[ =]\d+", f"--port {port}", command)
        else:
            command += f" --port {port}"
    return command


def wait_healthy(proc: subprocess.Popen, port: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or slow to answer under load
            pass
        time.sleep(0.1)
    pytest.fail(f"the server did not answer /healthz within {timeout:g} s:\n{log.read_text()[-4000:]}")


def run_servers(block: Block, scratch: Path, env: dict) -> None:
    """Each line of a server block is another way to start the service: they run one after another (one
    service per data root: the second would refuse while the first holds its lock), the first with its client."""
    for k, command in enumerate(commands_of(substituted(block))):
        port = free_port()
        log = scratch / f"server_{block.line}_{k}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(["bash", "-c", server_command(command, port)], cwd=scratch,
                                    env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(proc, port, log)
            if k == 0 and (client := client_of(block)) is not None:
                done = run_block(client, substituted(client, port), scratch, env)
                assert done.returncode == 0, f"{client.id} (against {block.id}) failed:\n{done.stdout[-4000:]}"
        finally:
            kill_group(proc)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_block_runs(block, scratch):
    env = block_env(scratch)
    if is_server_block(block):
        run_servers(block, scratch, env)
        return
    done = run_block(block, substituted(block), scratch, env)
    assert done.returncode == 0, f"{block.id} failed (exit {done.returncode}):\n{done.stdout[-4000:]}"


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in PARSE], ids=lambda b: b.id)
def test_data_block_parses(block):
    PARSE[block.lang](block.text)


def test_every_block_is_run_parsed_or_says_why_not():
    for b in ALL:
        if b.not_run is not None:
            assert b.not_run, f"{b.id}: a not-run marker needs a reason"
        else:
            assert b.lang in RUN or b.lang in PARSE or b.lang in PROSE, (
                f"{b.id}: no runner for ```{b.lang}: make it python or bash, or mark it <!-- not-run: REASON -->")


def test_python_blocks_show_what_they_evaluate():
    """A bare expression (``event.frame``) shows its value in a REPL but nothing when the block is pasted into a
    script, as the docs' blocks are run: print it (calls may stand alone, for their effect)."""
    import ast

    bare = []
    for b in ALL:
        if b.lang != "python":
            continue
        for node in ast.walk(ast.parse(b.text)):
            if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Call | ast.Await | ast.Constant):
                bare.append(f"{b.doc}:{b.line + node.lineno}: {ast.unparse(node)}")
    assert not bare, "expressions that print nothing:\n" + "\n".join(bare)


def test_substitutions_and_markers_match_the_docs():
    """A substitution whose text left its doc, or a marker above no fence, is stale."""
    for doc, old, _new, _why in SUBSTITUTIONS:
        assert any(b.doc == doc and old in b.text for b in ALL), f"{doc}: no block contains {old!r} any more"
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if NOT_RUN.match(line):
                assert i + 1 < len(lines) and FENCE.match(lines[i + 1]), (
                    f"{path.relative_to(REPO)}:{i + 1}: a not-run marker must be the line just above a fence")


def test_readme_names_every_core_dependency_and_what_dev_installs():
    """README's table of installs against pyproject.toml and ./dev (both drifted once)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    readme = (REPO / "README.md").read_text()
    core_row = next(line for line in readme.splitlines() if line.startswith("| `pip install unirender` |"))
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)[0]
        assert name.lower() in core_row.lower(), f"README's core row does not name {name}"
    dev = (REPO / "dev").read_text()
    for command, variable in (("demo", "DEMO_EXTRAS"), ("test", "TEST_EXTRAS")):
        extras = re.search(rf'^{variable}="([^"]+)"', dev, re.M)[1]
        assert f"`./dev {command}` installs `unirender[{extras}]`" in readme, command
