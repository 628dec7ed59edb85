"""ML-Agents specs and jobs on the real reference player (EGL, 32x32): validation, a dataset written and read
back against a direct MLAgentsController run, a bad scripted action, and SIGKILL + resume giving the same bytes."""

from __future__ import annotations

import filecmp
import os
import signal
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from fixtures import no_leaks  # noqa: E402, F401  (a fixture)
from fixtures.held_job import start_held  # noqa: E402
from unirender.errors import SpecError  # noqa: E402
from unirender.jobs import load_dataset, render  # noqa: E402
from unirender.jobs.runner import JobError  # noqa: E402
from unirender.spec import MLAgentsJobSpec, load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BEHAVIOR = "ReachTarget?team=0"


def job(out, **extra) -> dict:
    spec = {
        "name": "reach",
        "environment": {
            "protocol": "mlagents",
            "platform": "EGL",
            "width": 32,
            "height": 32,
            "time_scale": 100,
            "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"},
            "environment_parameters": {
                "light_intensity": {
                    "sampler_type": "uniform",
                    "sampler_parameters": {"min_value": 0.5, "max_value": 1.5},
                },
                "target_red": 0.3,
            },
        },
        "episodes": [
            {"name": "rand", "steps": 6, "seed": 3, "repeat": 2, "policy": {"kind": "random", "seed": 7}},
            {
                "name": "script",
                "seed": 9,
                "policy": {
                    "kind": "scripted",
                    "actions": [
                        {"continuous": [1.0, 0.0], "discrete": [0]},
                        {"continuous": [[0.5, 1.0], [-1.0, 0.0]], "discrete": [[2], [1]]},
                    ],
                },
            },
        ],
        "output": {"directory": str(out), "frames_per_shard": 3},
        "workers": 2,
    }
    spec.update(extra)
    return spec


def test_example_spec_loads():
    spec = load_spec(ROOT / "examples" / "mlagents_reach.yaml")
    assert isinstance(spec, MLAgentsJobSpec)
    assert [e.known_frame_count for e in spec.episodes] == [41, 4]


def test_bad_spec_reports_file_line_and_suggestions(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "environment:\n"
        "  protocol: mlagents\n"
        "  environment_parameters:\n"
        "    light_intensity:\n"
        "      sampler_type: gausian\n"
        "episodes:\n"
        "  - steps: 3\n"
        "    polcy: random\n"
        "  - policy: zeroes\n"
        "  - policy: {kind: scripted, actions: [{continuous: [1, 0]}]}\n"
        "    steps: 4\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    text = str(info.value)
    assert (
        f"{path}:4:5: environment.environment_parameters.light_intensity" in text
        and "did you mean 'gaussian'" in text
    )
    assert f"{path}:8:5: episodes.0.polcy" in text and "did you mean 'policy'" in text
    assert f"{path}:9:" in text and "did you mean 'zeros'" in text
    assert "episodes.2.steps" in text and "lists 1 actions" in text
    paths = [p for p, _ in info.value.errors]
    assert "environment.environment_parameters.light_intensity" in paths

    with pytest.raises(SpecError, match="did you mean 'mlagents'"):
        load_spec({"environment": {"protocol": "mlagent"}, "episodes": [{"steps": 1}]})
    with pytest.raises(SpecError, match="did you mean 'CameraSensor'"):
        load_spec({**job("x"), "record": {"sensors": ["CameraSenser"]}})
    # protocol: ai2thor is the default and changes nothing of an AI2-THOR spec (same content hash)
    plain = {"episodes": [{"scene": "FloorPlan1", "actions": ["Pass"]}]}
    explicit = {"environment": {"protocol": "ai2thor"}, **plain}
    assert load_spec(explicit).content_hash() == load_spec(plain).content_hash()


def _direct_run(unit_seed: int, steps: int, policy_seed: int):
    """The episode driven straight through MLAgentsController, with the documented policy rule: per step,
    ``ActionSpec.random(n, default_rng([policy seed, unit seed, step]), decision.action_mask)``."""
    from unirender.mlagents import MLAgentsController, Sampler

    params = {"light_intensity": Sampler.uniform(0.5, 1.5, unit_seed + 0), "target_red": 0.3}
    out = []
    with MLAgentsController("builtin", platform="EGL", width=32, height=32, time_scale=100, seed=unit_seed,
                            environment_parameters=params, env={"UNIRENDER_MLAGENTS_AGENTS": "2"}) as env:  # fmt: skip
        event = env.reset()
        spec = env.behavior_specs[BEHAVIOR]
        for step in range(steps + 1):
            decision, _ = event.steps()
            out.append((decision.frames["CameraSensor"].copy(), np.array(decision.obs[1])))
            if step < steps:
                rng = np.random.default_rng([policy_seed, unit_seed, step])
                event = env.step(spec.action_spec.random(len(decision), rng, decision.action_mask))
    return out


@pytest.mark.usefixtures("no_leaks")
def test_job_writes_a_dataset_that_reads_back(tmp_path):
    result = render(job(tmp_path / "ds"))
    assert result.frames == 7 * 2 + 3
    ds = load_dataset(tmp_path / "ds")
    assert ds.manifest["protocol"] == "mlagents"
    assert ds.manifest["output"]["frame_keys"] == ["CameraSensor.0", "CameraSensor.1"]
    frames = list(ds)
    assert len(frames) == 17
    first = frames[0]
    agents = first.metadata["behaviors"][BEHAVIOR]["agents"]
    assert [a["id"] for a in agents] == [0, 1] and all(a["decision"] for a in agents)
    assert len(agents[0]["observations"]["VectorSensor_size8"]) == 8
    assert first.frames()["CameraSensor.0"].dtype == np.uint8
    assert first.frames()["CameraSensor.0"].shape == (32, 32, 3)
    # the last frame of an episode has no action; every other decision agent's does
    assert "action" not in frames[6].metadata["behaviors"][BEHAVIOR]["agents"][0]
    # the scripted episode: broadcast row, then one row per agent
    script = [f.metadata["behaviors"][BEHAVIOR]["agents"] for f in frames[14:]]
    assert script[0][1]["action"] == {"continuous": [1.0, 0.0], "discrete": [0]}
    assert script[1][1]["action"] == {"continuous": [-1.0, 0.0], "discrete": [1]}

    # repeat 1 (seed 3 + 1) equals a direct run of the same seed, parameters and actions
    direct = _direct_run(4, 6, 7)
    for step, (images, vectors) in enumerate(direct):
        got = frames[7 + step]
        assert got.metadata["step"] == step
        for i in range(2):
            assert np.array_equal(got.frames()[f"CameraSensor.{i}"], images[i]), (step, i)
            got_vector = got.metadata["behaviors"][BEHAVIOR]["agents"][i]["observations"][
                "VectorSensor_size8"
            ]
            assert np.array_equal(np.float32(got_vector), vectors[i]), (step, i)
        if step < 6:
            rng = np.random.default_rng([7, 4, step])
            cont = rng.uniform(-1.0, 1.0, (2, 2)).astype(np.float32)
            assert np.float32(got.metadata["behaviors"][BEHAVIOR]["agents"][1]["action"]["continuous"]).tolist() \
                == cont[1].tolist()  # fmt: skip
    # the two repeats differ (seed + repeat): different starts, different light
    assert not np.array_equal(frames[0].frames()["CameraSensor.0"], frames[7].frames()["CameraSensor.0"])


@pytest.mark.usefixtures("no_leaks")
def test_scripted_actions_of_the_wrong_width_fail_the_job_with_advice(tmp_path):
    spec = job(tmp_path / "bad", workers=1)
    spec["episodes"] = [{"policy": {"kind": "scripted", "actions": [{"continuous": [1.0, 0.0, 0.5]}]}}]
    with pytest.raises(JobError, match=r"policy.actions.0.continuous: 3 values.*takes 2(.|\n)*fix the spec"):
        render(spec)


def _files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and ".unirender-job" not in p.parts and p.name != "manifest.json"
    )


@pytest.mark.usefixtures("no_leaks")
def test_sigkill_and_resume_give_identical_bytes(tmp_path):
    import yaml

    doc = job(tmp_path / "killed", workers=1)
    doc["episodes"] = [{"name": "long", "steps": 59, "seed": 1, "policy": "random"}]
    doc["output"]["frames_per_shard"] = 5
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # Held still once 3 chunks are committed (tests/fixtures/held_job.py): the kill lands mid-job whatever the load.
    proc = start_held("commits", 3, tmp_path / "ready", ["render", str(path)], log=tmp_path / "job.log", env=env,
                      start_new_session=True)
    log = tmp_path / "killed" / ".unirender-job" / "commits.log"
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its game, at once
    finally:
        proc.wait(10)
    committed = len(log.read_bytes().splitlines())
    assert committed == 3
    assert not (tmp_path / "killed" / "manifest.json").exists()

    resumed = render(path)
    assert resumed.frames == 60 and resumed.units_resumed == 0
    assert resumed.frames_written == 60 - 5 * 3
    clean = render(doc, output_dir=tmp_path / "clean")
    assert clean.frames == 60
    names = _files(tmp_path / "clean")
    assert names == _files(tmp_path / "killed") and len(names) > 120
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "clean", tmp_path / "killed", names, shallow=False)
    assert not mismatch and not errors


def test_example_and_demo_run(tmp_path):
    from unirender.jobs.demo import contact_sheet_for, mlagents_demo_spec
    from unirender.spec import read_document

    doc = read_document(ROOT / "examples" / "mlagents_reach.yaml")
    doc["environment"].update(width=32, height=32, platform="EGL")
    doc["output"]["directory"] = str(tmp_path / "example")
    doc["episodes"][0].update(steps=2, repeat=1)
    result = render(doc)
    assert result.frames == 3 + 4
    frame = next(iter(load_dataset(tmp_path / "example")))
    assert sorted(frame.frames()) == ["CameraSensor.0", "CameraSensor.1"]

    demo = mlagents_demo_spec(tmp_path / "demo", size=32)
    demo["episodes"][0].update(steps=3, repeat=1)
    assert render(demo).frames == 4
    assert contact_sheet_for(tmp_path / "demo").stat().st_size > 0


@pytest.mark.parametrize("fmt", ["npz", "webdataset"])
def test_archive_formats_hold_the_same_frames(tmp_path, fmt):
    def small(out, fmt):
        doc = job(out, workers=1)
        doc["episodes"] = [{"steps": 2, "seed": 4, "policy": {"kind": "random", "seed": 1}}]
        doc["output"]["format"] = fmt
        return doc

    render(small(tmp_path / "png", "png"))
    render(small(tmp_path / fmt, fmt))
    want, got = list(load_dataset(tmp_path / "png")), list(load_dataset(tmp_path / fmt))
    assert len(got) == len(want) == 3
    for a, b in zip(want, got, strict=True):
        assert a.metadata == b.metadata
        assert sorted(a.frames()) == sorted(b.frames())
        for key in a.frames():
            assert np.array_equal(a.frames()[key], b.frames()[key])


@pytest.mark.usefixtures("no_leaks")
def test_a_game_started_with_nographics_fails_the_job_at_its_first_frame(tmp_path):
    """Unity's -nographics renders black cameras: the job fails fast (no backend: the game is launched here)."""
    spec = job(tmp_path / "black", workers=1)
    spec["environment"]["args"] = ["-nographics"]
    spec["episodes"] = [{"steps": 3, "seed": 1, "policy": "zeros"}]
    with pytest.raises(JobError, match=r"CameraSensor(.|\n)*flat colour(.|\n)*-nographics(.|\n)*record.allow_flat"):
        render(spec)
