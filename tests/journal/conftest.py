"""Fixtures for the tests of ``pi-cross-session log``: journals written into this test's agent dir
(with the real writer), the command line run as a real process, and live inboxes.

The root conftest gives every test its own agent dir (``PI_CODING_AGENT_DIR``) and removes the
runtime dir it maps to; the inboxes a test starts are stopped in the finalizer, whatever the test
did. The pattern is that of ``tests/cli/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal import (
    Event,
    JournalPolicy,
    JournalWriter,
    journal_dir,
)
from tests.support.processes import Inboxes, Result, run_cli


@dataclass(frozen=True)
class Journals:
    """Writes sessions' journals into one agent dir, as the sessions would."""

    agent_dir: Path

    def dir_of(self, instance_id: str) -> Path:
        """The journal dir of a session (it may not exist yet)."""
        return Path(journal_dir(str(self.agent_dir), instance_id))

    def write(self, instance_id: str, *events: Event, keep_text: bool = False) -> Path:
        """Append ``events`` to that session's journal with the real writer; its dir."""
        directory = self.dir_of(instance_id)
        policy = JournalPolicy(enabled=True, keep_text=keep_text)
        with JournalWriter(str(directory), policy=policy) as writer:
            for event in events:
                assert writer.record(event), writer.last_error
        return directory

    def append_raw(self, instance_id: str, data: bytes, name: str = "journal.jsonl") -> Path:
        """Append bytes to a file of that session's journal (created 0600 in a 0700 dir)."""
        directory = self.dir_of(instance_id)
        fs.ensure_private_dir(str(directory))  # and its parents, 0700 as a session makes them
        path = directory / name
        with path.open("ab") as file:
            file.write(data)
        path.chmod(0o600)
        return path


@pytest.fixture
def journals(private_agent_dir: Path) -> Journals:
    """Journals in this test's agent dir."""
    return Journals(private_agent_dir)


@pytest.fixture
def cli(private_agent_dir: Path, tmp_path: Path) -> Callable[..., Result]:
    """Run one ``pi-cross-session`` command in this test's agent dir."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)

    def run(*args: str) -> Result:
        return run_cli(private_agent_dir, *args, cwd=workdir)

    return run


@pytest.fixture
def inboxes(private_agent_dir: Path, tmp_path: Path) -> Iterator[Inboxes]:
    """Start ``pi-cross-session inbox`` processes; all of them are stopped after the test."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    started = Inboxes(private_agent_dir, workdir)
    try:
        yield started
    finally:
        started.close()
