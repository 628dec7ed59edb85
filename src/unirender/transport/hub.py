"""``PlayerHub``: one WSGI endpoint (``/train``, ``/ping``) for many players, each routed to its session by token.

The hub either serves itself (waitress, in a thread, on 127.0.0.1 and an ephemeral port; tuned as
``transport.serving`` says) or is mounted into another WSGI application as ``hub.wsgi_app`` (the service mounts
it so players reach the service's own port; then ``PlayerHub(address=(host, port))`` says where that is, for
``AI2THOR_HOST``/``AI2THOR_PORT``). It reaches each player's transport only through :class:`HubChannel`.

Nothing a request says is trusted or remembered before its token is verified (docs/service.md, "Hardening"):
the part sizes that speed up parsing are each player's own, learnt only from its verified forms; a form from a
sender not yet known builds nothing beyond a bounded parse, and changes no state.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Protocol

from unirender.protocol import ProtocolError
from unirender.protocol.multipart import form_payload_parts, parse_form, parse_options_header
from unirender.transport.serving import (
    CONNECTION_KEY,
    ConnectionPolicy,
    apply_connection_policy,
    quick_ack_channel_class,
    stop_waitress,
    trust_connection,
    waitress_options,
)

log = logging.getLogger(__name__)

PART_SIZES_MAX = 128  # part names remembered per player (8 cameras x 7 modalities + the agent's fit)
# Parts a form from a sender not yet known may have (a Unity form has metadata, token and up to ~60 images):
# an unknown sender's form with more is refused after one count, before anything is built from it.
MAX_FORM_PARTS = 512


def _plain(start_response, status: str, text: str) -> list[bytes]:
    body = text.encode("ascii", "replace")
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


# The hub's refusals, as the service's JSON errors (Unity ignores an error's body; a person reading it does not).
_ERROR_CODES = {400: "bad_request", 403: "unknown_client_token", 404: "not_found", 405: "method_not_allowed",
                411: "length_required", 413: "payload_too_large"}


def error_body(status: str, text: str) -> bytes:
    """The JSON body of a refusal with ``status`` (also the private fast path's, ``transport.direct``)."""
    code = _ERROR_CODES.get(int(status.split()[0]), "bad_request")
    return json.dumps({"error": {"code": code, "message": text}}).encode()


def _error(start_response, status: str, text: str) -> list[bytes]:
    body = error_body(status, text)
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


class HubChannel(Protocol):
    """What the hub needs of a player's transport (``transport.wsgi.WsgiTransport``), and all it uses of it."""

    client_token: str  # the token the player's forms carry; the hub routes by it
    accept_any_token: bool  # a private hub's only channel takes any token (a player we did not launch)
    player_connected: bool  # a request with its token has come in
    part_sizes: dict[str, int]  # its forms' part sizes, tried when the next form claims its token

    def verified_request(self, part_sizes: dict[str, int]) -> None:
        """A request's token was verified as this channel's; ``part_sizes``: that form's."""

    def deliver(self, metadata: dict, files: dict) -> bytes | None:
        """The verified form; blocks until the action to answer with (None: the session is stopping)."""

    def fail(self, error: Exception) -> None:
        """A malformed request pinned on this channel's player."""

    def reject(self, message: str) -> None:
        """A wrong token on a private hub before its player was in."""

    def release(self) -> None:
        """End every request blocked in :meth:`deliver` (the hub is closing)."""


class PlayerHub:
    """Routes ``POST /train`` by the form's ``token`` to the registered :class:`HubChannel` (a
    ``transport.wsgi.WsgiTransport``).

    ``PlayerHub()`` serves itself after :meth:`start`; ``PlayerHub(address=(host, port))`` is mounted elsewhere.
    """

    def __init__(self, address: tuple[str, int] | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 max_players: int = 8, owner: HubChannel | None = None,
                 connection_policy: ConnectionPolicy | None = None):  # fmt: skip
        self._external_address = address
        self.connection_policy = connection_policy or ConnectionPolicy()
        self.host, self.port = host, port
        self.max_players = max_players
        self._owner = owner  # a private hub reports unroutable requests to its only channel
        self._channels: dict[str, HubChannel] = {}
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        self.rejected_tokens = 0  # requests answered 403
        self.bad_requests = 0  # requests answered 400

    # -- serving ------------------------------------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` players connect to (an IP literal: Unity uses ``IPAddress.Parse``)."""
        if self._external_address is not None:
            return self._external_address
        if self._server is None:
            raise RuntimeError("PlayerHub.address before start()")
        return self.host, int(self._server.effective_port)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> PlayerHub:
        """Serve with waitress in a daemon thread (no-op for a mounted hub or when already serving)."""
        if self._external_address is not None or self._server is not None:
            return self
        from waitress import create_server

        self._server = create_server(self.wsgi_app, host=self.host, port=self.port, ident="unirender",
                                     expose_tracebacks=False,
                                     **waitress_options(self.max_players, self.connection_policy))  # fmt: skip
        self._server.channel_class = quick_ack_channel_class(self.connection_policy)
        apply_connection_policy(self._server, self.connection_policy)
        self._thread = threading.Thread(
            target=self._serve, args=(self._server,), name="unirender-player-hub", daemon=True
        )
        self._thread.start()
        return self

    def _serve(self, server) -> None:
        try:
            server.run()
        except Exception:  # sockets closed under the loop by close(): expected then, a bug otherwise
            if self._server is server:
                log.exception("player hub server loop failed")

    def close(self) -> None:
        """Release every blocked request, stop waitress, close all its sockets. Idempotent."""
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            channel.release()
        server, self._server = self._server, None
        if server is None:
            return
        stop_waitress(server, self._thread)
        self._thread = None

    def __enter__(self) -> PlayerHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- routing ------------------------------------------------------------------------------------------
    def register(self, channel: HubChannel) -> None:
        with self._lock:
            self._channels[channel.client_token] = channel

    def unregister(self, channel: HubChannel) -> None:
        with self._lock:
            if self._channels.get(channel.client_token) is channel:
                del self._channels[channel.client_token]

    def wsgi_app(self, environ, start_response):
        """The WSGI application: ``GET /ping`` -> ``pong``; ``POST /train`` -> the next action for that player."""
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/ping":
            return _plain(start_response, "200 OK", "pong")
        if path != "/train":
            return _error(start_response, "404 Not Found", f"no route {path}; players POST /train")
        if method != "POST":
            return _error(start_response, "405 Method Not Allowed", "/train takes POST")
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return self._bad(environ, start_response, "411 Length Required", "POST /train needs a Content-Length",
                             None)
        stream = environ["wsgi.input"]
        body = _read_body(stream, length)
        if len(body) != length:
            return self._bad(environ, start_response, "400 Bad Request", "request body shorter than Content-Length",
                             None)
        content_type = environ.get("CONTENT_TYPE")
        # The sender's own part sizes, if the token it claims is a registered player's; parsed into a copy that
        # is kept only once the parsed form's token is verified (an unverified form changes nothing here).
        delimiter = form_delimiter(content_type)
        owner = self._owner
        claimed = self._channel_for(claimed_token(content_type, body, delimiter))
        if claimed is None and owner is not None and owner.accept_any_token:
            claimed = owner  # a player we did not launch: whatever token it sends is its own
        if claimed is None and count_parts(body, delimiter) > MAX_FORM_PARTS:  # not parsed, nothing built
            return self._bad(environ, start_response, "400 Bad Request",
                             f"/train form has more than {MAX_FORM_PARTS} parts", None)
        part_sizes = dict(claimed.part_sizes) if claimed is not None else {}
        try:
            metadata, files, token = train_form(content_type, body, part_sizes)
        except ProtocolError as exc:
            return self._bad(environ, start_response, "400 Bad Request", f"bad /train form: {exc}",
                             getattr(exc, "token", None), exc)
        channel = self._channel_for(token)
        if channel is None and owner is not None and owner.accept_any_token:
            channel = owner
        if channel is None:
            self.rejected_tokens += 1
            log.warning("rejected POST /train with an unknown client token")
            # A misconfigured player fails fast; once the player is in, no stranger can fail it this way.
            if owner is not None and not owner.player_connected:
                owner.reject(f"the player sent a wrong client token {token!r} (answered 403)")
            return _error(start_response, "403 Forbidden", "unknown client token")
        channel.verified_request(part_sizes)
        trust_connection(environ, self.connection_policy.player_idle_s, player=channel)
        recycle = getattr(stream, "recycle", None)
        if recycle is not None:
            recycle()
        reply = channel.deliver(metadata, files)
        if reply is None:  # the session is stopping: an action-less body, as 5.0.0's stop() sends
            reply = b"{}"
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(reply)))])
        return [reply]

    def _channel_for(self, token: str | None) -> HubChannel | None:
        return self._channels.get(token) if token is not None else None

    def _bad(self, environ, start_response, status: str, text: str, token: str | None,
             exc: Exception | None = None):
        """A malformed request fails the session it can be pinned on: the one its (verified) token names, or the
        player whose verified connection it came on; on a private hub, its only channel until a player is in.
        A stranger's malformed request on a connection of its own fails no one."""
        self.bad_requests += 1
        channel = self._channel_for(token)
        if channel is None:
            connection = environ.get(CONNECTION_KEY)
            channel = getattr(connection, "verified_player", None)
        if channel is None and self._owner is not None and not self._owner.player_connected:
            channel = self._owner
        if channel is not None:
            channel.fail(exc if exc is not None else ProtocolError(text))
        return _error(start_response, status, text)


def form_delimiter(content_type: str | None) -> bytes | None:
    """The part delimiter of a ``multipart/form-data`` body (None for any other body)."""
    if not content_type or not content_type.startswith("multipart/"):
        return None
    boundary = parse_options_header(content_type)[1].get("boundary")
    return b"\r\n--" + boundary.encode("latin-1") if boundary else None


def train_form(content_type: str | None, body, part_sizes: dict) -> tuple:
    """A player's ``/train`` form -> ``(metadata, files, token)`` (the metadata decoded when read). A form that
    cannot be parsed raises its ``ProtocolError`` with the form's ``token`` attached (None if it was not reached),
    for the answer that names it (the hub and the direct transport both answer a bad form this way)."""
    token = None
    try:
        fields, files = parse_form(content_type, body, part_sizes=part_sizes)
        token = (fields.get("token") or [None])[0]
        return form_payload_parts(fields, files)
    except ProtocolError as exc:
        exc.token = token
        raise


def count_parts(body, delimiter: bytes | None) -> int:
    """Parts (or urlencoded fields) in a form: one scan, nothing built."""
    return body.count(delimiter) if delimiter is not None else body.count(b"&") + 1


def claimed_token(content_type: str | None, body, delimiter: bytes | None) -> str | None:
    """The form's ``token`` if it is the last part, as Unity sends it: read from the end of the body without
    scanning the frames before it. Only a claim, to pick whose part sizes to try; the full parse decides."""
    if delimiter is None:
        return None
    end = body.rfind(delimiter + b"--", max(0, len(body) - 4096))
    start = body.rfind(delimiter, max(0, end - 4096), end) if end > 0 else -1
    if start < 0:
        return None
    try:  # the last part alone is a form of its own
        fields, _ = parse_form(content_type, bytes(body[start + 2 : end + len(delimiter) + 2]))
    except ProtocolError:
        return None
    return (fields.get("token") or [None])[0]


def _read_body(stream, length: int) -> bytes | bytearray:
    """Exactly ``length`` bytes (fewer only if the client stopped sending), as ``bytes`` or the frame's own
    ``bytearray`` (:class:`FrameBodyStream`), so parsing is zero-copy."""
    frame = getattr(stream, "frame_body", None)
    if isinstance(frame, bytearray) and len(frame) == length:
        return frame
    data = stream.read(length)
    if len(data) == length:
        return data
    chunks = [data]
    got = len(data)
    while got < length:
        chunk = stream.read(length - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
