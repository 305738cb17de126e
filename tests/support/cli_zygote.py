"""The fork server's own process: the command line imported once, forked for every command.

Run as ``python cli_zygote.py SOCKET`` by :mod:`tests.support.forked`, never by a test directly.
It imports ``pi_cross_session._internal.cli`` and every command module, prints ``ready``, and then,
for each connection on ``SOCKET`` (one request: arguments, environment, working directory, and the
three standard descriptors passed with ``SCM_RIGHTS``):

1. forks a *monitor*, which forks the *command*: a process that puts the passed descriptors on 0, 1
   and 2, closes every other descriptor, takes the request's environment, directory and arguments,
   and runs :func:`pi_cross_session._internal.cli.main` the way ``python -m pi_cross_session`` does
   (the ``SystemExit`` it raises ends the process through the interpreter's normal exit: ``atexit``,
   flushed streams, joined threads);
2. the monitor writes the command's pid on the connection, waits for it, writes its wait status,
   and exits;
3. the server reaps monitors and serves the next connection. It exits when its standard input
   (the test process's end of a pipe) closes, so a test process that dies takes it along.

Only the server's own code runs before the fork: it starts no thread and no event loop, and the
command's process starts from a state a fresh interpreter would have after the same imports.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import io
import json
import os
import select
import socket
import struct
import sys
from dataclasses import dataclass
from typing import TextIO

#: A request's header: the length of its JSON body (``forked._HEADER`` writes it; this script runs
#: outside the test package, so it cannot import it).
_HEADER = struct.Struct("!I")


@dataclass
class Command:
    """What the command's process runs."""

    args: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]


def _receive(conn: socket.socket) -> Command:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    (size,) = _HEADER.unpack_from(data)
    body = data[_HEADER.size :]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("request cut short")
        body += chunk
    request = json.loads(body)
    return Command(request["args"], request["env"], request["cwd"], list(fds))


def _reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _monitor(conn: socket.socket, command: Command) -> Command | None:
    """In the monitor: fork the command; returns the command in its process, else never."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        return command
    for fd in command.fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(f"{pid}\n".encode())
    while True:
        try:
            _pid, status = os.waitpid(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - retried by Python since 3.5
            continue
    with contextlib.suppress(OSError):
        conn.sendall(f"{status}\n".encode())
    os._exit(0)


def serve(path: str) -> Command:
    """Serve requests until standard input closes; returns only in a command's process."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    os.write(1, b"ready\n")
    while True:
        _reap()
        readable, _, _ = select.select([listener, 0], [], [], 1.0)
        if 0 in readable and not os.read(0, 1):
            listener.close()
            raise SystemExit(0)
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        try:
            command = _receive(conn)
        except (OSError, ValueError, KeyError, struct.error):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            found = _monitor(conn, command)
            if found is not None:
                return found
        conn.close()
        for fd in command.fds:
            os.close(fd)


def become(command: Command, main_file: str) -> None:
    """Turn this forked process into ``python -m pi_cross_session ARGS`` as requested."""
    for target, fd in enumerate(command.fds):
        if fd != target:
            os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
    os.chdir(command.cwd)
    os.environ.clear()
    os.environ.update(command.env)
    # What ``-m`` leaves: argv[0] the module's file, the working directory first on the path.
    sys.argv = [main_file, *command.args]
    sys.path[0] = command.cwd
    # New standard streams over the new descriptors, as the interpreter makes them at start (the
    # server's own describe its pipes: seekable or not, a terminal or not).
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = _stdio(0, "rb", sys.stdin, unbuffered=False)
    sys.stdout = sys.__stdout__ = _stdio(1, "wb", sys.stdout, unbuffered=unbuffered)
    sys.stderr = sys.__stderr__ = _stdio(2, "wb", sys.stderr, unbuffered=unbuffered)


def _stdio(fd: int, mode: str, like: TextIO, *, unbuffered: bool) -> TextIO:
    binary = open(fd, mode, buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    return io.TextIOWrapper(
        binary,
        encoding=like.encoding,
        errors=like.errors,
        line_buffering=fd == 2 or (fd == 1 and os.isatty(fd)),
        write_through=unbuffered,
    )


if __name__ == "__main__":
    # As under ``-m``: the working directory first on the path, not this script's directory.
    sys.path[0] = os.getcwd()
    import pi_cross_session._internal.cli as cli

    # Every command's module (the command line's own table of them), so that no command pays
    # for an import after the fork.
    for name in cli._RUNNERS.values():
        importlib.import_module(f"pi_cross_session._internal.cli.{name}")
    # What the imports made is kept out of every collection: a command's garbage collections
    # and its exit would otherwise touch, and so copy, every page of the imported heap (a forked
    # ``--version`` cost 128 ms of CPU without this, 39 ms with it).
    gc.collect()
    gc.freeze()
    try:
        command = serve(sys.argv[1])
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(f"fork server: {sys.argv[1]} is taken") from exc
        raise
    become(command, os.path.join(os.path.dirname(os.path.dirname(cli.__file__)), "__main__.py"))
    raise SystemExit(cli.main(command.args))
