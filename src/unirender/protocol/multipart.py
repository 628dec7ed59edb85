"""Unity ``WWWForm`` bodies (protocol.md 2.3-2.5): a byte-exact builder and a tolerant parser.

The builder reproduces what a Unity player sends, so the reference player and tests emit real Unity bytes. The
parser accepts Unity's quirks (quoted boundary, leading CRLF, ``Content-disposition``) and ordinary clients'
spellings alike; binary parts come back as read-only memoryviews into the body (no copy).
"""

from __future__ import annotations

import functools
import random
import re
import string
from email.message import Message
from email.utils import collapse_rfc2231_value
from urllib.parse import parse_qsl

from unirender.protocol.errors import MetadataError, MultipartError
from unirender.protocol.metadata import (
    JSON,
    DecodedMetadata,
    MetadataDocument,
    RawMetadata,
    loads_json,
    loads_json_metadata,
)

BOUNDARY_LENGTH = 40
_BOUNDARY_ALPHABET = string.digits + string.ascii_letters
_rng = random.Random()

# Unity's WWWTranscoder escapes bytes < 32, > 126, space and this set, with lower-case hex (protocol.md 2.3 (b)).
_URL_ESCAPED = frozenset(b" @&;:<>=?\"'/\\!#%+$,{}|^[]`")
_URL_TABLE = [
    f"%{b:02x}".encode("ascii") if (b < 32 or b > 126 or b in _URL_ESCAPED) else bytes([b])
    for b in range(256)
]


# A header value with nothing to undo (no quotes, escapes, comments or RFC 2231 encodings) and no empty or
# name-less option: split as it is. Every Content-Type a step carries looks like this.
_PLAIN_OPTIONS = re.compile(r"[^\"'\\()*;=]*(?:;[ \t]*[^\"'\\()*;=\s]+[ \t]*=[^\"'\\()*;=]*)*")


def parse_options_header(value: str | None) -> tuple[str, dict[str, str]]:
    """``'multipart/form-data; boundary="b"'`` -> ``('multipart/form-data', {'boundary': 'b'})``: the value and
    the option names lower-cased, quotes and RFC 2231 encodings undone. The standard library's MIME header
    parser, so neither the transport nor the thin client needs a web framework; a plain value (no quotes,
    escapes or encodings: every Content-Type a step carries) is split directly, with the same result, as the
    email package costs ~20 us a call and a step parses three or four."""
    text = value or ""
    if _PLAIN_OPTIONS.fullmatch(text):
        main, *options = text.split(";")
        parsed = {}
        for option in options:
            name, _, option_value = option.partition("=")
            parsed[name.strip().lower()] = option_value.strip()
        return main.strip().lower(), parsed
    return _parse_options_email(text)


def _parse_options_email(value: str) -> tuple[str, dict[str, str]]:
    msg = Message()
    msg["x"] = value
    params = msg.get_params(header="x", unquote=True) or [("", "")]
    return params[0][0].lower(), {k.lower(): collapse_rfc2231_value(v) for k, v in params[1:]}


@functools.lru_cache(maxsize=512)
def _options(value: str) -> tuple[str, dict[str, str]]:
    """:func:`parse_options_header`, memoised: a player sends the same part headers on every step. Callers must
    not modify the returned dict."""
    return parse_options_header(value)


def random_boundary() -> str:
    """40 random characters from ``[0-9A-Za-z]``, like ``WWWForm``."""
    return "".join(_rng.choices(_BOUNDARY_ALPHABET, k=BOUNDARY_LENGTH))


def unity_url_encode(data: bytes) -> bytes:
    """Percent-encode like Unity's ``WWWTranscoder.DataEncode``: lower-case hex, space as ``%20``."""
    return b"".join(_URL_TABLE[b] for b in data)


def build_wwwform(fields: list[tuple[str, str | bytes]], boundary: str | None = None) -> tuple[str, bytes]:
    """``(content_type, body)`` exactly as Unity's ``WWWForm`` builds them.

    ``str`` values are text fields (``AddField``), ``bytes``-like values binary parts (``AddBinaryData``), kept
    in the given order. With no binary part the body is urlencoded (Unity's other branch).
    """
    if not any(not isinstance(value, str) for _, value in fields):
        body = b"&".join(
            unity_url_encode(name.encode("utf-8")) + b"=" + unity_url_encode(value.encode("utf-8"))
            for name, value in fields
        )
        return "application/x-www-form-urlencoded", body
    boundary = boundary or random_boundary()
    delimiter = b"\r\n--" + boundary.encode("ascii") + b"\r\n"
    parts: list = []
    for name, value in fields:
        parts.append(delimiter)
        if isinstance(value, str):
            parts.append(
                b'Content-Type: text/plain; charset="utf-8"\r\nContent-disposition: form-data; name="%s"\r\n\r\n'
                % name.encode("ascii")
            )
            parts.append(value.encode("utf-8"))
        else:
            parts.append(
                b'Content-Type: application/octet-stream\r\nContent-disposition: form-data; name="%s"; '
                b'filename="%s.dat"\r\n\r\n' % (name.encode("ascii"), name.encode("ascii"))
            )
            parts.append(value)
    parts.append(b"\r\n--" + boundary.encode("ascii") + b"--\r\n")
    return f'multipart/form-data; boundary="{boundary}"', b"".join(parts)


def parse_form(
    content_type: str | None,
    body: bytes | bytearray | memoryview,
    *,
    part_sizes: dict[str, int] | None = None,
) -> tuple[dict[str, list[str]], dict[str, list[memoryview]]]:
    """A form body -> ``(fields, files)``; both map a name to its values in order of appearance.

    ``part_sizes`` (optional, updated in place): sizes of earlier forms' parts by name. A part whose closing
    delimiter sits exactly at its remembered size is taken without scanning its bytes for the boundary (frames
    keep their size from step to step: that scan is most of the parse). Well-formed bodies parse the same either
    way, since a boundary never occurs inside a part; otherwise the boundary is searched for as usual.

    ``multipart/form-data``: parts with a ``filename`` are files (read-only memoryviews into ``body``, zero-copy
    when ``body`` is ``bytes``/``bytearray``; a ``memoryview`` body is copied once to search it), other parts
    are text decoded with their charset (default UTF-8). Header names in any case, quoted or bare boundary, with
    or without a leading CRLF. Anything else is parsed as ``application/x-www-form-urlencoded``.
    """
    if not content_type:
        raise MultipartError("request has no Content-Type; expected multipart/form-data or urlencoded")
    mimetype, options = _options(content_type)
    if mimetype == "multipart/form-data":
        boundary = options.get("boundary")
        if not boundary:
            raise MultipartError(f"multipart Content-Type has no boundary parameter: {content_type!r}")
        return _parse_multipart(boundary.encode("latin-1"), body, part_sizes)
    return _parse_urlencoded(body), {}


def _parse_urlencoded(body) -> dict[str, list[str]]:
    try:
        text = bytes(body).decode("ascii")
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise MultipartError(f"urlencoded form body is malformed: {exc}") from exc
    fields: dict[str, list[str]] = {}
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return fields


def _parse_multipart(
    boundary: bytes, body, part_sizes: dict[str, int] | None = None
) -> tuple[dict[str, list[str]], dict[str, list[memoryview]]]:
    if isinstance(body, memoryview):
        body = body.tobytes()
    view = memoryview(body).toreadonly()
    dash_boundary = b"--" + boundary
    delimiter = b"\r\n" + dash_boundary
    # The first boundary may open the body (RFC 7578) or follow Unity's leading CRLF; a preamble is ignored.
    pos = body.find(dash_boundary)
    if pos < 0 or (pos > 0 and body[pos - 2 : pos] != b"\r\n"):
        raise MultipartError(f"multipart body does not contain the boundary {boundary.decode('latin-1')!r}")
    pos += len(dash_boundary)
    fields: dict[str, list[str]] = {}
    files: dict[str, list[memoryview]] = {}
    index = 0
    while True:
        if body[pos : pos + 2] == b"--":
            return fields, files
        if body[pos : pos + 2] != b"\r\n":
            raise MultipartError(f"part {index}: boundary not followed by CRLF or '--' (bad boundary?)")
        head_end = body.find(b"\r\n\r\n", pos + 2)
        if head_end < 0:
            raise MultipartError(f"part {index}: headers are not terminated by an empty line")
        headers = _parse_part_headers(body[pos + 2 : head_end], index)
        start = head_end + 4
        disposition, params = _options(headers.get("content-disposition", ""))
        if disposition != "form-data" or "name" not in params:
            raise MultipartError(
                f"part {index}: needs 'Content-Disposition: form-data; name=...', "
                f"got {headers.get('content-disposition')!r}"
            )
        name = params["name"]
        end = -1
        if part_sizes is not None:
            size = part_sizes.get(name)
            if size is not None and body.startswith(delimiter, start + size):
                end = start + size
        if end < 0:
            end = body.find(delimiter, start)
            if end < 0:
                raise MultipartError(
                    f"part {index}: no closing boundary {delimiter.decode('latin-1')!r} (truncated body?)"
                )
            if part_sizes is not None:
                part_sizes[name] = end - start
        if "filename" in params:
            files.setdefault(name, []).append(view[start:end])
        else:
            _, type_params = _options(headers.get("content-type", "text/plain"))
            charset = type_params.get("charset", "utf-8")
            try:
                fields.setdefault(name, []).append(bytes(view[start:end]).decode(charset))
            except (LookupError, UnicodeDecodeError) as exc:
                raise MultipartError(f"part {index} ({name!r}): cannot decode as {charset}: {exc}") from exc
        pos = end + len(delimiter)
        index += 1


def _parse_part_headers(block: bytes, index: int) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in block.split(b"\r\n"):
        key, colon, value = line.partition(b":")
        if not colon:
            raise MultipartError(f"part {index}: header line without ':': {bytes(line)[:80]!r}")
        headers[key.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
    return headers


def form_payload_parts(
    fields: dict[str, list[str]], files: dict[str, list[memoryview]]
) -> tuple[MetadataDocument, dict[str, list[memoryview]], str | None]:
    """Form -> ``(metadata, files, token)`` with the ``metadata`` JSON undecoded (a
    :class:`~unirender.protocol.metadata.RawMetadata`, decoded when read). A legacy non-empty ``actionReturns``
    field (it fills agents' returns) needs the document decoded at once.

    ``token`` is None when the form has none (Unity always sends one, possibly empty).
    """
    values = fields.get("metadata")
    if not values:
        raise MetadataError("form has no 'metadata' field")
    tokens = fields.get("token")
    token = tokens[0] if tokens else None
    legacy = fields.get("actionReturns")
    if not (legacy and legacy[0]):
        return RawMetadata(values[0], JSON), files, token
    metadata = loads_json_metadata(values[0])
    returns = loads_json(legacy[0], "form field 'actionReturns'")
    agents = metadata.get("agents")
    if isinstance(returns, list) and isinstance(agents, list):
        for agent, value in zip(agents, returns, strict=False):
            if isinstance(agent, dict) and "actionReturn" not in agent:
                agent["actionReturn"] = value
    return DecodedMetadata(metadata), files, token


def payload_parts_from_form(
    fields: dict[str, list[str]], files: dict[str, list[memoryview]]
) -> tuple[dict, dict[str, list[memoryview]], str | None]:
    """:func:`form_payload_parts` with the metadata decoded (``dict``): JSON ``metadata``, legacy
    ``actionReturns`` filling agents' returns."""
    document, files, token = form_payload_parts(fields, files)
    return document.decode(), files, token


__all__ = [
    "build_wwwform",
    "form_payload_parts",
    "parse_form",
    "payload_parts_from_form",
    "random_boundary",
    "unity_url_encode",
]
