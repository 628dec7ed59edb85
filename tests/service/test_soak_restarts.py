"""The soak with service restarts (issue 35), in CI's two-minute version: ``benchmarks/soak.py --service-restarts``
SIGKILLs and redeploys the service about every 36 s while four checked sessions step (frames compared with local
twins), dataset jobs run and are followed across the restarts (each compared byte for byte with an uninterrupted
run's), and a 4-env vector env steps over the ``service`` backend (it must never raise; its truncations must be
4 per restart); on top of the player kills, pauses and rogue connections of the plain soak. Its pass line is the
verdict (benchmarks/README.md, "Soak with service restarts", has the one-hour run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_minute_soak_with_service_restarts():
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "soak.py"), "--minutes", "2", "--size", "48",
         "--service-restarts", "0.6", "--seed", "3"],
        capture_output=True, text=True, timeout=840, cwd=REPO,
    )  # fmt: skip
    verdict = proc.stdout[-6000:] + "\n" + proc.stderr[-3000:]
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("PASS"), verdict
    assert "service restarts: 0" not in proc.stdout, verdict
