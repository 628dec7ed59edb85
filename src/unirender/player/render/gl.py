"""OpenGL back-ends through moderngl: "egl" (EGL device, no X) and "glx" (standalone context on $DISPLAY).

Same GLSL 330 for both. Per frame: one uniform-block write, one instanced draw per (mesh, texture) group into a
framebuffer holding exactly the requested targets, then ``read_into`` preallocated arrays (no allocation).
"""

from __future__ import annotations

import os

import moderngl
import numpy as np

from .base import RendererBase
from .gl_shaders import glsl_sources
from .scene import MODALITIES, Camera, RenderInfo, is_software_renderer
from .scene_state import FRAME_FLOATS, INSTANCE_DTYPE
from .textures import load_texture_rgba

# Texture format per target: (components, dtype). Instance ids are RGBA8 bytes (see gl_shaders.py).
_TARGET_FORMAT = {"rgb": (4, "f1"), "depth": (1, "f4"), "instance": (4, "f1"), "normals": (4, "f4"),
                  "flow": (2, "f4")}
_VERTEX_ATTRS = [("in_position", "3f", 12), ("in_normal", "3f", 12), ("in_uv", "2f", 8)]
_INSTANCE_ATTRS = [("in_model", "16f", 64), ("in_prev_model", "16f", 64), ("in_normal_matrix", "9f", 36),
                   ("in_color", "4f", 16), ("in_id", "1u", 4)]
assert sum(size for _, _, size in _INSTANCE_ATTRS) == INSTANCE_DTYPE.itemsize


def _create_context(backend: str, device_index: int | None) -> moderngl.Context:
    try:
        if backend == "egl":
            kwargs = {} if device_index is None else {"device_index": int(device_index)}
            return moderngl.create_standalone_context(require=330, backend="egl", **kwargs)
        if not os.environ.get("DISPLAY"):
            raise RuntimeError("the glx back-end needs DISPLAY (an X server with GLX, e.g. Xvfb)")
        return moderngl.create_standalone_context(require=330)
    except Exception as exc:  # glcontext raises bare Exception with the EGL/GLX reason
        from ...errors import PlatformError

        raise PlatformError(f"cannot create an OpenGL context for back-end {backend!r}: {exc}") from exc


class GLRenderer(RendererBase):
    """A moderngl renderer; see ``unirender.player.render`` for the API contract."""

    def __init__(self, backend: str, width: int, height: int, device_index: int | None = None) -> None:
        super().__init__()
        self._ctx = _create_context(backend, device_index)
        info = self._ctx.info
        name = str(info.get("GL_RENDERER", ""))
        software = is_software_renderer(name)
        self.info = RenderInfo(backend=backend, renderer=name, vendor=str(info.get("GL_VENDOR", "")),
                               software=software, device_type="CPU" if software else "GPU",
                               extra={"version": str(info.get("GL_VERSION", ""))})
        self._programs: dict[tuple, moderngl.Program] = {}  # by (outputs, light kinds, textured)
        self._vaos: dict[tuple, moderngl.VertexArray] = {}  # by (program variant, group index)
        self._mesh_buffers: dict[str, tuple[moderngl.Buffer, moderngl.Buffer, int]] = {}
        self._group_buffers: list[moderngl.Buffer] = []
        self._textures: dict[str, moderngl.Texture] = {}
        self._uploaded = (-1, -1)  # (mesh_version, instance_version) on the GPU
        self._targets: dict[str, moderngl.Texture] = {}
        self._fbos: dict[tuple[str, ...], moderngl.Framebuffer] = {}
        self._frame = np.zeros(FRAME_FLOATS, dtype=np.float32)
        self._depth_rb = None
        self._max_size = int(info.get("GL_MAX_TEXTURE_SIZE", self._max_size))
        try:
            with self._ctx:
                self._ubo = self._ctx.buffer(reserve=FRAME_FLOATS * 4)
                self._white = self._ctx.texture((1, 1), 4, b"\xff\xff\xff\xff")
            self.resize(width, height)
        except BaseException:
            self.close()
            raise

    def _resize_targets(self) -> None:
        with self._ctx:
            for fbo in self._fbos.values():
                fbo.release()
            for tex in self._targets.values():
                tex.release()
            if self._depth_rb is not None:
                self._depth_rb.release()
            self._fbos, self._targets = {}, {}
            size = (self.width, self.height)
            self._depth_rb = self._ctx.depth_renderbuffer(size)
            for name in MODALITIES:
                components, dtype = _TARGET_FORMAT[name]
                self._targets[name] = self._ctx.texture(size, components, dtype=dtype)

    # -- frame ---------------------------------------------------------------------------------------------
    def _draw(self, camera: Camera, previous_camera: Camera | None, outputs: tuple[str, ...],
              rgb_channels: int) -> dict[str, np.ndarray]:
        state = self._state
        self._frame[:] = state.frame_uniforms(camera, previous_camera, self.width, self.height, "gl")
        with self._ctx as ctx:
            self._upload_scene()
            fbo = self._fbo(outputs)
            fbo.use()
            self._clear(fbo, outputs, camera.far)
            ctx.enable_only(moderngl.DEPTH_TEST | moderngl.CULL_FACE)
            ctx.front_face = "cw"  # see transforms.py: outward faces are clockwise on screen
            ctx.cull_face = "back"
            self._ubo.write(self._frame)
            self._ubo.bind_to_uniform_block(0)
            for index, group in enumerate(state.groups):
                textured = "rgb" in outputs and group.texture is not None
                if textured:
                    self._texture(group.texture).use(0)
                variant = (outputs, state.light_kinds, textured)
                self._vao(variant, index).render(moderngl.TRIANGLES, instances=len(group.records))
            result = {}
            for attachment, name in enumerate(outputs):
                result[name] = self._read(fbo, attachment, name, rgb_channels)
        return result

    def _clear(self, fbo: moderngl.Framebuffer, outputs: tuple[str, ...], far: float) -> None:
        # glClear uses one colour for all attachments: clear everything to the common value (0), then give the
        # targets with their own background value (rgb: background colour, depth: far) a masked clear each.
        values = {"rgb": (*self._state.background, 1.0), "depth": (float(far), 0.0, 0.0, 0.0)}
        if len(outputs) == 1:
            fbo.clear(*values.get(outputs[0], (0.0, 0.0, 0.0, 0.0)), depth=1.0)
            return
        fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        fbo.depth_mask = False
        for attachment, name in enumerate(outputs):
            if name in values:
                fbo.color_mask = tuple((i == attachment,) * 4 for i in range(len(outputs)))
                fbo.clear(*values[name])
        fbo.color_mask = tuple((True,) * 4 for _ in outputs)
        fbo.depth_mask = True

    def _read(self, fbo, attachment: int, name: str, rgb_channels: int) -> np.ndarray:
        out = self._output(name, rgb_channels)
        # instance ids: the RGBA8 target's 4 bytes per pixel land in the uint32 array as one little-endian id
        components = {"rgb": rgb_channels, "depth": 1, "instance": 4, "normals": 3, "flow": 2}[name]
        dtype = "f1" if name in ("rgb", "instance") else "f4"
        fbo.read_into(out, components=components, attachment=attachment, dtype=dtype, alignment=1)
        return out

    # -- cached GPU objects --------------------------------------------------------------------------------
    def _program(self, variant: tuple) -> moderngl.Program:
        program = self._programs.get(variant)
        if program is None:
            vertex, fragment = glsl_sources(*variant)
            program = self._ctx.program(vertex_shader=vertex, fragment_shader=fragment)
            program["Frame"].binding = 0
            if "albedo_texture" in program:
                program["albedo_texture"].value = 0
            self._programs[variant] = program
        return program

    def _fbo(self, outputs: tuple[str, ...]) -> moderngl.Framebuffer:
        fbo = self._fbos.get(outputs)
        if fbo is None:
            fbo = self._ctx.framebuffer(color_attachments=[self._targets[m] for m in outputs],
                                        depth_attachment=self._depth_rb)
            self._fbos[outputs] = fbo
        return fbo

    def _texture(self, path: str | None) -> moderngl.Texture:
        if path is None:
            return self._white
        tex = self._textures.get(path)
        if tex is None:
            pixels = load_texture_rgba(path)
            tex = self._ctx.texture((pixels.shape[1], pixels.shape[0]), 4, pixels)
            tex.filter = (moderngl.LINEAR, moderngl.LINEAR)
            self._textures[path] = tex
        return tex

    def _upload_scene(self) -> None:
        state = self._state
        mesh_version, instance_version = self._uploaded
        if mesh_version != state.mesh_version:
            for vbo, ibo, _ in self._mesh_buffers.values():
                vbo.release()
                ibo.release()
            self._mesh_buffers = {}
            for key, mesh in state.drawable_meshes().items():
                uvs = mesh.uvs if mesh.uvs is not None else np.zeros((len(mesh.vertices), 2), np.float32)
                interleaved = np.hstack([mesh.vertices, mesh.normals, uvs]).astype(np.float32)
                self._mesh_buffers[key] = (self._ctx.buffer(interleaved), self._ctx.buffer(mesh.indices),
                                           mesh.indices.size)
        if (mesh_version, instance_version) != (state.mesh_version, state.instance_version):
            old_sizes = [b.size for b in self._group_buffers]
            new_sizes = [g.records.nbytes for g in state.groups]
            if mesh_version != state.mesh_version or old_sizes != new_sizes:
                self._release_vaos()
                for buf in self._group_buffers:
                    buf.release()
                self._group_buffers = [self._ctx.buffer(g.records) for g in state.groups]
            else:
                for buf, group in zip(self._group_buffers, state.groups, strict=True):
                    buf.write(group.records)
            self._uploaded = (state.mesh_version, state.instance_version)

    def _release_vaos(self) -> None:
        for vao in self._vaos.values():
            vao.release()
        self._vaos = {}

    def _vao(self, variant: tuple, index: int) -> moderngl.VertexArray:
        vao = self._vaos.get((variant, index))
        if vao is None:
            program = self._program(variant)
            group = self._state.groups[index]
            vbo, ibo, _ = self._mesh_buffers[group.mesh]
            vao = self._ctx.vertex_array(
                program,
                [_layout(vbo, program, _VERTEX_ATTRS, ""), _layout(self._group_buffers[index], program,
                                                                   _INSTANCE_ATTRS, " /i")],
                index_buffer=ibo, index_element_size=4)
            self._vaos[(variant, index)] = vao
        return vao

    @property
    def _closed(self) -> bool:
        return self._ctx is None

    def _release(self) -> None:
        self._ctx.release()  # frees every object made in it
        self._ctx = None


def _layout(buffer, program, attrs, suffix: str) -> tuple:
    """A moderngl buffer binding; attributes the variant's shader optimised away become padding."""
    parts, names = [], []
    for name, fmt, size in attrs:
        if name in program:
            parts.append(fmt)
            names.append(name)
        else:
            parts.append(f"{size}x")
    return (buffer, " ".join(parts) + suffix, *names)
