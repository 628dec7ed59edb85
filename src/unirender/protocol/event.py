"""``Event`` / ``MultiAgentEvent``: what ``controller.step()`` returns, with AI2-THOR's attribute names.

Images are decoded lazily: building an event only keeps references to the received buffers (and checks their
sizes); ``event.frame`` etc. decode on first access and cache. A modality nobody reads costs nothing. Arrays are
read-only, top-down views into the received bytes unless :mod:`unirender.protocol.images` says "copy".

Metadata is lazy too: an event from the wire holds the document as received
(:mod:`unirender.protocol.metadata`) and ``event.metadata`` decodes it on first access. What every step needs
(``bool(event)``, the screen size, the depth unit, :meth:`Event.peek_metadata` of the step keys) is read without
decoding it.

Pickling an event (Ray, multiprocessing) stores the decoded arrays, never the raw image buffers; metadata nobody
has read yet is stored as the received bytes, metadata already read as the dict (it may have been changed).
"""

from __future__ import annotations

import warnings

import numpy as np

from unirender.protocol.errors import ImageSizeError, MetadataError
from unirender.protocol.images import (
    DepthFormat,
    bytes_per_pixel,
    decode_color,
    decode_depth,
    image_view,
    parse_depth_format,
    screen_size,
    source_depth_format,
)
from unirender.protocol.masks import (
    ClassDetections2D,
    ClassMasks,
    InstanceDetections2D,
    InstanceMasks,
    SegmentationColors,
    checked_colors,
)
from unirender.protocol.metadata import (
    AGENT_STEP_KEYS,
    STEP_KEYS,
    MetadataDocument,
    agent_json_document,
    agent_msgpack,
    agent_step_keys,
)
from unirender.protocol.payload import Payload

# A spec's modality name -> the Event attribute holding the agent's frame of it (the gym's observations, OpenEnv's
# images, the service's documents all read frames by it).
MODALITY_ATTRIBUTE = {
    "rgb": "frame",
    "depth": "depth_frame",
    "instance_segmentation": "instance_segmentation_frame",
    "semantic_segmentation": "semantic_segmentation_frame",
    "normals": "normals_frame",
    "flow": "flow_frame",
}
# Event attribute -> form field name (protocol.md 2.4). Per agent:
AGENT_FRAME_FIELDS = {
    "frame": "image",
    "depth_frame": "image_depth",
    "normals_frame": "image_normals",
    "flow_frame": "image_flow",
    "instance_segmentation_frame": "image_ids",
    "semantic_segmentation_frame": "image_classes",
}
# Per third-party camera (lists, camera order):
THIRD_PARTY_FRAME_FIELDS = {
    "third_party_camera_frames": "image-thirdParty-camera",
    "third_party_depth_frames": "image_thirdParty_depth",
    "third_party_normals_frames": "image_thirdParty_normals",
    "third_party_flow_frames": "image_thirdParty_flow",
    "third_party_instance_segmentation_frames": "image_thirdParty_image_ids",
    "third_party_semantic_segmentation_frames": "image_thirdParty_classes",
}
# 5.0.0's Python looked for ``image_thirdParty_flows`` (never sent); accept it as well.
_FIELD_ALIASES = {"image_thirdParty_flows": "image_thirdParty_flow"}
# Old attribute names accepted by ``from_frames`` (5.0.0 stored flow as ``flows_frame``).
_FRAME_ALIASES = {"flows_frame": "flow_frame", "third_party_flows_frames": "third_party_flow_frames"}

_THIRD_PARTY_FIELD_NAMES = frozenset(THIRD_PARTY_FRAME_FIELDS.values())

_COLOR_ATTRS = {
    "frame",
    "instance_segmentation_frame",
    "semantic_segmentation_frame",
    "third_party_camera_frames",
    "third_party_instance_segmentation_frames",
    "third_party_semantic_segmentation_frames",
}
_DEPTH_ATTRS = {"depth_frame", "third_party_depth_frames"}


class MetadataWrapper(dict):
    """Agent metadata dict with AI2-THOR's deprecated aliases (protocol.md 5.3).

    ``["reachablePositions"]`` after GetReachablePositions/GetSceneBounds reads ``actionReturn`` (unless the key
    is really there); ``["hand"]`` reads ``heldObjectPose``.
    """

    def __getitem__(self, key):
        if key == "reachablePositions" and not dict.__contains__(self, key):
            if self.get("lastAction") in ("GetReachablePositions", "GetSceneBounds"):
                warnings.warn(
                    'event.metadata["reachablePositions"] is deprecated; use event.metadata["actionReturn"]',
                    DeprecationWarning,
                    stacklevel=2,
                )
                key = "actionReturn"
        elif key == "hand" and not dict.__contains__(self, key):
            warnings.warn(
                'event.metadata["hand"] is deprecated; use event.metadata["heldObjectPose"]',
                DeprecationWarning,
                stacklevel=2,
            )
            key = "heldObjectPose"
        return dict.__getitem__(self, key)


def _agent_frame_property(attr: str, doc: str) -> property:
    def get(self):
        return self._agent_frame(attr)

    return property(get, doc=doc)


def _third_party_property(attr: str, doc: str) -> property:
    def get(self):
        return self._third_party_frames(attr)

    return property(get, doc=doc)


class Event:
    """One agent's result of an action: ``metadata`` plus lazily decoded images.

    ``Event(metadata)`` alone works (no images), as in AI2-THOR. Missing modalities are ``None`` (agent frames)
    or ``[]`` (third-party lists). ``bool(event)`` is ``metadata["lastActionSuccess"]``.
    """

    def __init__(
        self,
        metadata: dict,
        images: dict[str, memoryview] | None = None,
        third_party_images: dict[str, list[memoryview]] | None = None,
        *,
        depth_format: DepthFormat | str = "Meters",
        camera_near_plane: float = 0.1,
        camera_far_plane: float = 20.0,
    ):
        self._setup(
            None, 0, metadata, images, third_party_images, depth_format, camera_near_plane, camera_far_plane
        )

    @classmethod
    def _from_document(
        cls, document: MetadataDocument, agent: int, images, third_party_images, **options
    ) -> Event:
        """Agent ``agent``'s event over a whole document, its metadata decoded on first access."""
        event = cls.__new__(cls)
        event._setup(document, agent, None, images, third_party_images, options["depth_format"],
                     options["camera_near_plane"], options["camera_far_plane"], options.get("step"))  # fmt: skip
        return event

    def _setup(self, document, agent, metadata, images, third_party, depth_format, near, far, step=None) -> None:
        self._document = document
        self._agent = agent
        if metadata is not None:
            self._metadata = metadata if isinstance(metadata, MetadataWrapper) else MetadataWrapper(metadata)
            self._step = self._metadata
        else:
            self._metadata = None
            # The step keys, read without a full decode (or as read by whoever forwarded the document).
            self._step = step if step is not None else document.fields.agents[agent]
        step = self._step
        self.screen_width = step.get("screenWidth")
        self.screen_height = step.get("screenHeight")
        self.depth_format = parse_depth_format(depth_format)
        self.camera_near_plane = near
        self.camera_far_plane = far
        self._images = images or {}
        self._third_party = third_party or {}
        self._decoded: dict[str, object] = {}
        self._derived: dict[str, object] = {}
        if self._images or self._third_party:
            width, height = screen_size(step)
            for field, buf in self._images.items():
                bytes_per_pixel(buf, width, height, field)
            for field, bufs in self._third_party.items():
                for index, buf in enumerate(bufs):
                    bytes_per_pixel(buf, width, height, f"{field}[{index}]")

    @property
    def metadata(self) -> MetadataWrapper:
        """The agent's metadata dict (with 5.3's aliases); decodes the received document on first access."""
        metadata = self._metadata
        if metadata is None:
            metadata = self._metadata = MetadataWrapper(self._document.decode()["agents"][self._agent])
            self._step = metadata
        return metadata

    @metadata.setter
    def metadata(self, value: dict) -> None:
        self._metadata = value if isinstance(value, MetadataWrapper) else MetadataWrapper(value)
        self._step = self._metadata

    @property
    def metadata_document(self) -> MetadataDocument | None:
        """The whole ``MultiAgentMetadata`` document this event came from, as received (its ``raw`` bytes where it
        has them, e.g. to forward without re-encoding); None for an event built from a dict."""
        return self._document

    def metadata_msgpack(self) -> bytes | memoryview | None:
        """This agent's metadata as msgpack, taken from the document as received without a decode/re-encode round
        trip (:func:`~unirender.protocol.metadata.agent_msgpack`), to forward it; None once ``metadata`` was
        accessed (the dict may have been changed since) or where the event has no raw document."""
        if self._metadata is not None or self._document is None:
            return None
        return agent_msgpack(self._document, self._agent)

    def metadata_json_document(self) -> bytes | memoryview | None:
        """A JSON document whose ``agents[0]`` is this agent's metadata in the JSON text a WSGI player sent
        (:func:`~unirender.protocol.metadata.agent_json_document`: for a one-agent scene, the player's document as
        received), to forward it unconverted; None once ``metadata`` was accessed or where the document is not
        such JSON."""
        if self._metadata is not None or self._document is None:
            return None
        return agent_json_document(self._document, self._agent)

    def step_keys(self) -> dict:
        """This agent's step keys that its metadata has (``lastActionSuccess``, ``errorMessage``, ``errorCode``,
        ``screenWidth``, ``screenHeight``, ``depthFormat``), as a dict, read without decoding the metadata."""
        step = self._step
        return {key: step[key] for key in AGENT_STEP_KEYS if key in step}

    def peek_metadata(self, key: str, default=None):
        """``event.metadata.get(key, default)``, without decoding the metadata when ``key`` is a step key
        (``lastActionSuccess``, ``errorMessage``, ``errorCode``, ``screenWidth``, ``screenHeight``,
        ``depthFormat``); any other key decodes it."""
        if key in STEP_KEYS:
            return self._step.get(key, default)
        return self.metadata.get(key, default)

    # -- decoding -------------------------------------------------------------------------------------------

    def _decode(self, attr: str, buf, field: str) -> np.ndarray:
        width, height = self.screen_width, self.screen_height
        if attr in _COLOR_ATTRS:
            return decode_color(buf, width, height, field)
        if attr in _DEPTH_ATTRS:
            return decode_depth(
                buf,
                width,
                height,
                source=source_depth_format(self._step),
                target=self.depth_format,
                near=self.camera_near_plane,
                far=self.camera_far_plane,
                field=field,
            )
        return image_view(buf, width, height, field)  # normals, flow: every channel sent, as 5.0.0

    def _agent_frame(self, attr: str):
        try:
            return self._decoded[attr]
        except KeyError:
            field = AGENT_FRAME_FIELDS[attr]
            buf = self._images.get(field)
            value = None if buf is None else self._decode(attr, buf, field)
            self._decoded[attr] = value
            return value

    def _third_party_frames(self, attr: str) -> list:
        try:
            return self._decoded[attr]
        except KeyError:
            field = THIRD_PARTY_FRAME_FIELDS[attr]
            value = [
                self._decode(attr, buf, f"{field}[{i}]")
                for i, buf in enumerate(self._third_party.get(field, ()))
            ]
            self._decoded[attr] = value
            return value

    frame = _agent_frame_property(
        "frame", "RGB ``(H, W, 3)`` uint8, top-down; alpha of RGBA32 players dropped. View."
    )
    depth_frame = _agent_frame_property(
        "depth_frame", "Depth ``(H, W)`` float32 in the controller's depth format (default metres)."
    )
    normals_frame = _agent_frame_property(
        "normals_frame", "Normals image ``(H, W, C)`` uint8, channels as sent. View."
    )
    flow_frame = _agent_frame_property(
        "flow_frame", "Optical flow image ``(H, W, C)`` uint8, channels as sent. View."
    )
    instance_segmentation_frame = _agent_frame_property(
        "instance_segmentation_frame", "Instance colors ``(H, W, 3)`` uint8. View."
    )
    semantic_segmentation_frame = _agent_frame_property(
        "semantic_segmentation_frame", "Class colors ``(H, W, 3)`` uint8. View."
    )
    third_party_camera_frames = _third_party_property(
        "third_party_camera_frames",
        "RGB ``(H, W, 3)`` per third-party camera (5.0.0 kept 4 channels on RGBA).",
    )
    third_party_depth_frames = _third_party_property(
        "third_party_depth_frames", "Depth per third-party camera."
    )
    third_party_normals_frames = _third_party_property("third_party_normals_frames", "Normals per camera.")
    third_party_flow_frames = _third_party_property(
        "third_party_flow_frames", "Flow per camera (5.0.0 never decoded these: field name mismatch)."
    )
    third_party_instance_segmentation_frames = _third_party_property(
        "third_party_instance_segmentation_frames", "Instance colors per camera."
    )
    third_party_semantic_segmentation_frames = _third_party_property(
        "third_party_semantic_segmentation_frames", "Class colors per camera."
    )

    @property
    def events(self) -> list[Event]:
        """``[self]``: the same API as :class:`MultiAgentEvent`. A property, not an attribute: ``[self]`` stored on
        the event would be a reference cycle that keeps every step's image buffers alive until the cyclic GC."""
        return [self]

    @property
    def flows_frame(self):
        """Alias of :attr:`flow_frame` (where 5.0.0 actually stored flow)."""
        return self.flow_frame

    @property
    def third_party_flows_frames(self) -> list:
        """Alias of :attr:`third_party_flow_frames` (5.0.0's name)."""
        return self.third_party_flow_frames

    @property
    def class_segmentation_frame(self):
        """Deprecated name of :attr:`semantic_segmentation_frame`."""
        return self.semantic_segmentation_frame

    @property
    def cv2img(self):
        """:attr:`frame` as BGR for OpenCV (view)."""
        frame = self.frame
        return None if frame is None else frame[..., ::-1]

    def cv2image(self):
        return self.cv2img

    # -- colors, masks, detections ------------------------------------------------------------------------

    def _cached(self, name: str, compute):
        try:
            return self._derived[name]
        except KeyError:
            value = self._derived[name] = compute()
            return value

    def _colors(self) -> list:
        return self._cached("colors", lambda: checked_colors(self.metadata.get("colors")))

    @property
    def color_to_object_id(self) -> dict[tuple, str]:
        """``(r, g, b)`` -> name, from ``metadata["colors"]``."""
        return self._cached(
            "color_to_object_id", lambda: {tuple(c["color"]): c["name"] for c in self._colors()}
        )

    @property
    def object_id_to_color(self) -> dict[str, tuple]:
        """name -> ``(r, g, b)``, from ``metadata["colors"]``."""
        return self._cached(
            "object_id_to_color", lambda: {c["name"]: tuple(c["color"]) for c in self._colors()}
        )

    def _segmentation(self, name: str, frame):
        return self._cached(
            name, lambda: None if frame is None else SegmentationColors(frame, self._colors())
        )

    def _agent_segmentation(self):
        return self._segmentation("segmentation", self.instance_segmentation_frame)

    @property
    def instance_masks(self):
        """objectId -> bool ``(H, W)`` for visible instances (``{}`` without an instance segmentation image)."""
        seg = self._agent_segmentation()
        return self._cached("instance_masks", lambda: {} if seg is None else InstanceMasks(seg))

    @property
    def class_masks(self):
        """objectType -> bool ``(H, W)``; ``"background"`` for colors not in the metadata."""
        seg = self._agent_segmentation()
        return self._cached("class_masks", lambda: {} if seg is None else ClassMasks(seg))

    @property
    def instance_detections2D(self):
        """objectId -> ``(x0, y0, x1, y1)`` inclusive, top-down (None without instance segmentation)."""
        masks = self.instance_masks
        return self._cached(
            "instance_detections2D",
            lambda: InstanceDetections2D(masks) if isinstance(masks, InstanceMasks) else None,
        )

    @property
    def class_detections2D(self):
        """objectType -> tuple of boxes (one per visible color of that class)."""
        seg = self._agent_segmentation()
        return self._cached("class_detections2D", lambda: {} if seg is None else ClassDetections2D(seg))

    def _third_party_segmentations(self) -> list[SegmentationColors]:
        frames = self.third_party_instance_segmentation_frames
        return self._cached(
            "third_party_segmentation", lambda: [SegmentationColors(f, self._colors()) for f in frames]
        )

    @property
    def third_party_instance_masks(self) -> list:
        return self._cached(
            "third_party_instance_masks",
            lambda: [InstanceMasks(s) for s in self._third_party_segmentations()],
        )

    @property
    def third_party_class_masks(self) -> list:
        return self._cached(
            "third_party_class_masks", lambda: [ClassMasks(s) for s in self._third_party_segmentations()]
        )

    # -- metadata conveniences (AI2-THOR) --------------------------------------------------------------------

    def __bool__(self) -> bool:
        return bool(self._step.get("lastActionSuccess", False))

    def __repr__(self) -> str:
        meta = self.metadata
        action_return = str(meta.get("actionReturn"))
        if len(action_return) > 100:
            action_return = action_return[:100] + "..."
        present = [
            attr
            for attr, field in AGENT_FRAME_FIELDS.items()
            if field in self._images or attr in self._decoded and self._decoded[attr] is not None
        ]
        return (
            f"<unirender Event lastAction={meta.get('lastAction')!r} "
            f"lastActionSuccess={meta.get('lastActionSuccess')!r} "
            f"errorMessage={str(meta.get('errorMessage') or '').replace(chr(10), ' ')!r} "
            f"actionReturn={action_return} size={self.screen_width}x{self.screen_height} "
            f"frames={present}>"
        )

    @property
    def pose(self) -> tuple[int, int, int, int]:
        agent = self.metadata["agent"]
        loc = agent["position"]
        return (
            round(loc["x"] * 1000),
            round(loc["z"] * 1000),
            round(agent["rotation"]["y"] * 1000),
            round(agent["cameraHorizon"] * 1000),
        )

    @property
    def pose_discrete(self) -> tuple[int, int, int, int]:
        step_size = 0.25  # AI2-THOR's fixed value
        agent = self.metadata["agent"]
        loc = agent["position"]
        return (
            int(loc["x"] / step_size),
            int(loc["z"] / step_size),
            int(agent["rotation"]["y"] / 90.0),
            int(round(agent["cameraHorizon"])),
        )

    def get_object(self, object_id: str) -> dict | None:
        for obj in self.metadata.get("objects") or ():
            if obj.get("objectId") == object_id:
                return obj
        return None

    def objects_by_type(self, object_type: str) -> list[dict]:
        return [obj for obj in self.metadata.get("objects") or () if obj.get("objectType") == object_type]

    # -- arrays in, arrays out ---------------------------------------------------------------------------------

    def frames(self) -> dict[str, np.ndarray]:
        """Every modality present, decoded, keyed by attribute name (``frame``, ``depth_frame``, ...).

        Third-party lists are stacked into one ``(N, H, W, ...)`` array (a copy) under their list's name.
        """
        out: dict[str, np.ndarray] = {}
        for attr in AGENT_FRAME_FIELDS:
            value = self._agent_frame(attr)
            if value is not None:
                out[attr] = value
        for attr in THIRD_PARTY_FRAME_FIELDS:
            value = self._third_party_frames(attr)
            if value:
                out[attr] = np.stack(value)
        return out

    @classmethod
    def from_frames(cls, metadata: dict | MetadataDocument, frames: dict[str, np.ndarray], *,
                    step: dict | None = None, **kwargs) -> Event:
        """An event from already decoded arrays (as :meth:`frames` returns; lists also accepted for third-party
        modalities). Arrays are used as given: no flip, no depth conversion. ``metadata``: a dict, or a
        document whose ``agents[0]`` is the event's (e.g. :func:`~unirender.protocol.metadata.one_agent_document`),
        decoded on first access; ``step``: its step keys as :meth:`step_keys` gave them where it was read (used
        if well-formed, so that the document is not even scanned), else they are read from the document."""
        if isinstance(metadata, MetadataDocument):
            options = {"depth_format": "Meters", "camera_near_plane": 0.1, "camera_far_plane": 20.0, **kwargs}
            event = cls._from_document(metadata, 0, None, None, step=agent_step_keys(step), **options)
        else:
            event = cls(metadata, **kwargs)
        event._set_frames(frames)
        return event

    def _set_frames(self, frames: dict) -> None:
        for name, value in frames.items():
            attr = _FRAME_ALIASES.get(name, name)
            if attr in AGENT_FRAME_FIELDS:
                self._decoded[attr] = None if value is None else np.asarray(value)
            elif attr in THIRD_PARTY_FRAME_FIELDS:
                self._decoded[attr] = [np.asarray(v) for v in value] if value is not None else []
            else:
                raise ValueError(
                    f"unknown frame name {name!r}; expected one of "
                    f"{sorted([*AGENT_FRAME_FIELDS, *THIRD_PARTY_FRAME_FIELDS])}"
                )
        if self.screen_width is None or self.screen_height is None:
            for value in self._decoded.values():
                shaped = value[0] if isinstance(value, list) and value else value
                if isinstance(shaped, np.ndarray) and shaped.ndim >= 2:
                    self.screen_height, self.screen_width = shaped.shape[:2]
                    break
        self._derived.clear()

    def __getstate__(self) -> dict:
        options = {
            "depth_format": self.depth_format.name,
            "camera_near_plane": self.camera_near_plane,
            "camera_far_plane": self.camera_far_plane,
        }
        # Never read: the document as received (bytes; one copy for all agents of a MultiAgentEvent).
        if self._metadata is None:
            return {"document": self._document, "agent": self._agent, "frames": self.frames(), **options}
        return {"metadata": dict(self._metadata), "frames": self.frames(), **options}

    def __setstate__(self, state: dict) -> None:
        options = (state["depth_format"], state["camera_near_plane"], state["camera_far_plane"])
        if "document" in state:
            self._setup(state["document"], state["agent"], None, None, None, *options)
        else:
            self._setup(None, 0, state["metadata"], None, None, *options)
        self._set_frames(state["frames"])


class MultiAgentEvent:
    """Events of all agents; ``metadata`` and image attributes are the active agent's, ``events`` all of them.

    (5.0.0 left ``third_party_camera_frames`` empty here; this delegates it to the active agent's event.)
    """

    def __init__(self, active_agent_id: int, events: list[Event]):
        if not isinstance(active_agent_id, int) or not 0 <= active_agent_id < len(events):
            raise MetadataError(f"activeAgentId {active_agent_id!r} is not one of the {len(events)} agents")
        self.active_agent_id = active_agent_id
        self.events = events
        self._active_event = events[active_agent_id]
        self.screen_width = self._active_event.screen_width
        self.screen_height = self._active_event.screen_height

    @property
    def metadata(self) -> MetadataWrapper:
        """The active agent's metadata (decoded on first access)."""
        return self._active_event.metadata

    @metadata.setter
    def metadata(self, value: dict) -> None:
        self._active_event.metadata = value

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._active_event, name)

    def __bool__(self) -> bool:
        return bool(self._active_event)

    def __repr__(self) -> str:
        return f"<unirender MultiAgentEvent active={self.active_agent_id} of {len(self.events)}: {self._active_event!r}>"


def build_event(
    payload: Payload,
    *,
    depth_format: DepthFormat | str = "Meters",
    camera_near_plane: float = 0.1,
    camera_far_plane: float = 20.0,
) -> Event | MultiAgentEvent:
    """One event per agent from a payload (protocol.md 5.2); one agent -> ``Event``, several -> ``MultiAgentEvent``.

    Agent buffer lists are indexed by agent, third-party lists by camera (attached to every agent's event).
    Sizes are checked here; pixels are decoded on access.
    """
    document = payload.document
    agents = document.fields.agents  # checks the document's shape (a non-empty list of agent maps)
    agent_fields = set(AGENT_FRAME_FIELDS.values())
    third_party: dict[str, list[memoryview]] = {}
    per_agent: dict[str, list[memoryview]] = {}
    for field, bufs in payload.files.items():
        field = _FIELD_ALIASES.get(field, field)
        if field in agent_fields:
            if len(bufs) != len(agents):
                raise ImageSizeError(
                    f"image field {field!r}: {len(bufs)} buffer(s) for {len(agents)} agent(s)",
                    field=field,
                    expected=len(agents),
                    got=len(bufs),
                )
            per_agent[field] = bufs
        elif field in _THIRD_PARTY_FIELD_NAMES:
            third_party[field] = bufs
        # other names (future Unity fields) are ignored, as 5.0.0 does
    options = {
        "depth_format": depth_format,
        "camera_near_plane": camera_near_plane,
        "camera_far_plane": camera_far_plane,
    }
    events = [
        Event._from_document(
            document, i, {field: bufs[i] for field, bufs in per_agent.items()}, third_party, **options
        )
        for i in range(len(agents))
    ]
    if len(events) == 1:
        return events[0]
    return MultiAgentEvent(document.fields.top.get("activeAgentId", 0), events)


__all__ = [
    "AGENT_FRAME_FIELDS",
    "THIRD_PARTY_FRAME_FIELDS",
    "Event",
    "MetadataWrapper",
    "MultiAgentEvent",
    "build_event",
]
