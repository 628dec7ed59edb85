"""Pose generators and work units without a player: grid order and thinning, seeded random draws, repeats."""

from __future__ import annotations

from unirender.jobs.episodes import expand_units, generated_poses
from unirender.spec import load_spec
from unirender.spec.models import GridGenerator, RandomGenerator

POSITIONS = [{"x": 0.25 * i, "y": 0.9, "z": -0.5 * i} for i in range(10)]


def pose_tuples(poses):
    return [(p.position.x, p.position.z, p.rotation.y, p.horizon) for p in poses]


def test_grid_is_every_kept_position_times_rotations_times_horizons():
    grid = GridGenerator(kind="grid", rotations=[0, 180], horizons=[0, 30], every=3)
    got = pose_tuples(generated_poses(grid, POSITIONS, repeat=0))
    kept = POSITIONS[::3]  # positions 0, 3, 6, 9
    assert got == [(p["x"], p["z"], r, h) for p in kept for r in (0, 180) for h in (0, 30)]
    capped = GridGenerator(kind="grid", every=2, max_positions=2)
    got = pose_tuples(generated_poses(capped, POSITIONS, repeat=5))  # a grid ignores the repeat
    assert got == [(p["x"], p["z"], r, 0.0) for p in (POSITIONS[0], POSITIONS[2]) for r in (0, 90, 180, 270)]


def test_random_draws_follow_the_seed_and_the_repeat():
    gen = RandomGenerator(kind="random", count=40, seed=7, rotations=[0, 45, 90], horizons=[-10, 20])
    first = pose_tuples(generated_poses(gen, POSITIONS, repeat=0))
    assert first == pose_tuples(generated_poses(gen, POSITIONS, repeat=0))  # a redone unit draws the same
    assert first != pose_tuples(generated_poses(gen, POSITIONS, repeat=1))  # each repeat draws anew
    other_seed = RandomGenerator(kind="random", count=40, seed=8, rotations=[0, 45, 90], horizons=[-10, 20])
    assert first != pose_tuples(generated_poses(other_seed, POSITIONS, repeat=0))
    # repeat r of seed s draws like repeat 0 of seed s + r (documented: default_rng(seed + repeat))
    assert pose_tuples(generated_poses(gen, POSITIONS, repeat=1)) == pose_tuples(
        generated_poses(other_seed, POSITIONS, repeat=0)
    )
    assert len(first) == 40
    assert {(x, z) for x, z, _, _ in first} <= {(p["x"], p["z"]) for p in POSITIONS}
    assert {r for _, _, r, _ in first} == {0, 45, 90} and {h for _, _, _, h in first} == {-10, 20}
    free = RandomGenerator(kind="random", count=200, seed=1)  # no rotation list: uniform in [0, 360)
    yaws = [r for _, _, r, _ in pose_tuples(generated_poses(free, POSITIONS, repeat=0))]
    assert all(0 <= r < 360 for r in yaws) and len(set(yaws)) > 150
    assert {h for _, _, _, h in pose_tuples(generated_poses(free, POSITIONS, repeat=0))} == {0.0}


def test_repeat_counts_expand_into_units_with_known_frame_counts():
    spec = load_spec(
        {
            "episodes": [
                {"scene": "FloorPlan1_physics", "actions": ["MoveAhead", "RotateLeft"], "repeat": 3},
                {
                    "scene": "FloorPlan201_physics",
                    "name": "sweep",
                    "generator": {"kind": "grid"},
                    "repeat": 2,
                },
                {"scene": "FloorPlan301_physics", "generator": {"kind": "random", "count": 4}, "repeat": 2},
            ]
        }
    )
    units = expand_units(spec)
    assert [u.id for u in units] == [
        "e0000-FloorPlan1_physics-r000",
        "e0000-FloorPlan1_physics-r001",
        "e0000-FloorPlan1_physics-r002",
        "e0001-sweep-r000",
        "e0001-sweep-r001",
        "e0002-FloorPlan301_physics-r000",
        "e0002-FloorPlan301_physics-r001",
    ]
    assert [u.repeat for u in units] == [0, 1, 2, 0, 1, 0, 1]
    assert [u.known_frame_count for u in units] == [3, 3, 3, None, None, 4, 4]
