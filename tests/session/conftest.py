"""Fixtures of the session tests: the runtime's file layer with injectable failures, and real
processes (some run as an unprivileged user, so that permissions are real even under root; others
each run a session in the test's agent dir).

The root conftest gives every test its own agent dir and removes the runtime dir it maps to. Tests
that run a process as another uid get a separate agent dir that uid can reach, and that dir and the
runtime dir it maps to for that uid are removed here. Every session process a test starts through
``peer_processes`` is ended in its finalizer, whatever the test did (stopped processes are
continued first, then asked to stop, then killed), before that cleanup runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment
from tests.session.injection import FaultyFiles, install
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import PeerProcesses

#: The uid and gid an unprivileged process runs as when the tests run as root.
NOBODY: Final = 65534
#: The script the tests run as a session, which the unprivileged uid must be able to read too.
SESSION_PROCESS: Final = Path(__file__).with_name("session_process.py")
#: What the probe runs: the import every test process starts with, then a read of each file given.
_PROBE: Final = "import importlib, sys\nimportlib.import_module(sys.argv[1])\n" + (
    "for path in sys.argv[2:]:\n    open(path, 'rb').close()\n"
)


def drop_privileges() -> tuple[tuple[str, ...], int, int]:
    """How to start a process that file permissions apply to: the prefix, its uid and gid.

    Not root: nothing to put before the command, this process's own uid. Root (permissions do not
    bind root): ``nobody`` through ``setpriv``; the test is skipped if that is not available.
    """
    if os.geteuid() != 0:
        return (), os.getuid(), os.getgid()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop privileges")
    prefix = (setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--")
    return prefix, NOBODY, NOBODY


def unrunnable_by(
    prefix: Sequence[str],
    env: Mapping[str, str],
    *,
    module: str = "pi_cross_session",
    files: Sequence[Path] = (SESSION_PROCESS,),
) -> str | None:
    """Why a process started with ``prefix`` cannot run this checkout's code; ``None`` if it can.

    A checkout in a private dir (0700, as ``mktemp -d`` makes) is out of another uid's reach: its
    interpreter (a venv inside it), the package and the test scripts. Its processes would then fail
    with "No module named pi_cross_session" or "Permission denied", which says nothing about the
    code under test. So a probe started the same way imports ``module`` and reads ``files`` first.
    """
    argv = [*prefix, sys.executable, "-c", _PROBE, module, *map(str, files)]
    try:
        done = subprocess.run(
            argv, env=dict(env), capture_output=True, text=True, timeout=MUST_HAPPEN_S, check=False
        )
    except OSError as exc:
        return f"{sys.executable} cannot be started: {exc}"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"the probe exited {done.returncode}"


@pytest.fixture
def faulty_files(monkeypatch: pytest.MonkeyPatch) -> FaultyFiles:
    """The file layer of every runtime this test starts, with failures on demand."""
    return install(monkeypatch)


@dataclass(frozen=True)
class Unprivileged:
    """How to run a process that file permissions apply to, and an agent dir it owns."""

    #: Put before a command line (empty when the tests already run unprivileged).
    prefix: tuple[str, ...]
    uid: int
    gid: int
    agent_dir: Path
    locations: paths.Locations

    def env(self) -> dict[str, str]:
        """The environment of such a process: its agent dir, no bytecode writes."""
        env = dict(os.environ)
        env["PI_CODING_AGENT_DIR"] = str(self.agent_dir)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["HOME"] = str(self.agent_dir.parent)
        return env


@pytest.fixture
def unprivileged() -> Iterator[Unprivileged]:
    """An agent dir owned by a uid that permissions apply to, and how to run as that uid.

    The uid: see :func:`drop_privileges`. When it is another uid that cannot run this checkout's
    code (a checkout in a private dir), the test is skipped with the probe's reason
    (:func:`unrunnable_by`). The agent dir lives in a fresh dir under the system temp dir (the
    test's own tmp_path is not reachable by another uid).
    """
    prefix, uid, gid = drop_privileges()
    if prefix:
        reason = unrunnable_by(prefix, {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        if reason is not None:
            pytest.skip(
                f"uid {uid} cannot run this checkout's code (is it in a private dir?): {reason}"
            )
    parent = Path(tempfile.mkdtemp(prefix="pi-faults-"))
    parent.chmod(0o755)
    agent_dir = parent / "agent"
    agent_dir.mkdir(mode=0o700)
    os.chown(agent_dir, uid, gid)
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(agent_dir)}, uid=uid)
    try:
        yield Unprivileged(prefix, uid, gid, agent_dir, locations)
    finally:
        peers_dir = Path(locations.peers_dir)
        if peers_dir.exists():
            peers_dir.chmod(0o700)  # a test may have left it read-only
        shutil.rmtree(parent, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


@pytest.fixture
def peer_processes(private_agent_dir: Path) -> Iterator[PeerProcesses]:
    """Start ``tests/support/peer_session_script.py`` sessions; all of them end after the test."""
    started = PeerProcesses(private_agent_dir)
    try:
        yield started
    finally:
        started.close()
