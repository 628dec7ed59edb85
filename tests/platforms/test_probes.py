"""Real Vulkan (Mesa lavapipe) and EGL (Mesa llvmpipe) probes, and their absence simulated by hiding drivers."""

from __future__ import annotations

import pytest

from unirender.platforms import EGL, CloudRendering, PlatformRequest, probes
from unirender.platforms.gpus import map_gpu_device, parse_nvidia_smi

LINUX = PlatformRequest(system="Linux")


def test_vulkan_lavapipe_is_reported_as_software():
    result = probes.vulkan()
    assert result["error"] is None and result["loader"]
    device = result["devices"][0]
    assert device["kind"] == "cpu" and device["software"] is True
    assert "llvmpipe" in device["name"]  # lavapipe calls itself llvmpipe
    assert len(device["uuid"]) == 36


def test_probe_results_are_cached_until_refresh():
    first = probes.vulkan()
    assert probes.vulkan() is first
    probes.refresh()
    again = probes.vulkan()
    assert again is not first and again["devices"] == first["devices"]


def test_cloudrendering_usable_on_lavapipe():
    a = CloudRendering().assess(LINUX)
    assert a.usable and a.reasons == []
    assert a.device.software and a.device.api == "vulkan"
    assert a.env == {} and a.args == []  # no GPU asked for: no -force-device-index, no nvidia-smi needed


def test_vulkan_hidden_makes_cloudrendering_unusable(empty_icd):
    result = probes.vulkan()
    assert result["devices"] == [] and result["loader"]
    errors = CloudRendering().validate(LINUX)
    assert len(errors) == 1
    assert "vkCreateInstance failed" in errors[0] and str(empty_icd) in errors[0]
    assert "libvulkan1 mesa-vulkan-drivers" in CloudRendering().dependency_instructions(LINUX)


def test_gpu_device_on_a_cpu_only_host_fails_loudly():
    errors = CloudRendering().validate(PlatformRequest(system="Linux", gpu_device=0))
    assert errors and "no hardware device" in errors[0] and "llvmpipe" in errors[0]


def test_egl_device_with_renderer_string():
    result = probes.egl()
    assert result["error"] is None
    device = result["devices"][0]
    assert device["vendor"] == "Mesa Project" and "llvmpipe" in device["name"]
    assert device["software"] is True and device["extra"]["usable"] is True


def test_egl_is_for_the_builtin_player_only():
    a = EGL().assess(LINUX)
    assert not a.usable and not a.applicable and "builtin reference player" in a.reasons[0]
    b = EGL().assess(PlatformRequest(system="Linux", builtin=True))
    assert b.usable and b.env == {"GLCONTEXT_DEVICE_INDEX": "0"} and b.device.software


def test_egl_hidden(hidden_egl):
    errors = EGL().validate(PlatformRequest(system="Linux", builtin=True))
    assert errors and "no EGL driver" in errors[0]


# -- gpu_device -> -force-device-index (pure mapping, with device lists as the probes report them) ----------
GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
VULKAN = [
    {"index": 0, "name": "llvmpipe", "software": True, "uuid": "6d657361-3232-2e33-2e36-000000000000"},
    {"index": 1, "name": "NVIDIA B", "software": False, "uuid": GPU_B[4:]},
    {"index": 2, "name": "NVIDIA A", "software": False, "uuid": GPU_A[4:]},
]


def test_parse_nvidia_smi():
    assert parse_nvidia_smi(f"1, {GPU_B}\n0, {GPU_A}\nbogus\n") == [GPU_A, GPU_B]


@pytest.mark.parametrize(
    "gpu_device, cuda_visible, smi, expected",
    [
        (0, None, [GPU_A, GPU_B], 2),  # CUDA 0 = GPU A = Vulkan 2
        (1, None, [GPU_A, GPU_B], 1),
        (0, "1", [GPU_A, GPU_B], 1),  # index into CUDA_VISIBLE_DEVICES
        (0, GPU_B, None, 1),  # UUIDs need no nvidia-smi
        (GPU_A, None, None, 2),
        (GPU_A.lower().upper(), None, None, 2),
        (1, None, None, 2),  # no nvidia-smi: the n-th hardware device
    ],
)
def test_map_gpu_device(gpu_device, cuda_visible, smi, expected):
    assert map_gpu_device(gpu_device, VULKAN, cuda_visible, smi) == (expected, None)


@pytest.mark.parametrize(
    "gpu_device, cuda_visible, smi, message",
    [
        (3, "0,1", [GPU_A, GPU_B], "out of range for CUDA_VISIBLE_DEVICES"),
        (5, None, [GPU_A, GPU_B], "does not exist"),
        ("GPU-00000000-0000-0000-0000-000000000000", None, None, "no Vulkan device has UUID"),
        ("MIG-abc", None, None, "MIG"),
        (0, "0", None, "nvidia-smi is not available"),
    ],
)
def test_map_gpu_device_failures(gpu_device, cuda_visible, smi, message):
    index, why = map_gpu_device(gpu_device, VULKAN, cuda_visible, smi)
    assert index is None and message in why


def test_a_crashing_probe_process_is_an_error_not_a_crash(tmp_path, monkeypatch):
    """Stands in for a driver that segfaults while loading: the worker really dies of SIGSEGV."""
    (tmp_path / "sitecustomize.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = probes.run_probes(["vulkan", "egl"])
    for name in ("vulkan", "egl"):
        assert result[name]["devices"] == [] and "SIGSEGV" in result[name]["error"]


def test_a_hanging_probe_is_bounded():
    result = probes.run_probes(["vulkan"], timeout=0.01)
    assert "timed out after 0.01 s" in result["vulkan"]["error"]


def test_cuda_visible_devices_alone_never_breaks_cloudrendering(monkeypatch):
    """allenact#374: merely having CUDA_VISIBLE_DEVICES set must not require nvidia-smi or a GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    a = CloudRendering().assess(LINUX)
    assert a.usable and a.args == [] and a.device.software
    assert "CUDA_VISIBLE_DEVICES not mapped" in a.notes[0]
