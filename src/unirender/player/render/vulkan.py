"""Vulkan back-end through wgpu-py (WGSL), offscreen, no X.

The adapter and device are created once per process and shared (lavapipe takes seconds to start). Per frame:
one command encoder with the render pass and one texture->buffer copy per requested target into a single
staging buffer, ``map_sync`` as the sync point (``on_submitted_work_done`` is broken in wgpu 0.32), then one
copy per target into preallocated arrays, flipping WebGPU's top-down rows to the bottom-up contract.
"""

from __future__ import annotations

import threading

import numpy as np
import wgpu

from ...errors import PlatformError
from .base import RendererBase
from .scene import Camera, RenderInfo, is_software_renderer
from .scene_state import FRAME_FLOATS, INSTANCE_DTYPE
from .textures import load_texture_rgba
from .wgsl_shaders import wgsl_source

# (texture format, bytes per pixel, channels, numpy dtype, clear value) per target
_TARGETS = {
    "rgb": ("rgba8unorm", 4, 4, np.uint8, None),  # clear = background
    "depth": ("r32float", 4, 1, np.float32, None),  # clear = far
    "instance": ("r32uint", 4, 1, np.uint32, (0, 0, 0, 0)),
    "normals": ("rgba32float", 16, 4, np.float32, (0, 0, 0, 0)),
    "flow": ("rg32float", 8, 2, np.float32, (0, 0, 0, 0)),
}
_ROW_ALIGN = 256  # copy_texture_to_buffer needs bytes_per_row % 256 == 0
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}

_devices: dict[int | None, tuple[wgpu.GPUAdapter, wgpu.GPUDevice]] = {}
_devices_lock = threading.Lock()


def _restrict_to_vulkan() -> None:
    """Keep wgpu off its GLES/EGL back-end: enumerating it panics (EGL BadAccess) when a GLX context is current
    in this process, and we only want Vulkan adapters anyway. Must run before wgpu creates its instance."""
    try:
        from wgpu.backends.wgpu_native.extras import set_instance_extras

        set_instance_extras(backends=["Vulkan"])
    except Exception:  # an instance already exists (someone used wgpu first) or an older wgpu: keep going
        pass


def _vulkan_adapters() -> list[wgpu.GPUAdapter]:
    adapters = [a for a in wgpu.gpu.enumerate_adapters_sync() if a.info.get("backend_type") == "Vulkan"]
    return sorted(adapters, key=lambda a: _TYPE_RANK.get(a.info.get("adapter_type"), 4))


def shared_device(device_index: int | None = None) -> tuple[wgpu.GPUAdapter, wgpu.GPUDevice]:
    """The process-wide (adapter, device) for a Vulkan adapter; ``device_index`` indexes the Vulkan adapters
    (GPUs first, CPU rasterisers last); None = wgpu's high-performance choice."""
    with _devices_lock:
        if device_index not in _devices:
            _restrict_to_vulkan()
            try:
                if device_index is None:
                    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
                    if adapter is None or adapter.info.get("backend_type") != "Vulkan":
                        candidates = _vulkan_adapters()
                        if not candidates:
                            raise PlatformError("no Vulkan adapter (is a Vulkan ICD, e.g. mesa-vulkan-drivers, "
                                                "installed?)")
                        adapter = candidates[0]
                else:
                    candidates = _vulkan_adapters()
                    if not 0 <= device_index < len(candidates):
                        raise PlatformError(f"Vulkan device index {device_index} out of range: "
                                            f"{len(candidates)} Vulkan adapter(s)")
                    adapter = candidates[device_index]
                _devices[device_index] = (adapter, adapter.request_device_sync())
            except PlatformError:
                raise
            except Exception as exc:  # wgpu raises RuntimeError subclasses with the loader's reason
                raise PlatformError(f"cannot open a Vulkan device through wgpu: {exc}") from exc
        return _devices[device_index]


def _vertex_layouts() -> list[dict]:
    f = wgpu.VertexFormat
    per_vertex = [(f.float32x3, 0), (f.float32x3, 12), (f.float32x2, 24)]
    per_instance = ([(f.float32x4, 16 * c) for c in range(4)] + [(f.float32x4, 64 + 16 * c) for c in range(4)]
                    + [(f.float32x3, 128 + 12 * c) for c in range(3)] + [(f.float32x4, 164), (f.uint32, 180)])
    return [
        {"array_stride": 32, "step_mode": wgpu.VertexStepMode.vertex,
         "attributes": [{"format": fmt, "offset": off, "shader_location": i}
                        for i, (fmt, off) in enumerate(per_vertex)]},
        {"array_stride": INSTANCE_DTYPE.itemsize, "step_mode": wgpu.VertexStepMode.instance,
         "attributes": [{"format": fmt, "offset": off, "shader_location": 3 + i}
                        for i, (fmt, off) in enumerate(per_instance)]},
    ]


class VulkanRenderer(RendererBase):
    """A wgpu renderer; see ``unirender.player.render`` for the API contract."""

    def __init__(self, width: int, height: int, device_index: int | None = None) -> None:
        super().__init__()
        self._adapter, self._device = shared_device(device_index)
        ai = self._adapter.info
        name = str(ai.get("device", ""))
        adapter_type = str(ai.get("adapter_type", "Unknown"))
        self.info = RenderInfo(backend="vulkan", renderer=name, vendor=str(ai.get("vendor", "")),
                               software=adapter_type == "CPU" or is_software_renderer(name),
                               device_type=adapter_type,
                               extra={"description": str(ai.get("description", "")),
                                      "backend_type": str(ai.get("backend_type", ""))})
        device = self._device
        self._ubo = device.create_buffer(size=FRAME_FLOATS * 4,
                                         usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self._frame_layout = device.create_bind_group_layout(entries=[
            {"binding": 0, "visibility": wgpu.ShaderStage.VERTEX | wgpu.ShaderStage.FRAGMENT,
             "buffer": {"type": wgpu.BufferBindingType.uniform}}])
        self._texture_layout = device.create_bind_group_layout(entries=[
            {"binding": 0, "visibility": wgpu.ShaderStage.FRAGMENT, "texture": {"sample_type": "float"}},
            {"binding": 1, "visibility": wgpu.ShaderStage.FRAGMENT, "sampler": {"type": "filtering"}}])
        self._frame_group = device.create_bind_group(layout=self._frame_layout, entries=[
            {"binding": 0, "resource": {"buffer": self._ubo, "offset": 0, "size": FRAME_FLOATS * 4}}])
        self._pipeline_layout = device.create_pipeline_layout(
            bind_group_layouts=[self._frame_layout, self._texture_layout])
        self._sampler = device.create_sampler(mag_filter="linear", min_filter="linear", address_mode_u="repeat",
                                              address_mode_v="repeat")
        self._texture_groups: dict[str | None, wgpu.GPUBindGroup] = {}
        self._pipelines: dict[tuple, wgpu.GPURenderPipeline] = {}  # by (outputs, light kinds, textured)
        self._mesh_buffers: dict[str, tuple[wgpu.GPUBuffer, wgpu.GPUBuffer, int]] = {}
        self._group_buffers: list[wgpu.GPUBuffer] = []
        self._uploaded = (-1, -1)
        self._staging: dict[tuple[str, ...], tuple[wgpu.GPUBuffer, dict[str, int]]] = {}
        self._targets: dict[str, wgpu.GPUTexture] = {}
        self._depth_buffer = None
        self._max_size = int(self._device.limits.get("max-texture-dimension-2d", self._max_size))
        try:
            self.resize(width, height)
        except BaseException:
            self.close()
            raise

    def _resize_targets(self) -> None:
        self._release_targets()
        usage = wgpu.TextureUsage.RENDER_ATTACHMENT | wgpu.TextureUsage.COPY_SRC
        size = (self.width, self.height, 1)
        for name, (fmt, *_rest) in _TARGETS.items():
            self._targets[name] = self._device.create_texture(size=size, format=fmt, usage=usage)
        self._depth_buffer = self._device.create_texture(size=size, format="depth32float",
                                                         usage=wgpu.TextureUsage.RENDER_ATTACHMENT)
        self._views = {name: tex.create_view() for name, tex in self._targets.items()}
        self._depth_view = self._depth_buffer.create_view()

    def _release_targets(self) -> None:
        for tex in self._targets.values():
            tex.destroy()
        if self._depth_buffer is not None:
            self._depth_buffer.destroy()
        for buf, _ in self._staging.values():
            buf.destroy()
        self._targets, self._staging, self._depth_buffer = {}, {}, None

    # -- frame ---------------------------------------------------------------------------------------------
    def _draw(self, camera: Camera, previous_camera: Camera | None, outputs: tuple[str, ...],
              rgb_channels: int) -> dict[str, np.ndarray]:
        state = self._state
        frame = state.frame_uniforms(camera, previous_camera, self.width, self.height, "zero_to_one")
        self._upload_scene()
        device = self._device
        device.queue.write_buffer(self._ubo, 0, frame)
        staging, offsets = self._staging_buffer(outputs)
        bind_groups = [self._texture_group(g.texture if "rgb" in outputs else None) for g in state.groups]

        encoder = device.create_command_encoder()
        attachments = []
        for name in outputs:
            clear = _TARGETS[name][4]
            if name == "rgb":
                clear = (*state.background, 1.0)
            elif name == "depth":
                clear = (float(camera.far), 0.0, 0.0, 0.0)
            attachments.append({"view": self._views[name], "load_op": wgpu.LoadOp.clear,
                                "store_op": wgpu.StoreOp.store, "clear_value": clear})
        rpass = encoder.begin_render_pass(
            color_attachments=attachments,
            depth_stencil_attachment={"view": self._depth_view, "depth_load_op": wgpu.LoadOp.clear,
                                      "depth_store_op": wgpu.StoreOp.discard, "depth_clear_value": 1.0})
        rpass.set_bind_group(0, self._frame_group)
        for index, group in enumerate(state.groups):
            vbo, ibo, count = self._mesh_buffers[group.mesh]
            textured = "rgb" in outputs and group.texture is not None
            rpass.set_pipeline(self._pipeline(outputs, state.light_kinds, textured))
            rpass.set_bind_group(1, bind_groups[index])
            rpass.set_vertex_buffer(0, vbo)
            rpass.set_vertex_buffer(1, self._group_buffers[index])
            rpass.set_index_buffer(ibo, wgpu.IndexFormat.uint32)
            rpass.draw_indexed(count, len(group.records))
        rpass.end()
        w, h = self.width, self.height
        for name in outputs:
            encoder.copy_texture_to_buffer(
                {"texture": self._targets[name], "mip_level": 0, "origin": (0, 0, 0)},
                {"buffer": staging, "offset": offsets[name], "bytes_per_row": _row_bytes(w, name),
                 "rows_per_image": h},
                (w, h, 1))
        device.queue.submit([encoder.finish()])

        staging.map_sync(wgpu.MapMode.READ)
        try:
            mapped = np.frombuffer(staging.read_mapped(copy=False), dtype=np.uint8)
            result = {name: self._copy_out(mapped, offsets[name], name, rgb_channels) for name in outputs}
        finally:
            staging.unmap()
        return result

    def _copy_out(self, mapped: np.ndarray, offset: int, name: str, rgb_channels: int) -> np.ndarray:
        _fmt, bpp, channels, dtype, _clear = _TARGETS[name]
        w, h = self.width, self.height
        row = _row_bytes(w, name)
        rows = mapped[offset: offset + row * h].view(dtype).reshape(h, row // bpp, channels)[::-1, :w]
        out = self._output(name, rgb_channels)
        keep = 1 if out.ndim == 2 else out.shape[2]
        np.copyto(out.reshape(h, w, keep), rows[:, :, :keep])  # un-pads, flips to bottom-up, drops channels
        return out

    # -- cached GPU objects --------------------------------------------------------------------------------
    def _pipeline(self, outputs: tuple[str, ...], light_kinds: tuple[str, ...],
                  textured: bool) -> wgpu.GPURenderPipeline:
        key = (outputs, light_kinds, textured)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            module = self._device.create_shader_module(code=wgsl_source(*key))
            pipeline = self._device.create_render_pipeline(
                layout=self._pipeline_layout,
                vertex={"module": module, "entry_point": "vs_main", "buffers": _vertex_layouts()},
                # outward faces are clockwise on screen (transforms.py); same culling as GL
                primitive={"topology": wgpu.PrimitiveTopology.triangle_list, "front_face": wgpu.FrontFace.cw,
                           "cull_mode": wgpu.CullMode.back},
                depth_stencil={"format": "depth32float", "depth_write_enabled": True,
                               "depth_compare": wgpu.CompareFunction.less},
                multisample={"count": 1},
                fragment={"module": module, "entry_point": "fs_main",
                          "targets": [{"format": _TARGETS[name][0]} for name in outputs]},
            )
            self._pipelines[key] = pipeline
        return pipeline

    def _staging_buffer(self, outputs: tuple[str, ...]) -> tuple[wgpu.GPUBuffer, dict[str, int]]:
        entry = self._staging.get(outputs)
        if entry is None:
            offsets, size = {}, 0
            for name in outputs:
                offsets[name] = size
                size += _row_bytes(self.width, name) * self.height  # a multiple of 256, so aligned
            buf = self._device.create_buffer(size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            entry = self._staging[outputs] = (buf, offsets)
        return entry

    def _texture_group(self, path: str | None) -> wgpu.GPUBindGroup:
        group = self._texture_groups.get(path)
        if group is None:
            pixels = (np.full((1, 1, 4), 255, np.uint8) if path is None else load_texture_rgba(path))
            h, w = pixels.shape[:2]
            tex = self._device.create_texture(size=(w, h, 1), format="rgba8unorm",
                                              usage=wgpu.TextureUsage.TEXTURE_BINDING | wgpu.TextureUsage.COPY_DST)
            self._device.queue.write_texture({"texture": tex, "mip_level": 0, "origin": (0, 0, 0)}, pixels,
                                             {"offset": 0, "bytes_per_row": w * 4, "rows_per_image": h},
                                             (w, h, 1))
            group = self._device.create_bind_group(layout=self._texture_layout, entries=[
                {"binding": 0, "resource": tex.create_view()}, {"binding": 1, "resource": self._sampler}])
            self._texture_groups[path] = group
        return group

    def _upload_scene(self) -> None:
        state, device = self._state, self._device
        mesh_version, instance_version = self._uploaded
        usage = wgpu.BufferUsage
        if mesh_version != state.mesh_version:
            for vbo, ibo, _ in self._mesh_buffers.values():
                vbo.destroy()
                ibo.destroy()
            self._mesh_buffers = {}
            for key, mesh in state.drawable_meshes().items():
                uvs = mesh.uvs if mesh.uvs is not None else np.zeros((len(mesh.vertices), 2), np.float32)
                interleaved = np.hstack([mesh.vertices, mesh.normals, uvs]).astype(np.float32)
                self._mesh_buffers[key] = (
                    device.create_buffer_with_data(data=interleaved, usage=usage.VERTEX),
                    device.create_buffer_with_data(data=mesh.indices, usage=usage.INDEX), mesh.indices.size)
        if (mesh_version, instance_version) != (state.mesh_version, state.instance_version):
            old_sizes = [b.size for b in self._group_buffers]
            new_sizes = [g.records.nbytes for g in state.groups]
            if old_sizes != new_sizes:
                for buf in self._group_buffers:
                    buf.destroy()
                self._group_buffers = [device.create_buffer_with_data(data=g.records,
                                                                      usage=usage.VERTEX | usage.COPY_DST)
                                       for g in state.groups]
            else:
                for buf, group in zip(self._group_buffers, state.groups, strict=True):
                    device.queue.write_buffer(buf, 0, group.records)
            self._uploaded = (state.mesh_version, state.instance_version)

    @property
    def _closed(self) -> bool:
        return self._device is None

    def _release(self) -> None:
        """Frees this renderer's targets and buffers; the shared device stays for the next renderer."""
        self._release_targets()
        for vbo, ibo, _ in self._mesh_buffers.values():
            vbo.destroy()
            ibo.destroy()
        for buf in self._group_buffers:
            buf.destroy()
        self._ubo.destroy()
        self._mesh_buffers, self._group_buffers, self._pipelines, self._texture_groups = {}, [], {}, {}
        self._device = None


def _row_bytes(width: int, name: str) -> int:
    raw = width * _TARGETS[name][1]
    return (raw + _ROW_ALIGN - 1) // _ROW_ALIGN * _ROW_ALIGN
