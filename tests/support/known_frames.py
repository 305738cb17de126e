"""For the tests of the frames known without a parse (``ServerMemo.known_hello``,
``frames.response_from_text`` with ``KnownReplies``): which texts were parsed as JSON."""

from __future__ import annotations

from typing import Any

import pytest

from pi_cross_session._internal.protocol import frames, jsonwire


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The list of texts parsed as JSON from now on (for the test's duration)."""
    seen: list[str] = []
    real = jsonwire.loads

    def counting(text: str) -> Any:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(frames.jsonwire, "loads", counting)
    return seen
