"""Package-level promises: the sans-IO core stays pure, the public names are what we mean."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import pi_cross_session
from pi_cross_session._internal import protocol

#: What a pure module never imports: sockets, threads, processes, clocks, files and the OS.
FORBIDDEN_IN_CORE = {
    "anyio",
    "asyncio",
    "ctypes",
    "fcntl",
    "filelock",
    "io",
    "os",
    "pwd",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "subprocess",
    "tempfile",
    "threading",
    "time",
    "trio",
}
PACKAGE_DIR = Path(pi_cross_session.__file__).parent
#: Where every module but the public face lives.
INTERNAL_DIR = PACKAGE_DIR / "_internal"
PROTOCOL_DIR = Path(protocol.__file__).parent


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def imported_modules(source: str) -> set[str]:
    """Every ``pi_cross_session`` module a source imports (``from X import y`` counts X.y too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("pi_cross_session.")}


def pure_modules() -> list[Path]:
    """Every module of ``protocol`` and ``security`` outside an ``io`` subpackage: pure by where
    it lives, not by a list kept by hand."""
    return sorted(
        path
        for layer in ("protocol", "security")
        for path in (INTERNAL_DIR / layer).rglob("*.py")
        if "io" not in path.relative_to(INTERNAL_DIR / layer).parts[:-1]
    )


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_a_module_outside_io_imports_no_io(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert not imported_roots(source) & FORBIDDEN_IN_CORE
    io_modules = {name for name in imported_modules(source) if ".io." in name + "."}
    assert not io_modules, f"{path.name} imports an I/O module: {sorted(io_modules)}"
    dotted = ".".join(("pi_cross_session", *path.relative_to(PACKAGE_DIR).with_suffix("").parts))
    importlib.import_module(dotted.removesuffix(".__init__"))


def test_the_io_subpackages_hold_the_drivers() -> None:
    # The split is visible in the tree: the drivers are where a reader looks for I/O.
    drivers = {p.stem for p in (PROTOCOL_DIR / "io").glob("*.py")}
    assert {"endpoint", "exchange", "discovery", "gitinfo", "offload"} <= drivers
    assert (INTERNAL_DIR / "security" / "io" / "fs.py").exists()


def test_imports_go_one_way() -> None:
    allowed = {"protocol": {"protocol"}, "security": {"protocol", "security"}}
    for layer, may_use in allowed.items():
        for path in (INTERNAL_DIR / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "pi_cross_session._internal."
                ):
                    used = (node.module or "").split(".")[2]
                    assert used in may_use, f"{path.name} imports {node.module}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
    return ".".join(("pi_cross_session", *parts)).removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Which modules of the package each module imports, counting every import statement: at the
    top, inside a function, under ``TYPE_CHECKING`` (a cycle hidden there is still a cycle of
    ideas). Packages (``__init__``) are not nodes: importing a submodule through one is not a
    dependency on its siblings."""
    modules = {
        module_name(path): path for path in PACKAGE_DIR.rglob("*.py") if path.name != "__init__.py"
    }
    return {
        name: (imported_modules(path.read_text(encoding="utf-8")) & modules.keys()) - {name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or ``None``."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for neighbour in sorted(graph[node]):
            cycle = visit(neighbour, [*path, node])
            if cycle is not None:
                return cycle
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start, [])
        if cycle is not None:
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_imports_itself_back() -> None:
    # Data types live apart from the texts made of them (plugin/reports.py), so that outbound,
    # render and runtime import one another in one direction only; the same holds package-wide.
    graph = import_graph()
    assert "pi_cross_session._internal.plugin.reports" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_version_is_exposed() -> None:
    assert "__version__" in pi_cross_session.__all__
    assert pi_cross_session.__version__.count(".") == 2


def test_importing_the_package_does_not_load_the_library() -> None:
    # Every module imports the package first; the command line's quick commands must not pay for
    # the event loop, pydantic's models and the runtime because the package exports the library.
    heavy = ("anyio", "pydantic", "pi_cross_session._internal.api")
    probe = (
        "import sys, pi_cross_session, pi_cross_session._internal.protocol.paths;"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
