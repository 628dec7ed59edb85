"""Player metadata kept as received, decoded on first use; the keys every step needs read without a full decode.

Why: AI2-THOR-sized metadata (50-100 objects) is ~55 KB of msgpack (FIFO) or ~90 KB of JSON (WSGI) per step, and
decoding it costs more than the rest of a step (measured here: 0.4 ms msgpack, 0.9 ms JSON). A caller that only
wants frames, or two keys, should not pay for it. So a transport hands over a :class:`RawMetadata` (the bytes as
received); the protocol state checks the sequence id, and the controller its ``lastActionSuccess``, through
:attr:`MetadataDocument.fields`, and ``event.metadata`` decodes the whole document only when someone reads it.

The partial read (:func:`scan_step_fields`) decodes the document against a schema that names only the step keys
(:data:`TOP_STEP_KEYS`, :data:`AGENT_STEP_KEYS`); msgspec skips every other value in C without building Python
objects, while still checking that it is well-formed. Its guarantee: **a value read partially is the value the
full decode gives for that key**. Where the partial read fails, finds the document's shape unexpected, or reads a
step key whose value is not a plain scalar, the document is decoded in full there and then (the exact path, with
the same errors as an eager decode). The one difference from eager decoding: a msgpack document that is
well-formed but fails the full decode deeper down (invalid UTF-8 in a string no step key holds, an unhashable map
key) raises :class:`MetadataError` when its metadata is first read rather than when it arrives.

Full decodes: msgpack with ``msgpack.unpackb`` (``strict_map_key=False``, as AI2-THOR 5.0.0); JSON with msgspec
(about twice as fast as ``json.loads``), falling back to ``json.loads`` for whatever msgspec refuses (``NaN``,
numbers out of range, lone surrogates), so the result is always what ``json.loads`` gives.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
import msgspec

from unirender.protocol.errors import MetadataError

# Keys read every step without a full decode. Top level: the protocol's sequence check, the active agent.
TOP_STEP_KEYS = ("sequenceId", "activeAgentId")
# Per agent: the controller's success check, the image decoder's size and depth unit.
AGENT_STEP_KEYS = (
    "lastActionSuccess",
    "errorMessage",
    "errorCode",
    "screenWidth",
    "screenHeight",
    "depthFormat",
)
STEP_KEYS = frozenset(TOP_STEP_KEYS + AGENT_STEP_KEYS)

MSGPACK = "msgpack"
JSON = "json"

# A partially read value is used only if it is one of these: containers could differ in their insides (ext
# types, bin) between msgspec and the full decoders; step keys are scalars in every real document.
_SCALARS = frozenset({type(None), bool, int, float, str})
_UNSET = msgspec.UNSET


class _AgentStepFields(msgspec.Struct):
    lastActionSuccess: Any = _UNSET
    errorMessage: Any = _UNSET
    errorCode: Any = _UNSET
    screenWidth: Any = _UNSET
    screenHeight: Any = _UNSET
    depthFormat: Any = _UNSET


class _TopStepFields(msgspec.Struct):
    agents: list[_AgentStepFields] | msgspec.UnsetType = _UNSET
    sequenceId: Any = _UNSET
    activeAgentId: Any = _UNSET


assert tuple(_AgentStepFields.__struct_fields__) == AGENT_STEP_KEYS
assert tuple(_TopStepFields.__struct_fields__[1:]) == TOP_STEP_KEYS

_SCANNERS = {
    MSGPACK: msgspec.msgpack.Decoder(_TopStepFields),
    JSON: msgspec.json.Decoder(_TopStepFields),
}


class StepFields:
    """The step keys of one document: ``top`` (present keys of :data:`TOP_STEP_KEYS`) and ``agents`` (per agent,
    present keys of :data:`AGENT_STEP_KEYS`). Plain dicts, so ``.get(key, default)`` reads like the full dict."""

    __slots__ = ("agents", "top")

    def __init__(self, top: dict, agents: list[dict]):
        self.top = top
        self.agents = agents

    def __repr__(self) -> str:
        return f"StepFields(top={self.top!r}, agents={self.agents!r})"


def scan_step_fields(raw, format: str) -> StepFields | None:
    """The step keys of a raw document without decoding the rest; None where only a full decode can say
    (malformed, unexpected shape, a step value that is not a plain scalar)."""
    try:
        doc = _SCANNERS[format].decode(raw)
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):  # deep nesting: RecursionError
        return None
    agents = doc.agents
    if agents is _UNSET or not agents:
        return None  # the full decode reports it with the usual message
    top = _step_scalars(doc, TOP_STEP_KEYS)
    per_agent = [_step_scalars(agent, AGENT_STEP_KEYS) for agent in agents]
    if top is None or None in per_agent:
        return None
    return StepFields(top, per_agent)


def _step_scalars(obj, keys) -> dict | None:
    """The present ``keys`` of a scanned struct; None when one of them is not a plain scalar."""
    fields = {}
    for key in keys:
        value = getattr(obj, key)
        if value is not _UNSET:
            if type(value) not in _SCALARS:
                return None
            fields[key] = value
    return fields


def step_fields_of(metadata: object) -> StepFields:
    """The step keys of a decoded document, checking its shape: a map with a non-empty ``agents`` list of maps."""
    if not isinstance(metadata, dict):
        raise MetadataError(f"metadata must be a JSON object / msgpack map, got {type(metadata).__name__}")
    agents = metadata.get("agents")
    if not isinstance(agents, list) or not agents:
        raise MetadataError("metadata must have a non-empty 'agents' list (MultiAgentMetadata, protocol.md 5.4)")
    per_agent = []
    for i, agent in enumerate(agents):
        if not isinstance(agent, dict):
            raise MetadataError(f"metadata agents[{i}] must be an object, got {type(agent).__name__}")
        per_agent.append({key: agent[key] for key in AGENT_STEP_KEYS if key in agent})
    return StepFields({key: metadata[key] for key in TOP_STEP_KEYS if key in metadata}, per_agent)


# -- full decodes -----------------------------------------------------------------------------------------------
def unpack_metadata(body, what: str = "METADATA") -> dict:
    """msgpack map -> dict, as 5.0.0 does (``strict_map_key=False``: dict-valued actionReturn may have int keys)."""
    try:
        value = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise MetadataError(f"{what} frame is not valid msgpack: {exc}") from exc
    if not isinstance(value, dict):
        raise MetadataError(f"{what} frame must be a msgpack map, got {type(value).__name__}")
    return value


def loads_json(text: str | bytes | memoryview, what: str = "form field 'metadata'") -> object:
    """JSON text -> Python, exactly as ``json.loads`` (msgspec first, for speed; ``json.loads`` for what it refuses)."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        pass
    try:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)
    except (ValueError, RecursionError) as exc:
        raise MetadataError(f"{what} is not JSON: {exc}") from exc


def loads_json_metadata(text: str | bytes) -> dict:
    metadata = loads_json(text)
    if not isinstance(metadata, dict):
        raise MetadataError(f"form field 'metadata' must be a JSON object, got {type(metadata).__name__}")
    return metadata


# -- documents --------------------------------------------------------------------------------------------------
class MetadataDocument:
    """One ``MultiAgentMetadata`` document: :meth:`decode` gives the dict (decoded once, then shared), :attr:`fields`
    the step keys (without a full decode where the document allows it)."""

    __slots__ = ("read",)

    raw = None  # the bytes as received (msgpack) or the JSON text, where the document has them
    format: str | None = None

    def __init__(self) -> None:
        self.read = False  # someone asked for the decoded dict (decode()), not just the step keys

    @property
    def decoded(self) -> bool:
        """True once the document is decoded (reading the metadata costs nothing more)."""
        raise NotImplementedError

    def decode(self) -> dict:
        """The decoded dict (decoded on the first call, then shared); marks the document as read."""
        self.read = True
        return self._load()

    def preload(self) -> None:
        """Decode now without marking the document as read (for a caller known to read it)."""
        self._load()

    def _load(self) -> dict:
        raise NotImplementedError

    @property
    def fields(self) -> StepFields:
        raise NotImplementedError


class DecodedMetadata(MetadataDocument):
    """A document that is already a dict (an ``Event(metadata)``, a legacy form, a test)."""

    __slots__ = ("_fields", "metadata")

    def __init__(self, metadata: dict):
        super().__init__()
        self.metadata = metadata
        self._fields: StepFields | None = None

    decoded = True

    def _load(self) -> dict:
        return self.metadata

    @property
    def fields(self) -> StepFields:
        if self._fields is None:
            self._fields = step_fields_of(self.metadata)
        return self._fields

    def __reduce__(self):
        return DecodedMetadata, (self.metadata,)


class RawMetadata(MetadataDocument):
    """A document as received: msgpack bytes (``format="msgpack"``) or JSON text (``"json"``), kept in ``raw``.

    ``raw`` may be a read-only memoryview into the received frame; pickling stores it as ``bytes``, never the
    decoded dict (a Ray actor returning an event whose metadata nobody read sends 55 KB, not a dict tree).
    """

    __slots__ = ("_decoded", "_fields", "format", "raw")

    def __init__(self, raw, format: str):
        if format not in _SCANNERS:
            raise ValueError(f"metadata format must be {MSGPACK!r} or {JSON!r}, got {format!r}")
        super().__init__()
        self.raw = raw
        self.format = format
        self._decoded: dict | None = None
        self._fields: StepFields | None = None

    @property
    def decoded(self) -> bool:
        return self._decoded is not None

    def _load(self) -> dict:
        if self._decoded is None:
            if self.format == MSGPACK:
                self._decoded = unpack_metadata(self.raw)
            else:
                self._decoded = loads_json_metadata(self.raw)
        return self._decoded

    @property
    def fields(self) -> StepFields:
        if self._fields is None:
            fields = None if self._decoded is not None else scan_step_fields(self.raw, self.format)
            self._fields = fields if fields is not None else step_fields_of(self._load())
        return self._fields

    def __reduce__(self):
        raw = self.raw if isinstance(self.raw, str | bytes) else bytes(self.raw)
        return RawMetadata, (raw, self.format)

    def __repr__(self) -> str:
        size = len(self.raw) if self.raw is not None else 0
        return f"<RawMetadata {self.format} {size} bytes{' decoded' if self.decoded else ''}>"


class PatchedMetadata(MetadataDocument):
    """A full document with METADATA_PATCHes merged in (protocol.md 3.6), lazily: the merge runs on :meth:`decode`.

    Consecutive patches fold into one update per agent (``a.update(p1); a.update(p2)`` is ``a.update({**p1, **p2})``
    with the same key order), so a long run of patches neither nests nor grows.
    """

    __slots__ = ("_decoded", "_fields", "active_agent_id", "base", "sequence_id", "updates")

    def __init__(self, base: MetadataDocument, updates: dict[int, dict], active_agent_id: int, sequence_id):
        super().__init__()
        self.base = base
        self.updates = updates
        self.active_agent_id = active_agent_id
        self.sequence_id = sequence_id
        self._decoded: dict | None = None
        self._fields: StepFields | None = None

    @classmethod
    def merge(cls, previous: MetadataDocument, patch: dict, agent_id: int, sequence_id) -> PatchedMetadata:
        if isinstance(previous, PatchedMetadata):
            updates = dict(previous.updates)
            updates[agent_id] = {**updates.get(agent_id, {}), **patch}
            return cls(previous.base, updates, agent_id, sequence_id)
        return cls(previous, {agent_id: dict(patch)}, agent_id, sequence_id)

    @property
    def decoded(self) -> bool:
        return self._decoded is not None

    def _load(self) -> dict:
        if self._decoded is None:
            previous = self.base._load()
            agents = [dict(agent) for agent in previous["agents"]]
            for agent_id, update in self.updates.items():
                agents[agent_id].update(update)
            metadata = dict(previous)
            metadata["agents"] = agents
            metadata["activeAgentId"] = self.active_agent_id
            metadata["sequenceId"] = self.sequence_id
            metadata["thirdPartyCameras"] = previous.get("thirdPartyCameras")
            self._decoded = metadata
        return self._decoded

    @property
    def fields(self) -> StepFields:
        if self._fields is None:
            base = self.base.fields
            agents = [dict(agent) for agent in base.agents]
            for agent_id, update in self.updates.items():
                agents[agent_id].update({key: update[key] for key in AGENT_STEP_KEYS if key in update})
            top = dict(base.top)
            top["activeAgentId"] = self.active_agent_id
            top["sequenceId"] = self.sequence_id
            self._fields = StepFields(top, agents)
        return self._fields

    def __reduce__(self):
        return PatchedMetadata, (self.base, self.updates, self.active_agent_id, self.sequence_id)


# -- forwarding one agent's metadata ------------------------------------------------------------------------------
class _AgentsAsJson(msgspec.Struct):
    agents: list[msgspec.Raw] | msgspec.UnsetType = _UNSET


_AGENTS_AS_JSON = msgspec.json.Decoder(_AgentsAsJson)
_ONE_AGENT_PREFIX = b"\x81\xa6agents\x91"  # msgpack {"agents": [ ... ]} around one agent's map


def agent_msgpack(document: MetadataDocument, agent: int) -> bytes | memoryview | None:
    """Agent ``agent``'s metadata map as msgpack, from the document as received (to forward it without a
    decode/re-encode round trip): for msgpack, the slice of the raw bytes that holds it (nothing decoded); for
    JSON, that agent alone decoded and packed once (the rest of the document untouched), or the decoded dict
    packed where the document was decoded already. None where the document has no raw form (a dict, merged
    patches) or its shape is not the expected one: the caller then packs ``event.metadata`` as before.

    The bytes are what the player sent: a client decoding them gets what decoding the player's document gives."""
    if not isinstance(document, RawMetadata):
        return None
    try:
        if document.format == MSGPACK:
            return _msgpack_agent_slice(document.raw, agent)
        if document.decoded:
            agents = document._load().get("agents")
            value = agents[agent] if isinstance(agents, list) and 0 <= agent < len(agents) else None
        else:
            agents = _AGENTS_AS_JSON.decode(document.raw).agents
            if agents is _UNSET or not 0 <= agent < len(agents):
                return None
            value = loads_json(agents[agent])
        # msgspec packs what JSON decodes to (str, int, float, bool, None, list, dict) as msgpack-python does,
        # 4x faster (0.09 vs 0.39 ms for a 50-object agent).
        return msgspec.msgpack.encode(value) if isinstance(value, dict) else None
    except (msgspec.MsgspecError, MetadataError, ValueError, TypeError, OverflowError, RecursionError):
        return None


def agent_json_document(document: MetadataDocument, agent: int) -> bytes | memoryview | None:
    """A ``MultiAgentMetadata`` JSON document whose ``agents[0]`` is agent ``agent``'s metadata, in the JSON text a
    WSGI player sent, to forward it without converting it: for agent 0 of a one-agent document (every step of a
    single-agent scene) the player's document itself, as received (nothing scanned again, nothing copied); else
    that agent's map sliced from it (nothing decoded) in a ``{"agents": [...]}`` of its own. None for any other
    document (msgpack, decoded, merged patches) or where it cannot be sliced (malformed, not strict JSON, not the
    expected shape): the caller then falls back to :func:`agent_msgpack`.

    Either way a full decode of the result gives, as ``agents[0]``, what the full decode of the player's document
    gives as ``agents[agent]``."""
    if not isinstance(document, RawMetadata) or document.format != JSON or document.decoded:
        return None
    if agent == 0:
        try:
            agents = len(document.fields.agents)  # read when it arrived (the sequence check), so no second scan
        except MetadataError:
            return None
        if document.decoded:
            return None  # the partial read could not say: decoded in full (and maybe changed since)
        if agents == 1:  # well-formed (msgspec checks what it skips), one agent: forwarded as it came
            raw = document.raw
            return raw.encode("utf-8") if isinstance(raw, str) else raw
    try:
        agents = _AGENTS_AS_JSON.decode(document.raw).agents
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
        return None
    if agents is _UNSET or not 0 <= agent < len(agents):
        return None
    text = bytes(agents[agent])
    return b'{"agents":[' + text + b"]}" if text[:1] == b"{" else None


def agent_step_keys(value: object) -> dict | None:
    """``value`` if it can stand for an agent's step keys read elsewhere (a dict of some of
    :data:`AGENT_STEP_KEYS` to plain scalars, as :attr:`StepFields.agents` holds), else None."""
    if not isinstance(value, dict) or len(value) > len(AGENT_STEP_KEYS):
        return None
    for key, item in value.items():
        if key not in AGENT_STEP_KEYS or type(item) not in _SCALARS:
            return None
    return value


def _msgpack_agent_slice(raw, agent: int) -> memoryview | None:
    """The bytes of ``agents[agent]``'s map; the last ``agents`` key counts, as in a full decode."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(raw), 1))
    unpacker.feed(raw)
    found = None
    try:
        for _ in range(unpacker.read_map_header()):
            if unpacker.unpack() != "agents":
                unpacker.skip()
                continue
            found = None
            if raw[unpacker.tell()] & 0xF0 != 0x90 and raw[unpacker.tell()] not in (0xDC, 0xDD):
                unpacker.skip()  # not a list: nothing to forward (the full decode says what is wrong)
                continue
            for index in range(unpacker.read_array_header()):
                start = unpacker.tell()
                unpacker.skip()
                if index == agent and (raw[start] & 0xF0 == 0x80 or raw[start] in (0xDE, 0xDF)):
                    found = (start, unpacker.tell())
        if unpacker.tell() != len(raw):
            return None  # trailing bytes: the full decode refuses the document
    except Exception:  # msgpack raises several unrelated types for bad input; the full decode reports it
        return None
    return memoryview(raw)[found[0] : found[1]] if found is not None else None


def one_agent_document(agent_map: bytes | memoryview) -> RawMetadata:
    """A ``MultiAgentMetadata`` msgpack document around one agent's metadata map as received (what
    :func:`agent_msgpack` gives): its step keys read and the rest decoded on first use, like a player's."""
    return RawMetadata(_ONE_AGENT_PREFIX + bytes(agent_map), MSGPACK)


def as_document(metadata: dict | MetadataDocument) -> MetadataDocument:
    return metadata if isinstance(metadata, MetadataDocument) else DecodedMetadata(metadata)


__all__ = [
    "AGENT_STEP_KEYS",
    "JSON",
    "MSGPACK",
    "STEP_KEYS",
    "TOP_STEP_KEYS",
    "DecodedMetadata",
    "MetadataDocument",
    "PatchedMetadata",
    "RawMetadata",
    "StepFields",
    "agent_json_document",
    "agent_msgpack",
    "agent_step_keys",
    "as_document",
    "loads_json",
    "loads_json_metadata",
    "one_agent_document",
    "scan_step_fields",
    "step_fields_of",
    "unpack_metadata",
]
