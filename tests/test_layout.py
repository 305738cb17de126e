"""The suite's layout stays easy to live in: files named by subject, one home for each helper.

* A test file says what it tests, not when it was written: no ``_2.py``, ``item7``, ``gaps``,
  ``misc`` or ``extra`` in its name.
* ``tests/support`` has one module per job: no two of its modules define a top-level function or
  class of the same name (two ``eventually`` helpers, two ``FakeClock`` s), so an import can never
  pick the wrong one; scripts run as processes may each have their ``main``. Each module says its
  job in a docstring.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path
from typing import Final

TESTS: Final = Path(__file__).resolve().parent
SUPPORT: Final = TESTS / "support"
#: Names that tell a file's history instead of its subject.
HISTORY_NAME: Final = re.compile(r"_\d+\.py$|item\d|gaps|misc|extra")
#: Names every script run as a process may define.
SCRIPT_NAMES: Final = frozenset({"main"})


def python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def duplicate_definitions(modules: list[Path]) -> dict[str, list[str]]:
    """Every top-level name defined by more than one of ``modules``, with the modules."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in modules:
        for name in top_level_names(path) - SCRIPT_NAMES:
            where[name].append(path.name)
    return {name: files for name, files in where.items() if len(files) > 1}


def test_no_test_file_is_named_after_its_history() -> None:
    named = [str(p.relative_to(TESTS)) for p in python_files(TESTS) if HISTORY_NAME.search(p.name)]
    assert named == []


def test_no_two_support_modules_define_the_same_name() -> None:
    assert duplicate_definitions(python_files(SUPPORT)) == {}


def test_every_support_module_says_its_job() -> None:
    undocumented = [
        path.name
        for path in python_files(SUPPORT)
        if path.name != "__init__.py"
        and not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert undocumented == []


def test_the_checks_see_a_duplicate_and_a_history_name(tmp_path: Path) -> None:
    """The rules above can fail: two modules with one helper are caught, a script's ``main`` is
    not, and the names this suite once had are refused."""
    (tmp_path / "one.py").write_text("def eventually(): ...\ndef main(): ...\n")
    (tmp_path / "two.py").write_text("async def eventually(): ...\ndef main(): ...\n")
    assert duplicate_definitions(python_files(tmp_path)) == {"eventually": ["one.py", "two.py"]}
    for name in ("test_goals_host_2.py", "test_item7_gaps.py", "test_misc.py"):
        assert HISTORY_NAME.search(name), name
    assert not HISTORY_NAME.search("test_goal_endings_and_restore.py")
