"""Every OS process a test drives: the command line, its inboxes, and scripted peer sessions.

All of them are :class:`WatchedProcess` es: their stdout and stderr are read by threads as they
come, so a test waits for an *event* (a JSON line or a line it expects) rather than for some time,
failing with everything the process printed if it ends or times out first; ending one always
reaps it and closes its pipes. Every process gets ``PI_CODING_AGENT_DIR`` explicitly, so nothing
here can ever touch ``~/.pi``.

* The command line (``python -m pi_cross_session``): :func:`run_cli` for one-shot commands,
  :func:`run_with_tty_stderr` for one whose stderr is a terminal, :class:`InboxProcess` /
  :class:`Inboxes` for live ``inbox`` processes (SIGINT first, SIGKILL after a timeout).
* Peer sessions (``peer_session_script.py``, a session runtime on the headless host driven
  through stdin): :class:`PeerProcess` / :class:`PeerProcesses`; a process that did not stop by
  itself is continued (if stopped), asked to stop (SIGTERM), then killed.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from tests.support import forked
from tests.support.bounds import MUST_HAPPEN_S

# -- a watched process -----------------------------------------------------------------------------

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
        self.process = forked.start(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            fork_prefix=CLI,
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


# -- the command line ------------------------------------------------------------------------------

CLI: Final = (sys.executable, "-m", "pi_cross_session")
#: The same command line with a queue time to live of seconds (see ``short_queue_ttl_cli.py``).
SHORT_QUEUE_TTL_CLI: Final = (
    sys.executable,
    str(Path(__file__).with_name("short_queue_ttl_cli.py")),
)
#: How long a one-shot command may run before the test fails (a send's own deadline is 5 s).
COMMAND_TIMEOUT_S: Final = 30.0
#: How long an inbox gets to stop after SIGINT/SIGTERM before it is killed.
STOP_TIMEOUT_S: Final = 10.0
#: ``--busy`` for an inbox that must stay busy while other processes start and send: the most the
#: option takes, a minute, far beyond a process start even under load. The test ends the turn
#: with :meth:`InboxProcess.end_turn`, or leaves the inbox busy until the fixture stops it.
HOLD_S: Final = 60.0
#: The messageId printed at the end of a send's text result.
MESSAGE_ID_RE: Final = re.compile(r"messageId=([0-9a-f-]{36})")


def cli_env(agent_dir: str | os.PathLike[str]) -> dict[str, str]:
    """This process's environment with the test's private agent dir."""
    env = dict(os.environ)
    env["PI_CODING_AGENT_DIR"] = str(agent_dir)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class Result:
    """A finished one-shot command."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """The command's stdout as JSON (the test fails with the output if it is not JSON)."""
        try:
            return json.loads(self.stdout)
        except ValueError as exc:  # pragma: no cover - only on a failing test
            raise AssertionError(f"not JSON: {self!r}") from exc

    def message_id(self) -> str:
        """The ``messageId=…`` of a text-mode send result."""
        match = MESSAGE_ID_RE.search(self.stdout + self.stderr)
        assert match is not None, self
        return match.group(1)

    def __str__(self) -> str:
        return (
            f"$ pi-cross-session {' '.join(self.args)}\n(exit {self.returncode})\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


def run_cli(
    agent_dir: str | os.PathLike[str],
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = COMMAND_TIMEOUT_S,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    encoding: str = "utf-8",
    command: Sequence[str] = CLI,
) -> Result:
    """Run ``pi-cross-session ARGS`` to completion (``stdin``: text to feed it; ``env``: extra
    variables; ``encoding``: how its output is decoded, with escapes for what does not decode;
    ``command``: the program, :data:`CLI` unless a test needs a variant)."""
    process = forked.start(
        [*command, *args],
        env={**cli_env(agent_dir), **(env or {})},
        cwd=cwd,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        encoding=encoding,
        errors="backslashreplace",
        fork_prefix=CLI,
    )
    try:
        out, err = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return Result(tuple(args), process.wait(), out, err)


def run_with_tty_stderr(
    agent_dir: str | os.PathLike[str],
    *args: str,
    cwd: str | os.PathLike[str],
    on_terminal: Callable[[str], None] | None = None,
) -> tuple[int, str, str]:
    """Run the command line with stderr on a pseudo-terminal (stdout stays a pipe).

    ``on_terminal`` is called with everything the terminal showed so far, after each read: a test
    acts on what the command said (an event), not on how long it has been running.
    """
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            [*CLI, *args],
            env=cli_env(agent_dir),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        slave = -1
        seen = b""
        while True:
            ready, _, _ = select.select([master], [], [], COMMAND_TIMEOUT_S)
            assert ready, "the command line went silent on its terminal"
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            seen += chunk
            if on_terminal is not None:
                on_terminal(seen.decode(errors="replace"))
        out = process.communicate(timeout=COMMAND_TIMEOUT_S)[0]
        return process.returncode, out.decode(), seen.decode()
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)


class InboxExitedError(ProcessExitedError):
    """The inbox ended while a test was waiting for one of its events."""


class InboxProcess(WatchedProcess):
    """A running ``pi-cross-session inbox`` and every line it printed so far."""

    def __init__(
        self,
        agent_dir: str | os.PathLike[str],
        *args: str,
        as_json: bool = True,
        cwd: str | os.PathLike[str] | None = None,
        command: Sequence[str] = CLI,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = ("inbox", *args, *(("--json",) if as_json else ()))
        self.as_json = as_json
        super().__init__(
            [*command, *self.args],
            env={**cli_env(agent_dir), **(env or {})},
            label="inbox",
            cwd=cwd,
        )

    def exited_error(self, message: str) -> AssertionError:
        return InboxExitedError(message)

    def states_of(self, message_id: str) -> list[str]:
        """The states one message went through, in order, as its ``state`` events show them.

        A state reported again (a row update that only changes its diagnostic, such as the host's
        confirmation of a submission) is not a new transition and is counted once.
        """
        states: list[str] = []
        for e in self.events():
            if e.get("event") != "state" or e.get("messageId") != message_id:
                continue
            if not states or states[-1] != e["state"]:
                states.append(e["state"])
        return states

    # -- stopping --------------------------------------------------------------------------------

    def send_signal(self, number: int) -> None:
        self.process.send_signal(number)

    def end_turn(self) -> None:
        """End the inbox's simulated turn now (SIGUSR2), whatever its ``--busy``."""
        self.send_signal(signal.SIGUSR2)

    def stop(self, number: int = signal.SIGINT, timeout: float = STOP_TIMEOUT_S) -> int:
        """Send ``number`` and wait for the exit status (the test fails if it does not exit)."""
        if self.process.poll() is None:
            self.process.send_signal(number)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.close()
            raise AssertionError(
                f"inbox did not stop on signal {number}:\n{self.output()}"
            ) from exc
        self._join()
        return code

    def close(self) -> None:
        """End the process whatever state it is in: SIGINT, then SIGKILL after a timeout."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGINT)
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._join()


class Inboxes:
    """Starts inboxes for one test and stops every one of them at the end."""

    def __init__(self, agent_dir: Path, cwd: Path) -> None:
        self.agent_dir = agent_dir
        self.cwd = cwd
        self.started: list[InboxProcess] = []

    def start(
        self,
        name: str | None = None,
        *args: str,
        busy: float | None = None,
        as_json: bool = True,
        wait: bool = True,
        command: Sequence[str] = CLI,
    ) -> InboxProcess:
        """Start ``inbox --name NAME ARGS`` and, by default, wait for its ``ready`` line."""
        argv: list[str] = []
        if name is not None:
            argv += ["--name", name]
        if busy is not None:
            argv += ["--busy", f"{busy:g}"]
        inbox = InboxProcess(
            self.agent_dir, *argv, *args, as_json=as_json, cwd=self.cwd, command=command
        )
        self.started.append(inbox)
        if wait:
            if as_json:
                inbox.wait_event("ready")
            else:
                inbox.wait_line(r"listening as session")
        return inbox

    def close(self) -> None:
        for inbox in self.started:
            inbox.close()


# -- peer sessions ---------------------------------------------------------------------------------

#: The script a peer session process runs.
PEER_SCRIPT: Final = str(Path(__file__).with_name("peer_session_script.py"))
#: How long a process gets to exit once asked to.
EXIT_TIMEOUT_S: Final = 10.0


class PeerExitedError(ProcessExitedError):
    """The process ended while a test was waiting for one of its events."""


class PeerProcess(WatchedProcess):
    """A running ``peer_session_script.py`` and every line it printed so far."""

    def __init__(self, agent_dir: str | os.PathLike[str], name: str, *, busy_s: float) -> None:
        self.name = name
        env = dict(os.environ)
        env["PI_CODING_AGENT_DIR"] = str(agent_dir)
        env["PYTHONUNBUFFERED"] = "1"
        self._next_id = 0
        super().__init__(
            [sys.executable, PEER_SCRIPT, "--name", name, "--busy", f"{busy_s:g}"],
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


def pid_exists(pid: int) -> bool:
    """``kill(pid, 0)`` succeeds (a zombie counts: its pid is still taken)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the demos -------------------------------------------------------------------------------------


def run_demo(script: Path, scratch: Path, *, timeout_s: float, unset: tuple[str, ...] = ()) -> str:
    """Run a demo script from the checkout's root as ``make`` does, with its temporary files in
    ``scratch`` (which it must leave empty); returns its output once it exited 0."""
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONWARNINGS": "ignore"}
    for name in unset:
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(scratch.iterdir()), "the demo left files in its temporary dir"
    return done.stdout
