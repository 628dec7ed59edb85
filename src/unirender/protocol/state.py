"""The Python side's protocol state for one player: sequence ids (protocol.md 5.5) and METADATA_PATCH merging (3.6).

Both transports feed this object, so the rules live in one place: ``prepare_action`` before sending,
``accept`` / ``accept_patch`` for what comes back. Neither decodes the metadata: the sequence id is read with the
other step keys (:mod:`unirender.protocol.metadata`) and patches are merged when the metadata is read.
"""

from __future__ import annotations

import copy
import json

import numpy as np

from unirender.protocol.errors import MetadataError, SequenceIdMismatchError
from unirender.protocol.metadata import MetadataDocument, PatchedMetadata, as_document, step_fields_of
from unirender.protocol.payload import Payload


class NumpyAwareEncoder(json.JSONEncoder):
    """ndarray -> list, numpy scalars -> Python scalars (what AI2-THOR's NumpyAwareEncoder does)."""

    def default(self, o):
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, np.generic):
            return o.item()
        return super().default(o)


_ENCODER = NumpyAwareEncoder(ensure_ascii=True)


def encode_json_action(action: dict) -> bytes:
    """An action as ASCII JSON bytes (Unity reads WSGI bodies with ``Encoding.ASCII``: non-ASCII is escaped).

    Uses the default separators, so the bytes equal 5.0.0's: ``{"action": "Pass", "sequenceId": 1}``.
    """
    return _ENCODER.encode(action).encode("ascii")


def normalize_action(action: dict | str | None, kwargs: dict) -> dict:
    """``step("MoveAhead", moveMagnitude=0.5)`` and ``step({"action": "MoveAhead", ...})`` alike -> one dict."""
    if action is None:
        action = {}
    elif isinstance(action, str):
        action = {"action": action}
    elif not isinstance(action, dict):
        raise TypeError(f"action must be a dict, a string or None, not {type(action).__name__}")
    if kwargs:
        action = {**action, **kwargs}
    return action


def _copy_action_value(value):
    """Deep copy of JSON-like data, several times faster than ``copy.deepcopy`` on typical actions."""
    if isinstance(value, dict):
        return {key: _copy_action_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy_action_value(item) for item in value]
    if isinstance(value, str | int | float | bool | None | np.generic):
        return value
    return copy.deepcopy(value)  # ndarray and anything unusual


def check_metadata(metadata: object) -> dict:
    """The minimum every full message needs: a map with a non-empty ``agents`` list of maps and a ``sequenceId``."""
    if "sequenceId" not in step_fields_of(metadata).top:
        raise MetadataError("metadata has no 'sequenceId' (protocol.md 5.5)")
    return metadata


class ControllerProtocol:
    """Sequence-id bookkeeping and patch merging for one player connection.

    ``sequence_id`` is the id of the last action sent (0 before any, matching the player's hello event).
    """

    def __init__(self) -> None:
        self.sequence_id = 0
        self._previous: Payload | None = None

    @property
    def previous(self) -> Payload | None:
        """The last accepted payload (what a METADATA_PATCH merges into)."""
        return self._previous

    def prepare_action(self, action: dict) -> dict:
        """Deep copy of ``action`` ready to send: non-dict ``rotation`` -> ``{"y": r}``, ``sequenceId`` assigned.

        An explicit ``sequenceId`` is adopted (``Reset`` sends 0: the new scene's player starts counting again);
        otherwise the counter is incremented and inserted.
        """
        if not isinstance(action, dict):
            raise TypeError(f"an action must be a dict, got {type(action).__name__}")
        action = _copy_action_value(action)
        if "rotation" in action and not isinstance(action["rotation"], dict):
            action["rotation"] = {"y": action["rotation"]}
        if "sequenceId" in action:
            self.sequence_id = int(action["sequenceId"])
        else:
            self.sequence_id += 1
            action["sequenceId"] = self.sequence_id
        return action

    def accept(self, metadata: dict | MetadataDocument, files: dict[str, list[memoryview]]) -> Payload:
        """A full message: checks its shape and ``sequenceId`` against the last action sent (from the step keys,
        without decoding the document) and remembers it for patches.

        Adaptive: when the previous message's metadata was read by the time this one arrives (a caller that
        reads metadata every step), this one is decoded at once, which costs what an eager decode costs; a
        caller that leaves metadata alone keeps getting the partial read.
        """
        document = as_document(metadata)
        previous = self._previous
        if previous is not None and previous.document.read:
            # The caller read the last step's metadata: it reads every step's, so decode now and skip the partial
            # read (which would be pure overhead on top of the full decode).
            document.preload()
        top = document.fields.top  # raises MetadataError for a document of the wrong shape
        if "sequenceId" not in top:
            raise MetadataError("metadata has no 'sequenceId' (protocol.md 5.5)")
        got = top["sequenceId"]
        if got != self.sequence_id:
            raise SequenceIdMismatchError(
                f"sequence id mismatch: player echoed {got!r}, last action sent had {self.sequence_id}",
                expected=self.sequence_id,
                got=got,
            )
        payload = Payload(document, files)
        self._previous = payload
        return payload

    def accept_patch(self, patch: dict) -> Payload:
        """Merge a METADATA_PATCH into the previous full metadata (protocol.md 3.6); images are the previous ones.

        The patch's agent dict is updated, ``activeAgentId`` becomes ``patch["agentId"]``, ``sequenceId`` is the
        last sent one (patches skip the check). Unlike 5.0.0 a missing top-level ``thirdPartyCameras`` is no
        ``KeyError``: it stays absent/None. The merge itself runs when the metadata is first read
        (:class:`~unirender.protocol.metadata.PatchedMetadata`).
        """
        if not isinstance(patch, dict):
            raise MetadataError(f"METADATA_PATCH must be a map, got {type(patch).__name__}")
        if self._previous is None:
            raise MetadataError("METADATA_PATCH arrived before any full METADATA message to merge it into")
        previous = self._previous.document
        count = len(previous.fields.agents)
        agent_id = patch.get("agentId", 0)
        if not isinstance(agent_id, int) or isinstance(agent_id, bool) or not 0 <= agent_id < count:
            raise MetadataError(f"METADATA_PATCH agentId {agent_id!r} is not one of the {count} agent(s)")
        document = PatchedMetadata.merge(previous, patch, agent_id, self.sequence_id)
        payload = Payload(document, self._previous.files, patched=True)
        self._previous = payload
        return payload


__all__ = ["ControllerProtocol", "check_metadata", "encode_json_action"]
