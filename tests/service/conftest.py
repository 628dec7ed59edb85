"""A real ``unirender serve`` process on loopback, one per test module."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml
from service_processes import alive, descendants

from fixtures.log_events import wait_for_line
from unirender._process import ManagedProcess
from unirender.service.jobs import TEST_HOLD_ENV

SERVING = re.compile(r"unirender serving on (http://127\.0\.0\.1:\d+)")


class ServiceProcess:
    def __init__(self, config: dict, tmp: Path, env: dict | None = None):
        """``env``: variables added to the service's (``TEST_HOLD_ENV``, say)."""
        self.tmp = tmp
        self.config_path = tmp / "service.yaml"
        self.config_path.write_text(yaml.safe_dump({"port": 0, "data_root": str(tmp / "data"), **config}))
        self.log_path = tmp / "serve.log"
        base = {k: v for k, v in os.environ.items() if k not in ("UNIRENDER_TOKENS", "UNIRENDER_CONFIG",
                                                                 TEST_HOLD_ENV)}
        self.process = ManagedProcess(
            [sys.executable, "-m", "unirender.cli", "serve", "--config", str(self.config_path)],
            env={**base, **(env or {})}, log_path=self.log_path, name="unirender-serve",
        )
        self.url = self._wait_for_url(60.0)

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = SERVING.search(self.log())
            if match:
                return match.group(1)
            if not self.process.alive():
                raise RuntimeError(f"unirender serve exited early:\n{self.log()}")
            time.sleep(0.05)
        self.process.terminate()
        raise RuntimeError(f"unirender serve did not come up:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, text: str, timeout: float = 120.0) -> None:
        """Until the service has logged ``text`` (an event the code gives: a held job, say)."""
        wait_for_line(self.log, self.process.alive, text, timeout)

    def sigterm(self, timeout: float = 60.0) -> int | None:
        if self.process.alive():
            os.kill(self.process.pid, signal.SIGTERM)
        return self.process.wait(timeout)

    def stop(self) -> None:
        kids = descendants(self.process.pid)
        with contextlib.suppress(Exception):
            self.sigterm(30.0)
        self.process.terminate(grace=2.0)
        for pid in kids:  # belt and braces: a failed test must not leave players behind
            with contextlib.suppress(ProcessLookupError):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def make_service(tmp_path_factory):
    started: list[ServiceProcess] = []

    def make(config: dict, env: dict | None = None) -> ServiceProcess:
        service = ServiceProcess(config, tmp_path_factory.mktemp("service"), env)
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()
