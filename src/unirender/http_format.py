"""The render service's HTTP body formats, both directions, as pure functions over bytes.

Shared by the service (``unirender.service.app``) and the thin client (``unirender.client``); it imports neither,
and nothing beyond numpy, msgpack, msgspec and the standard library at import time (Pillow only for PNG frames), so a
client installed with the core dependencies alone can use it.

A response *document* is a JSON-able dict in which frames appear as numpy arrays:
``{"metadata": {...}, "frames": {"rgb": ndarray, ...}}`` for one event, ``{"events": [doc, ...]}`` for many.
Three encodings, chosen by ``Accept``:

- ``application/x-msgpack`` (the fast path): arrays become ``{"shape", "dtype", "data": <raw bytes>}``.
- ``application/json``: arrays become ``{"shape", "dtype", "format": "png"|"npy", "data": <base64>}``; uint8
  images (H,W), (H,W,3), (H,W,4) are PNG, anything else (depth float32, instance ids) is NPY, so it is lossless.
- ``multipart/mixed``: a first ``application/json`` part with the document, where each array is replaced by
  ``{"shape", "dtype", "part": name}``, then one ``image/png`` or ``application/x-npy`` part per array.

msgpack events whose metadata the service forwards as the player sent it also carry ``step``: the step keys
(``lastActionSuccess``, ``errorMessage``, ``errorCode``, ``screenWidth``, ``screenHeight``, ``depthFormat``) the
service read from it, so that a client need not even scan the metadata. A msgpack request that sends
``Unirender-Metadata: as-sent`` (:data:`METADATA_HEADER`) lets an event whose player spoke JSON (WSGI) carry
``metadata_json`` instead of ``metadata``: a JSON document (bytes) whose ``agents[0]`` is the event's metadata,
for a one-agent scene the very document the player sent, forwarded without converting it. :func:`decode_document`
turns it back into ``metadata``, so callers see one shape either way.
"""

from __future__ import annotations

import base64
import io
import json
import secrets
from collections.abc import Callable

import msgpack
import msgspec
import numpy as np

from unirender.protocol.multipart import parse_options_header

JSON = "application/json"
MSGPACK = "application/x-msgpack"
MULTIPART = "multipart/mixed"
FORMATS = (JSON, MSGPACK, MULTIPART)
NPY = "application/x-npy"
PNG = "image/png"
# Request header: the client takes an event's metadata as the player sent it (``metadata_json`` for JSON).
METADATA_HEADER = "Unirender-Metadata"
METADATA_AS_SENT = "as-sent"
METADATA_JSON = "metadata_json"
STEP = "step"
# Request header: the client takes an ML-Agents event as the batched body (docs/service.md): every sensor one
# ``(agents, ...)`` array in its native dtype. Without it, the per-agent records of a dataset frame, as ever.
BODY_HEADER = "Unirender-Body"
BATCHED = "batched"


class PackedMsgpack:
    """A value already encoded as msgpack (e.g. a player's metadata as it came, ``Event.metadata_msgpack()``):
    a msgpack response carries its bytes as they are."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | memoryview):
        self.data = data


class WireError(ValueError):
    """A body could not be decoded; the message says what was wrong."""


class UnsupportedMediaType(WireError):
    """The request's Content-Type is neither JSON nor msgpack."""


# -- request bodies ----------------------------------------------------------------------------------------


def decode_request_body(content_type: str | None, body: bytes) -> dict:
    """JSON (default when no Content-Type) or msgpack object -> dict; anything else raises WireError."""
    mime = parse_options_header(content_type or JSON)[0]
    if not body:
        return {}
    if mime in (JSON, "text/json") or mime.endswith("+json"):
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise WireError(f"malformed JSON body: {exc}") from None
    elif mime in (MSGPACK, "application/msgpack"):
        try:
            value = msgpack.unpackb(body, raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises several unrelated types
            raise WireError(f"malformed msgpack body: {type(exc).__name__}: {exc}") from None
    else:
        raise UnsupportedMediaType(f"unsupported request Content-Type {mime!r}; use {JSON} or {MSGPACK}")
    if not isinstance(value, dict):
        raise WireError(f"the request body must be an object, not {type(value).__name__}")
    _check_depth(value)
    return value


MAX_DEPTH = 64  # nesting a request body may have; deeper ones would only serve to exhaust the stack later


def _check_depth(value: object) -> None:
    level = [value]
    for _ in range(MAX_DEPTH):
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c)
                 if isinstance(v, dict | list)]
        if not level:
            return
    raise WireError(f"the request body is nested more than {MAX_DEPTH} levels deep")


def encode_request_body(doc: dict, fmt: str = JSON) -> tuple[str, bytes]:
    """A request body as JSON (numpy arrays as lists) or, ``fmt=MSGPACK``, as msgpack with every numpy array an
    array description (:func:`array_description`): its raw bytes, no Python numbers."""
    if fmt == MSGPACK:
        return MSGPACK, msgpack.packb(doc, use_bin_type=True, default=_request_default)
    return JSON, json.dumps(doc, default=json_default).encode()


def _request_default(value):
    if isinstance(value, np.ndarray):
        return array_description(value)
    return json_default(value)


ARRAY_KEYS = frozenset({"shape", "dtype", "data"})
_ARRAY_KINDS = "biuf"  # the dtypes a request's array may have: bool, integers, floats (never objects)


def array_description(a: np.ndarray) -> dict:
    """An array in a msgpack request body: ``{"shape", "dtype", "data": <raw bytes, C order>}``."""
    return {"shape": list(a.shape), "dtype": a.dtype.str, "data": np.ascontiguousarray(a).tobytes()}


def is_array_description(value: object) -> bool:
    return isinstance(value, dict) and value.keys() == ARRAY_KEYS


def array_from_description(value: dict) -> np.ndarray:
    """Inverse of :func:`array_description` (a read-only view of the body's bytes); WireError saying what is wrong
    with a malformed one."""
    shape, dtype, data = value["shape"], value["dtype"], value["data"]
    if not isinstance(data, bytes) or not isinstance(dtype, str):
        raise WireError("an array is {\"shape\": [...], \"dtype\": \"<f4\", \"data\": <bytes>}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape) or len(shape) > 8:
        raise WireError(f"an array's shape must be a list of sizes, not {shape!r}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise WireError(f"unknown array dtype {dtype!r}") from None
    if dt.kind not in _ARRAY_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise WireError(f"array dtype {dtype!r} is not a number type (bool, integer or float)")
    size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if size != len(data):
        raise WireError(f"an array of shape {shape} and dtype {dtype} is {size} bytes, its data {len(data)}")
    return np.frombuffer(data, dt).reshape(shape)


# -- arrays ------------------------------------------------------------------------------------------------


def _is_png_able(a: np.ndarray) -> bool:
    return a.dtype == np.uint8 and (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4)))


def array_to_png(a: np.ndarray) -> bytes:
    from PIL import Image  # only the JSON and multipart formats carry PNG; msgpack needs no Pillow

    buf = io.BytesIO()
    # compress_level 1: PNG is for convenience here, msgpack is the fast path.
    Image.fromarray(np.ascontiguousarray(a)).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def array_to_npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _image_bytes(a: np.ndarray) -> tuple[str, bytes]:
    return ("png", array_to_png(a)) if _is_png_able(a) else ("npy", array_to_npy(a))


def _array_from(fmt: str, data: bytes, shape, dtype) -> np.ndarray:
    try:
        if fmt == "png":
            from PIL import Image

            arr = np.asarray(Image.open(io.BytesIO(data)))
        elif fmt == "npy":
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        elif fmt == "raw":
            arr = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)
        else:
            raise WireError(f"unknown frame format {fmt!r}")
    except WireError:
        raise
    except Exception as exc:
        raise WireError(f"cannot decode a {fmt} frame: {exc}") from None
    if shape is not None and list(arr.shape) != list(shape):
        raise WireError(f"frame shape {arr.shape} differs from the declared {tuple(shape)}")
    return arr


def _map_arrays(doc: dict, fn: Callable[[np.ndarray], object]) -> dict:
    """Copy of a document with every frame array replaced by ``fn(array)``.

    Only the document's structure is walked (``frames`` of an event, ``events`` of a list): metadata can be
    tens of KiB of nested dicts, and walking it cost more than sending the frames.
    """
    out = dict(doc)
    if isinstance(doc.get("frames"), dict):
        out["frames"] = {name: fn(a) if isinstance(a, np.ndarray) else a for name, a in doc["frames"].items()}
    if isinstance(doc.get("events"), list):
        out["events"] = [_map_arrays(e, fn) if isinstance(e, dict) else e for e in doc["events"]]
    return out


def _map_frame_dicts(doc, fn: Callable[[dict], np.ndarray]):
    """Inverse of :func:`_map_arrays`: array descriptions under ``frames`` -> arrays."""
    if not isinstance(doc, dict):
        raise WireError("the response document must be an object")
    out = dict(doc)
    frames = doc.get("frames")
    if isinstance(frames, dict):
        try:
            out["frames"] = {name: fn(desc) for name, desc in frames.items()}
        except (KeyError, TypeError) as exc:
            raise WireError(f"malformed frame description: {exc!r}") from None
    if isinstance(doc.get("events"), list):
        out["events"] = [_map_frame_dicts(e, fn) for e in doc["events"]]
    return out


def json_default(value):
    """``json.dumps(default=)`` for documents: numpy scalars and arrays as plain values (also msgpack's)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# -- responses ---------------------------------------------------------------------------------------------


def encode_document(doc: dict, fmt: str) -> tuple[str, bytes | list[bytes]]:
    """Encode a response document; returns (content type, body). Multipart bodies are a list of chunks."""
    if fmt == MSGPACK:
        return MSGPACK, _encode_msgpack(doc)
    if fmt == JSON:

        def b64(a: np.ndarray):
            kind, data = _image_bytes(a)
            return {"shape": list(a.shape), "dtype": a.dtype.str, "format": kind,
                    "data": base64.b64encode(data).decode("ascii")}

        return JSON, json.dumps(_map_arrays(doc, b64), default=json_default).encode()
    if fmt == MULTIPART:
        return _encode_multipart(doc)
    raise ValueError(f"unknown response format {fmt!r}")


def _raw_frame(a: np.ndarray) -> tuple[dict, memoryview]:
    """An array as (description, bytes) without copying when its buffer allows.

    Player frames are bottom-up buffers viewed top-down (a negative row stride): their rows go out as stored,
    with ``"flip": true``. RGB views of RGBA buffers (the last axis strided over a 4th channel) go out with the
    padding channel and ``"stored_shape"``; the client slices it off with a view. Both end as the same read-only
    views a local Event has.
    """
    desc: dict = {"shape": list(a.shape), "dtype": a.dtype.str}
    if not a.size:  # no agents (the batched ML-Agents body's empty terminal steps): a view cannot be cast
        return desc, memoryview(b"")
    b = a[::-1] if a.ndim >= 2 and a.strides[0] < 0 else a
    if b is not a:
        desc["flip"] = True
    if b.flags.c_contiguous:
        return desc, memoryview(b).cast("B")
    padded = _padded_channels(b)
    if padded is not None:
        desc["stored_shape"] = list(padded.shape)
        return desc, memoryview(padded).cast("B")
    desc.pop("flip", None)
    return desc, memoryview(np.ascontiguousarray(a)).cast("B")


def _padded_channels(b: np.ndarray) -> np.ndarray | None:
    """For an (H, W, C) view whose pixels are K > C items apart in one contiguous buffer, the (H, W, K) array
    over the same memory; None if the layout is anything else or the memory is not provably there."""
    if b.ndim != 3 or b.strides[2] != b.itemsize or b.strides[1] <= b.shape[2] * b.itemsize:
        return None
    k, rem = divmod(b.strides[1], b.itemsize)
    if rem or b.strides[0] != b.shape[1] * b.strides[1]:
        return None
    root = b
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not root.flags.c_contiguous:
        return None
    offset = b.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if offset < 0 or offset + b.shape[0] * b.strides[0] > root.nbytes:
        return None
    return np.ndarray((b.shape[0], b.shape[1], k), dtype=b.dtype, buffer=root, offset=offset)


def _encode_msgpack(doc: dict) -> bytes:
    """msgpack, assembled from pieces so that each frame is copied once (into the joined body), never
    flipped or made contiguous first. One ``bytes`` body: waitress compares and slices what it is given, which
    costs milliseconds per MiB for a memoryview."""
    return b"".join(_emitted_msgpack(doc))


def _emitted_msgpack(doc: dict) -> list[bytes | memoryview]:
    emitted: list[bytes | memoryview] = []
    _emit_msgpack(doc, emitted, msgpack.Packer(use_bin_type=True, default=json_default).pack)
    return emitted


def msgpack_pieces(doc: dict) -> list[bytes | memoryview]:
    """``doc`` as msgpack in pieces whose concatenation is :func:`encode_document`'s body: small ``bytes`` around
    each frame's data, which is a view of the frame's own memory (nothing copied), for a writer that sends
    buffers as they are (``sendmsg``)."""
    pieces: list[bytes | memoryview] = []
    run: list[bytes] = []  # consecutive bytes (keys, headers, small values) joined: a few buffers, not one per key
    for piece in _emitted_msgpack(doc):
        if type(piece) is bytes:
            run.append(piece)
            continue
        if run:
            pieces.append(b"".join(run))
            run = []
        pieces.append(piece)
    if run:
        pieces.append(b"".join(run))
    return pieces


def _emit_msgpack(value, chunks: list, pack) -> None:
    """Append ``value``'s msgpack to ``chunks``. A module function, not a closure that calls itself: such a
    closure is a reference cycle, which would keep ``chunks`` (views of the player's frame buffers) alive until
    the cyclic garbage collector ran, and the transports could not recycle those buffers."""
    if not (isinstance(value, dict) and ("frames" in value or "events" in value)):
        chunks.append(pack(value))
        return
    chunks.append(_map_header(len(value)))
    for key, item in value.items():
        chunks.append(pack(key))
        if key == "frames" and isinstance(item, dict):
            chunks.append(_map_header(len(item)))
            for name, array in item.items():
                chunks.append(pack(name))
                if not isinstance(array, np.ndarray):
                    chunks.append(pack(array))
                    continue
                desc, data = _raw_frame(array)
                chunks.append(_map_header(len(desc) + 1))
                for k, v in desc.items():
                    chunks.append(pack(k))
                    chunks.append(pack(v))
                chunks.append(pack("data"))
                chunks.append(b"\xc6" + len(data).to_bytes(4, "big"))  # bin 32 header
                chunks.append(data)
        elif key == "events" and isinstance(item, list):
            chunks.append(_array_header(len(item)))
            for event in item:
                _emit_msgpack(event, chunks, pack)
        elif isinstance(item, PackedMsgpack):  # forwarded as it came: not decoded, not re-packed
            chunks.append(item.data)
        elif isinstance(item, memoryview):  # bin, its bytes copied once (into the joined body)
            chunks.append(b"\xc6" + item.nbytes.to_bytes(4, "big"))
            chunks.append(item.cast("B") if item.format != "B" or item.ndim != 1 else item)
        else:
            chunks.append(pack(item))


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")


def _array_header(n: int) -> bytes:
    return bytes([0x90 | n]) if n < 16 else b"\xdd" + n.to_bytes(4, "big")


def _encode_multipart(doc: dict) -> tuple[str, list[bytes]]:
    parts: list[tuple[str, str, bytes]] = []

    def refer(a: np.ndarray):
        kind, data = _image_bytes(a)
        name = f"f{len(parts)}.{kind}"
        parts.append((name, PNG if kind == "png" else NPY, data))
        return {"shape": list(a.shape), "dtype": a.dtype.str, "part": name}

    head = json.dumps(_map_arrays(doc, refer), default=json_default).encode()
    boundary = secrets.token_hex(16)
    chunks = [f"--{boundary}\r\nContent-Type: {JSON}\r\nContent-Disposition: inline; name=\"document\"\r\n\r\n"
              .encode(), head]
    for name, ctype, data in parts:
        chunks.append(
            f"\r\n--{boundary}\r\nContent-Type: {ctype}\r\nContent-Disposition: attachment; name=\"{name}\"; "
            f"filename=\"{name}\"\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        )
        chunks.append(data)
    chunks.append(f"\r\n--{boundary}--\r\n".encode())
    return f'{MULTIPART}; boundary="{boundary}"', chunks


def decode_document(content_type: str | None, body: bytes, *, lazy_metadata: bool = False) -> dict:
    """Inverse of :func:`encode_document`: frames come back as numpy arrays (read-only for msgpack).

    ``lazy_metadata`` (msgpack only): each event's ``metadata`` is left undecoded, as a one-agent
    :class:`~unirender.protocol.metadata.RawMetadata` document (``Event.from_frames`` takes it; decoded on first
    access), so a caller that only wants frames never pays for the metadata."""
    mime, options = parse_options_header(content_type)
    if mime == MSGPACK:
        try:
            doc = _unpack_lazy(body) if lazy_metadata else _unpack_eager(body)
        except WireError:
            raise
        except Exception as exc:
            raise WireError(f"malformed msgpack response: {exc}") from None

        def load(d: dict) -> np.ndarray:
            stored = d.get("stored_shape") or d["shape"]
            arr = _array_from("raw", d["data"], stored, d["dtype"])
            if d.get("flip"):
                arr = arr[::-1]
            if list(stored) != list(d["shape"]):  # padding channels on the wire: a view without them
                arr = arr[..., : d["shape"][-1]]
            if list(arr.shape) != list(d["shape"]):
                raise WireError(f"frame shape {arr.shape} differs from the declared {tuple(d['shape'])}")
            return arr

        return _map_frame_dicts(doc, load)
    if mime == JSON:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise WireError(f"malformed JSON response: {exc}") from None
        return _map_frame_dicts(
            doc, lambda d: _array_from(d["format"], base64.b64decode(d["data"]), d["shape"], d["dtype"])
        )
    if mime == MULTIPART:
        boundary = options.get("boundary")
        if not boundary:
            raise WireError("multipart response without a boundary")
        parts = split_multipart(body, boundary)
        if not parts or parts[0][0] != "document":
            raise WireError("multipart response does not start with the JSON document part")
        doc = json.loads(parts[0][2])
        by_name = {name: (ctype, data) for name, ctype, data in parts[1:]}

        def load(d: dict) -> np.ndarray:
            if d.get("part") not in by_name:
                raise WireError(f"multipart response lacks part {d.get('part')!r}")
            ctype, data = by_name[d["part"]]
            return _array_from("png" if ctype == PNG else "npy", data, d["shape"], d["dtype"])

        return _map_frame_dicts(doc, load)
    raise WireError(f"unexpected response Content-Type {content_type!r}")


# The service's documents, top level and frame descriptions, decoded without building the metadata or copying
# the frames: msgspec.Raw values and frame data as memoryviews into the response body (read-only, as an eager
# decode's bytes are). A document of another shape takes the generic path below.
_TOP_LEVEL = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
_EVENT_LIST = msgspec.msgpack.Decoder(list[msgspec.Raw])


class _RawFrame(msgspec.Struct):
    """A msgpack frame description (:func:`_raw_frame`), its data left in the body."""

    shape: list[int]
    dtype: str
    data: memoryview
    flip: bool = False
    stored_shape: list[int] | None = None


class _EventsDocument(msgspec.Struct, forbid_unknown_fields=True):
    """A batch's answer (``POST /v1/steps``): its events' entries, found in ONE pass over the body (decoding the
    top level, then the list, then each event as Raw would skip each event's metadata three times)."""

    events: list[dict[str, msgspec.Raw]]


_EVENTS_DOCUMENT = msgspec.msgpack.Decoder(_EventsDocument)
_EVENTS_HEAD = b"\x81\xa6events"  # a one-entry map whose key is "events"
_FRAME_DESCRIPTIONS = msgspec.msgpack.Decoder(dict[str, _RawFrame])
_BYTES = msgspec.msgpack.Decoder(memoryview)
_BIN = (0xC4, 0xC5, 0xC6)  # msgpack bin 8/16/32
# The eager decode's arrays smaller than this are copied out of the body: a small array kept (a vector observation
# in a replay buffer) must not pin a 1.5 MiB body; a camera's frames, most of the body, stay views.
_VIEW_AT_LEAST = 64 * 1024


def _unpack_lazy(body: bytes) -> dict:
    """A msgpack response document with every event's ``metadata`` map kept as bytes, wrapped as a one-agent
    document (decoded on first read)."""
    try:
        return _lazy_document(body)
    except (msgspec.MsgspecError, ValueError, TypeError, IndexError):
        return _unpack_lazy_generic(body)


def _unpack_eager(body: bytes) -> dict:
    """A msgpack response document with its metadata decoded and its large frames' data left in the body
    (memoryviews: ``msgpack.unpackb`` would copy every frame into a ``bytes`` of its own, 1.5 MiB a step for two
    512x512 cameras); arrays under 64 KiB are copied, so that keeping one does not keep the whole body."""
    try:
        return _lazy_document(body, lazy_metadata=False)
    except (msgspec.MsgspecError, ValueError, TypeError, IndexError):
        return _metadata_from_json(msgpack.unpackb(body, raw=False, strict_map_key=False))


def _metadata_from_json(doc):
    """An eagerly decoded msgpack document with each ``metadata_json`` (bytes) decoded into ``metadata``."""
    if isinstance(doc, dict):
        if isinstance(doc.get(METADATA_JSON), bytes):
            from unirender.protocol.metadata import JSON as JSON_TEXT
            from unirender.protocol.metadata import RawMetadata

            doc = dict(doc)
            doc["metadata"] = RawMetadata(doc.pop(METADATA_JSON), JSON_TEXT).decode()["agents"][0]
        if isinstance(doc.get("events"), list):
            doc["events"] = [_metadata_from_json(event) for event in doc["events"]]
    return doc


def _lazy_document(raw, lazy_metadata: bool = True) -> dict:
    if bytes(raw[: len(_EVENTS_HEAD)]) == _EVENTS_HEAD:
        try:
            events = _EVENTS_DOCUMENT.decode(raw).events
        except msgspec.ValidationError:  # an item that is not a map: the general path below
            pass
        else:
            return {"events": [_lazy_entries(event, lazy_metadata) for event in events]}
    return _lazy_entries(_TOP_LEVEL.decode(raw), lazy_metadata)


def _lazy_entries(entries: dict[str, msgspec.Raw], lazy_metadata: bool = True) -> dict:
    """One document's entries (Raw values) -> the document, its frames' data views into the body; its metadata
    left undecoded (``lazy_metadata``) or decoded."""
    from unirender.protocol.metadata import JSON as JSON_TEXT
    from unirender.protocol.metadata import RawMetadata, one_agent_document

    doc = {}
    for key, value in entries.items():
        view = memoryview(value)
        if key == "metadata" and _is_map(view[0]) and lazy_metadata:
            doc[key] = one_agent_document(view)
        elif key == METADATA_JSON and view[0] in _BIN:
            metadata = RawMetadata(_BYTES.decode(view), JSON_TEXT)  # a view into the body, not a copy
            doc["metadata"] = metadata if lazy_metadata else metadata.decode()["agents"][0]
        elif key == "frames" and _is_map(view[0]):
            doc[key] = {name: {"shape": f.shape, "dtype": f.dtype, "flip": f.flip, "stored_shape": f.stored_shape,
                               "data": f.data if lazy_metadata or f.data.nbytes >= _VIEW_AT_LEAST else bytes(f.data)}
                        for name, f in _FRAME_DESCRIPTIONS.decode(view).items()}  # fmt: skip
        elif key == "events" and _is_array(view[0]):
            doc[key] = [_lazy_document(event, lazy_metadata) if _is_map(memoryview(event)[0]) else
                        msgpack.unpackb(event, raw=False, strict_map_key=False) for event in _EVENT_LIST.decode(view)]
        else:
            doc[key] = msgpack.unpackb(view, raw=False, strict_map_key=False)
    return doc


def _unpack_lazy_generic(body: bytes) -> dict:
    """:func:`_unpack_lazy` for any document: each ``metadata`` map's extent found with ``Unpacker.skip``."""
    from unirender.protocol.metadata import JSON as JSON_TEXT
    from unirender.protocol.metadata import RawMetadata, one_agent_document

    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(body), 1))
    unpacker.feed(body)

    def document() -> dict:
        doc = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key == "metadata" and _is_map(body[unpacker.tell()]):
                start = unpacker.tell()
                unpacker.skip()
                doc[key] = one_agent_document(memoryview(body)[start : unpacker.tell()])
            elif key == METADATA_JSON and body[unpacker.tell()] in _BIN:
                doc["metadata"] = RawMetadata(unpacker.unpack(), JSON_TEXT)
            elif key == "events" and _is_array(body[unpacker.tell()]):
                events = []
                for _ in range(unpacker.read_array_header()):
                    events.append(document() if _is_map(body[unpacker.tell()]) else unpacker.unpack())
                doc[key] = events
            else:
                doc[key] = unpacker.unpack()
        return doc

    if not body or not _is_map(body[0]):
        raise WireError("the response document must be an object")
    doc = document()
    if unpacker.tell() != len(body):
        raise WireError("malformed msgpack response: extra data after the document")
    return doc


def _is_map(first_byte: int) -> bool:
    return first_byte & 0xF0 == 0x80 or first_byte in (0xDE, 0xDF)


def _is_array(first_byte: int) -> bool:
    return first_byte & 0xF0 == 0x90 or first_byte in (0xDC, 0xDD)


def split_multipart(body: bytes, boundary: str) -> list[tuple[str, str, bytes]]:
    """``multipart/mixed`` body -> [(name, content type, bytes)]; uses each part's Content-Length when given."""
    delim = b"--" + boundary.encode()
    parts = []
    pos = body.find(delim)
    if pos < 0:
        raise WireError("multipart boundary not found")
    while True:
        pos += len(delim)
        if body[pos:pos + 2] == b"--":
            return parts
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise WireError("truncated multipart part headers")
        headers = {}
        for line in body[pos:head_end].decode("latin-1").split("\r\n"):
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        start = head_end + 4
        if "content-length" in headers:
            end = start + int(headers["content-length"])
            nxt = body.find(delim, end)
        else:
            nxt = body.find(b"\r\n" + delim, start)
            end = nxt
            nxt = nxt + 2 if nxt >= 0 else -1
        if nxt < 0:
            raise WireError("truncated multipart body")
        _, opts = parse_options_header(headers.get("content-disposition", ""))
        parts.append((opts.get("name", ""), headers.get("content-type", ""), body[start:end]))
        pos = nxt
