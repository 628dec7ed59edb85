"""The ``unirender`` dispatcher: a closed output pipe is a quiet exit; a missing extra names itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from unirender.cli import missing_extra_message

ROOT = Path(__file__).resolve().parents[1]


def test_closed_stdout_pipe_is_a_quiet_exit():
    """``unirender spec check ... | head -1``: the reader is gone before the first write (deterministic EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "unirender.cli", "spec", "check",
                               str(ROOT / "examples" / "kitchen_tour.yaml")],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


def test_head_of_spec_check_prints_the_first_line_only():
    proc = subprocess.run(f"'{sys.executable}' -m unirender.cli spec check examples/kitchen_tour.yaml | head -1",
                          shell=True, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(("module", "extra"), [("wgpu", "player"), ("werkzeug.http", "service"),
                                               ("ray", "ray"), ("gymnasium", "gym")])
def test_a_missing_extra_names_the_pip_command(module, extra):
    message = missing_extra_message(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert f"pip install 'unirender[{extra}]'" in message.splitlines()[-1]


def test_other_missing_modules_are_not_blamed_on_an_extra():
    assert missing_extra_message(ModuleNotFoundError("No module named 'numpyy'", name="numpyy")) is None


def test_the_cli_loads_no_extra_it_does_not_run():
    """Building the parser registers every subcommand; none of them may load its extra's heavy modules then (every
    ``unirender`` call would pay for them: openenv-core's server module alone loads gradio and pandas)."""
    probe = (
        "import sys\n"
        "from unirender.cli import build_parser\n"
        "build_parser()\n"
        "heavy = ('openenv', 'gradio', 'fastapi', 'ray', 'torch', 'grpc', 'werkzeug', 'selenium')\n"
        "print([m for m in sys.modules if m.split('.')[0] in heavy])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
