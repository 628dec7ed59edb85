"""Every line of every family registry resolves, and what it names sits where the import contracts allow.

A family is its adapter modules plus one line per registry (``docs/internals.md``, "Adding a family"). A registry
line is a ``"module:attribute"`` string (or an object holding the target itself), loaded on first use, so a wrong
line would otherwise fail only when somebody first uses that family in that layer. Here, for every registry and
every family it lists: the target imports, is what the registry expects (a class, a callable, an adapter object),
and its module is one the registry's own layer may import under ``.importlinter`` (its layer or one below it,
never a layer above) and lies in the package the registry hands out to (the console's adapters in
``service.ui``, the client's in ``client``, ...).
"""

from __future__ import annotations

import configparser
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from unirender.simulator import FAMILIES, load_target

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Registry:
    """One registry: where it is, what it maps a family to, where its targets may live and what they must be."""

    name: str  # "module:ATTRIBUTE" of the registry
    packages: tuple[str, ...]  # the packages its targets must lie in
    targets: Callable[[Any], Iterator[tuple[str, str | Any]]]  # registry -> (family, target) pairs
    kind: Callable[[Any], bool] = callable  # what a resolved target must be
    needs: str | None = None  # an extra its targets import

    @property
    def module(self) -> str:
        return self.name.partition(":")[0]


def _strings(table: dict) -> Iterator[tuple[str, str]]:
    yield from table.items()


def _gym(table: dict) -> Iterator[tuple[str, str]]:
    for family, entry in table.items():
        yield family, entry.env
        if entry.agents_vector_env is not None:
            yield family, entry.agents_vector_env


def _spec(table: dict) -> Iterator[tuple[str, Any]]:
    for family, entry in table.items():
        assert entry.name == family
        for target in (entry.job_model, entry.environment_model, entry.check_loaded, entry.check_builtin_scenes,
                       entry.check_actions, entry.platform_request, entry.platform_name):  # fmt: skip
            yield family, target


def _demos(table: dict) -> Iterator[tuple[str, Any]]:
    for family, demo in table.items():
        yield family, demo.spec


def _backends(table: dict) -> Iterator[tuple[str, str]]:
    for name, (module, attribute, _extra) in table.items():
        yield name, f"{module}:{attribute}"


def _has(*names: str) -> Callable[[Any], bool]:
    return lambda target: all(hasattr(target, name) for name in names)


CONTROLLERS = ("unirender.controller", "unirender.cluster", "unirender.mlagents", "unirender.webgl")
REGISTRIES = [
    Registry("unirender.cluster.simulators:LAUNCHERS", CONTROLLERS, _strings),
    Registry("unirender.cluster.simulators:CAMERA_READERS", CONTROLLERS, _strings),
    Registry("unirender.cluster.simulators:WEBGL_LAUNCHERS", CONTROLLERS, _strings),
    Registry("unirender.cluster.simulators:RAY_EVENT_CODECS", ("unirender.cluster",), _strings,
             _has("pack", "unpack"), needs="ray"),
    Registry("unirender.cluster.registry:BACKENDS", ("unirender.cluster",), _backends, inspect.isclass, needs="ray"),
    Registry("unirender.cluster.service_backend:SESSION_BODIES", ("unirender.cluster",), _strings),
    Registry("unirender.spec.families:SPEC_FAMILIES", ("unirender.spec",), _spec),
    Registry("unirender.jobs.families:JOB_FAMILIES", ("unirender.jobs",), _strings,
             _has("units", "seat", "frames", "dataset_frame")),
    Registry("unirender.jobs.demo:DEMOS", ("unirender.jobs",), _demos),
    Registry("unirender.service.families:SERVICE_FAMILIES", ("unirender.service",), _strings,
             _has("name", "session_body", "create_session", "render", "job_spec")),
    Registry("unirender.service.ui.families:CONSOLE_FAMILIES", ("unirender.service.ui",), _strings,
             _has("family", "template", "views", "check_view", "view_array", "caption", "scene", "controls",
                  "action", "transport", "result")),
    Registry("unirender.client:REMOTE_SESSIONS", ("unirender.client",), _strings,
             lambda cls: inspect.isclass(cls) and _has("family", "event_of", "step", "reset", "action_body")(cls)),
    Registry("unirender.gym.families:GYM_FAMILIES", ("unirender.gym",), _gym, inspect.isclass),
    Registry("unirender.openenv.families:OPENENV_FAMILIES", ("unirender.openenv",), _strings,
             lambda cls: inspect.isclass(cls) and _has("declare", "launch_overrides", "reseeds", "first_event",
                                                       "session_action", "outcome")(cls), needs="openenv"),
]


def layers() -> list[set[str]]:
    """The top-level layers of ``.importlinter``'s ``layers`` contract, top first (``a | b``: one layer)."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [{name.strip() for name in line.split("|")} for line in lines if line.strip()]


def layer_of(module: str, stack: list[set[str]]) -> int:
    for index, layer in enumerate(stack):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return index
    raise AssertionError(f"{module} is in no layer of .importlinter")


def problems(registry: Registry, table: Any | None = None) -> list[str]:
    """What is wrong with ``registry``'s lines (``table``: the registry's value, default the real one)."""
    stack = layers()
    if table is None:
        table = load_target(registry.name)
    found = []
    for family, target in registry.targets(table):
        where = f"{registry.name}[{family!r}] = {target!r}"
        if registry.module != "unirender.cluster.registry" and family not in FAMILIES:
            found.append(f"{where}: {family!r} is not a family of unirender.simulator.FAMILIES")
        try:
            value = load_target(target) if isinstance(target, str) else target
        except (ImportError, AttributeError) as exc:
            found.append(f"{where}: does not resolve ({exc})")
            continue
        module = target.partition(":")[0] if isinstance(target, str) else value.__module__
        if not any(module == p or module.startswith(p + ".") for p in registry.packages):
            found.append(f"{where}: {module} is outside {', '.join(registry.packages)}")
        if layer_of(module, stack) < layer_of(registry.module, stack):
            found.append(f"{where}: {module} is in a layer above {registry.module} (.importlinter)")
        if not registry.kind(value):
            found.append(f"{where}: {value!r} is not what the registry hands out")
    return found


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.name)
def test_every_line_resolves_where_the_contracts_allow(registry):
    if registry.needs:
        pytest.importorskip(registry.needs)
    assert problems(registry) == []


# The registries the webgl family has a line in so far (issue 48: below the port, gym, the spec, the jobs and the
# service layers, the console, the service placement and the client; issue 50: OpenEnv; docs/internals.md,
# "Measured: the webgl family"). A line added elsewhere fails the test until it is listed.
WEBGL_WIRED = {
    "unirender.cluster.simulators:LAUNCHERS",
    "unirender.cluster.simulators:CAMERA_READERS",
    "unirender.cluster.service_backend:SESSION_BODIES",
    "unirender.service.families:SERVICE_FAMILIES",
    "unirender.service.ui.families:CONSOLE_FAMILIES",
    "unirender.client:REMOTE_SESSIONS",
    "unirender.spec.families:SPEC_FAMILIES",
    "unirender.jobs.families:JOB_FAMILIES",
    "unirender.gym.families:GYM_FAMILIES",
    "unirender.openenv.families:OPENENV_FAMILIES",
}


def test_every_family_has_a_line_in_each_layer_it_is_wired_to():
    """AI2-THOR and ML-Agents are wired in every layer; WebGL in the registries of :data:`WEBGL_WIRED`."""
    webgl = set()
    for registry in REGISTRIES:
        # a family's Ray codec and its launcher of WebGL builds are optional (cluster.simulators says why)
        if registry.module in ("unirender.cluster.registry",) or registry.name.endswith(("RAY_EVENT_CODECS",
                                                                                          "WEBGL_LAUNCHERS")):
            continue
        families = {family for family, _ in registry.targets(load_target(registry.name))}
        assert {"ai2thor", "mlagents"} <= families, registry.name
        if "webgl" in families:
            webgl.add(registry.name)
    assert webgl == WEBGL_WIRED


@pytest.mark.parametrize("registry_name", sorted(WEBGL_WIRED))
def test_the_webgl_lines_name_the_webgl_adapters(registry_name):
    """Each webgl line resolves where the contracts allow (the test above, for the real tables) and names a
    module of the family's own (``webgl`` in its module's name), or the registry's own default hooks."""
    registry = next(r for r in REGISTRIES if r.name == registry_name)
    table = load_target(registry_name)
    lines = [(family, target) for family, target in registry.targets(table) if family == "webgl"]
    assert lines, registry_name
    for _family, target in lines:
        module = target.partition(":")[0] if isinstance(target, str) else target.__module__
        assert "webgl" in module or module == registry.module, (registry_name, target)
    assert problems(registry, {"webgl": table["webgl"]}) == []


@pytest.mark.parametrize(("registry_name", "line", "complaint"), [
    ("unirender.service.ui.families:CONSOLE_FAMILIES", "unirender.service.ui.no_such_console:CONSOLE",
     "does not resolve"),
    ("unirender.client:REMOTE_SESSIONS", "unirender.client.ai2thor:NoSuchSession", "does not resolve"),
    ("unirender.cluster.service_backend:SESSION_BODIES", "unirender.service.ai2thor_sessions:FAMILY",
     "is outside unirender.cluster"),
    ("unirender.client:REMOTE_SESSIONS", "unirender.service.ui.ai2thor_console:AI2ThorConsole",
     "in a layer above unirender.client"),
    ("unirender.service.ui.families:CONSOLE_FAMILIES", "unirender.service.ui.families:DEFAULT_KEYS",
     "not what the registry hands out"),
])  # fmt: skip
def test_a_wrong_line_is_reported(registry_name, line, complaint):
    registry = next(r for r in REGISTRIES if r.name == registry_name)
    table = dict(load_target(registry_name))
    table["ai2thor"] = line
    assert any(complaint in problem for problem in problems(registry, table)), problems(registry, table)


def test_every_service_session_adapter_takes_the_protocols_document_arguments():
    """A family's session adapter answers ``SessionAdapter.document`` with all its arguments (a keyword added to the
    protocol, ``batched``, once reached the WebGL adapter only as a TypeError on every step)."""
    import importlib
    import inspect

    from unirender.service.families import SERVICE_FAMILIES, SessionAdapter

    want = [p for p in inspect.signature(SessionAdapter.document).parameters if p != "self"]
    for family, target in SERVICE_FAMILIES.items():
        module = importlib.import_module(target.split(":")[0])
        adapters = [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__
                    and c.__name__.endswith("Session") and hasattr(c, "document")]  # fmt: skip
        assert adapters, f"{family}: no session adapter in {module.__name__}"
        for adapter in adapters:
            params = [p for p in inspect.signature(adapter.document).parameters if p != "self"]
            assert params == want, f"{family}: {adapter.__name__}.document{tuple(params)} is not the protocol's {tuple(want)}"
