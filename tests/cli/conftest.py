"""Fixtures for the command-line tests: real ``pi-cross-session`` processes in a private agent dir.

The root conftest gives every test its own agent dir (``PI_CODING_AGENT_DIR``) and removes the
runtime dir it maps to; here every inbox a test starts is stopped in the finalizer, whatever the
test did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.processes import Inboxes, Result, run_cli


@pytest.fixture
def inboxes(private_agent_dir: Path, tmp_path: Path) -> Iterator[Inboxes]:
    """Start ``pi-cross-session inbox`` processes; all of them are stopped after the test."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    started = Inboxes(private_agent_dir, workdir)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def cli(private_agent_dir: Path, tmp_path: Path) -> Callable[..., Result]:
    """Run one ``pi-cross-session`` command in this test's agent dir."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)

    def run(*args: str) -> Result:
        return run_cli(private_agent_dir, *args, cwd=workdir)

    return run
