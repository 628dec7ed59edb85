"""GLSL 330 for the moderngl back-ends (EGL and GLX). Mirrors wgsl_shaders.py line for line in its maths.

One source, specialised per set of modalities with #defines (a frame renders only what was asked for) and per
list of light kinds (unrolled) and texturing.
Outputs: rgb -> RGBA8; depth -> R32F planar eye z in metres; instance -> RGBA8 holding the uint32 id's four
little-endian bytes (unorm8 stores k/255 exactly, and a float target clears like the others); normals ->
RGBA32F world-space unit normal; flow -> RG32F pixels, x right, y up.
"""

from __future__ import annotations

from .scene_state import MAX_LIGHTS

# One uniform block, shared by both stages (std140: the layout the renderer packs).
_FRAME_BLOCK = """
layout(std140) uniform Frame {
    mat4 view_proj;
    mat4 prev_view_proj;
    vec4 view_z;
    vec4 viewport;
    vec4 ambient;
    vec4 background;
    vec4 light_vec[MAX_LIGHTS];
    vec4 light_color[MAX_LIGHTS];
};
"""

_VERTEX = _FRAME_BLOCK + """

in vec3 in_position;
in vec3 in_normal;
in vec2 in_uv;
in mat4 in_model;
in mat4 in_prev_model;
in mat3 in_normal_matrix;
in vec4 in_color;
in uint in_id;

out vec3 v_world;
out vec3 v_normal;
out vec2 v_uv;
out vec4 v_color;
flat out uint v_id;
out float v_eye_z;
out vec4 v_clip;
out vec4 v_prev_clip;

void main() {
    vec4 world = in_model * vec4(in_position, 1.0);
    v_world = world.xyz;
    v_normal = in_normal_matrix * in_normal;
    v_uv = in_uv;
    v_color = in_color;
    v_id = in_id;
    v_eye_z = dot(view_z, world);
    vec4 clip = view_proj * world;
    v_clip = clip;
#ifdef WANT_FLOW
    v_prev_clip = prev_view_proj * (in_prev_model * vec4(in_position, 1.0));
#else
    v_prev_clip = clip;
#endif
    gl_Position = clip;
}
"""

_FRAGMENT = _FRAME_BLOCK + """
uniform sampler2D albedo_texture;

in vec3 v_world;
in vec3 v_normal;
in vec2 v_uv;
in vec4 v_color;
flat in uint v_id;
in float v_eye_z;
in vec4 v_clip;
in vec4 v_prev_clip;

#ifdef WANT_RGB
layout(location = LOC_RGB) out vec4 out_rgb;
#endif
#ifdef WANT_DEPTH
layout(location = LOC_DEPTH) out float out_depth;
#endif
#ifdef WANT_INSTANCE
layout(location = LOC_INSTANCE) out vec4 out_instance;
#endif
#ifdef WANT_NORMALS
layout(location = LOC_NORMALS) out vec4 out_normals;
#endif
#ifdef WANT_FLOW
layout(location = LOC_FLOW) out vec2 out_flow;
#endif

void main() {
    vec3 n = normalize(v_normal);
#ifdef WANT_RGB
    vec3 albedo = v_color.rgb;
#ifdef TEXTURED
    albedo *= textureLod(albedo_texture, v_uv, 0.0).rgb;
#endif
    vec3 light = ambient.rgb;
//LIGHTS
    out_rgb = vec4(albedo * light, 1.0);
#endif
#ifdef WANT_DEPTH
    out_depth = v_eye_z;
#endif
#ifdef WANT_INSTANCE
    out_instance = vec4(uvec4(v_id, v_id >> 8u, v_id >> 16u, v_id >> 24u) & 255u) / 255.0;
#endif
#ifdef WANT_NORMALS
    out_normals = vec4(n, 0.0);
#endif
#ifdef WANT_FLOW
    vec2 now = v_clip.xy / v_clip.w;
    vec2 before = v_prev_clip.xy / v_prev_clip.w;
    out_flow = (now - before) * 0.5 * viewport.xy;
#endif
}
"""


def _lighting(light_kinds: tuple[str, ...]) -> str:
    # One unrolled statement per light: llvmpipe runs a uniform-count loop with a kind branch ~3x slower.
    lines = []
    for i, kind in enumerate(light_kinds):
        to_light = f"normalize(light_vec[{i}].xyz - v_world)" if kind == "point" else f"light_vec[{i}].xyz"
        lines.append(f"    light += light_color[{i}].rgb * max(dot(n, {to_light}), 0.0);")
    return "\n".join(lines)


def glsl_sources(outputs: tuple[str, ...], light_kinds: tuple[str, ...] = (),
                 textured: bool = False) -> tuple[str, str]:
    """(vertex, fragment) GLSL for the given ordered outputs (output i is written to location i), lights and
    texturing (a compile-time switch: a per-fragment test costs ~20% at 1024x1024 on llvmpipe)."""
    defines = [f"#define MAX_LIGHTS {MAX_LIGHTS}"] + (["#define TEXTURED 1"] if textured else [])
    for location, name in enumerate(outputs):
        defines.append(f"#define WANT_{name.upper()} 1")
        defines.append(f"#define LOC_{name.upper()} {location}")
    header = "#version 330\n" + "\n".join(defines) + "\n"
    return header + _VERTEX, header + _FRAGMENT.replace("//LIGHTS", _lighting(light_kinds))
