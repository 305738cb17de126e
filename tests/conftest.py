"""Suite-wide guards: no test may touch the user's real agent dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the agent dir at a fresh temporary dir, so nothing reads or writes ``~/.pi``."""
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent_dir))
    yield agent_dir
