"""MCP tests: every peer gets its own working directory, and no inherited option changes it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def clean_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PI_CROSS_SESSION_INBOUND", raising=False)
    monkeypatch.delenv("PI_CROSS_SESSION_NAME", raising=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
