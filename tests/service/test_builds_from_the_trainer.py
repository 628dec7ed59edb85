"""A build that exists only on the trainer's machine reaches the render host through the ``service`` backend
(issue 46 stage 3): ``unirender render --backend service`` writes the dataset the local run writes, a vector env of
4 and an ``MLAgentsEnv`` upload it once, and the service's store holds it by digest afterwards."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from fixtures.unity_builds import executable_of, make_build
from unirender.builds import BuildStore

UP = "uploader-token"


@pytest.fixture(scope="module")
def service(make_service, tmp_path_factory):
    store = tmp_path_factory.mktemp("service-store")
    service = make_service({"tokens": {"up": {"token": UP, "scopes": ["sessions", "jobs", "builds:write"]}},
                            "build_store": str(store)})  # fmt: skip
    service.store = store
    return service


def held(service, digest: str) -> bool:
    return requests.head(f"{service.url}/v1/builds/{digest}", headers={"Authorization": f"Bearer {UP}"},
                         timeout=30).status_code == 200  # fmt: skip


def test_render_with_the_service_backend_uploads_the_trainers_build(service, tmp_path, monkeypatch):
    from unirender.cli import main
    from unirender.jobs import load_dataset

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "trainer-store"))
    folder = make_build(tmp_path / "trainer", family="ai2thor", player="reference", variant=11, changed=1)
    digest = BuildStore(tmp_path / "trainer-store").digest_folder(folder)
    assert not held(service, digest)
    spec = {"environment": {"executable": str(executable_of(folder)), "width": 48, "height": 40,
                            "platform": "CloudRendering"},
            "episodes": [{"scene": "FloorPlan1", "actions": ["MoveAhead", "RotateRight"]}]}  # fmt: skip
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    assert main(["render", str(path), "--backend", "service", "--url", service.url, "--token", UP,
                 "--out", str(tmp_path / "remote"), "--quiet"]) == 0  # fmt: skip
    assert held(service, digest)
    assert main(["render", str(path), "--out", str(tmp_path / "local"), "--quiet"]) == 0
    remote, local = list(load_dataset(tmp_path / "remote")), list(load_dataset(tmp_path / "local"))
    assert len(remote) == len(local) == 3  # the reset and two steps
    for a, b in zip(remote, local, strict=True):
        assert np.array_equal(np.asarray(a.frame), np.asarray(b.frame))
    manifest = json.loads((tmp_path / "remote" / "manifest.json").read_text())
    assert manifest["build"]["digest"] == digest


def test_a_vector_env_of_four_uploads_once(service, tmp_path, monkeypatch):
    from unirender.cluster import create_backend
    from unirender.gym import UnityVectorEnv

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "trainer-store"))
    folder = make_build(tmp_path / "trainer", family="ai2thor", player="reference", variant=12, changed=1)
    kwargs = {"executable": str(executable_of(folder)), "width": 32, "height": 32, "platform": "CloudRendering"}
    backend = create_backend("service", url=service.url, token=UP)
    env = UnityVectorEnv(4, kwargs, backend=backend)
    try:
        env.reset(seed=0)
        observations, *_ = env.step(env.action_space.sample())
        assert observations["rgb"].shape == (4, 32, 32, 3) and backend.uploads == 1
    finally:
        env.close()
        backend.close()


def test_an_mlagents_env_uploads_the_trainers_game_once(service, tmp_path, monkeypatch):
    from unirender.cluster import create_backend
    from unirender.gym import MLAgentsEnv

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "trainer-store"))
    folder = make_build(tmp_path / "trainer", family="mlagents", variant=13, changed=1)
    digest = BuildStore(tmp_path / "trainer-store").digest_folder(folder)
    environment = {"executable": str(executable_of(folder)), "platform": "auto", "width": 32, "height": 32,
                   "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "1"}}  # fmt: skip
    backend = create_backend("service", url=service.url, token=UP)
    env = MLAgentsEnv(environment=environment, backend=backend)
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        assert backend.uploads == 1 and held(service, digest)
    finally:
        env.close()
        backend.close()
