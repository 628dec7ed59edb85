"""One answer for ``gpu_device``: validated against the GPUs the platform layer found, on every platform (Linux64
too), with the valid values in the error; the service answers the same 422 whether or not an X server runs.

This host has only software devices (lavapipe, llvmpipe EGL, Xvfb), so no gpu_device is valid here."""

from __future__ import annotations

import pytest
from werkzeug.test import Client

from fixtures import foreign_x
from unirender.errors import PlatformError, SpecError
from unirender.platforms import GpuDeviceError, Linux64, PlatformRequest, resolve

SMALL = {"width": 64, "height": 48}


def _error(gpu_device, **kw) -> GpuDeviceError:
    with pytest.raises(GpuDeviceError) as info:
        resolve(PlatformRequest(system="Linux", builtin=True, gpu_device=gpu_device, **SMALL, **kw))
    return info.value


def test_an_unknown_gpu_device_names_the_valid_values_on_every_platform(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    err = _error(99)
    assert isinstance(err, PlatformError) and isinstance(err, SpecError)  # 422 in the service, not 503
    first = str(err).splitlines()[0]
    assert first == "gpu_device=99 is not a GPU of this host; valid gpu_device values: none (no GPU was found)"
    assert set(err.valid) == {"EGL", "CloudRendering", "Linux64", "Linux64 (virtual display)"}
    assert all(v == [] for v in err.valid.values())
    assert err.errors == [("environment.gpu_device", first)]
    assert "valid gpu_device: none" in str(err)


def test_linux64_no_longer_ignores_gpu_device_on_a_running_x_server(monkeypatch):
    """Before: an X server happened to run, Linux64 took it and gpu_device=99 was silently dropped."""
    with foreign_x.foreign_xvfb() as display:
        monkeypatch.setenv("DISPLAY", display)
        a = Linux64().assess(PlatformRequest(system="Linux", builtin=True, gpu_device=99, **SMALL))
        assert not a.usable and a.gpu_mismatch and a.gpu_indices == []
        assert "0 X screen(s) rendering on a GPU (valid gpu_device: none)" in a.reasons[0]
        assert any(d.index.startswith(display) and d.software for d in a.devices)  # it was looked at: llvmpipe
        with_x = _error(99)
        # explicit x_display: that display only, same verdict
        only = Linux64().assess(PlatformRequest(system="Linux", gpu_device=0, x_display=display, **SMALL))
        assert not only.usable and only.gpu_mismatch
        # without gpu_device the same X server is still usable, as before
        assert Linux64().assess(PlatformRequest(system="Linux", **SMALL)).usable
    monkeypatch.delenv("DISPLAY")
    without_x = _error(99)
    assert str(with_x).splitlines()[0] == str(without_x).splitlines()[0]
    assert with_x.valid == without_x.valid


def test_the_service_gives_the_same_422_with_and_without_an_x_server(tmp_path, monkeypatch):
    from unirender.service import create_app
    from unirender.service.config import ServiceConfig

    monkeypatch.delenv("DISPLAY", raising=False)
    app = create_app(ServiceConfig(data_root=tmp_path, port=0), start=False)
    http = Client(app)
    body = {"environment": {**SMALL, "gpu_device": 99}}
    try:
        answers = []
        for with_x in (True, False):
            if with_x:
                with foreign_x.foreign_xvfb() as display:
                    monkeypatch.setenv("DISPLAY", display)
                    resp = http.post("/v1/sessions", json=body)
                monkeypatch.delenv("DISPLAY")
            else:
                resp = http.post("/v1/sessions", json=body)
            assert resp.status_code == 422, resp.get_data(as_text=True)
            error = resp.get_json()["error"]
            assert error["code"] == "invalid_spec"
            assert error["errors"][0]["path"] == "environment.gpu_device"
            assert "valid gpu_device values: none" in error["errors"][0]["message"]
            answers.append((resp.status_code, error["code"], error["errors"]))
        assert answers[0] == answers[1]
        assert http.get("/v1/sessions").get_json()["sessions"] == []  # nothing was left half-made
    finally:
        app.shutdown(timeout=5)
