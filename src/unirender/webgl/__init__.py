"""The webgl family: Unity WebGL builds in headless Chromium (docs/webgl.md)."""

from unirender.webgl.controller import WebGLController, WebGLEvent, camera_frames

__all__ = ["WebGLController", "WebGLEvent", "camera_frames"]
