"""Dependencies point one way (STYLE.md 6), the core is sans-IO (STYLE.md 1), and every event
loop is run by asyncio itself.

protocol <- state <- operators <- node <- ops_scripts: a package may import only packages
to its left. protocol/, state/ and operators/ never import asyncio, socket, time, aiohttp,
uvloop or threading: time is a parameter there, never read. Nor do the pure parts of node/
(the consistency machine and its vocabulary, the upstream choice), which import of node/
only each other and node/errors.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

ORDER = ["protocol", "state", "operators", "node", "ops_scripts"]
IO_MODULES = {"asyncio", "socket", "time", "aiohttp", "uvloop", "threading", "selectors", "datetime"}
CORE = {"protocol", "state", "operators"}
#: The sans-IO modules of node/ (STYLE.md 1), and what of node/ they may import besides.
PURE_NODE = {"node.replica.consistency", "node.replica.vocabulary", "node.streams.upstream",
             "node.procs.pacing", "node.flux.events"}
PURE_NODE_MAY_IMPORT = {"node.errors"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def module_imports(path: Path) -> set[str]:
    """The full names of the modules ``path`` imports (absolute imports)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def modules() -> list[tuple[str, Path]]:
    return [(pkg, p) for pkg in ORDER for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize(("pkg", "path"), modules(), ids=lambda x: str(x).split("/main/")[-1])
def test_dependencies_point_one_way(pkg: str, path: Path) -> None:
    allowed = set(ORDER[: ORDER.index(pkg) + 1])
    ours = imports_of(path) & set(ORDER)
    assert ours <= allowed, f"{path.relative_to(ROOT)} imports {sorted(ours - allowed)}"


@pytest.mark.parametrize(
    ("pkg", "path"), [m for m in modules() if m[0] in CORE], ids=lambda x: str(x).split("/main/")[-1]
)
def test_core_is_sans_io(pkg: str, path: Path) -> None:
    bad = imports_of(path) & IO_MODULES
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)} (the core takes `now` as a parameter)"


@pytest.mark.parametrize("name", sorted(PURE_NODE))
def test_the_pure_parts_of_node_are_sans_io(name: str) -> None:
    path = ROOT / (name.replace(".", "/") + ".py")
    imported = module_imports(path)
    bad = {m.split(".")[0] for m in imported} & IO_MODULES
    assert not bad, f"{name} imports {sorted(bad)} (the machine takes `now` as a parameter)"
    of_node = {m for m in imported if m.split(".")[0] == "node"}
    stray = of_node - PURE_NODE - PURE_NODE_MAY_IMPORT
    assert not stray, f"{name} imports {sorted(stray)}, which may do I/O"


def test_the_pure_parts_of_node_may_import_are_pure_too() -> None:
    for name in PURE_NODE_MAY_IMPORT:
        imported = module_imports(ROOT / (name.replace(".", "/") + ".py"))
        assert not {m.split(".")[0] for m in imported} & (IO_MODULES | {"node"}), name


def test_every_error_derives_from_the_root() -> None:
    """STYLE.md 9: one root error type; each package keeps its errors in errors.py."""
    import importlib
    import inspect

    from protocol.errors import DPCError

    strays = []
    for pkg, path in modules():
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            ours = cls.__module__ == name
            if ours and issubclass(cls, BaseException) and not issubclass(cls, DPCError):
                strays.append(f"{name}.{cls_name}")
            if ours and issubclass(cls, DPCError) and rel.name != "errors":
                strays.append(f"{name}.{cls_name} (not in {pkg}'s errors.py)")
    assert not strays, f"errors outside the root or outside errors.py: {strays}"


@pytest.mark.parametrize("path", sorted((ROOT / "ops_scripts" / "check").rglob("*.py")),
                         ids=lambda p: p.name)
def test_the_checker_does_not_import_the_harness(path: Path) -> None:
    """Jepsen's split: the harness writes the history and calls the checker, never the other
    way round (the checker judges histories of `dpc run` and `dpc simulate` alike)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    bad = sorted(m for m in mods if m.startswith(("ops_scripts.harness", "ops_scripts.cluster",
                                                     "ops_scripts.bench")))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_every_event_loop_is_run_by_asyncio() -> None:
    """asyncio.run or an asyncio.Runner runs each loop of the package, never a hand-written
    ``run_until_complete`` then ``close``: on Ctrl-C the Runner cancels the main task and
    awaits what is left, where a loop closed by hand left the tasks pending and printed
    their tracebacks (tests/ops_scripts/harness/test_simulate.py, the Ctrl-C tests)."""
    by_hand = [f"{p.relative_to(ROOT)}:{n.lineno}" for _, p in modules()
               for n in ast.walk(ast.parse(p.read_text(), filename=str(p)))
               if isinstance(n, ast.Attribute) and n.attr == "run_until_complete"]
    assert not by_hand, f"event loops run by hand: {by_hand}"
