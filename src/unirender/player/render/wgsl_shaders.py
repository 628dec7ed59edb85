"""WGSL for the Vulkan (wgpu) back-end. Mirrors gl_shaders.py in its maths; see that file for the targets.

WGSL has no preprocessor, so the fragment outputs are assembled per set of modalities here. The instance id
goes to an r32uint target directly (wgpu clears each attachment to its own value).
"""

from __future__ import annotations

from .scene_state import MAX_LIGHTS

_COMMON = f"""
struct Frame {{
    view_proj: mat4x4<f32>,
    prev_view_proj: mat4x4<f32>,
    view_z: vec4<f32>,
    viewport: vec4<f32>,
    ambient: vec4<f32>,
    background: vec4<f32>,
    light_vec: array<vec4<f32>, {MAX_LIGHTS}>,
    light_color: array<vec4<f32>, {MAX_LIGHTS}>,
}};
@group(0) @binding(0) var<uniform> frame: Frame;
@group(1) @binding(0) var albedo_texture: texture_2d<f32>;
@group(1) @binding(1) var albedo_sampler: sampler;

struct VertexIn {{
    @location(0) position: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) uv: vec2<f32>,
    @location(3) model0: vec4<f32>,
    @location(4) model1: vec4<f32>,
    @location(5) model2: vec4<f32>,
    @location(6) model3: vec4<f32>,
    @location(7) prev0: vec4<f32>,
    @location(8) prev1: vec4<f32>,
    @location(9) prev2: vec4<f32>,
    @location(10) prev3: vec4<f32>,
    @location(11) normal0: vec3<f32>,
    @location(12) normal1: vec3<f32>,
    @location(13) normal2: vec3<f32>,
    @location(14) color: vec4<f32>,
    @location(15) id: u32,
}};

struct VertexOut {{
    @builtin(position) position: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) normal: vec3<f32>,
    @location(2) uv: vec2<f32>,
    @location(3) color: vec4<f32>,
    @location(4) @interpolate(flat) id: u32,
    @location(5) eye_z: f32,
    @location(6) clip: vec4<f32>,
    @location(7) prev_clip: vec4<f32>,
}};

@vertex
fn vs_main(v: VertexIn) -> VertexOut {{
    let model = mat4x4<f32>(v.model0, v.model1, v.model2, v.model3);
    let prev_model = mat4x4<f32>(v.prev0, v.prev1, v.prev2, v.prev3);
    let normal_matrix = mat3x3<f32>(v.normal0, v.normal1, v.normal2);
    let world = model * vec4<f32>(v.position, 1.0);
    var out: VertexOut;
    out.world = world.xyz;
    out.normal = normal_matrix * v.normal;
    out.uv = v.uv;
    out.color = v.color;
    out.id = v.id;
    out.eye_z = dot(frame.view_z, world);
    let clip = frame.view_proj * world;
    out.clip = clip;
    out.prev_clip = frame.prev_view_proj * (prev_model * vec4<f32>(v.position, 1.0));
    out.position = clip;
    return out;
}}
"""

_OUTPUT_TYPES = {"rgb": "vec4<f32>", "depth": "f32", "instance": "u32", "normals": "vec4<f32>",
                 "flow": "vec2<f32>"}

_OUTPUT_CODE = {
    "rgb": """
    var albedo = vin.color.rgb;
//TEXTURE
    var light = frame.ambient.rgb;
//LIGHTS
    out.rgb = vec4<f32>(albedo * light, 1.0);
""",
    "depth": "    out.depth = vin.eye_z;\n",
    "instance": "    out.instance = vin.id;\n",
    "normals": "    out.normals = vec4<f32>(n, 0.0);\n",
    "flow": """
    let now = vin.clip.xy / vin.clip.w;
    let before = vin.prev_clip.xy / vin.prev_clip.w;
    out.flow = (now - before) * 0.5 * frame.viewport.xy;
""",
}


def _lighting(light_kinds: tuple[str, ...]) -> str:
    lines = []  # unrolled, as in gl_shaders.py
    for i, kind in enumerate(light_kinds):
        to_light = (f"normalize(frame.light_vec[{i}].xyz - vin.world)" if kind == "point"
                    else f"frame.light_vec[{i}].xyz")
        lines.append(f"    light = light + frame.light_color[{i}].rgb * max(dot(n, {to_light}), 0.0);")
    return "\n".join(lines)


_TEXTURE_CODE = "    albedo = albedo * textureSampleLevel(albedo_texture, albedo_sampler, vin.uv, 0.0).rgb;"


def wgsl_source(outputs: tuple[str, ...], light_kinds: tuple[str, ...] = (), textured: bool = False) -> str:
    """The WGSL module for the given ordered outputs (output i is written to location i), lights and
    texturing."""
    fields = "\n".join(f"    @location({i}) {name}: {_OUTPUT_TYPES[name]}," for i, name in enumerate(outputs))
    body = "".join(_OUTPUT_CODE[name] for name in outputs).replace("//LIGHTS", _lighting(light_kinds))
    body = body.replace("//TEXTURE", _TEXTURE_CODE if textured else "")
    return (_COMMON + f"\nstruct FragmentOut {{\n{fields}\n}};\n\n@fragment\nfn fs_main(vin: VertexOut) -> FragmentOut {{\n"
            f"    let n = normalize(vin.normal);\n    var out: FragmentOut;\n{body}    return out;\n}}\n")
