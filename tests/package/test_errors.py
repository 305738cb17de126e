"""The exception tree drawn in ``protocol/errors.py`` is the package's real one, class for class.

Every exception class defined in ``src`` (except module-private ones) must appear in the drawing,
under the module that defines it and below its actual parent; nothing may be drawn that does not
exist. A new error class therefore cannot join the package without joining the tree.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

from pi_cross_session import _internal
from pi_cross_session._internal.protocol import errors
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.security.goals import GoalError, GoalErrorCode

_NAME = re.compile(r"[A-Z]\w*")
_MODULE = re.compile(r"([a-z_]+(?:\.[a-z_]+)+):")


@dataclass(frozen=True)
class Drawn:
    name: str
    module: str
    parent: str | None


def drawn_tree() -> dict[str, Drawn]:
    """The classes of the ``::`` block of the module docstring, with module and parent."""
    doc = errors.__doc__
    assert doc is not None
    block = doc.split("::\n", 1)[1]
    lines = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            break
        lines.append(line[4:])
    found: dict[str, Drawn] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        match = _NAME.search(line)
        assert match is not None, line
        depth, name = match.start(), match.group()
        module = _MODULE.search(line[match.end() :])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        assert name not in found, f"{name} is drawn twice"
        found[name] = Drawn(name, module.group(1) if module else "protocol.errors", parent)
        stack.append((depth, name))
    return found


def real_classes() -> dict[str, type[BaseException]]:
    """Every public exception class defined in the package, by name."""
    found: dict[str, type[BaseException]] = {}
    # The public face defines no class of its own; everything lives in the internal package.
    for info in pkgutil.walk_packages(_internal.__path__, "pi_cross_session._internal."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                assert name not in found or found[name] is value, f"two classes named {name}"
                found[name] = value
    return found


def test_every_exception_class_is_drawn_and_nothing_else() -> None:
    assert set(drawn_tree()) == set(real_classes())


def test_each_class_is_drawn_under_its_module_and_its_parent() -> None:
    real = real_classes()
    for name, drawn in drawn_tree().items():
        cls = real[name]
        assert cls.__module__ == f"pi_cross_session._internal.{drawn.module}", name
        (base,) = cls.__bases__
        if drawn.parent is None:
            assert cls is CrossSessionError
        else:
            assert base.__name__ == drawn.parent, name


def test_every_deliberate_error_carries_a_code() -> None:
    for cls in real_classes().values():
        assert issubclass(cls, CrossSessionError), cls
        assert isinstance(cls.code, str), cls
        assert cls.code, cls


def test_a_goal_error_is_a_cross_session_error_with_its_goal_code() -> None:
    error = GoalError(GoalErrorCode.TASK_OWNED, "a task handle belongs to another goal")
    assert isinstance(error, CrossSessionError)
    assert error.code is GoalErrorCode.TASK_OWNED
    assert error.message == "a task handle belongs to another goal"
    assert str(error) == "goal_task_owned: a task handle belongs to another goal"
