"""The marks ``./dev test-fast`` goes by (tests/fixtures/suite_marks.py): the measured list names tests that
exist, and the rules mark what they say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fixtures.suite_marks import RAY_FILES, SLOW_FILES, measured_slow

REPO = Path(__file__).resolve().parents[1]


def test_every_listed_slow_test_and_marked_file_exists():
    missing = []
    for node in sorted(measured_slow()):
        path, _, name = node.partition("::")
        function = name.split("[")[0].split("::")[-1]
        source = REPO / path
        if not source.is_file() or not re.search(rf"^\s*(async )?def {re.escape(function)}\(", source.read_text(), re.M):
            missing.append(node)
    assert not missing, f"tests/slow_tests.txt names tests that no longer exist: {missing}"
    for path in [*SLOW_FILES, *RAY_FILES]:
        assert (REPO / path).exists(), path


def collected(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_fast_subset_leaves_out_chromium_ray_and_the_measured_slow_tests():
    fast = collected("-m", "not slow and not ray", "tests/webgl/test_build_files.py",
                     "tests/service/test_serve_ray.py", "tests/service/test_limits.py", "tests/test_docs_blocks.py")
    assert fast, "nothing collected"
    assert not [n for n in fast if n.startswith(("tests/webgl/", "tests/service/test_serve_ray.py"))], fast
    assert "tests/service/test_limits.py::test_capacity_rate_limit_and_idle_reaping" not in fast  # measured
    ray_blocks = collected("-m", "ray", "tests/test_docs_blocks.py")
    assert any("docs/cluster.md" in n for n in ray_blocks), ray_blocks  # its blocks on a Ray backend
    assert not any("test_data_block_parses" in n for n in ray_blocks)
