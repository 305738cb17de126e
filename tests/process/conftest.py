"""Fixtures for the process tests: real OS processes, each running a session, in a private
agent dir.

The root conftest gives every test its own agent dir and removes the runtime dir it maps to; here
every process a test starts is ended in the finalizer, whatever the test did (stopped processes
are continued first, then asked to stop, then killed), before that cleanup runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import PeerProcesses


@pytest.fixture
def peer_processes(private_agent_dir: Path) -> Iterator[PeerProcesses]:
    """Start ``tests/support/peer_session_script.py`` sessions; all of them end after the test."""
    started = PeerProcesses(private_agent_dir)
    try:
        yield started
    finally:
        started.close()
