"""The driver's build store served over HTTP to Ray nodes (``unirender.cluster.ray_builds.StoreServer``), without
Ray: the server on 127.0.0.1, asked by the same client a node uses (``ServiceSource``, what ``RayStoreSource`` is)
and by plain requests for what that client never sends. It speaks the service's blob routes, behind its token."""

from __future__ import annotations

import json
import socket

import pytest
import requests

from fixtures.unity_builds import make_build
from unirender.builds import BuildFetchError, BuildStore, manifest
from unirender.builds.fetch import BATCH_BLOBS, FetchStats, ServiceSource, fetch
from unirender.cluster import ray_builds
from unirender.cluster.ray_builds import NODE_HEADER, StoreServer


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("blob-server")
    store = BuildStore(root / "driver")
    build = store.add(make_build(root / "src", family="ai2thor", player="reference", asset_size=3 << 20))
    server = StoreServer(str(store.root))
    try:
        endpoint = server.endpoint("127.0.0.1")
        yield server, endpoint, build
    finally:
        server.close()


def files(build) -> list[tuple[str, int]]:
    entries = manifest.parse((build.path / "manifest.json").read_bytes())
    return sorted({(e.sha256, e.size) for e in entries if e.type == "file"}, key=lambda f: f[1])


def test_a_node_fetches_every_blob_and_what_it_moved_is_counted_for_it(served, tmp_path):
    server, endpoint, build = served
    node = BuildStore(tmp_path / "node")
    stats = FetchStats()
    source = ServiceSource(endpoint["url"], endpoint["token"], headers={NODE_HEADER: "node-1"})
    assert fetch(node, build.digest, source, stats=stats).digest == build.digest
    assert node.verify(build.digest) == []
    moved = sum(size for _sha, size in files(build))
    assert stats.bytes_moved == moved
    assert server.served()["node-1"] == {"manifests": 1, "bytes": moved}


def test_without_its_token_nothing_is_served_and_the_fetch_fails_clearly(served, tmp_path):
    _server, endpoint, build = served
    base = f"{endpoint['url']}/v1/builds/{build.digest}"
    assert requests.get(f"{base}/manifest", timeout=30).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert requests.get(f"{base}/blobs/{files(build)[0][0]}", headers=wrong, timeout=30).status_code == 401
    node = BuildStore(tmp_path / "node")
    with pytest.raises(BuildFetchError, match="401 unauthorized"):
        fetch(node, build.digest, ServiceSource(endpoint["url"], "not-the-token"))
    assert node.digests() == []


def test_ranges_batches_and_what_is_not_the_builds_are_answered_as_the_service_does(served):
    server, endpoint, build = served
    auth = {"Authorization": f"Bearer {endpoint['token']}"}
    base = f"{endpoint['url']}/v1/builds/{build.digest}"
    store = server._source.store
    (small, _), (large, large_size) = files(build)[0], files(build)[-1]
    large_bytes = store.blob_path(large, False).read_bytes()
    part = requests.get(f"{base}/blobs/{large}", headers={**auth, "Range": "bytes=10-19"}, timeout=30)
    assert part.status_code == 206 and part.content == large_bytes[10:20]
    assert part.headers["Content-Range"] == f"bytes 10-19/{large_size}"
    rest = requests.get(f"{base}/blobs/{large}", headers={**auth, "Range": f"bytes={large_size - 5}-"}, timeout=30)
    assert rest.status_code == 206 and rest.content == large_bytes[-5:]
    past = requests.get(f"{base}/blobs/{large}", headers={**auth, "Range": f"bytes={large_size}-"}, timeout=30)
    assert past.status_code == 416
    backwards = requests.get(f"{base}/blobs/{large}", headers={**auth, "Range": "bytes=10-5"}, timeout=30)
    assert backwards.status_code == 416  # not a 206 with a negative Content-Length
    batch = requests.post(f"{base}/blobs", json={"blobs": [small, small]}, headers=auth, timeout=30)
    small_bytes = next(p for x in (True, False) if (p := store.blob_path(small, x)).exists()).read_bytes()
    assert batch.status_code == 200 and batch.content == small_bytes * 2

    def code(answer) -> tuple[int, str]:
        return answer.status_code, answer.json()["error"]["code"]

    assert code(requests.get(f"{base}/blobs/{'0' * 64}", headers=auth, timeout=30)) == (404, "blob_not_found")
    other = f"{endpoint['url']}/v1/builds/sha256:{'1' * 64}/manifest"
    assert code(requests.get(other, headers=auth, timeout=30)) == (404, "build_not_found")
    assert code(requests.post(f"{base}/blobs", json={"blobs": ["0" * 64]}, headers=auth, timeout=30)) == (
        404, "blob_not_found")  # fmt: skip
    assert code(requests.post(f"{base}/blobs", json={"blobs": [small] * (BATCH_BLOBS + 1)}, headers=auth,
                              timeout=30)) == (400, "invalid_parameter")  # fmt: skip
    assert code(requests.post(f"{base}/blobs", data=b"not json", headers=auth, timeout=30)) == (
        400, "invalid_parameter")  # fmt: skip
    assert code(requests.get(f"{endpoint['url']}/elsewhere", headers=auth, timeout=30)) == (404, "not_found")


def answer_until_closed(sock: socket.socket) -> tuple[int, dict]:
    """Everything the server sends until it closes the connection: the status and the JSON error."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def test_a_batch_body_is_read_only_after_its_token_and_within_its_bound(served):
    """``POST .../blobs`` announcing a terabyte: without the token the head alone gets the 401, with it the 413;
    nothing of the body is waited for (none is sent), and the connection is closed behind the refusal."""
    _server, endpoint, build = served
    host, port = endpoint["url"].removeprefix("http://").split(":")
    for auth, status, code in (("", 401, "unauthorized"), ("Authorization: Bearer not-the-token\r\n", 401,
                               "unauthorized"), (f"Authorization: Bearer {endpoint['token']}\r\n", 413,
                               "batch_too_large")):  # fmt: skip
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(f"POST /v1/builds/{build.digest}/blobs HTTP/1.1\r\nHost: x\r\n{auth}"
                         "Content-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n".encode())
            answered, error = answer_until_closed(sock)
        assert (answered, error["code"]) == (status, code)


def test_no_request_names_a_file_outside_the_builds_blobs(served):
    """A blob is served only as a file of the build asked about: a path in a batch's body or in the URL is no
    blob's name, whatever it points at."""
    _server, endpoint, build = served
    auth = {"Authorization": f"Bearer {endpoint['token']}"}
    base = f"{endpoint['url']}/v1/builds/{build.digest}"
    manifest_path = f"../../builds/{build.digest.removeprefix('sha256:')}/manifest.json"
    for name in (manifest_path, "/etc/passwd", f"{files(build)[0][0]}/../../x", files(build)[0][0].upper()):
        answer = requests.post(f"{base}/blobs", json={"blobs": [name]}, headers=auth, timeout=30)
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "blob_not_found"), name
    host, port = endpoint["url"].removeprefix("http://").split(":")
    for path in (f"/blobs/{manifest_path}", "/blobs/..%2f..%2fmanifest.json", f"/../../{build.digest}/manifest"):
        with socket.create_connection((host, int(port)), timeout=30) as sock:  # the path sent as written
            sock.sendall(f"GET /v1/builds/{build.digest}{path} HTTP/1.1\r\nHost: x\r\n"
                         f"Authorization: Bearer {endpoint['token']}\r\nConnection: close\r\n\r\n".encode())
            answered, error = answer_until_closed(sock)
        assert (answered, error["code"]) == (404, "not_found"), path


def test_a_silent_connection_is_closed_and_holds_no_thread(monkeypatch, tmp_path):
    """A peer that sends half a head, or a batch's head and then none of its body, is dropped after ``IDLE_S``:
    it holds none of the server's threads for ever."""
    monkeypatch.setattr(ray_builds, "IDLE_S", 0.5)
    server = StoreServer(str(BuildStore(tmp_path / "store").root))
    try:
        endpoint = server.endpoint("127.0.0.1")
        host, port = endpoint["url"].removeprefix("http://").split(":")
        for sent in (b"GET /v1/builds/", f"POST /v1/builds/sha256:{'0' * 64}/blobs HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {endpoint['token']}\r\nContent-Length: 100\r\n\r\n{{".encode()):
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                sock.sendall(sent)
                assert sock.recv(65536) == b""  # the server's close: nothing answered, the connection ended
    finally:
        server.close()


def test_an_empty_file_is_served_whole(tmp_path):
    """A build's empty file over ``GET .../blobs/{sha256}``: a 200 with no body, on a connection that stays open
    for the next request (sendfile refuses a count of 0: it once failed after the head went out)."""
    source = make_build(tmp_path / "src", family="ai2thor", player="reference")
    (source / "empty.txt").write_bytes(b"")
    build = BuildStore(tmp_path / "driver").add(source)
    empty = next(sha for sha, size in files(build) if size == 0)
    server = StoreServer(str(tmp_path / "driver"))
    try:
        endpoint = server.endpoint("127.0.0.1")
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {endpoint['token']}"
            base = f"{endpoint['url']}/v1/builds/{build.digest}"
            answer = session.get(f"{base}/blobs/{empty}", timeout=30)
            assert (answer.status_code, answer.content) == (200, b"")
            assert session.get(f"{base}/manifest", timeout=30).status_code == 200
        assert server.served()["?"]["manifests"] == 1
    finally:
        server.close()
