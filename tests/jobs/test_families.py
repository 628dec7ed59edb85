"""The jobs family registry: every family's adapter is found by its name, and the family modules stay apart."""

from __future__ import annotations

import grimp
import pytest

from unirender.jobs.families import JOB_FAMILIES, family_of_manifest, job_family
from unirender.simulator import FAMILIES
from unirender.spec import load_spec

SPECS = {
    "ai2thor": {"episodes": [{"scene": "FloorPlan1_physics", "actions": ["Pass"], "repeat": 2}]},
    "mlagents": {"environment": {"protocol": "mlagents"}, "episodes": [{"steps": 3, "repeat": 2}]},
    "webgl": {"environment": {"protocol": "webgl", "executable": "game"}, "episodes": [{"repeat": 2}]},
}


WITH_JOBS = FAMILIES  # every family has a jobs adapter (webgl since issue 48)


@pytest.mark.parametrize("family", WITH_JOBS)
def test_every_family_has_a_jobs_adapter(family):
    adapter = job_family(family)
    spec = load_spec(SPECS[family])
    assert adapter.name == family == spec.family
    units = adapter.units(spec)
    assert [u.repeat for u in units] == [0, 1] and units[0].id != units[1].id
    assert all(u.sequential for u in units)  # an action sequence, an ML-Agents game: one player in order
    assert adapter.render_section(spec).modalities == ["rgb"]
    assert adapter.allows_flat_cameras(spec) is False
    assert adapter.allow_flat_cameras_key.endswith(".allow_flat_cameras")
    assert (
        family_of_manifest({"protocol": adapter.manifest_protocol} if adapter.manifest_protocol else {})
        is adapter
    )


def test_an_unknown_family_is_a_clear_error():
    assert set(JOB_FAMILIES) == set(WITH_JOBS)
    with pytest.raises(ValueError, match=r"no jobs adapter for protocol 'http'; known: ai2thor, mlagents, webgl"):
        job_family("http")


def test_the_family_modules_do_not_import_each_other():
    """Lazy imports included: only the registry names both (by string)."""
    graph = grimp.build_graph("unirender", cache_dir=None)  # no stale cache (tests/test_layering.py)
    modules = ("unirender.jobs.episodes", "unirender.jobs.mlagents_episodes", "unirender.jobs.webgl_episodes")
    for importer in modules:
        for imported in modules:
            if importer != imported:
                assert not graph.chain_exists(importer=importer, imported=imported), (importer, imported)
