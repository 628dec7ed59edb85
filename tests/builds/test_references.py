"""Builds named by reference wherever a build is named: Controller(build=, commit_id=, local_executable_path=),
MLAgentsController(build=), the drop-in's UnityEnvironment(file_name=<reference>), its registry's make(), and a
launch from a store on a read-only mount. The fake builds exec the stand-in players (fixtures.unity_builds)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from fixtures import no_leaks  # noqa: F401
from fixtures.unity_builds import COMMIT, make_build
from unirender import Controller
from unirender.builds import BuildNotFoundError, BuildStore

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(autouse=True)
def _clean(no_leaks):  # noqa: F811
    yield


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "store"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAKE_PLAYER_FLAVOUR", "Linux64")
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", "20")
    built = BuildStore()
    yield built
    built.close()


def drive(controller: Controller) -> None:
    try:
        event = controller.step("MoveAhead")
        assert event.metadata["lastActionSuccess"] and event.frame.shape == (24, 32, 3)
    finally:
        controller.stop()


THOR = dict(width=32, height=24, platform="Linux64", server_start_timeout=60, server_timeout=30)


def test_controller_build_reference(tmp_path, store):
    build = store.add(make_build(tmp_path, family="ai2thor"), name="kitchen:v1")
    controller = Controller(build="kitchen:v1", log_dir=tmp_path, **THOR)
    assert controller.build_digest == build.digest and controller.executable == str(build.executable)
    drive(controller)
    drive(Controller(build.digest, log_dir=tmp_path, **THOR))  # a reference given as the executable


def test_commit_id_from_ai2thors_own_cache(tmp_path, store):
    """AI2-THOR downloaded the commit once (its cache layout): commit_id= finds it, keeps it in the store."""
    releases = tmp_path / "home" / ".ai2thor" / "releases"
    make_build(releases, family="ai2thor", platform="Linux64")
    controller = Controller(commit_id=COMMIT, log_dir=tmp_path, **THOR)
    stored = store.resolve(f"ai2thor:{COMMIT}")
    assert controller.build_digest == stored.digest and controller.executable.startswith(str(store.root))
    drive(controller)


def test_a_missing_commit_fails_fast_saying_how_to_get_it(tmp_path, store):
    started = time.monotonic()
    with pytest.raises(BuildNotFoundError) as caught:
        Controller(commit_id="0" * 40, log_dir=tmp_path, **THOR)
    assert time.monotonic() - started < 2
    assert "unirender builds import-ai2thor" in str(caught.value) and "unirender builds pull" in str(
        caught.value
    )


def test_local_executable_path_and_one_name_at_a_time(tmp_path, store):
    folder = make_build(tmp_path, family="ai2thor")
    drive(Controller(local_executable_path=folder / folder.name, log_dir=tmp_path, **THOR))
    with pytest.raises(ValueError, match="name the build once"):
        Controller(commit_id=COMMIT, build="kitchen:v1", **THOR)


def test_mlagents_controller_and_the_drop_in_take_references(tmp_path, store):
    from unirender.mlagents import MLAgentsController, UnityEnvironment

    build = store.add(make_build(tmp_path, family="mlagents"), name="reach:v1")
    with MLAgentsController(build="reach:v1", no_graphics=True, allow_blank_cameras=True, timeout=30, start_timeout=60,
                            env={"UNIRENDER_MLAGENTS_MAX_STEP": "20"}) as controller:  # fmt: skip
        assert controller.build_digest == build.digest
        assert controller.reset().behavior_names
    env = UnityEnvironment(file_name="reach:v1", no_graphics=True, timeout_wait=60)
    try:
        env.reset()
        assert list(env.behavior_specs)
    finally:
        env.close()
    from unirender.mlagents.exception import UnityEnvironmentException

    with pytest.raises(UnityEnvironmentException, match="no build named reach:v9"):
        UnityEnvironment(file_name="reach:v9")


def test_registry_make_from_the_store_and_from_a_registry_file(tmp_path, store, monkeypatch):
    from unirender.mlagents.registry import RemoteRegistryEntry, UnityEnvRegistry, default_registry

    store.add(make_build(tmp_path / "a", family="mlagents"), name="reach:v1")
    default_registry.reload()
    assert "reach" in default_registry and "reach:v1" in default_registry
    env = default_registry["reach"].make(no_graphics=True, timeout_wait=60)
    try:
        env.reset()
        assert list(env.behavior_specs)
    finally:
        env.close()
    folder = make_build(tmp_path / "b", family="mlagents", name="Ball", variant=2, changed=1)
    archive = tmp_path / "Ball.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in sorted(folder.rglob("*")):
            bundle.write(path, "Ball/" + path.relative_to(folder).as_posix())
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    registry_yaml = tmp_path / "registry.yaml"
    registry_yaml.write_text(
        f"environments:\n  - Ball:\n      expected_reward: 1\n      description: a ball\n"
        f"      linux_url: {archive.as_uri()}\n      sha256: {sha}\n"
    )
    monkeypatch.setenv("UNIRENDER_REGISTRY", str(registry_yaml))
    default_registry.reload()
    entry = default_registry["Ball"]
    assert isinstance(entry, RemoteRegistryEntry) and entry.expected_reward == 1
    for _ in range(2):  # the second make() finds it in the store: the archive may be gone
        env = entry.make(no_graphics=True, timeout_wait=60)
        try:
            env.reset()
        finally:
            env.close()
        archive.rename(tmp_path / "gone.zip") if archive.exists() else None
    assert store.resolve(entry.store_reference).info.family == "mlagents"
    mine = UnityEnvRegistry()
    mine.register(RemoteRegistryEntry("Bad", 0, "", (tmp_path / "gone.zip").as_uri(), sha256="00" * 32))
    with pytest.raises(Exception, match="neither matches"):
        mine["Bad"].make()
    with pytest.raises(KeyError, match="The entry Nope is not present in the registry."):
        mine["Nope"]


LAUNCH_READ_ONLY = """
import os, sys
from unirender.builds import BuildStore
from unirender.mlagents import MLAgentsController
store = BuildStore(sys.argv[1])
build = store.resolve("reach:v1")
try:
    (build.root / "x").write_text("x")
except OSError as exc:
    print("write refused:", exc.strerror)
with MLAgentsController(build="reach:v1", no_graphics=True, allow_blank_cameras=True, timeout=30, start_timeout=60) as c:
    print("behaviors:", list(c.reset().behavior_names))
"""


def test_launching_from_a_store_on_a_read_only_mount(tmp_path, store):
    """The store bind-mounted read-only in a user and mount namespace of the test's own (no privileges)."""
    if shutil.which("unshare") is None:
        pytest.skip("missing dependency: unshare (util-linux)")
    store.add(make_build(tmp_path, family="mlagents"), name="reach:v1")
    store.close()
    root = str(store.root)
    script = (f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" "{root}" && '
              f'exec "{sys.executable}" -c "$0" "{root}"')  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "UNIRENDER_BUILDS": root,
        "UNIRENDER_MLAGENTS_MAX_STEP": "20",
    }
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"missing dependency: user namespaces ({probe.stderr.decode().strip()})")
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, LAUNCH_READ_ONLY],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "write refused: Read-only file system" in done.stdout
        and "behaviors: ['ReachTarget?team=0']" in done.stdout
    )


def test_commit_id_drives_the_reference_player_from_an_ai2thor_cache_folder(tmp_path, store):
    """The same, with unirender's reference player behind the AI2-THOR-named executable (headless Vulkan)."""
    releases = tmp_path / "home" / ".ai2thor" / "releases"
    make_build(releases, family="ai2thor", platform="CloudRendering", player="reference")
    controller = Controller(commit_id=COMMIT, log_dir=tmp_path, width=32, height=24, platform="CloudRendering",
                            server_start_timeout=120, server_timeout=60)  # fmt: skip
    try:
        event = controller.reset("FloorPlan1_physics")
        assert event.frame.shape == (24, 32, 3) and event.frame.any()
        assert controller.step("RotateRight").metadata["lastActionSuccess"]
        assert controller.build_digest == store.resolve(f"ai2thor:{COMMIT}").digest
    finally:
        controller.stop()
