"""The WebGL build folder check and the file server: Unity's headers for compressed builds, nothing outside the
build served, bad builds refused before a browser starts."""

from __future__ import annotations

import gzip

import pytest
import requests

from fixtures.webgl import GAME
from unirender.builds.detect import is_webgl_build
from unirender.errors import PlatformError
from unirender.webgl.build import content_headers, find_build
from unirender.webgl.server import BuildFiles, BuildServer


@pytest.mark.parametrize("name, expected", [
    ("game.wasm", ("application/wasm", None)),
    ("game.wasm.gz", ("application/wasm", "gzip")),
    ("game.wasm.br", ("application/wasm", "br")),
    ("game.framework.js.gz", ("application/javascript", "gzip")),
    ("game.loader.js", ("application/javascript", None)),
    ("game.data.br", ("application/octet-stream", "br")),
    ("game.data", ("application/octet-stream", None)),
])
def test_content_headers_follow_unitys_server_configuration(name, expected):
    assert content_headers(name) == expected


def test_finds_the_test_game():
    build = find_build(GAME)
    assert is_webgl_build(GAME)
    assert (build.name, build.loader, build.framework, build.code, build.data) == (
        "game", "Build/game.loader.js", "Build/game.framework.js", "Build/game.wasm", "Build/game.data")
    assert build.urls()["codeUrl"] == "Build/game.wasm" and build.compression is None


def test_a_gzip_build_is_found_with_its_compressed_names(game_copy):
    for part in ("framework.js", "wasm", "data"):
        path = game_copy / "Build" / f"game.{part}"
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    build = find_build(game_copy)
    assert build.code == "Build/game.wasm.gz" and build.compression == "gzip"


@pytest.mark.parametrize("breakage, message", [
    (lambda b: (b / "Build" / "game.wasm").unlink(), "Build/game.wasm (or .gz/.br) is missing"),
    (lambda b: (b / "Build" / "game.framework.js").unlink(), "game.framework.js (or .gz/.br) is missing"),
    (lambda b: (b / "Build" / "game.loader.js").unlink(), "no Build/<name>.loader.js"),
    (lambda b: (b / "Build" / "game.wasm").rename(b / "Build" / "game.wasm.gz"), "is not gzip-compressed"),
    (lambda b: (b / "Build" / "game.wasm.br").write_bytes(b"x"), "several wasm files"),
    (lambda b: (b / "Build" / "other.loader.js").write_text(""), "several loaders"),
])
def test_bad_builds_are_refused_with_what_is_wrong(game_copy, breakage, message):
    breakage(game_copy)
    with pytest.raises(PlatformError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        find_build(game_copy)


def test_not_a_build(tmp_path):
    with pytest.raises(PlatformError, match="not a Unity WebGL build"):
        find_build(tmp_path)
    assert not is_webgl_build(tmp_path)


@pytest.fixture
def served(game_copy):
    (game_copy / "Build" / "game.data.gz").write_bytes(gzip.compress(b'{"x": 1}'))
    (game_copy.parent / "secret.txt").write_text("outside the build")
    server = BuildServer(BuildFiles(game_copy, {"index.html": ("text/html; charset=utf-8", b"<p>host</p>")}))
    try:
        yield server
    finally:
        server.close()


def test_the_server_sends_unitys_headers(served):
    wasm = requests.get(f"{served.url}/Build/game.wasm", timeout=10)
    assert wasm.status_code == 200 and wasm.headers["Content-Type"] == "application/wasm"
    assert wasm.content == (GAME / "Build" / "game.wasm").read_bytes()
    data = requests.get(f"{served.url}/Build/game.data.gz", timeout=10)  # requests decodes Content-Encoding
    assert data.headers["Content-Encoding"] == "gzip" and data.json() == {"x": 1}
    host = requests.get(f"{served.url}/__unirender__/index.html", timeout=10)
    assert host.text == "<p>host</p>" and host.headers["Content-Type"].startswith("text/html")
    assert served.server.effective_host == "127.0.0.1"


@pytest.mark.parametrize("path", ["/../secret.txt", "/Build/../../secret.txt", "/Build/nothing.wasm",
                                  "/__unirender__/nothing", "/Build"])
def test_nothing_outside_the_build_is_served(served, path):
    answer = requests.get(served.url + path, timeout=10)
    assert answer.status_code == 404 and "outside" not in answer.text


def test_only_reads(served):
    answer = requests.post(f"{served.url}/Build/game.wasm", data=b"x", timeout=10)
    assert answer.status_code == 405
    assert requests.head(f"{served.url}/Build/game.wasm", timeout=10).headers["Content-Length"] == "41"
