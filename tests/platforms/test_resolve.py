"""resolve(): auto order, explicit platforms, the virtual display fall-back and the one error listing all."""

from __future__ import annotations

import pytest

from unirender.errors import PlatformError
from unirender.platforms import (
    EGL,
    CloudRendering,
    Linux64,
    PlatformRequest,
    probes,
    resolve,
)
from unirender.platforms.x11 import find_screen

# An unusual size that no X server of a parallel test is likely to offer, so "no valid X" holds here.
ODD = {"width": 1931, "height": 1033}


def test_auto_prefers_cloudrendering_for_unity_builds():
    with resolve(PlatformRequest(system="Linux")) as r:
        assert r.name == "CloudRendering" and r.backend == "vulkan"
        assert r.device.software is True and r.software is True
        assert [c.status for c in r.candidates] == ["usable", "not evaluated"]
        assert r.virtual_display is None and r.env == {}


@pytest.mark.parametrize("name", ["LinuxHeadlessSimulation", "linuxheadlesssimulation"])
def test_linux_headless_simulation_is_cloudrendering_by_another_name(name):
    with resolve(PlatformRequest(system="Linux"), name) as r:
        assert r.name == "LinuxHeadlessSimulation" and r.backend == "vulkan" and r.env == {}
        assert r.platform.ignores_screen_flags and r.device.software is True


def test_auto_prefers_egl_for_the_builtin_player():
    with resolve(PlatformRequest(system="Linux", builtin=True)) as r:
        assert r.name == "EGL" and r.backend == "egl"
        assert r.env == {"GLCONTEXT_DEVICE_INDEX": "0"}
        assert [c.label for c in r.candidates] == ["EGL", "CloudRendering", "Linux64"]


def test_builtin_falls_back_to_vulkan_when_egl_is_missing(hidden_egl):
    with resolve(PlatformRequest(system="Linux", builtin=True)) as r:
        assert r.name == "CloudRendering"
        assert r.candidates[0].status == "unusable" and "no EGL driver" in r.candidates[0].reasons[0]
        assert "libegl1" in r.candidates[0].instructions


def test_no_vulkan_no_x_yields_linux64_on_a_working_virtual_display(empty_icd):
    with resolve(PlatformRequest(system="Linux", **ODD)) as r:
        assert r.name == "Linux64" and r.backend == "glx"
        assert [(c.label, c.status) for c in r.candidates] == [
            ("CloudRendering", "unusable"), ("Linux64", "unusable"), ("Linux64 (virtual display)", "usable"),
        ]  # fmt: skip
        vd = r.virtual_display
        assert vd is not None and vd.alive() and vd.width >= 1931 and vd.height >= 1033
        assert r.env == {"DISPLAY": f"{vd.display}.0"}
        assert r.device.software is True
        assert find_screen(1931, 1033, r.env["DISPLAY"]).chosen is not None
        glx = probes.run_probes([f"glx={r.env['DISPLAY']}"])[f"glx={r.env['DISPLAY']}"]
        assert "llvmpipe" in glx["renderer"]  # a real GL context on it works
    assert not vd.alive()


def test_virtual_display_is_shared_and_reference_counted():
    request = PlatformRequest(system="Linux", **ODD)
    first = resolve(request, "Linux64")
    second = resolve(request, Linux64)
    try:
        assert first.virtual_display is second.virtual_display and first.virtual_display.refs == 2
    finally:
        first.release()
        first.release()  # idempotent: does not drop the other lease
        assert second.virtual_display.alive() and second.virtual_display.refs == 1
        second.release()
    assert not second.virtual_display.alive()


def test_everything_missing_gives_one_error_with_every_reason(empty_icd, hidden_egl):
    request = PlatformRequest(system="Linux", builtin=True, allow_virtual_display=False, **ODD)
    with pytest.raises(PlatformError) as info:
        resolve(request)
    text = str(info.value)
    assert "- EGL: unusable" in text and "no EGL driver" in text
    assert "- CloudRendering: unusable" in text and "vkCreateInstance failed" in text
    assert "- Linux64: unusable" in text
    assert (
        "sudo apt-get install -y libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri libvulkan1 mesa-vulkan-drivers xvfb"
        in text
    )


def test_explicit_platform_is_honoured_even_when_auto_would_pick_another():
    with resolve(PlatformRequest(system="Linux", builtin=True), "CloudRendering") as r:
        assert r.name == "CloudRendering" and [c.label for c in r.candidates] == ["CloudRendering"]
    with resolve(PlatformRequest(system="Linux", builtin=True), [Linux64, EGL]) as r:
        assert r.name in ("Linux64", "EGL") and r.candidates[0].platform == Linux64()


@pytest.mark.parametrize(
    "platform, request_kwargs, message",
    [
        ("OSXIntel64", {}, "OSXIntel64 runs only on Darwin"),
        ("EGL", {}, "builtin reference player only"),
        ("Linux64", {"x_display": ":4999"}, "X socket @/tmp/.X11-unix/X4999 is unreachable"),
        ("Linux64", {"allow_virtual_display": False, **ODD}, "- Linux64: unusable"),
        ("CloudRendering", {"gpu_device": 3}, "asked for a GPU but Vulkan has no hardware device"),
        ("Nonsense", {}, "unknown platform 'Nonsense'; known: Linux64, CloudRendering"),
    ],
)
def test_explicit_platform_fails_with_its_own_reasons(platform, request_kwargs, message):
    with pytest.raises(PlatformError) as info:
        resolve(PlatformRequest(system="Linux", **request_kwargs), platform)
    assert message in str(info.value)


def test_explicit_cloudrendering_without_vulkan(empty_icd):
    with pytest.raises(PlatformError) as info:
        resolve(PlatformRequest(system="Linux"), CloudRendering())
    assert "vkCreateInstance failed" in str(info.value)
    assert "sudo apt-get install -y libvulkan1 mesa-vulkan-drivers" in str(info.value)
    assert "Linux64" not in str(info.value).split("Install")[0]


def test_macos_auto_and_unknown_system():
    with resolve(PlatformRequest(system="Darwin")) as r:
        assert r.name == "OSXIntel64"
    with pytest.raises(PlatformError, match="no platform exists for 'Windows'"):
        resolve(PlatformRequest(system="Windows"))


def test_resolution_explains_itself():
    with resolve(PlatformRequest(system="Linux")) as r:
        data = r.to_dict()
        assert data["platform"] == "CloudRendering" and data["software"] is True
        assert "software rasteriser" in r.explain()
        assert r.explain().startswith("platform CloudRendering chosen for 300x300 on llvmpipe")


def test_an_existing_x_server_is_asked_what_it_renders_with(foreign_xvfb):
    with resolve(PlatformRequest(system="Linux", x_display=foreign_xvfb), "Linux64") as r:
        assert r.env == {"DISPLAY": f"{foreign_xvfb}.0"} and r.virtual_display is None
        assert r.device.api == "glx" and "llvmpipe" in r.device.name  # GL_RENDERER through GLX
        assert r.device.software is True and r.device.kind == "cpu"


def test_auto_with_an_explicit_x_display_means_linux64_on_it(xvfb_two_screens):
    """Vulkan (lavapipe) is usable here, yet asking for a display must not yield CloudRendering without it."""
    with resolve(PlatformRequest(system="Linux", x_display=xvfb_two_screens.display)) as r:
        assert r.name == "Linux64" and r.env == {"DISPLAY": f"{xvfb_two_screens.display}.0"}
        assert r.virtual_display is None and [c.label for c in r.candidates] == ["Linux64"]
    with pytest.raises(PlatformError) as info:  # a bad display is an error, not a silent fall-back
        resolve(PlatformRequest(system="Linux", x_display=":4999"))
    assert "X4999 is unreachable" in str(info.value) and "CloudRendering" not in str(info.value)


def test_a_gpu_request_never_falls_back_to_a_software_virtual_display():
    """Only software devices here (lavapipe, llvmpipe EGL, Xvfb): gpu_device must fail, not quietly run on the CPU."""
    with pytest.raises(PlatformError) as info:
        resolve(PlatformRequest(system="Linux", gpu_device=0, **ODD))
    message = str(info.value)
    assert "asked for a GPU but Vulkan has no hardware device" in message
    assert "Linux64 (virtual display): unusable" in message and "renders in software" in message


def test_ai2thor_platform_classes_are_understood_by_name():
    """AI2-THOR users pass ``platform=ai2thor.platform.CloudRendering`` (a class of theirs, not ours)."""

    class CloudRendering:  # stands in for ai2thor.platform.CloudRendering
        pass

    with resolve(PlatformRequest(system="Linux"), CloudRendering) as r:
        assert r.name == "CloudRendering" and [c.label for c in r.candidates] == ["CloudRendering"]
    with pytest.raises(PlatformError, match="platform must be 'auto'"):
        resolve(PlatformRequest(system="Linux"), type("Nonsense", (), {}))
