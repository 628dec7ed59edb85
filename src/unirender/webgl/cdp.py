"""A small Chrome DevTools Protocol client over Chromium's DevTools pipe: commands answered by id, events to
listeners.

Why the pipe (``--remote-debugging-pipe``: JSON messages ending in NUL on the browser's fds 3 and 4) and not a
DevTools port: a port on 127.0.0.1 is open to every local user, and DevTools can read any file the browser's
user can (``file://``) and run anything in the page; the pipe belongs to us alone, needs no port, no port file
to wait for and no websocket library. Why our own client (~100 lines) and not playwright or pyppeteer:
playwright's Python package brings its own Node driver and browser downloads (a closed network has neither),
pyppeteer is unmaintained and asyncio-only, and unirender's controllers are synchronous. One reader thread hands
each answer to the command that waits for it, so a dead browser (the pipe ends) fails every waiting command at
once instead of hanging it.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from unirender.errors import PlayerCrashedError, PlayerTimeoutError, UnirenderError


class CDPError(UnirenderError):
    """The browser answered a command with an error (a bad argument, an exception in evaluated JavaScript)."""


class CDPConnection:
    """The browser's DevTools pipe: ``write_fd`` (its fd 3), ``read_fd`` (its fd 4); both are ours to close.
    Commands go to ``session_id`` (the attached page) unless sent with ``session_id=None`` explicitly."""

    def __init__(self, write_fd: int, read_fd: int, *, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.session_id: str | None = None
        self._write_fd, self._read_fd = write_fd, read_fd
        self._ids = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._listeners: list[Callable[[str, dict], None]] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.closed_reason: str | None = None
        self._reader = threading.Thread(target=self._read, name="unirender-cdp", daemon=True)
        self._reader.start()

    def listen(self, listener: Callable[[str, dict], None]) -> None:
        """``listener(method, params)`` for every event, called on the reader thread (keep it short)."""
        self._listeners.append(listener)

    def send(self, method: str, params: dict | None = None, *, timeout: float | None = None,
             session_id: str | None | bool = True) -> dict:
        """One command and its result; raises CDPError for the browser's error, PlayerCrashedError when the
        connection is gone, PlayerTimeoutError after ``timeout`` seconds (the connection's default).
        ``session_id``: True for the attached page's session, None for the browser itself."""
        future = self.send_async(method, params, session_id=session_id)
        try:
            return future.result(self.timeout if timeout is None else timeout)
        except FutureTimeout:
            raise PlayerTimeoutError(
                f"the browser did not answer {method} within {self.timeout if timeout is None else timeout:g} s "
                "(a hung tab)"
            ) from None

    def send_async(self, method: str, params: dict | None = None, *, session_id: str | None | bool = True) -> Future:
        future: Future = Future()
        with self._lock:
            if self.closed_reason is not None:
                raise PlayerCrashedError(f"the browser connection is closed ({self.closed_reason})")
            command_id = next(self._ids)
            self._pending[command_id] = future
        message = {"id": command_id, "method": method, "params": params or {}}
        session = self.session_id if session_id is True else session_id
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            with self._write_lock:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._write_fd, view):]
        except OSError as exc:
            self._fail_all(f"writing to the DevTools pipe failed: {exc}")
        return future

    def close(self) -> None:
        self._fail_all("closed by unirender")
        for fd in (self._write_fd,):
            try:
                os.close(fd)
            except OSError:
                pass
        self._write_fd = -1
        if self._reader is not threading.current_thread():
            self._reader.join(5)  # ends once the browser is gone and the pipe closes

    # -- the reader thread ------------------------------------------------------------------------------------
    def _read(self) -> None:
        buffer = bytearray()
        try:
            while True:
                chunk = os.read(self._read_fd, 1 << 20)
                if not chunk:
                    break
                buffer += chunk
                while (end := buffer.find(b"\0")) >= 0:
                    raw, buffer = bytes(buffer[:end]), buffer[end + 1:]
                    self._dispatch(json.loads(raw))
        except (OSError, ValueError) as exc:
            self._fail_all(f"{type(exc).__name__}: {exc}")
            return
        finally:
            try:
                os.close(self._read_fd)
            except OSError:
                pass
        self._fail_all("the browser closed its DevTools pipe")

    def _dispatch(self, message: dict) -> None:
        if "id" in message:
            with self._lock:
                future = self._pending.pop(message["id"], None)
            if future is None:
                return
            if "error" in message:
                error = message["error"]
                future.set_exception(CDPError(f"{error.get('message')} ({error.get('data', '')})"))
            else:
                future.set_result(message.get("result", {}))
        else:
            for listener in list(self._listeners):
                listener(message.get("method", ""), message.get("params", {}))

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
