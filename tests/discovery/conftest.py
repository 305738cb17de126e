"""Fixtures for the discovery tests: locations in the per-test agent dir, registrations, git."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    Status,
    build_registration,
    serialize,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.tokens import new_instance_id, new_token

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


def mock_clock_backend() -> Any:
    """A parameter for ``anyio_backend``: trio on a virtual clock that jumps whenever every task
    waits, so the real 30 s / 350 ms figures run in no wall time (deadlines are tested on a
    virtual clock, never by waiting them out).

    Keep such tests free of deadlines of their own while a worker thread runs: the clock would
    jump to them, since a task waiting for a thread counts as waiting.
    """
    from trio.testing import MockClock

    return pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-mock-clock")


@pytest.fixture
def locations(private_agent_dir: Path) -> Iterator[Locations]:
    """The locations of this test's private agent dir; its runtime dir is removed afterwards."""
    resolved = environment.resolve()
    assert resolved.agent_dir == str(private_agent_dir)
    yield resolved
    # The runtime dir lives in /tmp, outside the test's tmp_path: never leave one behind.
    shutil.rmtree(resolved.runtime_dir, ignore_errors=True)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_registration(
    locations: Locations,
    *,
    instance_id: str | None = None,
    name: str | None = "peer",
    cwd: str = "/",
    pid: int | None = None,
    updated_at: int | None = None,
    status: Status = "idle",
) -> Registration:
    """A registration as a live session of this agent dir would publish it."""
    instance_id = instance_id or new_instance_id()
    stamp = now_ms() if updated_at is None else updated_at
    return build_registration(
        session_id=str(uuid.uuid4()),
        session_name=name,
        instance_id=instance_id,
        cwd=cwd,
        pid=os.getpid() if pid is None else pid,
        started_at=stamp,
        updated_at=stamp,
        status=status,
        inbound="accept",
        socket_path=locations.socket_path(instance_id),
        token=new_token(),
    )


def publish(locations: Locations, registration: Registration) -> Path:
    """Write a registration file exactly as its owner would."""
    fs.ensure_private_dir(locations.peers_dir)
    assert fs.write_registration(
        locations.peers_dir,
        registration.instance_id,
        serialize(registration),
        still_current=lambda: True,
    )
    return Path(locations.registration_path(registration.instance_id))


def exists(path: str | Path) -> bool:
    """``lexists``, kept out of the async test bodies (ruff's ASYNC240)."""
    return os.path.lexists(path)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def git_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """git as a fresh user would run it: no global or system config, no repository override."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GIT_DISCOVERY_ACROSS_FILESYSTEM", raising=False)


def git(cwd: Path | str, *args: str) -> str:
    """Run git with a fixed identity; returns stdout."""
    assert GIT is not None
    completed = subprocess.run(
        [
            GIT,
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
            *args,
        ],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return completed.stdout


def make_repo(path: Path, *, commit: bool = True) -> Path:
    """A repository at ``path`` with one commit on ``main`` (or none: an unborn branch)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    if commit:
        (path / "file.txt").write_text("content\n")
        git(path, "add", "file.txt")
        git(path, "commit", "-q", "-m", "first")
    return path
