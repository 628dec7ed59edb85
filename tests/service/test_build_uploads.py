"""A service's build store over HTTP (issue 34): ``PUT``/``HEAD``/``GET``/``DELETE /v1/builds/{digest}`` on a real
``unirender serve``: scopes (an upload needs ``builds:write``, refused from the head; deleting needs ``admin``),
the digest checked before anything is published, a cut upload publishing nothing, concurrent identical uploads
leaving one copy, quotas (per token, whole store: 413), an unsafe archive (422, nothing published), a bounded
store evicting around a running player, Range downloads, and an uploaded build launched by digest."""

from __future__ import annotations

import socket
import threading
import zipfile

import pytest
import requests

from fixtures.unity_builds import make_build
from unirender.builds import BuildStore
from unirender.client import Client

ALICE, UP, OPS = "alice-bare-token", "uploader-token", "ops-admin-token"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """A fake AI2-THOR build (the reference player behind it) and its export tar, made in a local store."""
    root = tmp_path_factory.mktemp("local")
    store = BuildStore(root / "store")
    stored = store.add(make_build(root / "src", family="ai2thor", player="reference"))
    tar = root / "build.tar"
    store.export(stored.digest, tar)
    return stored.digest, tar.read_bytes()


@pytest.fixture(scope="module")
def service(make_service, tmp_path_factory):
    store = tmp_path_factory.mktemp("service-store")
    service = make_service({
        "tokens": {"alice": ALICE, "up": {"token": UP, "scopes": ["sessions", "builds:write"]},
                   "ops": {"token": OPS, "scopes": ["admin"]}},
        "build_store": str(store), "limits": {"build_bytes_per_token": 64 * 2**20},
    })  # fmt: skip
    service.store = store
    return service


def call(service, method, path, token, **kwargs):
    headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    return requests.request(method, service.url + path, headers=headers, timeout=120, **kwargs)


def published(service) -> list[str]:
    return [b.digest for b in BuildStore(service.store).list()]


def test_an_upload_needs_builds_write_and_the_right_digest(service, build):
    digest, tar = build
    assert call(service, "HEAD", f"/v1/builds/{digest}", UP).status_code == 404
    refused = call(service, "PUT", f"/v1/builds/{digest}", ALICE, data=tar,
                   headers={"Content-Type": "application/x-tar"})  # fmt: skip
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
    wrong = "sha256:" + "0" * 64
    resp = call(service, "PUT", f"/v1/builds/{wrong}", UP, data=tar, headers={"Content-Type": "application/x-tar"})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "digest_mismatch", resp.text
    assert published(service) == []  # checked before anything was published
    bad = call(service, "PUT", "/v1/builds/latest", UP, data=b"x")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_digest"


def test_a_cut_upload_publishes_nothing_and_the_next_one_succeeds(service, build):
    digest, tar = build
    host, port = service.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"PUT /v1/builds/{digest} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {UP}\r\n"
                     f"Content-Type: application/x-tar\r\nContent-Length: {len(tar)}\r\n\r\n".encode()
                     + tar[: len(tar) // 2])  # fmt: skip
    assert digest not in published(service)
    results: list[requests.Response] = []

    def upload():
        results.append(call(service, "PUT", f"/v1/builds/{digest}", UP, data=tar,
                            headers={"Content-Type": "application/x-tar"}))  # fmt: skip

    threads = [threading.Thread(target=upload) for _ in range(2)]  # two trainers at once
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert sorted(r.status_code for r in results) in ([200, 201], [201, 201]), [r.text for r in results]
    assert published(service) == [digest]  # one copy
    assert call(service, "HEAD", f"/v1/builds/{digest}", UP).status_code == 200
    listed = call(service, "GET", "/v1/builds", ALICE).json()["builds"]
    assert [b["digest"] for b in listed] == [digest]  # an uploaded build may be launched (allow_uploaded_builds)


def test_a_downloaded_build_imports_to_the_same_digest_and_ranges_resume(service, build, tmp_path):
    digest, tar = build
    call(service, "PUT", f"/v1/builds/{digest}", UP, data=tar, headers={"Content-Type": "application/x-tar"})
    whole = call(service, "GET", f"/v1/builds/{digest}", ALICE)
    assert whole.status_code == 200
    part = call(service, "GET", f"/v1/builds/{digest}", ALICE, headers={"Range": "bytes=100-"})
    assert part.status_code == 206 and part.content == whole.content[100:]
    (tmp_path / "got.tar").write_bytes(whole.content)
    assert BuildStore(tmp_path / "mirror").import_(tmp_path / "got.tar").digest == digest


def test_an_uploaded_build_launches_by_digest(service, build):
    digest, tar = build
    call(service, "PUT", f"/v1/builds/{digest}", UP, data=tar, headers={"Content-Type": "application/x-tar"})
    with Client(service.url, UP) as client:
        with client.session({"build": digest, "width": 64, "height": 48, "platform": "CloudRendering"},
                            scene="FloorPlan1") as session:  # fmt: skip
            assert session.step("RotateRight").frame.shape == (48, 64, 3)


def test_deleting_needs_admin_and_quotas_are_413(service, build, make_service, tmp_path):
    digest, tar = build
    call(service, "PUT", f"/v1/builds/{digest}", UP, data=tar, headers={"Content-Type": "application/x-tar"})
    assert call(service, "DELETE", f"/v1/builds/{digest}", UP).status_code == 403
    assert call(service, "DELETE", f"/v1/builds/{digest}", OPS).status_code == 204
    assert call(service, "HEAD", f"/v1/builds/{digest}", OPS).status_code == 404
    small = make_service({"tokens": {"up": {"token": UP, "scopes": ["builds:write"]}},
                          "build_store": str(tmp_path / "small"), "limits": {"build_bytes": 4096}})  # fmt: skip
    resp = call(small, "PUT", f"/v1/builds/{digest}", UP, data=tar, headers={"Content-Type": "application/x-tar"})
    assert resp.status_code == 413, resp.text


def test_head_answers_on_every_get_route(service):
    """A HEAD response announces a body it never sends: the channel must not hold its head back (it did: every
    HEAD hung until the client gave up)."""
    for path in ("/healthz", "/v1/platforms", "/v1/sessions"):
        resp = call(service, "HEAD", path, ALICE)
        assert resp.status_code == 200 and resp.content == b"", path


def test_the_service_backend_brings_a_local_build_once(service, tmp_path, monkeypatch):
    """A trainer names its own build by path: the backend uploads it (the service lacked it) before the first
    session, a vector env of 2 and a second trainer upload nothing more, and the sessions run it by digest."""
    from fixtures.unity_builds import executable_of
    from unirender.cluster import create_backend
    from unirender.gym import UnityVectorEnv

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "trainer-store"))
    folder = make_build(tmp_path / "trainer", family="ai2thor", player="reference", variant=7, changed=1)
    kwargs = {"executable": str(executable_of(folder)), "width": 48, "height": 40, "platform": "CloudRendering"}
    first = create_backend("service", url=service.url, token=UP)
    env = UnityVectorEnv(2, kwargs, backend=first)
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        assert first.uploads == 1
        (digest,) = first._builds_here
        assert call(service, "HEAD", f"/v1/builds/{digest}", UP).status_code == 200
    finally:
        env.close()
        first.close()
    second = create_backend("service", url=service.url, token=UP)
    session = second.create_session(dict(kwargs))
    try:
        assert session.step("RotateRight").frame.shape == (40, 48, 3) and second.uploads == 0
    finally:
        second.close()
    bare = create_backend("service", url=service.url, token=ALICE)  # a bare token may not upload: clear 403
    other = make_build(tmp_path / "other", family="ai2thor", player="reference", variant=8, changed=1)
    with pytest.raises(Exception, match="builds:write"):
        bare.create_session({**kwargs, "executable": str(executable_of(other))})
    bare.close()


# ------------------------------------------------------------------ quotas, unsafe archives, the store's bound
@pytest.fixture(scope="module")
def others(tmp_path_factory):
    """Three more builds (distinct assets of 64 KiB each, the rest shared) and their export tars."""
    root = tmp_path_factory.mktemp("others")
    store = BuildStore(root / "store", max_bytes=None)
    made = []
    for variant in (1, 2, 3):
        stored = store.add(make_build(root / f"src{variant}", family="ai2thor", player="reference",
                                      variant=variant, changed=4, asset_size=64 << 10))  # fmt: skip
        store.export(stored.digest, root / f"{variant}.tar")
        made.append((stored.digest, (root / f"{variant}.tar").read_bytes()))
    return made


def put(service, digest, body, content_type="application/x-tar"):
    return call(service, "PUT", f"/v1/builds/{digest}", UP, data=body, headers={"Content-Type": content_type})


def leftovers(store) -> list[str]:
    """What a refused upload must not leave: staging folders, uploads in tmp/."""
    return [p.name for p in [*(store / "builds").glob(".*"), *(store / "tmp").glob("upload-*")]]


def test_the_per_token_quota_is_413_build_quota_exceeded(make_service, others, tmp_path):
    (first, tar1), (second, tar2), _ = others
    quota = make_service({"tokens": {"up": {"token": UP, "scopes": ["builds:write"]},
                                     "ops": {"token": OPS, "scopes": ["admin", "builds:write"]}},
                          "build_store": str(tmp_path / "store"),
                          "limits": {"build_bytes_per_token": len(tar1)}})  # fmt: skip
    quota.store = tmp_path / "store"
    assert put(quota, first, tar1).status_code == 201
    resp = put(quota, second, tar2)  # this token's uploads would pass its quota
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "build_quota_exceeded", resp.text
    assert published(quota) == [first] and leftovers(quota.store) == []
    again = put(quota, first, tar1)  # a build already here counts nothing more
    assert again.status_code == 200 and again.json()["created"] is False
    other = call(quota, "PUT", f"/v1/builds/{second}", OPS, data=tar2, headers={"Content-Type": "application/x-tar"})
    assert other.status_code == 201, other.text  # the quota is per token
    assert sorted(published(quota)) == sorted([first, second])


def test_the_whole_store_quota_is_413_build_store_full(make_service, others, tmp_path):
    (first, tar1), (second, tar2), _ = others
    full = make_service({"tokens": {"up": {"token": UP, "scopes": ["builds:write"]}},
                         "build_store": str(tmp_path / "store"), "limits": {"build_store_bytes": len(tar1)}})  # fmt: skip
    full.store = tmp_path / "store"
    assert put(full, first, tar1).status_code == 201
    resp = put(full, second, tar2)
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "build_store_full", resp.text
    assert published(full) == [first] and leftovers(full.store) == []


def test_an_unsafe_archive_is_422_and_publishes_nothing(service, tmp_path):
    bundle = tmp_path / "evil.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("Game.x86_64", b"#!/bin/sh\n")
        archive.writestr("../outside.txt", b"escaped")  # a member that leaves the build
    before = published(service)
    resp = put(service, "sha256:" + "1" * 64, bundle.read_bytes(), "application/zip")
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "unsafe_archive", resp.text
    assert "outside.txt" in resp.json()["error"]["message"]
    assert published(service) == before and leftovers(service.store) == []
    assert not (service.store / "outside.txt").exists() and not (service.store / "builds" / "outside.txt").exists()


def test_a_bounded_store_evicts_the_least_recently_used_upload_never_a_running_one(make_service, others, tmp_path):
    (first, tar1), (second, tar2), (third, tar3) = others
    one = BuildStore(tmp_path / "probe", max_bytes=None)
    (tmp_path / "t1.tar").write_bytes(tar1)
    (tmp_path / "t2.tar").write_bytes(tar2)
    one.import_(tmp_path / "t1.tar")
    one.import_(tmp_path / "t2.tar")
    bound = one.disk_usage()  # room for two of these builds, not three
    one.close()
    bounded = make_service({"tokens": {"up": {"token": UP, "scopes": ["sessions", "builds:write"]}},
                            "build_store": str(tmp_path / "store"), "build_store_max_bytes": bound})  # fmt: skip
    bounded.store = tmp_path / "store"
    assert put(bounded, first, tar1).status_code == 201
    assert put(bounded, second, tar2).status_code == 201
    with Client(bounded.url, UP) as client:
        with client.session({"build": first, "width": 32, "height": 24, "platform": "CloudRendering"},
                            scene="FloorPlan1") as session:  # fmt: skip
            # The first build runs a player (leased; its launch also made it the most recently used).
            assert put(bounded, third, tar3).status_code == 201
            assert sorted(published(bounded)) == sorted([first, third])  # the second, unused, was evicted
            session.step("RotateRight")
            with BuildStore(bounded.store, max_bytes=None).lease(third):  # a player of the third elsewhere
                resp = put(bounded, second, tar2)  # both builds in use: nothing to evict
                assert resp.status_code == 413 and resp.json()["error"]["code"] == "build_store_full", resp.text
                assert "in use by running players" in resp.json()["error"]["message"]
            assert sorted(published(bounded)) == sorted([first, third]) and leftovers(bounded.store) == []
