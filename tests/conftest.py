"""Suite-wide guards: no test may touch the user's real agent dir."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the agent dir at a fresh temporary dir, so nothing reads or writes ``~/.pi``."""
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent_dir))
    return agent_dir
