from __future__ import annotations

import shutil

import pytest

from fixtures.dependency_skips import require_chromium
from fixtures.webgl import GAME


@pytest.fixture(scope="session")
def browser_binary():
    return require_chromium()


@pytest.fixture
def game_copy(tmp_path):
    """A writable copy of the test game (to break it)."""
    target = tmp_path / "game"
    shutil.copytree(GAME, target)
    return target


@pytest.fixture(scope="module")
def ray_backend():
    """A Ray backend on a one-CPU local cluster (loopback), for one test module; the module skips without Ray."""
    import ray

    from unirender.cluster import create_backend

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    backend = create_backend("ray", start_timeout=120, step_timeout=60)
    try:
        yield backend
    finally:
        backend.close()
        ray.shutdown()
