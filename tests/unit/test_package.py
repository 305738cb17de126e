"""Package-level promises: the sans-IO core stays pure, the public names are what we mean."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import pi_cross_session
from pi_cross_session import protocol

FORBIDDEN_IN_CORE = {"anyio", "asyncio", "socket", "time", "trio", "selectors", "subprocess"}
PROTOCOL_DIR = Path(protocol.__file__).parent


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("name", protocol.SANS_IO_MODULES)
def test_sans_io_core_imports_no_io(name: str) -> None:
    source = (PROTOCOL_DIR / f"{name}.py").read_text(encoding="utf-8")
    assert not imported_roots(source) & FORBIDDEN_IN_CORE
    importlib.import_module(f"pi_cross_session.protocol.{name}")


def test_imports_go_one_way() -> None:
    package_dir = Path(pi_cross_session.__file__).parent
    allowed = {"protocol": {"protocol"}, "security": {"protocol", "security"}}
    for layer, may_use in allowed.items():
        for path in (package_dir / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "pi_cross_session."
                ):
                    used = (node.module or "").split(".")[1]
                    assert used in may_use, f"{path.name} imports {node.module}"


def test_version_is_exposed() -> None:
    assert pi_cross_session.__all__ == ["__version__"]
    assert pi_cross_session.__version__.count(".") == 2
