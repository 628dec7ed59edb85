"""The import layering of ``.importlinter`` holds (protocol sans-I/O, player on the protocol only, client without
the service, spec without jobs/player, no cycles in cluster), and a violation is really reported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(src: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache", "--config", str(ROOT / ".importlinter")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src)})


def test_import_contracts_are_kept():
    result = lint_imports(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_violation_is_reported(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "unirender", src / "unirender",
                    ignore=shutil.ignore_patterns("__pycache__", "scenes"))
    event = src / "unirender" / "protocol" / "event.py"
    event.write_text(event.read_text() + "\nimport socket  # noqa\nfrom unirender import client  # noqa\n")
    result = lint_imports(src)
    assert result.returncode != 0
    assert "unirender.protocol.event -> socket" in result.stdout
    assert "unirender.protocol.event -> unirender.client" in result.stdout
