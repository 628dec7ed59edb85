"""``./dev``: what each command installs, that it says so before it starts, and that it fails naming what is missing
when it cannot install a system package (a CI image without apt-get must not run a suite that then skips or fails for
want of Xvfb or Chromium).

The script runs for real, in bash, on a PATH holding only the tools it may use. Where it would install (apt-get,
pip), the PATH holds stand-ins that record their arguments: a real install takes minutes and the network."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

DEV = Path(__file__).parent.parent / "dev"
# What ./dev runs before it installs anything, and nothing else: no apt-get, no dpkg-query, no sudo.
TOOLS = ("bash", "dirname", "id", "mkdir", "chmod", "grep", "cat", "sha256sum", "cut")
# What the stand-in Python and the venv's size line use besides.
MORE_TOOLS = ("cp", "du", "timeout", "mktemp", "rm", "sed", "env")

# A Python that records how it was called: `-m venv DIR` makes DIR/bin/{python,unirender} (recording too);
# `-c "import torch"` fails (no torch yet); `-m pip ...` succeeds.
FAKE_PYTHON = """#!/bin/bash
echo "python $*" >> "$DEV_LOG"
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin" && cp "$0" "$3/bin/python"
    printf '#!/bin/bash\\necho "unirender $*" >> "$DEV_LOG"\\n' > "$3/bin/unirender"
    chmod +x "$3/bin/unirender"
fi
[ "$1" = -c ] && exit 1
exit 0
"""
# Every package is installed.
FAKE_DPKG_QUERY = "#!/bin/bash\necho 'install ok installed'\n"


def make_env(tmp_path: Path, *, system_installed: bool, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS + (MORE_TOOLS if system_installed else ()):
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
           "VENV": str(tmp_path / "venv"), "DEV_LOG": str(tmp_path / "log")}
    if system_installed:
        for name, text in (("dpkg-query", FAKE_DPKG_QUERY), ("python3", FAKE_PYTHON)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    return env | extra


def run_dev(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash"), str(DEV), *args], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_dev_setup_fails_without_apt_get_and_names_the_packages(tmp_path):
    done = run_dev(make_env(tmp_path, system_installed=False), "setup")
    assert done.returncode == 1, done.stderr
    assert "error: missing system packages (" in done.stderr and "no apt-get" in done.stderr
    for package in ("xvfb", "chromium-driver", "mesa-vulkan-drivers"):
        assert f" {package}" in done.stderr or f"({package}" in done.stderr, done.stderr
    assert not (tmp_path / "venv").exists()  # it stopped before creating the venv


def test_dev_demo_needs_no_chromium_and_says_it_installs_only_the_player(tmp_path):
    done = run_dev(make_env(tmp_path, system_installed=False), "demo")
    assert done.returncode == 1, done.stderr
    assert "./dev demo installs:" in done.stderr and "unirender[player]" in done.stderr, done.stderr
    missing = done.stderr.split("error: missing system packages (")[1].split(")")[0].split()
    assert "xvfb" in missing and "mesa-vulkan-drivers" in missing
    assert "chromium" not in missing and "chromium-driver" not in missing
    assert "torch" not in done.stderr  # the demo installs no torch, and says nothing about it


def test_dev_demo_installs_the_player_extra_only_and_shows_pips_progress(tmp_path):
    env = make_env(tmp_path, system_installed=True)
    done = run_dev(env, "demo", "--size", "64")
    assert done.returncode == 0, done.stderr
    pip = [c for c in calls(tmp_path) if " -m pip " in c or c.startswith("unirender")]
    assert pip == ["python -m pip install --upgrade pip", "python -m pip install -e .[player]",
                   "unirender demo --size 64"], pip  # no -q: pip's download lines and sizes show
    assert "step 2/2: pip installs unirender[player]" in done.stderr, done.stderr

    # Again: installed already, so straight to the demo; --mlagents adds its extra.
    assert run_dev(env, "demo").returncode == 0 and calls(tmp_path) == ["unirender demo"]
    assert run_dev(env, "demo", "--mlagents").returncode == 0
    assert "python -m pip install -e .[player,mlagents]" in calls(tmp_path)


def test_dev_test_after_demo_installs_the_rest_torch_first_and_says_which_torch(tmp_path):
    env = make_env(tmp_path, system_installed=True)
    assert run_dev(env, "demo").returncode == 0
    calls(tmp_path)
    done = run_dev(env, "setup")
    assert done.returncode == 0, done.stderr
    pip = [c for c in calls(tmp_path) if " -m pip install" in c]
    assert pip == ["python -m pip install --upgrade pip", "python -m pip install torch==2.13.0",
                   "python -m pip install -e .[all,test,sb3,openenv]"], pip
    # The truth about PyPI's Linux torch, and the one variable for the CPU build.
    assert "CUDA build" in done.stderr and "2.7 GB" in done.stderr
    assert 'TORCH_REQUIREMENT="torch --index-url https://download.pytorch.org/whl/cpu"' in done.stderr
    # ./dev demo after ./dev test installs nothing, --mlagents included ([all] holds it).
    assert run_dev(env, "demo").returncode == 0 and calls(tmp_path) == ["unirender demo"]
    assert run_dev(env, "demo", "--mlagents").returncode == 0 and calls(tmp_path) == ["unirender demo --mlagents"]


def test_dev_quiet_and_torch_requirement(tmp_path):
    env = make_env(tmp_path, system_installed=True, DEV_QUIET="1",
                   TORCH_REQUIREMENT="torch --index-url https://download.pytorch.org/whl/cpu")
    assert run_dev(env, "setup").returncode == 0
    pip = [c for c in calls(tmp_path) if " -m pip install" in c]
    assert pip[1] == "python -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu", pip
    assert all(" -q " in c for c in pip), pip


def test_dev_test_runs_two_workers_and_test_fast_leaves_out_slow_and_ray(tmp_path):
    env = make_env(tmp_path, system_installed=True)
    assert run_dev(env, "setup").returncode == 0
    calls(tmp_path)
    assert run_dev(env, "test", "-x", "tests/jobs").returncode == 0
    assert calls(tmp_path) == ["python -m pytest -n 2 --dist loadfile --max-worker-restart=0 -x tests/jobs"]  # CI's own command
    assert run_dev(env | {"DEV_TEST_WORKERS": "0"}, "test-fast").returncode == 0
    assert calls(tmp_path) == ["python -m pytest -n 0 --dist loadfile --max-worker-restart=0 -m not slow and not ray"]


# A pytest that never ends, as a test stuck where no per-test limit reaches: it says what it runs, as the hang
# guard's plugin does, and sleeps (the whole run's limit must end it and name the test).
STUCK_PYTHON = """#!/bin/bash
echo "python $*" >> "$DEV_LOG"
if [ "$1" = -m ] && [ "$2" = pytest ]; then
    echo "tests/test_stuck.py::test_forever" > "$UNIRENDER_RUNNING_TESTS/$$"
    exec "$SLEEP" 600
fi
exit 0
"""


def test_dev_test_bounds_the_whole_run_and_names_the_tests_running(tmp_path):
    env = make_env(tmp_path, system_installed=True, DEV_TEST_LIMIT="1s", SLEEP=shutil.which("sleep"))
    assert run_dev(env, "setup").returncode == 0
    (tmp_path / "venv" / "bin" / "python").write_text(STUCK_PYTHON)
    done = run_dev(env, "test")
    assert done.returncode == 124, done.stderr
    assert "the suite ran past DEV_TEST_LIMIT (1s)" in done.stderr, done.stderr
    assert "[dev]   tests/test_stuck.py::test_forever" in done.stderr, done.stderr


FAKE_APT = """#!/bin/bash
echo "apt-get $*" >> "$DEV_LOG"
"""


def test_dev_bounds_apt_with_a_lock_timeout_retries_and_a_limit_on_update(tmp_path):
    env = make_env(tmp_path, system_installed=True)
    bin_dir = tmp_path / "bin"
    (bin_dir / "dpkg-query").write_text("#!/bin/bash\nexit 1\n")  # nothing installed
    (bin_dir / "apt-get").write_text(FAKE_APT)
    (bin_dir / "apt-get").chmod(0o755)
    done = run_dev(env, "setup")
    assert done.returncode == 0, done.stderr
    apt = [c for c in calls(tmp_path) if c.startswith("apt-get")]
    assert len(apt) == 2 and " update" in apt[0] and " install -y" in apt[1], apt
    for call in apt:
        for bound in ("DPkg::Lock::Timeout=300", "Acquire::Retries=3", "Acquire::http::Timeout=30"):
            assert f"-o {bound}" in call, call
