"""Entry point for running the service under another WSGI server, e.g. gunicorn (see docs/service.md):

    UNIRENDER_CONFIG=service.yaml gunicorn -k gthread -w 1 --threads 24 --keep-alive 75 --timeout 120 \\
        -b 127.0.0.1:8200 'unirender.service.wsgi:application()'

The config's ``host``/``port`` must be the address gunicorn binds: WSGI players are told to connect there.
Exactly one worker process (``-w 1``): sessions and the players' long polls live in its memory.
"""

from __future__ import annotations

import atexit
import signal
import threading

from unirender.service.app import ServiceApp, create_app
from unirender.service.config import load_config


def application() -> ServiceApp:
    """Build the app from ``$UNIRENDER_CONFIG`` (and ``$UNIRENDER_TOKENS``); stop every player at exit."""
    config = load_config()
    if not config.port:
        raise SystemExit("unirender.service.wsgi: set 'port' in the config to the port gunicorn binds")
    app = create_app(config)
    atexit.register(app.shutdown, 20.0)
    _drain_on_sigterm(app)
    return app


def _drain_on_sigterm(app: ServiceApp) -> None:
    """Chain onto the WSGI server's SIGTERM handler: start draining at once (players stopped, long polls
    released), so the server's graceful wait for in-flight requests ends in seconds, not at its timeout."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        threading.Thread(target=app.shutdown, args=(20.0,), name="unirender-drain", daemon=True).start()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
