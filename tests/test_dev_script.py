"""``./dev`` fails, naming what is missing, when it cannot install a system package the suite needs (a CI
image without apt-get must not run a suite that then skips or fails for want of Xvfb or Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

DEV = Path(__file__).parent.parent / "dev"
# What ./dev runs before it installs anything, and nothing else: no apt-get, no dpkg-query, no sudo.
TOOLS = ("bash", "dirname", "id", "mkdir", "chmod", "grep", "cat")


def run_dev(tmp_path: Path) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
           "VENV": str(tmp_path / "venv")}
    return subprocess.run([str(bin_dir / "bash"), str(DEV), "setup"], env=env, capture_output=True, text=True,
                          timeout=60)


def test_dev_setup_fails_without_apt_get_and_names_the_packages(tmp_path):
    done = run_dev(tmp_path)
    assert done.returncode == 1, done.stderr
    assert "error: missing system packages (" in done.stderr and "no apt-get" in done.stderr
    for package in ("xvfb", "chromium-driver", "mesa-vulkan-drivers"):
        assert f" {package}" in done.stderr or f"({package}" in done.stderr, done.stderr
    assert not (tmp_path / "venv").exists()  # it stopped before creating the venv
