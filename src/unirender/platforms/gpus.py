"""Which Vulkan device is ``gpu_device``: CUDA ordinals and UUIDs matched to Vulkan device UUIDs.

``nvidia-smi`` is consulted only when a GPU was asked for (explicitly or through ``CUDA_VISIBLE_DEVICES``) and
is never required: a CUDA UUID matches a Vulkan ``deviceUUID`` directly (NVIDIA reports the same 16 bytes).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from unirender._process import ManagedProcess

log = logging.getLogger(__name__)

NVIDIA_SMI_TIMEOUT = 10.0


def nvidia_gpu_uuids(timeout: float = NVIDIA_SMI_TIMEOUT) -> list[str] | None:
    """UUIDs (``GPU-...``) by physical index from ``nvidia-smi``; None when it is absent or fails."""
    binary = shutil.which("nvidia-smi")
    if not binary:
        return None
    with tempfile.TemporaryDirectory(prefix="unirender-smi-") as tmp:
        out = os.path.join(tmp, "out.txt")
        proc = ManagedProcess(
            [binary, "--query-gpu=index,uuid", "--format=csv,noheader"], log_path=out, name="nvidia-smi"
        )
        try:
            rc = proc.wait(timeout)
        finally:
            proc.terminate(grace=1.0)
        if rc != 0:
            log.warning("nvidia-smi failed (%s)", proc.describe())
            return None
        with open(out, errors="replace") as f:
            return parse_nvidia_smi(f.read())


def parse_nvidia_smi(text: str) -> list[str]:
    """``"0, GPU-abc\\n1, GPU-def"`` -> ``["GPU-abc", "GPU-def"]`` ordered by index."""
    rows = []
    for line in text.splitlines():
        index, _, uuid = line.partition(",")
        if index.strip().isdigit() and uuid.strip().startswith("GPU-"):
            rows.append((int(index), uuid.strip()))
    return [uuid for _, uuid in sorted(rows)]


def normalise_uuid(text: str) -> str:
    return text.strip().lower().removeprefix("gpu-")


def cuda_device_uuid(
    gpu_device: int | str, cuda_visible_devices: str | None, smi_uuids: list[str] | None
) -> tuple[str | None, str | None]:
    """(uuid, None) or (None, reason). ``gpu_device`` int is an index into ``CUDA_VISIBLE_DEVICES`` if set."""
    if isinstance(gpu_device, str) and not gpu_device.strip().isdigit():
        if gpu_device.strip().upper().startswith("MIG-"):
            return None, f"gpu_device {gpu_device!r} is a MIG instance; Vulkan cannot address MIG slices"
        return normalise_uuid(gpu_device), None
    ordinal = int(gpu_device)
    entry: str | int = ordinal
    if cuda_visible_devices:
        visible = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
        if ordinal >= len(visible):
            return (
                None,
                f"gpu_device {ordinal} is out of range for CUDA_VISIBLE_DEVICES={cuda_visible_devices!r}",
            )
        entry = visible[ordinal]
        if not entry.isdigit():
            return cuda_device_uuid(entry, None, smi_uuids)
        entry = int(entry)
    if smi_uuids is None:
        return None, "nvidia-smi is not available to map a CUDA index to a device UUID"
    if entry >= len(smi_uuids):
        return None, f"CUDA device {entry} does not exist (nvidia-smi lists {len(smi_uuids)} GPUs)"
    return normalise_uuid(smi_uuids[entry]), None


def vulkan_index_for_uuid(uuid: str, vulkan_devices: list[dict]) -> int | None:
    for device in vulkan_devices:
        if device.get("uuid") and normalise_uuid(device["uuid"]) == uuid:
            return int(device["index"])
    return None


def map_gpu_device(
    gpu_device: int | str,
    vulkan_devices: list[dict],
    cuda_visible_devices: str | None = None,
    smi_uuids: list[str] | None = None,
) -> tuple[int | None, str | None]:
    """The Vulkan index for ``gpu_device`` (for ``-force-device-index``), or (None, why not)."""
    uuid, why = cuda_device_uuid(gpu_device, cuda_visible_devices, smi_uuids)
    if uuid is not None:
        index = vulkan_index_for_uuid(uuid, vulkan_devices)
        if index is not None:
            return index, None
        return None, f"no Vulkan device has UUID {uuid} (gpu_device={gpu_device!r})"
    # No UUID (no nvidia-smi): an ordinal still means "the n-th GPU" among the hardware Vulkan devices.
    gpus = [d for d in vulkan_devices if not d.get("software")]
    if isinstance(gpu_device, int) and not cuda_visible_devices and gpu_device < len(gpus):
        return int(gpus[gpu_device]["index"]), None
    if not gpus:
        names = ", ".join(d["name"] for d in vulkan_devices) or "none"
        return (
            None,
            f"gpu_device={gpu_device!r} asked for a GPU but Vulkan has no hardware device (only: {names})",
        )
    return None, why
