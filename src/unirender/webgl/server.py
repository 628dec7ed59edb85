"""The build's files served on 127.0.0.1, as Unity's docs require for a WebGL build (``Content-Encoding`` for
``.gz``/``.br`` files, ``application/wasm`` for the wasm so that it compiles while streaming), plus the host page
unirender writes (``/__unirender__/``): a small WSGI app on waitress, in a thread of the controller's process.

Only files under the build's root are served (no ``..``, no symlinks out), read-only, GET/HEAD only.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import waitress.server

from unirender.transport.serving import stop_waitress
from unirender.webgl.build import content_headers

HOST_PREFIX = "/__unirender__/"


class BuildFiles:
    """The WSGI app: ``root``'s files, and ``pages`` (name -> (content type, bytes)) under HOST_PREFIX."""

    def __init__(self, root: str | os.PathLike, pages: dict[str, tuple[str, bytes]]) -> None:
        self.root = Path(root).resolve()
        self.pages = pages

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            return self._answer(start_response, "405 Method Not Allowed", b"GET or HEAD only\n",
                                [("Allow", "GET, HEAD")])
        path = environ.get("PATH_INFO", "/")
        if path.startswith(HOST_PREFIX):
            page = self.pages.get(path[len(HOST_PREFIX):])
            if page is None:
                return self._answer(start_response, "404 Not Found", b"no such page\n")
            content_type, body = page
            return self._answer(start_response, "200 OK", body if method == "GET" else b"",
                                [("Content-Type", content_type)], length=len(body))
        target = (self.root / path.lstrip("/")).resolve()
        if not target.is_relative_to(self.root) or not target.is_file():
            return self._answer(start_response, "404 Not Found", b"not found\n")
        content_type, encoding = content_headers(target.name)
        headers = [("Content-Type", content_type)]
        if encoding:
            headers.append(("Content-Encoding", encoding))
        size = target.stat().st_size
        headers += [("Content-Length", str(size)), ("Cache-Control", "no-cache")]
        start_response("200 OK", headers)
        if method == "HEAD":
            return [b""]
        wrapper = environ.get("wsgi.file_wrapper")
        handle = open(target, "rb")
        return wrapper(handle, 1 << 20) if wrapper else iter(lambda: handle.read(1 << 20), b"")

    @staticmethod
    def _answer(start_response, status, body, headers=(), length=None):
        headers = [("Content-Type", "text/plain; charset=utf-8"), *headers] if not any(
            h[0] == "Content-Type" for h in headers) else list(headers)
        headers.append(("Content-Length", str(len(body) if length is None else length)))
        start_response(status, headers)
        return [body]


class BuildServer:
    """``BuildServer(app)``: listening on 127.0.0.1 (a port the kernel picks) until ``close()``."""

    def __init__(self, app: BuildFiles) -> None:
        self.server = waitress.server.create_server(app, host="127.0.0.1", port=0, threads=4,
                                                    clear_untrusted_proxy_headers=True, ident="unirender")
        self.port = self.server.effective_port
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.run, name="unirender-webgl-files", daemon=True)
        self._thread.start()

    def close(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        stop_waitress(server, self._thread)  # as the player hub stops its own
