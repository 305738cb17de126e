"""The file layer a running session uses, with registration writes that fail on demand.

:class:`SessionRuntime` hands its :class:`Registrar` (and its endpoint, exchanger and listings) the
module :mod:`pi_cross_session._internal.security.io.fs` as their file operations.
:class:`FaultyFiles` stands in for that module — :func:`install` puts it where the runtime looks it
up — and delegates everything to it. Only registration writes are watched: each is recorded with its
outcome, and while a fault is armed the *real* ``fs.write_registration`` runs with the one system
call that would fail in that situation raising the ``OSError``:

* ``ENOSPC`` (disk full) from ``write(2)`` of the temp file's bytes;
* ``EACCES`` (permission denied) from ``open(2)`` creating the temp file;
* ``EMFILE`` (out of file descriptors) from ``open(2)`` creating the temp file;
* ``EIO`` from ``write(2)``, for anything else.

So the error reaches the registrar exactly as the file layer translates it (a
:class:`~pi_cross_session._internal.security.io.fs.FileOperationError` whose code is the errno
name), and the file layer's own cleanup of its temp file runs for real. The fault is thread-local to
the chosen write's worker thread: nothing else in the process sees it.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pytest

from pi_cross_session._internal.plugin import assembly as assembly_module
from pi_cross_session._internal.plugin import runtime as runtime_module
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs

#: Which system call fails for each injected errno.
FAILING_CALL: Final = {
    errno.ENOSPC: "write",
    errno.EACCES: "open",
    errno.EMFILE: "open",
    errno.EIO: "write",
}

_fault = threading.local()


@dataclass(frozen=True, slots=True)
class Write:
    """One registration write the runtime attempted, and how it ended."""

    instance_id: str
    #: ``"ok"``, ``"fenced"`` (the registrar stopped meanwhile) or the error's code.
    outcome: str


class FaultyFiles:
    """:mod:`security.fs`, with registration writes recorded and failing while armed."""

    def __init__(self) -> None:
        self.fault: int | None = None
        self.writes: list[Write] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(fs, name)

    def arm(self, code: int) -> None:
        """Every registration write from now on fails with ``code`` at its system call."""
        assert code in FAILING_CALL, code
        self.fault = code

    def disarm(self) -> None:
        self.fault = None

    def outcomes(self) -> list[str]:
        return [write.outcome for write in self.writes]

    def write_registration(
        self,
        peers_dir: str,
        instance_id: str,
        data: bytes,
        *,
        still_current: Callable[[], bool],
    ) -> bool:
        _fault.code = self.fault
        try:
            written = fs.write_registration(
                peers_dir, instance_id, data, still_current=still_current
            )
        except fs.FileSystemError as exc:
            self.writes.append(Write(instance_id, str(exc.code)))
            raise
        finally:
            _fault.code = None
        self.writes.append(Write(instance_id, "ok" if written else "fenced"))
        return written


def install(monkeypatch: pytest.MonkeyPatch) -> FaultyFiles:
    """Make every runtime created from now on (in this test) use a :class:`FaultyFiles`."""
    files = FaultyFiles()
    real_open = fs._open
    real_write = fs._write

    def faulty_open(path: str, flags: int, mode: int) -> int:
        code = getattr(_fault, "code", None)
        if code is not None and FAILING_CALL[code] == "open" and flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), path)
        return real_open(path, flags, mode)

    def faulty_write(fd: int, data: memoryview) -> int:
        code = getattr(_fault, "code", None)
        if code is not None and FAILING_CALL[code] == "write":
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(fs, "_open", faulty_open)
    monkeypatch.setattr(fs, "_write", faulty_write)
    # The assembly gives an incarnation its files; the runtime uses them at stop and for sends.
    monkeypatch.setattr(assembly_module, "fs", files)
    monkeypatch.setattr(runtime_module, "fs", files)
    return files


def temp_files(locations: Locations) -> list[str]:
    """Temp files a registration write left in the peers dir (there must never be any)."""
    try:
        names = os.listdir(locations.peers_dir)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if name.startswith(".") and name.endswith(".tmp"))


def leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
