"""The same app under gunicorn with the documented settings (gthread, one worker, keep-alive 75 s): a WSGI
player keeps its connection through an idle pause longer than gunicorn's default 2 s keep-alive, and SIGTERM
stops every player."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import time

import pytest
import requests
import yaml
from service_processes import alive, descendants

from unirender._process import ManagedProcess
from unirender.client import Client

pytestmark = pytest.mark.skipif(shutil.which("gunicorn", path=os.path.dirname(sys.executable)) is None,
                                reason="missing dependency: gunicorn (pip install 'unirender[gunicorn]')")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gunicorn_gthread_serves_wsgi_players_and_stops_them(tmp_path):
    port = free_port()
    config = tmp_path / "service.yaml"
    config.write_text(yaml.safe_dump({"host": "127.0.0.1", "port": port, "data_root": str(tmp_path / "data")}))
    gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
    env = {**os.environ, "UNIRENDER_CONFIG": str(config)}
    env.pop("UNIRENDER_TOKENS", None)
    proc = ManagedProcess(
        [gunicorn, "-k", "gthread", "-w", "1", "--threads", "12", "--keep-alive", "75", "--timeout", "120",
         "-b", f"127.0.0.1:{port}", "unirender.service.wsgi:application()"],
        env=env, log_path=tmp_path / "gunicorn.log", name="gunicorn",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(url + "/healthz", timeout=2).ok:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or slow to start on a loaded machine
                time.sleep(0.1)
        else:
            raise AssertionError(f"gunicorn did not answer /healthz within 60 s:\n{proc.log_tail()}")
        client = Client(url)
        session = client.session({"width": 32, "height": 32, "transport": "wsgi"})
        pid = session.info()["pid"]
        assert session.step("RotateRight").metadata["lastActionSuccess"]
        time.sleep(3.0)  # longer than gunicorn's default keep-alive: the player's connection must survive
        assert session.step("RotateRight").metadata["lastActionSuccess"]
        family = descendants(proc.pid)
        assert pid in family
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        assert [p for p in family if alive(p)] == []
    finally:
        proc.terminate()
