"""``unirender builds ...`` end to end: add, list, show, verify, tag, rm, gc, export/import, import-ai2thor, and
pull over a real HTTP server on 127.0.0.1 (Range resume after a cut, a wrong sha256 refused)."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from fixtures.unity_builds import COMMIT, make_build
from unirender.builds import BuildStore
from unirender.cli import main


@pytest.fixture
def cli(tmp_path, capsys):
    store = tmp_path / "store"

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main(["builds", "--store", str(store), *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    run.store = store
    return run


def zip_build(folder: Path, out: Path) -> Path:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(folder.rglob("*")):
            bundle.write(path, path.relative_to(folder).as_posix())  # as AI2-THOR ships: no top folder
    return out


def test_add_list_show_verify_tag_rm_gc(tmp_path, cli):
    folder = make_build(tmp_path, family="mlagents")
    rc, out, _ = cli("add", str(folder), "--name", "reach:v1")
    digest = out.strip()
    assert rc == 0 and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    rc, out, _ = cli("list")
    assert rc == 0 and "reach:v1" in out and "mlagents" in out and "Linux64" in out and "2020.3.25f1" in out
    rc, out, _ = cli("show", "reach:v1")
    assert rc == 0
    for text in (digest, "family         mlagents", "unity version  2020.3.25f1", "target         Linux64",
                 "com.unity.ml-agents 2.0.1, communicator 1.5.0", "Game.x86_64", "in 11 files"):  # fmt: skip
        assert text in out, out
    rc, out, _ = cli("show", digest, "--json")
    assert json.loads(out)["executable"] == "Game.x86_64"
    assert cli("tag", digest[:20], "reach")[0] == 0
    assert cli("verify", "reach")[1].startswith(f"{digest}: ok")
    stored = BuildStore(cli.store).resolve("reach").root / "Game_Data" / "sharedassets2.assets"
    stored.chmod(0o644)
    stored.write_bytes(b"changed")
    rc, out, err = cli("verify", "reach")
    assert (
        rc == 1 and out == "changed: Game_Data/sharedassets2.assets (content)\n" and "1 file(s) differ" in err
    )
    rc, out, _ = cli("rm", "reach:v1")
    assert rc == 0 and cli("list")[1] == ""
    rc, out, _ = cli("gc")
    assert rc == 0 and "in 11 files" in out
    rc, _, err = cli("show", "reach:v1")
    assert rc == 1 and "no build named reach:v1" in err


def test_export_then_import_into_another_store(tmp_path, cli, capsys):
    digest = cli("add", str(make_build(tmp_path, family="ai2thor")))[1].strip()
    tar = tmp_path / "moved.tar"
    assert cli("export", digest, "-o", str(tar))[0] == 0
    rc = main(["builds", "--store", str(tmp_path / "elsewhere"), "import", str(tar), "--name", "thor:paper"])
    assert rc == 0 and capsys.readouterr().out.strip() == digest


def test_import_ai2thor_cache(tmp_path, cli):
    releases = tmp_path / ".ai2thor" / "releases"
    make_build(releases, family="ai2thor", platform="Linux64")
    make_build(releases, family="ai2thor", platform="CloudRendering", variant=1, changed=1)
    (releases / f"thor-Linux64-{COMMIT}.lock").write_text("")
    rc, out, _ = cli("import-ai2thor", str(releases))
    assert rc == 0 and len(out.splitlines()) == 2
    store = BuildStore(cli.store)
    cloud = store.resolve(f"ai2thor:{COMMIT}")
    assert cloud.info.target == "CloudRendering" and cloud.info.family == "ai2thor"
    assert store.resolve(f"ai2thor:{COMMIT}", platform="Linux64").info.target == "Linux64"
    assert store.resolve(f"ai2thor:{COMMIT}-Linux64").info.ai2thor_commit == COMMIT
    rc, _, err = cli("show", "ai2thor:" + "0" * 40)
    assert rc == 1 and "unirender builds import-ai2thor" in err and "unirender builds pull" in err


class _BuildHost(http.server.BaseHTTPRequestHandler):
    """A build host: serves one archive, honours Range, and cuts the first full download halfway."""

    payload = b""
    cut_first = True
    requests: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.requests.append(self.headers.get("Range"))
        start = 0
        if (ranged := self.headers.get("Range")) and (m := re.fullmatch(r"bytes=(\d+)-", ranged)):
            start = int(m.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(self.payload) - 1}/{len(self.payload)}")
        else:
            self.send_response(200)
        body = self.payload[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if type(self).cut_first:
            type(self).cut_first = False
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(2)  # the connection drops mid-download
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def build_host():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BuildHost)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _BuildHost.requests = []
    _BuildHost.cut_first = True
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_pull_resumes_with_range_and_checks_the_sha256(tmp_path, cli, build_host):
    folder = make_build(tmp_path / "src", family="ai2thor", assets=6, asset_size=256 << 10)
    archive = zip_build(folder, tmp_path / f"thor-Linux64-{COMMIT}.zip")
    _BuildHost.payload = archive.read_bytes()
    sha = hashlib.sha256(_BuildHost.payload).hexdigest()
    url = f"http://127.0.0.1:{build_host.server_address[1]}/builds/{archive.name}"
    rc, _, err = cli("pull", url, "--sha256", sha)
    assert rc == 1 and err  # the cut: nothing published, the partial download kept
    assert BuildStore(cli.store).digests() == []
    rc, out, err = cli("pull", url, "--sha256", sha)
    assert rc == 0, err
    assert _BuildHost.requests[0] is None and _BuildHost.requests[1].startswith("bytes=") and \
        _BuildHost.requests[1] != "bytes=0-"  # fmt: skip
    store = BuildStore(cli.store)
    assert store.resolve(f"ai2thor:{COMMIT}").digest == out.strip() == store.digest_folder(folder)
    assert not list((cli.store / "tmp").iterdir())


def test_pull_with_a_wrong_sha256_publishes_nothing(tmp_path, cli, build_host):
    archive = zip_build(make_build(tmp_path / "src", family="mlagents"), tmp_path / "Game.zip")
    _BuildHost.payload, _BuildHost.cut_first = archive.read_bytes(), False
    url = f"http://127.0.0.1:{build_host.server_address[1]}/Game.zip"
    rc, _, err = cli("pull", url, "--sha256", "ab" * 32)
    assert rc == 1 and "neither matches" in err and hashlib.sha256(_BuildHost.payload).hexdigest() in err
    assert BuildStore(cli.store).digests() == [] and not list((cli.store / "tmp").iterdir())


def test_pull_a_file_url_with_the_build_digest(tmp_path, cli):
    folder = make_build(tmp_path / "src", family="mlagents")
    archive = zip_build(folder, tmp_path / "Game.zip")
    digest = BuildStore(tmp_path / "scratch").digest_folder(folder)
    rc, out, err = cli("pull", archive.as_uri(), "--sha256", digest, "--name", "reach:pulled")
    assert rc == 0 and out.strip() == digest, err
    shutil.rmtree(tmp_path / "scratch")
