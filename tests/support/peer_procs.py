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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

SCRIPT: Final = str(Path(__file__).with_name("peer_process.py"))
#: How long a test waits for an event it expects (a send's own deadline is 5 s).
EVENT_TIMEOUT_S: Final = 15.0
#: How long a process gets to exit once asked to.
EXIT_TIMEOUT_S: Final = 10.0


class PeerExitedError(AssertionError):
    """The process ended while a test was waiting for one of its events."""


class PeerProcess:
    """A running ``peer_process.py`` and every line it printed so far."""

    def __init__(self, agent_dir: str | os.PathLike[str], name: str, *, busy_s: float) -> None:
        self.name = name
        env = dict(os.environ)
        env["PI_CODING_AGENT_DIR"] = str(agent_dir)
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "--name", name, "--busy", f"{busy_s:g}"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self._lock = threading.Condition()
        self.lines: list[str] = []
        self.err_lines: list[str] = []
        self._open_streams = 2
        self._next_id = 0
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self._readers = [
            threading.Thread(
                target=self._read, args=(self.process.stdout, self.lines), daemon=True
            ),
            threading.Thread(
                target=self._read, args=(self.process.stderr, self.err_lines), daemon=True
            ),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self, stream: IO[str], sink: list[str]) -> None:
        try:
            for line in stream:
                with self._lock:
                    sink.append(line.rstrip("\n"))
                    self._lock.notify_all()
        finally:
            with self._lock:
                self._open_streams -= 1
                self._lock.notify_all()

    # -- what it printed ---------------------------------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            lines = list(self.lines)
        return [json.loads(line) for line in lines if line.startswith("{")]

    def output(self) -> str:
        with self._lock:
            return self._output_locked()

    def _output_locked(self) -> str:
        out = "\n".join(self.lines)
        err = "\n".join(self.err_lines)
        return f"--- {self.name} stdout\n{out}\n--- stderr\n{err}"

    def wait_event(
        self, event: str, *, timeout: float = EVENT_TIMEOUT_S, **fields: Any
    ) -> dict[str, Any]:
        """The first JSON event of this kind whose fields equal ``fields``; waits for it."""

        def find() -> dict[str, Any] | None:
            for line in self.lines:
                if not line.startswith("{"):
                    continue
                data = json.loads(line)
                if data.get("event") == event and all(data.get(k) == v for k, v in fields.items()):
                    return data  # type: ignore[no-any-return]
            return None

        return self._wait(find, f"event {event} {fields}", timeout)

    def _wait(self, find: Callable[[], Any], what: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = find()
                if found is not None:
                    return found
                if self._open_streams == 0:
                    raise PeerExitedError(
                        f"{self.name} ended before {what}:\n{self._output_locked()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}:\n{self._output_locked()}")
                self._lock.wait(left)

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

    def _join(self) -> None:
        self.close_stdin()
        for reader in self._readers:
            reader.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


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
