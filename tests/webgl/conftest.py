from __future__ import annotations

import shutil

import pytest

from fixtures.webgl import GAME
from unirender.platforms import chromium


@pytest.fixture(scope="session")
def browser_binary():
    binary = chromium.find_chromium()
    if binary is None:
        pytest.skip("no Chromium (sudo apt-get install -y chromium)")
    return binary


@pytest.fixture
def game_copy(tmp_path):
    """A writable copy of the test game (to break it)."""
    target = tmp_path / "game"
    shutil.copytree(GAME, target)
    return target
