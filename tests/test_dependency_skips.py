"""Under CI a skip for a missing dependency fails the run and names the package (fixtures/dependency_skips.py);
other skips stay skips and are listed by reason. Each case is a real pytest run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parent

# A module-level importorskip, a module-level skip for a binary, and a skip that is allowed anywhere.
SAMPLE = {
    "test_extra.py": """
        import pytest
        pytest.importorskip("unirender_no_such_extra")
        def test_needs_it(): pass
    """,
    "test_binary.py": """
        import pytest
        pytest.skip("missing dependency: chromium (Debian's chromium package)", allow_module_level=True)
    """,
    "test_allowed.py": """
        import pytest
        @pytest.mark.skipif(True, reason="needs a GPU")
        def test_on_a_gpu(): pass
        def test_runs(): pass
    """,
}

# A package hidden from the interpreter, as in a venv where its extra was never installed.
HIDE = """
import sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r} or name.startswith({name!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

sys.meta_path.insert(0, Hide())
"""


def run_pytest(args, cwd, ci: bool, pythonpath: list[Path]):
    env = {**os.environ, "CI": "true" if ci else "", "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def sample(tmp_path: Path) -> Path:
    for name, text in SAMPLE.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


def test_under_ci_a_dependency_skip_fails_and_names_the_package(tmp_path):
    args = ["-p", "fixtures.dependency_skips", "."]
    stopped = run_pytest(args, sample(tmp_path), ci=True, pythonpath=[TESTS])
    assert stopped.returncode == 2, stopped.stdout  # collection errors stop the run (pytest's "interrupted")
    assert "missing dependency under CI: unirender_no_such_extra" in stopped.stdout
    done = run_pytest([*args, "--continue-on-collection-errors"], tmp_path, ci=True, pythonpath=[TESTS])
    out = done.stdout
    assert done.returncode == 1, out
    assert "missing dependency under CI: unirender_no_such_extra" in out
    assert "missing dependency under CI: chromium (Debian's chromium package)" in out
    assert "missing dependencies (failures under CI): chromium (Debian's chromium package), " \
           "unirender_no_such_extra" in out
    assert "1 skipped (allowed): needs a GPU" in out and "1 passed" in out


def test_without_ci_they_are_skips_listed_by_reason(tmp_path):
    done = run_pytest(["-p", "fixtures.dependency_skips", "."], sample(tmp_path), ci=False, pythonpath=[TESTS])
    out = done.stdout
    assert done.returncode == 0, out
    assert "1 passed, 3 skipped" in out
    assert "1 skipped (dependency): could not import 'unirender_no_such_extra'" in out
    assert "1 skipped (dependency): missing dependency: chromium" in out
    assert "1 skipped (allowed): needs a GPU" in out
    assert "dependency skips above fail the run when CI is set" in out


def test_the_suite_fails_under_ci_when_ray_is_missing(tmp_path):
    """The suite's own conftest: a test file of the ray extra, with ray hidden."""
    (tmp_path / "hide_ray.py").write_text(HIDE.format(name="ray"))
    repo = TESTS.parent
    args = ["-p", "hide_ray", "--collect-only", "-q", str(TESTS / "cluster" / "test_ray_backend.py")]
    done = run_pytest(args, repo, ci=True, pythonpath=[tmp_path, repo / "src", TESTS])
    assert done.returncode != 0, done.stdout
    assert "missing dependency under CI: ray" in done.stdout
    skipped = run_pytest(args, repo, ci=False, pythonpath=[tmp_path, repo / "src", TESTS])
    assert skipped.returncode == 5 and "could not import 'ray'" in skipped.stdout  # nothing collected


# The same skips from inside a test and from a fixture's setup (require_chromium() in a fixture, an importorskip
# in a test body): the run-phase reports, not the collection's.
IN_TESTS = """
    import pytest

    @pytest.fixture
    def browser():
        pytest.skip("missing dependency: chromium (Debian's chromium package)")

    def test_imports_late():
        pytest.importorskip("unirender_no_such_extra")

    def test_in_a_browser(browser): pass
"""


def test_skips_inside_tests_and_fixtures_fail_under_ci_too(tmp_path):
    (tmp_path / "test_late.py").write_text(textwrap.dedent(IN_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = ["-p", "fixtures.dependency_skips", "."]
    done = run_pytest(args, tmp_path, ci=True, pythonpath=[TESTS])
    out = done.stdout
    assert done.returncode == 1, out
    assert "missing dependency under CI: unirender_no_such_extra" in out
    assert "missing dependency under CI: chromium (Debian's chromium package)" in out
    assert "1 failed, 1 error in" in out, out  # the test body's failed, the fixture's setup errored: none skipped
    skipped = run_pytest(args, tmp_path, ci=False, pythonpath=[TESTS])
    assert skipped.returncode == 0 and "2 skipped" in skipped.stdout, skipped.stdout
