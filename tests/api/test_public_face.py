"""The public face is what docs/api.md lists, no more and no less; the rest is internal."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import pi_cross_session
from pi_cross_session import sanitize
from tests.data_paths import REPO_ROOT

API_DOC = REPO_ROOT / "docs" / "api.md"
INTERNAL_DIR = Path(pi_cross_session.__file__).parent / "_internal"


def documented_names(module: str) -> set[str]:
    """The names in the first column of the table under "`module` exports exactly these names"."""
    text = API_DOC.read_text(encoding="utf-8")
    if module == "pi_cross_session":
        lead = re.escape("The package exports exactly these names:")
    else:
        lead = re.escape(f"`{module}` exports exactly these names:")
    found = re.search(lead + r"\n\n((?:\|.*\n)+)", text)
    assert found, f"docs/api.md has no table of {module}'s names"
    names: set[str] = set()
    for row in found.group(1).splitlines()[2:]:  # past the header and its rule
        first_cell = row.split("|")[1]
        names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)", first_cell))
    return names


def test_the_package_exports_exactly_what_the_docs_list() -> None:
    documented = documented_names("pi_cross_session")
    assert {"list_peers", "send", "run_inbox", "CrossSessionError", "__version__"} <= documented
    assert set(pi_cross_session.__all__) == documented
    assert len(pi_cross_session.__all__) == len(documented)
    assert set(dir(pi_cross_session)) >= documented
    for name in documented:
        assert getattr(pi_cross_session, name) is not None
    with pytest.raises(AttributeError):
        _ = pi_cross_session.not_a_name  # type: ignore[attr-defined]


def test_the_library_names_are_the_internal_ones() -> None:
    from pi_cross_session._internal import api

    assert set(api.__all__) == set(pi_cross_session.__all__) - {"__version__"}
    for name in api.__all__:
        assert getattr(pi_cross_session, name) is getattr(api, name)


def test_sanitize_exports_exactly_what_the_docs_list() -> None:
    documented = documented_names("pi_cross_session.sanitize")
    assert set(sanitize.__all__) == documented
    assert sanitize.line("a\x1bb") == "a\\x1bb"


def test_the_old_sanitize_name_works_and_warns() -> None:
    # In a fresh interpreter: a module imported once warns once.
    probe = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    import pi_cross_session.protocol.sanitize\n"
        "except DeprecationWarning as w:\n"
        "    print('warned:', w)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert "warned: pi_cross_session.protocol.sanitize is deprecated" in done.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("pi_cross_session.protocol.sanitize")
    assert old.line is sanitize.line
    assert old.block is sanitize.block


def test_no_internal_module_imports_the_public_face() -> None:
    # The face re-exports the inside, never the other way round (the deprecated shim included).
    public = ("pi_cross_session.sanitize", "pi_cross_session.protocol")
    for path in INTERNAL_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(public), f"{path.name} imports {node.module}"


def test_the_package_holds_only_the_face_and_the_internal_package() -> None:
    top = {p.name for p in Path(pi_cross_session.__file__).parent.iterdir()}
    top -= {"__pycache__"}
    assert top == {"__init__.py", "__main__.py", "_internal", "py.typed", "sanitize.py", "protocol"}
