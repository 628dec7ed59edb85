"""The import layering of ``.importlinter`` holds (protocol sans-I/O, player on the protocol only, client without
the service, spec without jobs/player, no cycles in cluster), no import circle anywhere (lazy imports included), and
a violation of either is really reported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(src: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache", "--config", str(ROOT / ".importlinter")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src)})


def test_import_contracts_are_kept():
    result = lint_imports(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_violation_is_reported(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "unirender", src / "unirender",
                    ignore=shutil.ignore_patterns("__pycache__", "scenes"))
    event = src / "unirender" / "protocol" / "event.py"
    event.write_text(event.read_text() + "\nimport socket  # noqa\nfrom unirender import client  # noqa\n")
    gym_env = src / "unirender" / "gym" / "env.py"  # an upper layer reaching an ML-Agents module directly
    gym_env.write_text(gym_env.read_text() + "\n\ndef _late():\n    from unirender.mlagents import controller  # noqa\n")
    result = lint_imports(src)
    assert result.returncode != 0
    assert "unirender.protocol.event -> socket" in result.stdout
    assert "unirender.protocol.event -> unirender.client" in result.stdout
    assert "unirender.gym.env -> unirender.mlagents.controller" in result.stdout


def import_cycles(package: str = "unirender") -> list[list[str]]:
    """Every import circle among the package's modules (strongly connected components of more than one module),
    lazy imports included: grimp reads every import statement, wherever it stands, except those under
    ``if TYPE_CHECKING:`` (they never run: ``service/`` annotates ``app: ServiceApp`` that way)."""
    import grimp

    # No cache: grimp keys its cache by file mtimes, and a merge rewrites files within the second (a stale entry
    # once reported a circle the tree no longer had).
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_circle_anywhere():
    assert import_cycles() == []


def test_an_import_circle_is_found(tmp_path, monkeypatch):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "unirender", src / "unirender",
                    ignore=shutil.ignore_patterns("__pycache__", "scenes"))
    errors = src / "unirender" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _late():\n    from unirender import simulator  # noqa\n")
    simulator = src / "unirender" / "simulator.py"
    simulator.write_text(simulator.read_text() + "\nimport unirender.errors  # noqa\n")
    monkeypatch.syspath_prepend(str(src))
    for name in [m for m in sys.modules if m == "unirender" or m.startswith("unirender.")]:
        monkeypatch.delitem(sys.modules, name)
    assert ["unirender.errors", "unirender.simulator"] in import_cycles()
