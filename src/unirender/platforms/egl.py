"""EGL device probe (ctypes + moderngl): the X-free GL path of the reference player.

Runs inside the probe worker process (see ``probes.py``). Devices come from ``eglQueryDevicesEXT``, as glcontext
enumerates them, so an index here is a valid ``GLCONTEXT_DEVICE_INDEX``.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from unirender.platforms.devices import Device, looks_software

EGL_EXTENSIONS = 0x3055
EGL_VENDOR = 0x3053
EGL_VERSION = 0x3054
EGL_DRM_DEVICE_FILE_EXT = 0x3233
EGL_PLATFORM_DEVICE_EXT = 0x313F
MAX_DEVICES = 32


def probe_egl(renderer_strings: bool = True) -> dict:
    """``{"library": path|None, "devices": [Device dict], "error": str|None}``. Never raises."""
    path = ctypes.util.find_library("EGL")
    result: dict = {"library": path, "devices": [], "error": None}
    if not path:
        result["error"] = "libEGL not found"
        return result
    try:
        egl = ctypes.CDLL(path)
    except OSError as exc:
        result["error"] = f"cannot load {path}: {exc}"
        return result
    egl.eglGetProcAddress.restype = ctypes.c_void_p
    egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    egl.eglQueryString.restype = ctypes.c_char_p
    egl.eglQueryString.argtypes = [ctypes.c_void_p, ctypes.c_int]

    client_ext = (egl.eglQueryString(None, EGL_EXTENSIONS) or b"").decode()
    if "EGL_EXT_device_enumeration" not in client_ext or "EGL_EXT_platform_device" not in client_ext:
        result["error"] = (
            "EGL offers no device enumeration (EGL_EXT_device_enumeration, EGL_EXT_platform_device): "
            "no EGL driver (vendor library) installed or usable"
        )
        return result

    def proc(name, restype, *argtypes):
        address = egl.eglGetProcAddress(name.encode())
        return ctypes.CFUNCTYPE(restype, *argtypes)(address) if address else None

    query_devices = proc(
        "eglQueryDevicesEXT",
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_int),
    )
    query_device_string = proc("eglQueryDeviceStringEXT", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)
    get_platform_display = proc(
        "eglGetPlatformDisplayEXT", ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p
    )
    egl.eglInitialize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    egl.eglTerminate.argtypes = [ctypes.c_void_p]

    handles = (ctypes.c_void_p * MAX_DEVICES)()
    count = ctypes.c_int(0)
    if not query_devices or not query_devices(MAX_DEVICES, handles, ctypes.byref(count)):
        result["error"] = "eglQueryDevicesEXT failed"
        return result
    for index in range(count.value):
        handle = handles[index]
        extensions = (
            (query_device_string(handle, EGL_EXTENSIONS) or b"").decode() if query_device_string else ""
        )
        drm = (
            query_device_string(handle, EGL_DRM_DEVICE_FILE_EXT) if "drm_device_file" in extensions else None
        )
        vendor = version = ""
        display = (
            get_platform_display(EGL_PLATFORM_DEVICE_EXT, handle, None) if get_platform_display else None
        )
        initialized = bool(display) and bool(egl.eglInitialize(display, None, None))
        if initialized:
            vendor = (egl.eglQueryString(display, EGL_VENDOR) or b"").decode("utf-8", "replace")
            version = (egl.eglQueryString(display, EGL_VERSION) or b"").decode("utf-8", "replace")
            egl.eglTerminate(display)
        device = Device(
            api="egl",
            index=index,
            name=f"EGL device {index}",
            kind="unknown",
            software="EGL_MESA_device_software" in extensions,
            vendor=vendor,
            extra={
                "egl_version": version,
                "drm_device": drm.decode() if drm else None,
                "usable": initialized,
            },
        )
        if renderer_strings and initialized:
            _add_renderer(device)
        if device.software:
            device.kind = "cpu"
        result["devices"].append(device.to_dict())
    if not result["devices"]:
        result["error"] = "EGL enumerates no device"
    return result


def _add_renderer(device: Device) -> None:
    """GL_RENDERER/GL_VENDOR through the same glcontext path the reference player uses."""
    try:
        import moderngl

        ctx = moderngl.create_context(standalone=True, backend="egl", device_index=int(device.index))
        try:
            device.name = ctx.info["GL_RENDERER"]
            device.driver = ctx.info["GL_VERSION"]
            device.extra["gl_vendor"] = ctx.info["GL_VENDOR"]
        finally:
            ctx.release()
    except Exception as exc:  # a device without GL (e.g. GLES-only) is still listed
        device.extra["usable"] = False
        device.extra["gl_error"] = f"{type(exc).__name__}: {exc}"
        return
    device.software = device.software or looks_software(device.name)
    if not device.software:
        device.kind = "gpu"


def probe_glx(display: str) -> dict:
    """GL_RENDERER of an X screen through GLX (``display`` like ``":1.0"``): tells a GPU from llvmpipe."""
    import os

    os.environ["DISPLAY"] = display
    try:
        import moderngl

        ctx = moderngl.create_context(standalone=True)
        try:
            info = dict(ctx.info)
        finally:
            ctx.release()
    except Exception as exc:
        return {"display": display, "renderer": None, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "display": display,
        "renderer": info["GL_RENDERER"],
        "vendor": info["GL_VENDOR"],
        "version": info["GL_VERSION"],
        "software": looks_software(info["GL_RENDERER"]),
        "error": None,
    }


if __name__ == "__main__":  # manual check: python -m unirender.platforms.egl
    import json

    print(json.dumps(probe_egl(), indent=2))
