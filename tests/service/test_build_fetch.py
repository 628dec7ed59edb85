"""A node fetching a build from a protected service (issue 46, stage 1): ``pull`` with a bearer token (Python
``token=``, CLI ``--token`` / ``UNIRENDER_TOKEN``) and ``unirender.builds.fetch`` with a ``ServiceSource``, against a
real ``unirender serve`` whose ``GET /v1/builds/{digest}`` needs a token."""

from __future__ import annotations

import urllib.error

import pytest

from fixtures.unity_builds import make_build
from unirender.builds import BuildFetchError, BuildStore
from unirender.builds.fetch import FetchStats, ServiceSource, fetch
from unirender.cli import main

ALICE = "alice-fetch-token"


@pytest.fixture(scope="module")
def service(make_service, tmp_path_factory):
    root = tmp_path_factory.mktemp("service-store")
    store = BuildStore(root / "store")
    build = store.add(make_build(root / "src", family="ai2thor", player="reference"))
    service = make_service({"tokens": {"alice": ALICE}, "build_store": str(store.root),
                            "allowed_builds": [build.digest]})  # fmt: skip
    service.digest, service.store_root = build.digest, store.root
    return service


def test_pull_sends_the_token_and_takes_the_builds_route(service, tmp_path):
    url = f"{service.url}/v1/builds/{service.digest}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        BuildStore(tmp_path / "bare").pull(url)
    assert refused.value.code == 401
    node = BuildStore(tmp_path / "node")
    build = node.pull(url, token=ALICE, sha256=service.digest)
    assert build.digest == service.digest and node.verify(build.digest) == []
    assert not list((node.root / "tmp").glob("upload-*"))  # the downloaded tar is not kept once published


def test_the_cli_pull_takes_the_token_from_the_environment(service, tmp_path, monkeypatch, capsys):
    url = f"{service.url}/v1/builds/{service.digest}"
    monkeypatch.setenv("UNIRENDER_TOKEN", ALICE)
    assert main(["builds", "--store", str(tmp_path / "env"), "pull", url]) == 0
    assert capsys.readouterr().out.strip() == service.digest
    monkeypatch.delenv("UNIRENDER_TOKEN")
    assert main(["builds", "--store", str(tmp_path / "flag"), "pull", url, "--token", ALICE]) == 0
    assert BuildStore(tmp_path / "flag").digests() == [service.digest]


def test_fetch_from_a_service_and_one_clear_error_without_the_right_token(service, tmp_path):
    node = BuildStore(tmp_path / "node")
    with pytest.raises(BuildFetchError) as caught:
        fetch(node, service.digest, ServiceSource(service.url, "not-a-token"), node_id="node-9")
    message = str(caught.value)
    assert service.digest in message and "node-9" in message and service.url in message
    assert node.digests() == []
    stats = FetchStats()
    assert fetch(node, service.digest, ServiceSource(service.url, ALICE), stats=stats).digest == service.digest
    assert stats.fetched and node.verify(service.digest) == []


def test_a_service_fetch_moves_only_the_blobs_the_node_lacks(service, tmp_path):
    """The blob routes: a node holding a sibling build (every file shared but one) moves that one file only, and
    the build is published checked."""
    import requests

    from fixtures.unity_builds import asset_bytes
    from unirender.builds import manifest

    origin = BuildStore(service.store_root)
    build = origin.get(service.digest)
    node = BuildStore(tmp_path / "node")
    sibling = make_build(tmp_path / "sibling", family="ai2thor", player="reference", variant=5, changed=1)
    node.add(sibling)
    stats = FetchStats()
    assert fetch(node, service.digest, ServiceSource(service.url, ALICE), stats=stats).digest == service.digest
    assert node.verify(service.digest) == []
    entries = manifest.parse((build.path / "manifest.json").read_bytes())
    assert stats.blobs_moved == 1 and stats.bytes_moved == len(asset_bytes(0, 4096))
    assert stats.blobs_present == len({e.sha256 for e in entries if e.type == "file"}) - 1

    auth = {"Authorization": f"Bearer {ALICE}"}
    base = f"{service.url}/v1/builds/{service.digest}"
    not_its = requests.get(f"{base}/blobs/{'0' * 64}", headers=auth, timeout=30)
    assert not_its.status_code == 404 and not_its.json()["error"]["code"] == "blob_not_found"
    assert requests.get(f"{base}/blobs/not-a-sha", headers=auth, timeout=30).status_code == 400
    assert requests.get(f"{base}/manifest", timeout=30).status_code == 401
    other = "sha256:" + "1" * 64
    assert requests.get(f"{service.url}/v1/builds/{other}/manifest", headers=auth, timeout=30).status_code == 404
    some = next(e for e in entries if e.type == "file" and e.size > 100)
    part = requests.get(f"{base}/blobs/{some.sha256}", headers={**auth, "Range": "bytes=10-19"}, timeout=30)
    assert part.status_code == 206 and len(part.content) == 10


def test_several_small_blobs_come_in_one_post_in_the_order_asked(service):
    """``POST /v1/builds/{digest}/blobs``: the files' bytes one after another, in the order asked; a file of another
    build, a malformed body or too many blobs is refused with its error."""
    import requests

    from unirender.builds import manifest
    from unirender.builds.fetch import BATCH_BLOBS

    origin = BuildStore(service.store_root)
    entries = manifest.parse((origin.get(service.digest).path / "manifest.json").read_bytes())
    files = sorted({(e.sha256, e.size) for e in entries if e.type == "file"}, key=lambda f: f[1])[:5][::-1]
    expected = b"".join(next(p for x in (True, False) if (p := origin.blob_path(sha, x)).exists()).read_bytes()
                        for sha, _size in files)  # fmt: skip
    auth = {"Authorization": f"Bearer {ALICE}"}
    url = f"{service.url}/v1/builds/{service.digest}/blobs"
    answer = requests.post(url, json={"blobs": [sha for sha, _size in files]}, headers=auth, timeout=30)
    assert answer.status_code == 200 and answer.content == expected
    assert requests.post(url, json={"blobs": [files[0][0]]}, timeout=30).status_code == 401

    def refused(body) -> tuple[int, str]:
        answer = requests.post(url, json=body, headers=auth, timeout=30)
        return answer.status_code, answer.json()["error"]["code"]

    assert refused({"blobs": [files[0][0], "0" * 64]}) == (404, "blob_not_found")
    assert refused({"blobs": ["not-a-sha"]}) == (400, "invalid_digest")
    assert refused({"blobs": []}) == (400, "invalid_parameter")
    assert refused({"files": [files[0][0]]}) == (400, "invalid_parameter")
    assert refused({"blobs": [files[0][0]] * (BATCH_BLOBS + 1)}) == (413, "batch_too_large")
