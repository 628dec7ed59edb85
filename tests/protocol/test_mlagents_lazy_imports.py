"""Importing the ML-Agents step and event types, or the thin client, loads no protobuf, no grpc, no trainer module
(issue 49, stage 1): checked in a fresh interpreter, since this test process has loaded them all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("google.protobuf", "grpc", "mlagents_envs", "unirender.protocol.mlagents.trainer")


def loaded_after(statement: str) -> list[str]:
    code = (f"import json, sys\n{statement}\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}) or m.endswith('_pb2'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statement", [
    "import unirender.protocol.mlagents.steps",
    "import unirender.protocol.mlagents.events",
    "from unirender.protocol.mlagents import DecisionSteps, MLAgentsEvent, TerminalSteps, ActionTuple, HWC",
    "import unirender.client",
    "import unirender.client.mlagents",
    "from unirender.client import RemoteMLAgentsSession",
])  # fmt: skip
def test_step_types_and_the_client_load_no_protobuf_and_no_trainer(statement):
    assert loaded_after(statement) == []


def test_the_trainer_still_loads_on_first_use():
    loaded = loaded_after("from unirender.protocol.mlagents import TrainerProtocol, MLAgentsEvent\n"
                          "import unirender.protocol.mlagents.trainer as t\n"
                          "assert t.MLAgentsEvent is MLAgentsEvent")  # fmt: skip
    assert "unirender.protocol.mlagents.trainer" in loaded and "unirender.protocol.mlagents.communicator_objects_pb2" in loaded
    import unirender.protocol.mlagents as package

    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError):
        package.Nothing  # noqa: B018
