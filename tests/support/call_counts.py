"""Counting the calls of module-level functions, for tests that must show something was never
called (not parsed, not verified) rather than merely that its result went unused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class CallCount:
    """Calls made so far to the functions one :func:`count_calls` wrapped, together."""

    count: int = 0


def count_calls(monkeypatch: pytest.MonkeyPatch, targets: list[tuple[object, str]]) -> CallCount:
    """Wrap each function named by ``targets`` (an object and its attribute) for the test's
    duration, so that every call of any of them is counted and then made as before.

    Wrap the name the caller looks up: a module that imported a function by name holds its own
    reference, which patching the defining module does not reach.
    """
    calls = CallCount()
    for owner, name in targets:
        real = getattr(owner, name)

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            calls.count += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    return calls
