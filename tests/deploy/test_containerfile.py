"""The Containerfile's stages: a bare ``podman build .`` (its last stage) is the service image, and the named
targets docs/deploy.md gives (``service``, ``ray-node``) exist. ``./dev container-test`` builds and runs them."""

from __future__ import annotations

import re
from pathlib import Path

CONTAINERFILE = Path(__file__).resolve().parents[2] / "Containerfile"
FROM = re.compile(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", re.I | re.M)


def stages() -> list[tuple[str, str | None]]:
    return FROM.findall(CONTAINERFILE.read_text())


def test_the_default_target_is_the_service_image():
    found = stages()
    named = {name: base for base, name in found if name}
    assert {"service", "ray-node"} <= set(named)
    base, name = found[-1]
    assert base == "service" and name in ("", None), f"last stage is FROM {base} AS {name}: not the service"


def test_the_last_stage_adds_nothing_to_the_service():
    text = CONTAINERFILE.read_text()
    last = text[list(FROM.finditer(text))[-1].end():]
    instructions = [line for line in last.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert instructions == [], instructions
