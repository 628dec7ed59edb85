"""Every example spec's ``content_hash`` and its dump (what a dataset's manifest.json and the service's job records
write, key order included) stay byte-identical to what they were at 0189eb0, before the job models shared a base:
both decide datasets' bytes and whether a resumed job is the same job."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from unirender.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# file: (content_hash, sha256 of json.dumps(model_dump(mode="json"), indent=2)), computed at 0189eb0
AT_0189EB0 = {
    "grid_sweep.yaml": ("e2f45a475b7c480516548f70d541959f4d63037a7ecfdfde961670bb0e3313bc",
                        "62321e7ae876add89cf478a86216d49d12ee2046de28ee3de106c9a8802ede2a"),
    "kitchen_tour.yaml": ("836ff28a359b2f37c6db4850b0a7424a01c015f7b0305baaf28d45d7fdf94894",
                          "28bdd6e18b0a261e46e0a102910b1675651f50e05e126695e8eefdca3e5f72b5"),
    "mlagents_reach.yaml": ("15c39dea7ae3c8f45132bc347dd996dfa8d8299ecf3e83294e064813130b8d10",
                            "b87728bb86df854d02557b94cfa4ad2153958533a1cd606984d96abdff1726d1"),
    "random_poses.toml": ("e5ab0aba49cc277bd00e6bc0088d97b58c779882d9a513eabc2a25f354cee219",
                          "935f494552c7694f08644d6b4ba506f0433f52b6f8a5ab549b1e20d6e6291ac7"),
    # added with the webgl spec family (issue 48); held from then on like the others
    "webgl_game.yaml": ("1233a63aeb26fe1b1f0abc86c2aa07534f9e21043c5d3dec23ebe3c917bcde2d",
                        "c4afb0e105eb0da0b56842f1a97fb17edaf38bed7b480e98807981d678a01ef3"),
}  # fmt: skip


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".yaml", ".yml", ".toml", ".json")) == sorted(
        AT_0189EB0
    )


@pytest.mark.parametrize("name", sorted(AT_0189EB0))
def test_content_hash_and_dump_are_unchanged(name):
    spec = load_spec(EXAMPLES / name)
    dump = json.dumps(spec.model_dump(mode="json"), indent=2).encode()
    assert (spec.content_hash(), hashlib.sha256(dump).hexdigest()) == AT_0189EB0[name]
