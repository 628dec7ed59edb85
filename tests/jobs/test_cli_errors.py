"""Bad input to ``unirender render`` / ``spec check``: a clear message and exit code 2, never a traceback."""

from __future__ import annotations

import pytest

from unirender.cli import main


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["render", "{dir}/missing.yaml"], "cannot read spec"),
        (["render", "{dir}/job.yaml", "--workers", "0"], "workers: must be an int of at least 1"),
        (["render", "{dir}/bad.yaml"], "episodes.0.generator.count: required key is missing"),
        (["spec", "check", "{dir}/bad.yaml"], "episodes.0.generator.count"),
        (
            ["render", "{dir}/noscene.yaml"],
            "episodes.0.scene: 'FloorPlan9' is not a scene of the builtin player",
        ),
        (["spec", "check", "{dir}/noscene.yaml"], "built-in scenes: FloorPlan1_physics"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, argv, fragment):
    (tmp_path / "job.yaml").write_text("episodes: [{scene: FloorPlan1_physics, actions: [MoveAhead]}]\n")
    (tmp_path / "bad.yaml").write_text("episodes: [{scene: FloorPlan1_physics, generator: {kind: random}}]\n")
    (tmp_path / "noscene.yaml").write_text(
        f"episodes: [{{scene: FloorPlan9, actions: [MoveAhead]}}]\noutput: {{directory: {tmp_path}/out}}\n"
    )
    rc = main([a.format(dir=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert fragment in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing started
