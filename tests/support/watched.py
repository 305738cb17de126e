"""A child process whose output is read by threads as it comes, so tests wait for lines, not time.

Both the command line's inbox (:mod:`tests.support.cli_procs`) and the scripted peer sessions
(:mod:`tests.support.peer_procs`) are driven this way: stdout and stderr are collected line by line,
a test waits for a JSON event or a line it expects (failing with everything the process printed if
it ends or times out first), and ending the process always reaps it and closes its pipes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, Final

from tests.support.bounds import MUST_HAPPEN_S

#: How long a test waits for an event it expects (a send's own deadline is 5 s).
EVENT_TIMEOUT_S: Final = MUST_HAPPEN_S


class ProcessExitedError(AssertionError):
    """The process ended while a test was waiting for one of its lines."""


class WatchedProcess:
    """A running child process and every line it printed so far."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        label: str,
        cwd: str | os.PathLike[str] | None = None,
        with_stdin: bool = False,
    ) -> None:
        self.label = label
        self._lock = threading.Condition(threading.RLock())
        self.lines: list[str] = []
        self.err_lines: list[str] = []
        self._open_streams = 2
        self.process = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
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

    # -- what it printed -------------------------------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        """Every JSON line printed so far."""
        with self._lock:
            lines = list(self.lines)
        return [json.loads(line) for line in lines if line.startswith("{")]

    def output(self) -> str:
        """Everything printed so far, stdout then stderr (for failure messages)."""
        with self._lock:  # re-entrant: also called while waiting under the lock
            out = "\n".join(self.lines)
            err = "\n".join(self.err_lines)
        return f"--- {self.label} stdout\n{out}\n--- stderr\n{err}"

    def _wait(self, find: Callable[[], Any], what: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = find()
                if found is not None:
                    return found
                if self._open_streams == 0:
                    raise self.exited_error(f"{self.label} ended before {what}:\n{self.output()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}:\n{self.output()}")
                self._lock.wait(left)

    def exited_error(self, message: str) -> AssertionError:
        """The error raised when the process ends while a test waits (subclasses narrow it)."""
        return ProcessExitedError(message)

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

        found: dict[str, Any] = self._wait(find, f"event {event} {fields}", timeout)
        return found

    def wait_line(
        self,
        pattern: str | re.Pattern[str],
        *,
        timeout: float = EVENT_TIMEOUT_S,
        stderr: bool = False,
    ) -> re.Match[str]:
        """The first line printed on stdout (or ``stderr``) matching ``pattern``
        (``re.search``); waits for it."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        printed = self.err_lines if stderr else self.lines

        def find() -> re.Match[str] | None:
            for line in printed:
                match = regex.search(line)
                if match is not None:
                    return match
            return None

        found: re.Match[str] = self._wait(find, f"a line matching {regex.pattern!r}", timeout)
        return found

    # -- ending ----------------------------------------------------------------------------------

    def _join(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()
        for reader in self._readers:
            reader.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """End the process if it still runs (SIGKILL), reap it and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._join()
