"""Suite-wide guards: a private agent dir per test (never ~/.pi), and no runtime dir left."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session.protocol import paths


@pytest.fixture(autouse=True)
def private_agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the agent dir at a fresh temporary dir, so nothing reads or writes ``~/.pi``.

    The runtime dir under ``/tmp`` that this agent dir maps to is removed afterwards, whether or
    not the test created it: the namespace is unique to this test's agent dir.
    """
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent_dir))
    yield agent_dir
    runtime_dir = paths.resolve(env={"PI_CODING_AGENT_DIR": str(agent_dir)}).runtime_dir
    shutil.rmtree(runtime_dir, ignore_errors=True)


@pytest.fixture
def locations(private_agent_dir: Path) -> paths.Locations:
    """Where this test's sessions register and listen."""
    return paths.resolve(env={"PI_CODING_AGENT_DIR": str(private_agent_dir)})


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio, the loop every supported host uses."""
    return "asyncio"
