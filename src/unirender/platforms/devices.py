"""A rendering device as every probe reports it, so that a software fall-back is always visible."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Names Mesa's CPU rasterisers report; lavapipe calls itself "llvmpipe" too.
SOFTWARE_RENDERER_MARKERS = (
    "llvmpipe",
    "softpipe",
    "swrast",
    "lavapipe",
    "software rasterizer",
    "swiftshader",
)


def looks_software(*strings: str | None) -> bool:
    text = " ".join(s for s in strings if s).lower()
    return any(marker in text for marker in SOFTWARE_RENDERER_MARKERS)


@dataclass
class Device:
    """One device: a Vulkan physical device, an EGL device or an X screen."""

    api: str  # "vulkan" | "egl" | "glx"
    index: int | str  # Vulkan/EGL enumeration index, or the X display string ":1.0"
    name: str  # device name or GL_RENDERER
    kind: str  # "discrete" | "integrated" | "virtual" | "cpu" | "other" | "unknown"
    software: bool
    vendor: str = ""
    driver: str = ""
    uuid: str | None = None  # Vulkan deviceUUID as 8-4-4-4-12 hex (matches nvidia-smi's "GPU-<uuid>")
    extra: dict = field(default_factory=dict)

    @property
    def summary(self) -> str:
        what = "software rasteriser" if self.software else f"{self.kind} GPU"
        return f"{self.name} ({what})"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["summary"] = self.summary
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Device:
        data = {k: v for k, v in data.items() if k != "summary"}
        return cls(**data)
