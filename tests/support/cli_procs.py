"""The ``pi-cross-session`` command line as real processes: one-shot commands and live inboxes.

Every process gets ``PI_CODING_AGENT_DIR`` explicitly, so nothing here can ever touch ``~/.pi``.
An inbox's stdout and stderr are read by threads as they come, so a test waits for an *event*
(a line it expects) rather than for some time; :meth:`InboxProcess.close` always ends the process
(SIGINT first, SIGKILL after a timeout), and fixtures call it in their finalizers.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_cross_session.protocol import paths
from tests.support.watched import ProcessExitedError, WatchedProcess

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
    done = subprocess.run(
        [*command, *args],
        env={**cli_env(agent_dir), **(env or {})},
        cwd=cwd,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding=encoding,
        errors="backslashreplace",
        timeout=timeout,
        check=False,
    )
    return Result(tuple(args), done.returncode, done.stdout, done.stderr)


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
    ) -> None:
        self.args = ("inbox", *args, *(("--json",) if as_json else ()))
        self.as_json = as_json
        super().__init__([*command, *self.args], env=cli_env(agent_dir), label="inbox", cwd=cwd)

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


# -- files ---------------------------------------------------------------------------------------


def exists(path: str | os.PathLike[str]) -> bool:
    """``lexists``: kept out of async test bodies (ruff's ASYNC240)."""
    return os.path.lexists(path)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Create or overwrite a file (a sync helper for async test bodies)."""
    Path(path).write_text(text)


def listdir(path: str | os.PathLike[str]) -> list[str]:
    """Sorted entries of a dir (a sync helper for async test bodies)."""
    return sorted(os.listdir(path))


def mode_of(path: str | os.PathLike[str]) -> int:
    """Permission bits of ``path`` itself (never following a symlink)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


def tree_state(
    *roots: str | os.PathLike[str], rewritten: Iterable[str] = ()
) -> dict[str, tuple[Any, ...]]:
    """Everything under ``roots`` as ``path -> (type, mode, uid, size, mtime_ns, link)``.

    Symlinks are recorded, not followed; a missing root is recorded as missing. A dir's mtime is
    recorded too, so even a file created and removed again inside it shows. ``rewritten`` names
    files a live session rewrites on its own (its registration, at every heartbeat): their times
    and sizes, and their dir's time, are left out, since they change whatever the test does.
    """
    state: dict[str, tuple[Any, ...]] = {}
    moving = {os.fspath(path) for path in rewritten}
    moving_dirs = {os.path.dirname(path) for path in moving}

    def record(path: str) -> os.stat_result | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            state[path] = ("missing",)
            return None
        link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
        changes = path in moving or path in moving_dirs
        state[path] = (
            stat.S_IFMT(st.st_mode),
            stat.S_IMODE(st.st_mode),
            st.st_uid,
            None if path in moving else size,
            None if changes else st.st_mtime_ns,
            link,
        )
        return st

    def walk(path: str) -> None:
        st = record(path)
        if st is not None and stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(path)):
                walk(os.path.join(path, name))

    for root in roots:
        walk(os.fspath(root))
    return state


def leftovers(locations: paths.Locations, keep: Sequence[str] = ()) -> list[str]:
    """Registration files, temp files and sockets not belonging to the instance ids in ``keep``."""
    found: list[str] = []
    for directory in (locations.peers_dir, locations.runtime_dir):
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith(".") and name.endswith(".lock"):
                continue  # the reap lock of listings: part of the dir, not a leftover
            stem = name.split(".", 1)[0]
            if stem in keep and not name.startswith("."):
                continue
            found.append(os.path.join(directory, name))
    return found
