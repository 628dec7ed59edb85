"""The AI2-THOR family's client adapter: :class:`RemoteSession` (the local Controller's ``step``/``reset``/``stop``
and ``last_event``, an ``Event`` built by ``Event.from_frames``), registered in ``client.REMOTE_SESSIONS``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unirender import http_format
from unirender.client import RemoteSessionBase
from unirender.simulator import AI2THOR

if TYPE_CHECKING:
    from unirender.protocol.event import Event


def event_from_document(doc: dict) -> Event:
    from unirender.protocol.event import Event

    # The step keys the service read from the metadata it forwarded: the metadata is not even scanned here.
    return Event.from_frames(doc["metadata"], doc.get("frames") or {}, step=doc.get(http_format.STEP))


class RemoteSession(RemoteSessionBase["Event"]):
    """An AI2-THOR session on the service with the local Controller's ``step``/``reset``/``stop`` and
    ``last_event`` (an ``Event``)."""

    family = AI2THOR
    lazy_metadata = True  # Event.from_frames decodes the metadata when it is first read

    @staticmethod
    def event_of(doc: dict, description: dict | None) -> Event:
        return event_from_document(doc)

    def step(self, action: dict | str | None = None, **kwargs: Any) -> Event:
        from unirender.protocol.state import normalize_action

        return self._event("step", normalize_action(action, kwargs))

    def action_body(self, action: Any) -> Any:
        from unirender.protocol.state import normalize_action

        return normalize_action(action, {})

    def reset(self, scene: str | None = None, **initialize_params: Any) -> Event:
        body = dict(initialize_params)
        if scene is not None:
            body["scene"] = scene
        return self._event("reset", body)

    def __enter__(self) -> RemoteSession:
        return self


__all__ = ["RemoteSession", "event_from_document"]
