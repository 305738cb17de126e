"""Command-line processes forked from a server that imported the package once.

A ``pi-cross-session`` command spends most of its short life starting Python and importing the
package (0.3 s of CPU on two shared cores, against a few hundredths for what most commands then
do), and the suite runs hundreds of them. Here each test process starts one server
(``cli_zygote.py``) that imports the command line and every command module, and each command is
a fork of it: a real OS process, with its own pid, its own pipes, the environment, directory and
arguments asked for, signals delivered to it and its exit status seen as ``subprocess`` would —
only without the interpreter's start and the imports, which ``tests/cli/test_exec.py`` and
``bench/cli_start.py`` cover through ``python -m pi_cross_session`` itself.

A command is forked only when its process would start the same as the server did: the same
interpreter-level environment (every ``PYTHON*``, ``LANG`` and ``LC_*`` variable; a test that sets
``PYTHONIOENCODING`` gets a real start). ``PI_XS_TEST_EXEC=1`` turns forking off: in the test
process's environment for the whole run (``make test-long`` does), so every command then starts
the way a user starts it; in one command's environment for that command.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

#: Set to 1 to start every command line with ``python -m pi_cross_session`` instead.
EXEC_ENV: Final = "PI_XS_TEST_EXEC"
#: The server's program.
ZYGOTE: Final = str(Path(__file__).with_name("cli_zygote.py"))
#: How long the server may take to import everything (a cold start under load).
START_TIMEOUT_S: Final = 60.0
_HEADER: Final = struct.Struct("!I")


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that decide how an interpreter starts (encodings, flags, paths)."""
    return {
        key: value
        for key, value in env.items()
        if key.startswith(("PYTHON", "LC_")) or key == "LANG"
    }


class ForkServer:
    """One ``cli_zygote.py`` process for this test process, started on first use."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="pi-xs-forks-")
        self.path = os.path.join(self._dir, "s")
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._process = subprocess.Popen(
            [sys.executable, ZYGOTE, self.path],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], START_TIMEOUT_S)
        line = self._process.stdout.readline() if ready else b""
        if line != b"ready\n":
            self.close()
            raise RuntimeError("the command line's fork server did not start")
        self._process.stdout.close()

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a process with ``env`` would start as the server did."""
        return self._process.poll() is None and _interpreter_env(env) == _interpreter_env(self.env)

    def start(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        fds: Sequence[int],
    ) -> tuple[socket.socket, int]:
        """Ask for ``pi-cross-session ARGS`` on descriptors ``fds``; its status channel and pid."""
        body = json.dumps({"args": list(args), "env": dict(env), "cwd": cwd}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [_HEADER.pack(len(body)) + body], list(fds))
            pid = int(_read_line(conn, None))
        except BaseException:
            conn.close()
            raise
        return conn, pid

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def _read_line(conn: socket.socket, timeout: float | None) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([conn], [], [], timeout)
        if not ready:
            raise TimeoutError
        chunk = conn.recv(1)  # a byte at a time: what follows the line is another's to read
        if not chunk:
            raise ConnectionError("the fork server's monitor went away")
        data += chunk
    return data


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This test process's server (started on first use, stopped at exit)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = ForkServer()
            atexit.register(_server.close)
        return _server


class ForkedProcess:
    """A forked command, with the part of :class:`subprocess.Popen` the tests use."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str] | None,
        stdin: int | None,
        stdout: int | None,
        stderr: int | None,
        encoding: str | None,
        errors: str | None,
    ) -> None:
        self.args = list(args)
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        theirs: list[int] = []
        ours: list[tuple[int, str]] = []
        try:
            for number, how in enumerate((stdin, stdout, stderr)):
                if how == subprocess.PIPE:
                    read, write = os.pipe()
                    child, parent = (read, write) if number == 0 else (write, read)
                    theirs.append(child)
                    ours.append((parent, "w" if number == 0 else "r"))
                elif how == subprocess.DEVNULL or how is None:
                    theirs.append(os.open(os.devnull, os.O_RDWR))
                    ours.append((-1, ""))
                else:
                    theirs.append(os.dup(how))
                    ours.append((-1, ""))
            self._conn, self.pid = fork_server().start(
                args, env=env, cwd=os.fspath(cwd or os.getcwd()), fds=theirs
            )
        except BaseException:
            for fd, _mode in ours:
                if fd != -1:
                    os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        streams = [_wrap(fd, mode, encoding, errors) for fd, mode in ours]
        self.stdin, self.stdout, self.stderr = streams

    # -- the part of Popen the tests use ---------------------------------------------------------

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(TimeoutError):
                self._collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self._collect(timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def _collect(self, timeout: float | None) -> None:
        status = int(_read_line(self._conn, timeout))
        self._conn.close()
        self.returncode = os.waitstatus_to_exitcode(status)

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(
        self, input: str | bytes | None = None, timeout: float | None = None
    ) -> tuple[Any, Any]:
        """Feed ``input``, read both outputs to their end and wait, as ``Popen.communicate``."""
        results: dict[str, Any] = {}

        def drain(name: str, stream: IO[Any]) -> None:
            results[name] = stream.read()
            stream.close()

        threads = [
            threading.Thread(target=drain, args=(name, stream), daemon=True)
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for thread in threads:
            thread.start()
        if self.stdin is not None:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        self.wait(timeout)
        for thread in threads:
            thread.join(timeout)
        return results.get("out"), results.get("err")


def _wrap(fd: int, mode: str, encoding: str | None, errors: str | None) -> IO[Any] | None:
    if fd == -1:
        return None
    if mode == "w":
        raw: IO[bytes] = open(fd, "wb")  # noqa: SIM115 - owned by the process object
        if encoding is None:
            return raw
        return io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
    if encoding is None:
        return open(fd, "rb")
    return open(fd, encoding=encoding, errors=errors)


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
    encoding: str | None = "utf-8",
    errors: str | None = None,
    fork_prefix: Sequence[str] = (),
) -> ForkedProcess | subprocess.Popen[Any]:
    """Start ``argv``: forked when it is ``fork_prefix`` + arguments and may be, else executed."""
    prefix = tuple(fork_prefix)
    if (
        prefix
        and tuple(argv[: len(prefix)]) == prefix
        and "1" not in (os.environ.get(EXEC_ENV), env.get(EXEC_ENV))
        and fork_server().serves(env)
    ):
        return ForkedProcess(
            argv[len(prefix) :],
            env=env,
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            encoding=encoding,
            errors=errors,
        )
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        text=encoding is not None,
        encoding=encoding,
        errors=errors,
    )
