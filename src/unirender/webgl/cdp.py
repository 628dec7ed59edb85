"""A small Chrome DevTools Protocol client: one websocket, commands answered by id, events to listeners.

Why our own (80 lines) and not playwright or pyppeteer: playwright's Python package brings its own Node driver
and browser downloads (a closed network has neither), pyppeteer is unmaintained and asyncio-only, and
unirender's controllers are synchronous. websocket-client is a small pure-Python dependency; one reader thread
hands each answer to the command that waits for it, so a dead browser (the socket closes) fails every waiting
command at once instead of hanging it.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import websocket  # websocket-client

from unirender.errors import PlayerCrashedError, PlayerTimeoutError, UnirenderError


class CDPError(UnirenderError):
    """The browser answered a command with an error (a bad argument, an exception in evaluated JavaScript)."""


class CDPConnection:
    """One DevTools websocket (a page target's, or the browser's with ``session_id`` per command)."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url
        self.timeout = timeout
        self._ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True,
                                               enable_multithread=True, skip_utf8_validation=True)
        self._ws.settimeout(None)  # the reader blocks; commands time out on their futures instead
        self._ids = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._listeners: list[Callable[[str, dict], None]] = []
        self._lock = threading.Lock()
        self.closed_reason: str | None = None
        self._reader = threading.Thread(target=self._read, name="unirender-cdp", daemon=True)
        self._reader.start()

    def listen(self, listener: Callable[[str, dict], None]) -> None:
        """``listener(method, params)`` for every event, called on the reader thread (keep it short)."""
        self._listeners.append(listener)

    def send(self, method: str, params: dict | None = None, *, timeout: float | None = None) -> dict:
        """One command and its result; raises CDPError for the browser's error, PlayerCrashedError when the
        connection is gone, PlayerTimeoutError after ``timeout`` seconds (the connection's default)."""
        future = self.send_async(method, params)
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except FutureTimeout:
            raise PlayerTimeoutError(
                f"the browser did not answer {method} within {self.timeout if timeout is None else timeout:g} s "
                "(a hung tab)"
            ) from None

    def send_async(self, method: str, params: dict | None = None) -> Future:
        future: Future = Future()
        with self._lock:
            if self.closed_reason is not None:
                raise PlayerCrashedError(f"the browser connection is closed ({self.closed_reason})")
            command_id = next(self._ids)
            self._pending[command_id] = future
        try:
            self._ws.send(json.dumps({"id": command_id, "method": method, "params": params or {}}))
        except (OSError, websocket.WebSocketException) as exc:
            self._fail_all(f"send failed: {exc}")
        return future

    def close(self) -> None:
        try:
            self._ws.close(timeout=1)
        except Exception:  # already gone
            pass
        self._fail_all("closed by unirender")
        if self._reader is not threading.current_thread():
            self._reader.join(5)

    # -- the reader thread ------------------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while True:
                raw = self._ws.recv()
                if not raw:
                    break
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        future = self._pending.pop(message["id"], None)
                    if future is None:
                        continue
                    if "error" in message:
                        error = message["error"]
                        future.set_exception(CDPError(f"{error.get('message')} ({error.get('data', '')})"))
                    else:
                        future.set_result(message.get("result", {}))
                else:
                    for listener in list(self._listeners):
                        listener(message.get("method", ""), message.get("params", {}))
        except (OSError, websocket.WebSocketException, ValueError) as exc:
            self._fail_all(f"{type(exc).__name__}: {exc}")
            return
        self._fail_all("the browser closed the DevTools connection")

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            if self.closed_reason is None:
                self.closed_reason = reason
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(PlayerCrashedError(f"the browser connection closed ({reason})"))


def evaluate(connection: CDPConnection, expression: str, *, await_promise: bool = False,
             timeout: float | None = None) -> Any:
    """``Runtime.evaluate`` by value; a JavaScript exception becomes a CDPError carrying its text."""
    result = connection.send("Runtime.evaluate", {
        "expression": expression, "returnByValue": True, "awaitPromise": await_promise,
    }, timeout=timeout)
    if "exceptionDetails" in result:
        details = result["exceptionDetails"]
        text = details.get("exception", {}).get("description") or details.get("text", "exception")
        raise CDPError(f"JavaScript error: {text}")
    return result.get("result", {}).get("value")
