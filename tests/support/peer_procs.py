"""Driving :mod:`tests.support.peer_process` sessions from a test: one OS process per session.

:class:`PeerProcess` starts the script with the test's private agent dir, reads its stdout and
stderr in threads as they come (so a test waits for an *event*, never for some time), sends it
commands, and can signal it. :class:`PeerProcesses` starts several and ends every one of them in
its :meth:`~PeerProcesses.close`, which fixtures call in their finalizers: a process that did not
stop by itself is continued (if stopped), asked to stop (SIGTERM), then killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from tests.support.watched import ProcessExitedError, WatchedProcess

SCRIPT: Final = str(Path(__file__).with_name("peer_process.py"))
#: How long a process gets to exit once asked to.
EXIT_TIMEOUT_S: Final = 10.0


class PeerExitedError(ProcessExitedError):
    """The process ended while a test was waiting for one of its events."""


class PeerProcess(WatchedProcess):
    """A running ``peer_process.py`` and every line it printed so far."""

    def __init__(self, agent_dir: str | os.PathLike[str], name: str, *, busy_s: float) -> None:
        self.name = name
        env = dict(os.environ)
        env["PI_CODING_AGENT_DIR"] = str(agent_dir)
        env["PYTHONUNBUFFERED"] = "1"
        self._next_id = 0
        super().__init__(
            [sys.executable, SCRIPT, "--name", name, "--busy", f"{busy_s:g}"],
            env=env,
            label=name,
            with_stdin=True,
        )

    def exited_error(self, message: str) -> AssertionError:
        return PeerExitedError(message)

    @property
    def ready(self) -> dict[str, Any]:
        return self.wait_event("ready")

    # -- commands ----------------------------------------------------------------------------------

    def command(self, **command: Any) -> int:
        """Write one command line; returns the id it was given."""
        self._next_id += 1
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"id": self._next_id, **command}) + "\n")
        stdin.flush()
        return self._next_id

    def send(self, target: str, text: str, **extra: Any) -> dict[str, Any]:
        """Send ``text`` to ``target`` through this session's runtime; the send's report."""
        ident = self.command(send=target, text=text, **extra)
        return self.wait_event("sent", id=ident)["report"]  # type: ignore[no-any-return]

    def list_peers(self) -> dict[str, Any]:
        """A listing made by this session's runtime (it probes, hides and reaps)."""
        ident = self.command(peers=True)
        return self.wait_event("peers", id=ident)

    def exit(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"exit": True}) + "\n")
        stdin.flush()

    def close_stdin(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    # -- ending ------------------------------------------------------------------------------------

    def wait_exit(self, timeout: float = EXIT_TIMEOUT_S) -> int:
        """The exit status, once the process ended by itself (the test fails otherwise)."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{self.name} did not exit:\n{self.output()}") from exc
        self._join()
        return code

    def close(self) -> None:
        """End the process whatever its state (stopped, hung, already gone), and reap it."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGCONT)
                self.process.terminate()
                self.process.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._join()


class PeerProcesses:
    """Starts peer processes for one test and ends all of them at the end."""

    def __init__(self, agent_dir: str | os.PathLike[str]) -> None:
        self.agent_dir = agent_dir
        self.started: list[PeerProcess] = []

    def start(self, *names: str, busy_s: float = 0.05) -> list[PeerProcess]:
        """Start one process per name, all at once, and wait until each is ready."""
        peers = [PeerProcess(self.agent_dir, name, busy_s=busy_s) for name in names]
        self.started += peers
        for peer in peers:
            peer.wait_event("ready")
        return peers

    def close(self) -> None:
        for peer in self.started:
            peer.close()


def exists(path: str) -> bool:
    """``lexists`` (a socket or a dangling link counts)."""
    return os.path.lexists(path)


def pid_exists(pid: int) -> bool:
    """``kill(pid, 0)`` succeeds (a zombie counts: its pid is still taken)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
