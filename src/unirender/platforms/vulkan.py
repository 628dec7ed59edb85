"""Vulkan probe through the loader itself (ctypes): instance, physical devices, their properties.

Runs inside the probe worker process (see ``probes.py``): a broken ICD can crash the process that loads it.
Only the leading, stable parts of the Vulkan structs are declared; the rest is opaque padding.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from unirender.platforms.devices import Device, looks_software

VK_SUCCESS = 0
VK_INCOMPLETE = 5
VK_RESULT_NAMES = {
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY",
    -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED",
    -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
}
# Loader variables that replace the list of drivers (ICDs); named in errors because they hide real drivers.
DRIVER_ENV_VARS = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "VK_LOADER_DRIVERS_SELECT")
DEVICE_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}

_STYPE_APPLICATION_INFO = 0
_STYPE_INSTANCE_CREATE_INFO = 1
_STYPE_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
_STYPE_PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004
_STYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES = 1000196000
_API_VERSION_1_1 = (1 << 22) | (1 << 12)


class _ApplicationInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int),
        ("pNext", ctypes.c_void_p),
        ("pApplicationName", ctypes.c_char_p),
        ("applicationVersion", ctypes.c_uint32),
        ("pEngineName", ctypes.c_char_p),
        ("engineVersion", ctypes.c_uint32),
        ("apiVersion", ctypes.c_uint32),
    ]


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pApplicationInfo", ctypes.POINTER(_ApplicationInfo)),
        ("enabledLayerCount", ctypes.c_uint32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", ctypes.c_uint32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


class _PhysicalDeviceProperties(ctypes.Structure):
    # apiVersion .. pipelineCacheUUID, then VkPhysicalDeviceLimits + sparse properties (about 540 bytes;
    # 2 KiB of padding leaves room for any driver that writes them).
    _fields_ = [
        ("apiVersion", ctypes.c_uint32),
        ("driverVersion", ctypes.c_uint32),
        ("vendorID", ctypes.c_uint32),
        ("deviceID", ctypes.c_uint32),
        ("deviceType", ctypes.c_int),
        ("deviceName", ctypes.c_char * 256),
        ("pipelineCacheUUID", ctypes.c_uint8 * 16),
        ("_limits_and_sparse", ctypes.c_uint8 * 2048),
    ]


class _PhysicalDeviceProperties2(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int),
        ("pNext", ctypes.c_void_p),
        ("properties", _PhysicalDeviceProperties),
    ]


class _PhysicalDeviceIDProperties(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int),
        ("pNext", ctypes.c_void_p),
        ("deviceUUID", ctypes.c_uint8 * 16),
        ("driverUUID", ctypes.c_uint8 * 16),
        ("deviceLUID", ctypes.c_uint8 * 8),
        ("deviceNodeMask", ctypes.c_uint32),
        ("deviceLUIDValid", ctypes.c_uint32),
    ]


class _PhysicalDeviceDriverProperties(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int),
        ("pNext", ctypes.c_void_p),
        ("driverID", ctypes.c_int),
        ("driverName", ctypes.c_char * 256),
        ("driverInfo", ctypes.c_char * 256),
        ("conformanceVersion", ctypes.c_uint8 * 4),
    ]


def format_uuid(raw: bytes) -> str:
    """16 bytes -> ``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (the form ``nvidia-smi -L`` prints after ``GPU-``)."""
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _version(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def find_loader() -> str | None:
    return ctypes.util.find_library("vulkan")


def probe_vulkan() -> dict:
    """``{"loader": path|None, "devices": [Device dict], "error": str|None}``. Never raises."""
    loader = find_loader()
    result: dict = {"loader": loader, "devices": [], "error": None}
    if not loader:
        result["error"] = "Vulkan loader (libvulkan.so.1) not found"
        return result
    try:
        lib = ctypes.CDLL(loader)
    except OSError as exc:
        result["error"] = f"cannot load the Vulkan loader {loader}: {exc}"
        return result

    app = _ApplicationInfo(
        _STYPE_APPLICATION_INFO, None, b"unirender-probe", 1, b"unirender", 1, _API_VERSION_1_1
    )
    info = _InstanceCreateInfo(_STYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    lib.vkCreateInstance.restype = ctypes.c_int
    rc = lib.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if rc != VK_SUCCESS:
        name = VK_RESULT_NAMES.get(rc, f"VkResult {rc}")
        hint = " (no Vulkan driver/ICD installed or usable)" if rc == -9 else ""
        overrides = [f"{k}={os.environ[k]}" for k in DRIVER_ENV_VARS if os.environ.get(k)]
        if overrides:
            hint += f" [driver list overridden: {', '.join(overrides)}]"
        result["error"] = f"vkCreateInstance failed: {name}{hint}"
        return result
    try:
        count = ctypes.c_uint32(0)
        lib.vkEnumeratePhysicalDevices.restype = ctypes.c_int
        rc = lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        if rc not in (VK_SUCCESS, VK_INCOMPLETE):
            result["error"] = f"vkEnumeratePhysicalDevices failed: {VK_RESULT_NAMES.get(rc, rc)}"
            return result
        handles = (ctypes.c_void_p * max(count.value, 1))()
        rc = lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        if rc not in (VK_SUCCESS, VK_INCOMPLETE):
            result["error"] = f"vkEnumeratePhysicalDevices failed: {VK_RESULT_NAMES.get(rc, rc)}"
            return result
        get_props2 = getattr(lib, "vkGetPhysicalDeviceProperties2", None)
        for index in range(count.value):
            result["devices"].append(_describe(lib, get_props2, handles[index], index).to_dict())
        if not result["devices"]:
            result["error"] = "the Vulkan loader works but enumerates no physical device"
    finally:
        lib.vkDestroyInstance(instance, None)
    return result


def _describe(lib, get_props2, handle, index: int) -> Device:
    uuid = None
    driver = ""
    if get_props2 is not None:
        driver_props = _PhysicalDeviceDriverProperties(_STYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, None)
        id_props = _PhysicalDeviceIDProperties(
            _STYPE_PHYSICAL_DEVICE_ID_PROPERTIES, ctypes.cast(ctypes.pointer(driver_props), ctypes.c_void_p)
        )
        props2 = _PhysicalDeviceProperties2(
            _STYPE_PHYSICAL_DEVICE_PROPERTIES_2, ctypes.cast(ctypes.pointer(id_props), ctypes.c_void_p)
        )
        get_props2(ctypes.c_void_p(handle), ctypes.byref(props2))
        props = props2.properties
        uuid = format_uuid(bytes(id_props.deviceUUID))
        driver = driver_props.driverName.decode("utf-8", "replace")
        if driver_props.driverInfo:
            driver += f" ({driver_props.driverInfo.decode('utf-8', 'replace')})"
    else:  # Vulkan 1.0 loader: no UUIDs
        props = _PhysicalDeviceProperties()
        lib.vkGetPhysicalDeviceProperties(ctypes.c_void_p(handle), ctypes.byref(props))
    name = props.deviceName.decode("utf-8", "replace")
    kind = DEVICE_TYPES.get(props.deviceType, "unknown")
    return Device(
        api="vulkan",
        index=index,
        name=name,
        kind=kind,
        software=kind == "cpu" or looks_software(name, driver),
        vendor=f"0x{props.vendorID:04x}",
        driver=driver,
        uuid=uuid,
        extra={"apiVersion": _version(props.apiVersion), "deviceID": f"0x{props.deviceID:04x}"},
    )


if __name__ == "__main__":  # manual check: python -m unirender.platforms.vulkan
    import json

    print(json.dumps(probe_vulkan(), indent=2))
