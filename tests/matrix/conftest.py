"""The capability matrix (issue 22): every capability above the controller, for every family, on every backend.

Parameters: ``family`` in {AI2-THOR over FIFO, AI2-THOR over WSGI, ML-Agents, WebGL (the test game in headless
Chromium)} and ``backend`` in {local, Ray}.
Each layer's test module (``test_matrix_<layer>.py``) takes the ``case`` fixture (family x backend) and uses
``case.environment`` (a spec's ``environment`` section), ``case.controller_kwargs`` (what a session backend takes)
and ``case.backend()`` (a fresh backend of that kind, closed at the end). Ray runs one local node for the whole
matrix package (loopback, offline: tests/conftest.py), started on first use and stopped after it.

A capability a family does not have yet is listed in :data:`NOT_YET` (family, layer module) with the reason: its
cases run as strict ``xfail``, so the day the capability lands they pass and fail the run until the line goes.
WebGL cases boot Chromium (every session is a browser): they are ``slow`` (docs/testing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fixtures.dependency_skips import require_chromium
from fixtures.webgl import ACTIONS as WEBGL_ACTIONS
from fixtures.webgl import GAME as WEBGL_GAME

FAMILIES = {
    "ai2thor-fifo": {"executable": "builtin", "width": 48, "height": 40, "platform": "EGL", "server": "fifo"},
    "ai2thor-wsgi": {"executable": "builtin", "width": 48, "height": 40, "platform": "EGL", "server": "wsgi"},
    "mlagents": {"protocol": "mlagents", "executable": "builtin", "width": 48, "height": 40, "platform": "EGL",
                 "time_scale": 100},  # fmt: skip
    "webgl": {"protocol": "webgl", "executable": str(WEBGL_GAME), "width": 48, "height": 40,
              "actions": WEBGL_ACTIONS},  # fmt: skip
}
# (family id, the layer's test module) -> why that capability is not there yet (a strict xfail, above).
NOT_YET: dict[tuple[str, str], str] = {}
BACKENDS = ("local", "ray")
# Where sessions can live: the backends above, and a real service (``Case.service``, over a local backend) whose
# sessions a ``create_backend("service", url=...)`` drives (issue 26).
PLACEMENTS = (*BACKENDS, "service")


@dataclass
class Case:
    family_id: str
    backend_kind: str
    _request: pytest.FixtureRequest

    def __post_init__(self) -> None:
        if self.family == "webgl":
            require_chromium()

    @property
    def family(self) -> str:
        return FAMILIES[self.family_id].get("protocol", "ai2thor")

    @property
    def platform(self) -> str:
        """The platform a session of this family reports (a browser's canvas: ``WebGL``)."""
        return "WebGL" if self.family == "webgl" else FAMILIES[self.family_id]["platform"]

    @property
    def service_config(self) -> dict:
        """What a service needs to serve this family: a WebGL build folder must be allowed by name."""
        return {"allowed_executables": [str(WEBGL_GAME)]} if self.family == "webgl" else {}

    @property
    def controller_kwargs(self) -> dict:
        return dict(FAMILIES[self.family_id])

    @property
    def environment(self) -> dict:
        """A spec's ``environment`` section for this family (AI2-THOR's ``server`` is the spec's ``transport``)."""
        env = dict(FAMILIES[self.family_id])
        if "server" in env:
            env["transport"] = env.pop("server")
        return env

    def backend(self, **options):
        """A session backend of this case's kind (closed when the test ends)."""
        from unirender.cluster import create_backend

        if self.backend_kind == "service":
            url = self.service(self._request.getfixturevalue("tmp_path_factory").mktemp("placement"))
            backend = create_backend("service", url=url, **options)
            self._request.addfinalizer(backend.close)
            return backend
        if self.backend_kind == "ray":
            self._request.getfixturevalue("ray_node")
            options = {"start_timeout": 120, "step_timeout": 60, **options}
        backend = create_backend(self.backend_kind, **options)
        self._request.addfinalizer(backend.close)
        return backend


    def service(self, tmp_path, **config) -> str:
        """A real service (waitress, the production server loop) on 127.0.0.1 over this case's backend, in a
        thread of this process; its URL. Shut down (players stopped) when the test ends."""
        import threading

        from unirender.service.config import ServiceConfig
        from unirender.service.server import Server

        # The service's own sessions live on this case's backend (a local one under the service placement).
        own = self if self.backend_kind != "service" else Case(self.family_id, "local", self._request)
        config = {**self.service_config, **config}
        server = Server(ServiceConfig(port=0, data_root=tmp_path / "service", **config), backend=own.backend())
        thread = threading.Thread(target=server.serve_forever, name="matrix-service", daemon=True)
        thread.start()

        def stop():
            server.request_shutdown("test over")
            thread.join(30)

        self._request.addfinalizer(stop)
        return server.url


@pytest.fixture(scope="package")
def ray_node():
    """One local Ray node for the matrix (2 CPUs, small object store, no dashboard), stopped when the matrix
    is done: while it runs, a ``ray.init()`` elsewhere in the suite (a service, a doc block) would join it."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                            "object_store_memory": 150 * 2**20})  # fmt: skip
    try:
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _param(*values: str):
    """A case's parameter; one that lives on Ray is marked ``ray`` (its node's start-up and the actors' are most
    of the matrix's time: ``./dev test-fast`` leaves them out, docs/testing.md), a WebGL one ``slow``."""
    marks = [pytest.mark.ray] if "ray" in values else []
    if "webgl" in values:
        marks.append(pytest.mark.slow)
    return pytest.param(values if len(values) > 1 else values[0], marks=marks, id="-".join(values))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """:data:`NOT_YET`'s cases: strict xfails with the reason (a collection hook sees the whole suite's items:
    only the matrix's own are looked at)."""
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(item.path).resolve().parent != here or not hasattr(item, "callspec"):
            continue
        for value in item.callspec.params.values():
            family_id = value[0] if isinstance(value, tuple) else value
            if not isinstance(family_id, str):
                continue
            reason = NOT_YET.get((family_id, Path(item.path).stem))
            if reason:
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"not yet: {reason}"))


@pytest.fixture(params=[_param(f, b) for f in FAMILIES for b in BACKENDS])
def case(request) -> Case:
    family_id, backend_kind = request.param
    return Case(family_id, backend_kind, request)


@pytest.fixture(params=[_param(f) for f in FAMILIES])
def family_case(request) -> Case:
    """The families alone (for capabilities that have no backend choice, e.g. ``/v1/render``)."""
    return Case(request.param, "local", request)


@pytest.fixture(params=[_param(b) for b in BACKENDS])
def mlagents_case(request) -> Case:
    """ML-Agents on each backend (for what only that family can show, e.g. a game started with -nographics)."""
    return Case("mlagents", request.param, request)


@pytest.fixture(params=[_param("webgl", b) for b in BACKENDS])
def webgl_case(request) -> Case:
    """WebGL on each backend (for what only that family has, e.g. the console's declared-action keys)."""
    return Case("webgl", request.param[1], request)


@pytest.fixture(params=[_param(f, p) for f in FAMILIES for p in PLACEMENTS])
def placement_case(request) -> Case:
    """family x placement (local, Ray, the service backend): for what every placement must do alike."""
    family_id, placement = request.param
    return Case(family_id, placement, request)


@pytest.fixture(params=[_param(f) for f in FAMILIES])
def service_case(request) -> Case:
    """The families under the service placement only (``case.backend()`` drives a real service's sessions)."""
    return Case(request.param, "service", request)
