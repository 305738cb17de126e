"""The one place that judges files, modes, owners and symlinks (spec §1.2, spec §1.4, spec §1.5,
spec §2).

Every function here is synchronous and does blocking system calls; async callers run them in a
worker thread, or on the loop once :func:`on_local_filesystem` said the directory is local (see
:mod:`pi_cross_session._internal.protocol.io.offload`). Nothing else in the package calls ``lstat``,
``chmod`` or ``kill`` for a decision.

Threat model
------------
* **Another uid on the machine** may create, in ``/tmp``, the runtime dir we are about to use (or a
  symlink named like it), may leave files readable or writable by everyone, and may point a symlink
  at a file of ours. Trust therefore rests on three facts checked with ``lstat`` (never ``stat``):
  the thing is of the expected type and not a symlink, it is owned by our uid, and no group/other
  mode bit is set. A dir failing the owner check is refused; a dir of ours that is merely too open
  is repaired to 0700 (spec §1.2), because nobody but us could have made it so. A registration that
  is too open is *ignored*, never repaired: a reader must not change another session's file.
* **Symlink swaps and TOCTOU.** Between a check and a use, the path may be replaced. Reads
  therefore open with ``O_NOFOLLOW|O_NONBLOCK``, re-check the open descriptor with ``fstat`` and
  require the same ``(st_dev, st_ino)`` as the ``lstat``: what is read is what was judged. A FIFO
  slipped in cannot block the reader (``O_NONBLOCK``, then refused as not a regular file). Writes go
  to a fresh ``O_EXCL|O_NOFOLLOW`` temp file, get their mode through the descriptor and are renamed
  into place, so readers see either the old file or the whole new one, always at 0600.
* **Same-uid processes are not an adversary** here (spec: same-uid isolation is not a goal): a mode
  repair of our own dir or socket goes through a path the other uids cannot reach.

Exceptions
----------
::

    CrossSessionError               (protocol.errors)
    └── FileSystemError             something at ``path`` cannot be used
        ├── UnsafePathError         we refuse to trust it (code ``unsafe_endpoint``; ``reason``)
        └── FileOperationError      the OS refused an operation (code = errno name; ``operation``)

An :class:`OSError` from a system call is translated here, at this boundary, with the original kept
as ``__cause__``; no function below raises a raw ``OSError``. Exceptions raised by a caller's own
callback (the write fence) pass through unchanged. :func:`vet_socket` and :func:`pid_is_dead`
never raise: they answer with a code or a boolean.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io.environment import resolve_uid
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_PATH_CODE_POINTS,
    MAX_LISTED_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
    REGISTRATION_READ_ATTEMPTS,
)
from pi_cross_session._internal.protocol.name_window import NameWindow
from pi_cross_session._internal.protocol.paths import (
    instance_id_from_filename,
    is_instance_id,
)
from pi_cross_session._internal.protocol.pressure import RESOURCE_ERRNOS

try:
    import pwd
except ImportError:  # pragma: no cover - not a POSIX system
    pwd = None  # type: ignore[assignment]

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "DirInspection",
    "DirState",
    "FileOperationError",
    "FileSystemError",
    "Reason",
    "UnsafePathError",
    "describe_uid",
    "ensure_private_dir",
    "inspect_private_dir",
    "list_registration_names",
    "make_socket_private",
    "on_local_filesystem",
    "open_private_file",
    "pid_is_dead",
    "read_refused_registration",
    "read_registration_bytes",
    "remove_file",
    "vet_socket",
    "write_private_file",
    "write_registration",
]

logger = logging.getLogger(__name__)

#: Mode of the peers dir and the runtime dir.
DIR_MODE: Final = 0o700
#: Mode of a registration file and of a listening socket.
FILE_MODE: Final = 0o600
#: Any of these bits makes a file readable, writable or searchable by someone else.
_FOREIGN_BITS: Final = 0o077
#: Bytes asked of the OS per read call; a registration is normally well under one chunk.
_READ_CHUNK: Final = 65_536

# Test seams: tests replace these to inject failures or swap a file between two steps. Production
# code never reassigns them.
_open: Callable[[str, int, int], int] = os.open
_write: Callable[[int, memoryview], int] = os.write

# ``O_NOFOLLOW`` reports a symlink as ELOOP on Linux and macOS, EMLINK on FreeBSD.
_SYMLINK_ERRNOS: Final = frozenset({errno.ELOOP, errno.EMLINK})


class Reason(StrEnum):
    """Why a path was refused; carried by :class:`UnsafePathError` for diagnostics and tests."""

    SYMLINK = "symlink"
    NOT_DIRECTORY = "not_directory"
    NOT_REGULAR = "not_regular_file"
    NOT_SOCKET = "not_socket"
    FOREIGN_OWNER = "foreign_owner"
    LOOSE_MODE = "group_or_other_access"
    TOO_LARGE = "too_large"
    REPLACED = "replaced_during_check"


class FileSystemError(CrossSessionError):
    """Something at :attr:`path` cannot be used; see the two subclasses."""

    code = Code.TRANSPORT_ERROR

    def __init__(self, message: str, *, path: str, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.path = path


class UnsafePathError(FileSystemError):
    """A file, dir or socket exists but fails a trust check; :attr:`reason` says which.

    Not retryable as such: something (or someone) has to change the file first. :attr:`remedy`
    says what the user can do, when there is something to say (the private dirs' refusals).
    """

    code = Code.UNSAFE_ENDPOINT

    def __init__(self, path: str, reason: Reason, detail: str, *, remedy: str = "") -> None:
        message = f"refusing {path!r}: {detail}"
        super().__init__(f"{message}. {remedy}" if remedy else message, path=path)
        self.reason = reason
        self.detail = detail
        self.remedy = remedy


class FileOperationError(FileSystemError):
    """The OS refused an operation (missing path, permission denied, disk full …).

    :attr:`code` is the errno name (``ENOENT``, ``EACCES``, ``ENOSPC`` …), the same kind of code
    sender vetting produces (spec §2); :attr:`operation` names the step that failed.
    """

    code = Code.TRANSPORT_ERROR

    def __init__(self, path: str, operation: str, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        super().__init__(
            f"could not {operation} {path!r}: {reason}",
            path=path,
            code=_errno_name(exc, Code.TRANSPORT_ERROR),
        )
        self.operation = operation


def _errno_name(exc: OSError, default: str) -> str:
    if exc.errno is None:
        return default
    return errno.errorcode.get(exc.errno, default)


def _failed(path: str, operation: str, exc: OSError) -> FileSystemError:
    """Translate an OSError; a symlink met by ``O_NOFOLLOW`` or ``O_DIRECTORY`` is a refusal."""
    if exc.errno in _SYMLINK_ERRNOS:
        return UnsafePathError(path, Reason.SYMLINK, "it is a symbolic link")
    return FileOperationError(path, operation, exc)


def _check_owner_and_type(
    path: str,
    st: os.stat_result,
    uid: int,
    *,
    is_type: Callable[[int], bool],
    wrong_type: Reason,
    wrong_type_detail: str,
) -> None:
    """Refuse a symlink, the wrong file type, or an owner other than ``uid``."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, Reason.SYMLINK, "it is a symbolic link")
    if not is_type(st.st_mode):
        raise UnsafePathError(path, wrong_type, wrong_type_detail)
    if st.st_uid != uid:
        raise UnsafePathError(path, Reason.FOREIGN_OWNER, f"owned by uid {st.st_uid}, not {uid}")


# -- private dirs ----------------------------------------------------------------------------------


def _mkdir_private(path: str) -> None:
    """``mkdir -p`` where every dir we create (leaf and missing parents) gets mode 0700.

    :func:`os.makedirs` would create the parents with the default mode, and it raises when a
    dangling symlink sits at the leaf; here that case falls through to the ``lstat`` judgement.
    """
    missing: list[str] = []
    current = path
    while True:
        try:
            os.mkdir(current, DIR_MODE)
        except FileExistsError:
            break
        except FileNotFoundError:
            parent = os.path.dirname(current)
            if not parent or parent == current:
                raise
            missing.append(current)
            current = parent
            continue
        break
    for pending in reversed(missing):
        try:
            os.mkdir(pending, DIR_MODE)
        except FileExistsError:
            # Another process won the race for this level; the final lstat judges the leaf.
            continue


def ensure_private_dir(path: str, *, uid: int | None = None) -> None:
    """Create ``path`` if needed and make sure it is a private dir of ours (spec §1.2).

    Missing dirs are created with mode 0700. The leaf must then be a real directory (a symlink is
    refused, even to a good dir) owned by ``uid`` (default: ours). A dir of ours whose mode is not
    0700 is repaired to 0700 through a descriptor opened without following links, so a swap after
    the check cannot redirect the ``chmod``. Used for the peers dir and the runtime dir, at start-up
    and before every listing.

    Raises :class:`UnsafePathError` or :class:`FileOperationError`.
    """
    owner = resolve_uid(uid)
    try:
        _mkdir_private(path)
    except OSError as exc:
        raise _failed(path, "create the directory", exc) from exc
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise _failed(path, "inspect the directory", exc) from exc
    refusal = _unusable_dir(path, st, owner)
    if refusal is not None:
        raise refusal
    # Spec §1.2 repairs group/other bits; we also restore missing owner bits, which a strange
    # umask can strip and without which the dir is useless to us. Special bits are left alone.
    if stat.S_IMODE(st.st_mode) & 0o777 != DIR_MODE:
        _repair_dir_mode(path, st)


class DirState(StrEnum):
    """What :func:`inspect_private_dir` found at a private dir's path."""

    PRIVATE = "private"
    MISSING = "missing"
    #: Ours, but group/other bits are set (or owner bits missing): sessions repair it.
    LOOSE_MODE = "loose_mode"
    #: A symlink, not a dir, or another user's: sessions refuse to start.
    UNUSABLE = "unusable"
    #: ``lstat`` itself failed (permission denied on a parent, …).
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class DirInspection:
    """A private dir as :func:`ensure_private_dir` would judge it, without changing it.

    ``detail`` says what is wrong (empty when it is private); ``remedy`` what the user can do.
    """

    path: str
    state: DirState
    detail: str = ""
    remedy: str = ""
    mode: int | None = None


def inspect_private_dir(path: str, *, uid: int | None = None) -> DirInspection:
    """Judge a dir as :func:`ensure_private_dir` would, changing nothing (for diagnosis).

    Never raises: a failed ``lstat`` is reported as :attr:`DirState.UNREADABLE`.
    """
    owner = resolve_uid(uid)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return DirInspection(path, DirState.MISSING)
    except OSError as exc:
        detail = f"cannot be inspected: {_errno_name(exc, 'error')}"
        return DirInspection(path, DirState.UNREADABLE, detail)
    refusal = _unusable_dir(path, st, owner)
    if refusal is not None:
        return DirInspection(path, DirState.UNUSABLE, refusal.detail, refusal.remedy)
    mode = stat.S_IMODE(st.st_mode) & 0o777
    if mode != DIR_MODE:
        return DirInspection(
            path, DirState.LOOSE_MODE, f"mode {mode:04o} instead of 0700", mode=mode
        )
    return DirInspection(path, DirState.PRIVATE, mode=mode)


def describe_uid(uid: int) -> str:
    """``uid 1001 (mallory)``, or ``uid 1001`` when the account has no name here."""
    if pwd is None:  # pragma: no cover - not a POSIX system
        return f"uid {uid}"
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _kind_of(st: os.stat_result) -> str:
    kinds = (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    )
    return next((name for test, name in kinds if test(st.st_mode)), "special file")


def _unusable_dir(path: str, st: os.stat_result, uid: int) -> UnsafePathError | None:
    """Why the entry at ``path`` can never serve as our private dir, or ``None`` if it can.

    The detail says who owns it and what it is; the remedy what the user can do, since we never
    follow, repair or remove what we did not make. The runtime dir's name is predictable from the
    agent dir, so another user can create it first; a different agent dir string gives a
    different name.
    """
    foreign = st.st_uid != uid
    owned = f"owned by {describe_uid(st.st_uid)}, not by you (uid {uid})"
    if stat.S_ISLNK(st.st_mode):
        reason, what = Reason.SYMLINK, "it is a symbolic link"
        with contextlib.suppress(OSError):
            # Whoever made the link chose its target: escaped and cut like any foreign text.
            what += f" to '{sanitize.line(os.readlink(path), DISPLAY_PATH_CODE_POINTS)}'"
        detail = f"{what}, {owned}" if foreign else f"{what}; sessions never follow one here"
    elif not stat.S_ISDIR(st.st_mode):
        reason = Reason.NOT_DIRECTORY
        detail = f"it is not a directory but a {_kind_of(st)}" + (f", {owned}" if foreign else "")
    elif foreign:
        reason, detail = Reason.FOREIGN_OWNER, owned
    else:
        return None
    if foreign:
        detail += ": another user created it first"
        remedy = (
            "Sessions of this agent dir cannot start while it is there. Use another agent dir "
            "(set PI_CODING_AGENT_DIR; each agent dir string gets its own runtime dir), or ask "
            "an administrator to remove it."
        )
    else:
        remedy = (
            "Sessions of this agent dir cannot start while it is there. Move it aside (sessions "
            "create this dir themselves), or use another agent dir (PI_CODING_AGENT_DIR)."
        )
    return UnsafePathError(path, reason, detail, remedy=remedy)


def _repair_dir_mode(path: str, judged: os.stat_result) -> None:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = _open(path, flags, 0)
    except OSError as exc:
        # The lstat saw a real dir; with O_NOFOLLOW|O_DIRECTORY, a symlink swapped in since then
        # shows as ENOTDIR on Linux and ELOOP elsewhere.
        if exc.errno == errno.ENOTDIR or exc.errno in _SYMLINK_ERRNOS:
            detail = "it was replaced by a symlink or a non-directory while checking it"
            raise UnsafePathError(path, Reason.REPLACED, detail) from exc
        raise _failed(path, "open the directory to repair its mode", exc) from exc
    try:
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (judged.st_dev, judged.st_ino):
                detail = "the directory was replaced while checking it"
                raise UnsafePathError(path, Reason.REPLACED, detail)
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _failed(path, "repair the mode of", exc) from exc


# -- registrations ---------------------------------------------------------------------------------


def list_registration_names(peers_dir: str, *, limit: int = MAX_LISTED_REGISTRATIONS) -> NameWindow:
    """The registration names a listing reads (at most ``limit``, in directory order), and how
    many more there are.

    Kept: entries that are regular files by their directory-entry type (a symlink is not followed
    and not kept) named ``<32 lowercase hex>.json``. Only the first ``limit`` such names are
    returned (spec §1.5); the ones after them are counted, never returned, so a listing can say
    how many it left unread. The dir is walked once, which is what a dir stuffed with junk names
    already costs; no file is opened. A missing dir gives no names.

    The caller runs :func:`ensure_private_dir` first. Raises :class:`FileOperationError` if the
    dir cannot be read (for instance, it is a file).
    """
    if limit < 0:
        raise ValueError("limit must not be negative")
    names: list[str] = []
    unread = 0
    try:
        with os.scandir(peers_dir) as entries:
            for entry in entries:
                if instance_id_from_filename(entry.name) is None:
                    continue
                # ``follow_symlinks=False`` uses the dirent type (lstat only if the FS has none).
                if not entry.is_file(follow_symlinks=False):
                    continue
                if len(names) < limit:
                    names.append(entry.name)
                else:
                    unread += 1
    except FileNotFoundError:
        return NameWindow([], 0)
    except OSError as exc:
        raise _failed(peers_dir, "list", exc) from exc
    return NameWindow(names, unread)


def _check_registration(path: str, st: os.stat_result, uid: int, max_bytes: int) -> None:
    _check_owner_and_type(
        path,
        st,
        uid,
        is_type=stat.S_ISREG,
        wrong_type=Reason.NOT_REGULAR,
        wrong_type_detail="it is not a regular file",
    )
    if st.st_mode & _FOREIGN_BITS:
        mode = stat.S_IMODE(st.st_mode)
        raise UnsafePathError(path, Reason.LOOSE_MODE, f"mode {mode:04o} gives others access")
    if st.st_size > max_bytes:
        raise UnsafePathError(
            path, Reason.TOO_LARGE, f"{st.st_size} bytes is over the {max_bytes}-byte limit"
        )


def read_registration_bytes(
    path: str, *, uid: int | None = None, max_bytes: int = MAX_REGISTRATION_BYTES
) -> bytes:
    """The bytes of a registration file, after every check of spec §1.5.

    Refused (:class:`UnsafePathError`): a symlink, anything but a regular file, a size over
    ``max_bytes``, an owner other than ``uid`` (default: ours), any group/other mode bit. Such a
    file is ignored, never repaired. The checks run on ``lstat``, then again on the open
    descriptor, which must be the very file that was checked; a file that grows past ``max_bytes``
    while being read is refused too.

    Raises :class:`FileOperationError` when the OS refuses (the file vanished: ``ENOENT``).
    """
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    owner = resolve_uid(uid)
    return _read_checked(
        path, max_bytes, lambda st: _check_registration(path, st, owner, max_bytes)
    )


def read_refused_registration(path: str, *, max_bytes: int = MAX_REGISTRATION_BYTES) -> bytes:
    """The bytes of a registration the listing refuses for its owner or mode, for a diagnosis.

    Only ``doctor`` calls this, to learn which process a refused file names (so that it never
    advises removing the file of a process that still runs). What it returns is evidence, never
    trusted for anything else. A symlink, anything but a regular file and a size over
    ``max_bytes`` are still refused, with the same checks on ``lstat`` and on the descriptor:
    reading them could follow a link, block on a FIFO, or cost without bound.
    """

    def check(st: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(path, Reason.SYMLINK, "it is a symbolic link")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(path, Reason.NOT_REGULAR, "it is not a regular file")
        if st.st_size > max_bytes:
            detail = f"{st.st_size} bytes is over the {max_bytes}-byte limit"
            raise UnsafePathError(path, Reason.TOO_LARGE, detail)

    return _read_checked(path, max_bytes, check)


def _read_checked(path: str, max_bytes: int, check: Callable[[os.stat_result], None]) -> bytes:
    """``lstat`` → ``check`` → open without following links → ``check`` the descriptor, which
    must be the very file judged → read at most ``max_bytes``.

    A writer replaces a registration by an atomic rename at every heartbeat and every busy/idle
    change, so a reader can meet a new file between its ``lstat`` and its ``open``. That is no
    attack: the sequence simply runs again on the new file. Only a file replaced on every one of
    :data:`REGISTRATION_READ_ATTEMPTS` attempts is refused as replaced.
    """
    for _ in range(REGISTRATION_READ_ATTEMPTS):
        data = _read_checked_once(path, max_bytes, check)
        if data is not None:
            return data
    raise UnsafePathError(path, Reason.REPLACED, "the file was replaced while opening it")


def _read_checked_once(
    path: str, max_bytes: int, check: Callable[[os.stat_result], None]
) -> bytes | None:
    """One attempt of :func:`_read_checked`; ``None`` when the file was replaced meanwhile."""
    try:
        before = os.lstat(path)
    except OSError as exc:
        raise _failed(path, "inspect", exc) from exc
    check(before)

    # NONBLOCK: a FIFO swapped in after the lstat must not hang the reader; it is refused below.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = _open(path, flags, 0)
    except OSError as exc:
        raise _failed(path, "open", exc) from exc
    try:
        try:
            opened = os.fstat(fd)
            check(opened)
            if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
                return None
            return _read_at_most(fd, path, max_bytes, expected=opened.st_size)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _failed(path, "read", exc) from exc


def _read_at_most(fd: int, path: str, max_bytes: int, *, expected: int = _READ_CHUNK) -> bytes:
    """Read to EOF, but never more than ``max_bytes + 1`` bytes (one more proves "too large").

    The first read asks for ``expected`` (the size ``fstat`` saw) plus one byte, so a file that
    did not change is read in one call without a 64 KiB buffer that is shrunk afterwards — on a
    hot path that churn fragments the allocator's heap.
    """
    chunks: list[bytes] = []
    remaining = max_bytes + 1
    ask = min(max(expected, 0) + 1, _READ_CHUNK)
    while remaining > 0:
        chunk = os.read(fd, min(remaining, ask))
        ask = _READ_CHUNK
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise UnsafePathError(path, Reason.TOO_LARGE, f"it grew past the {max_bytes}-byte limit")
    return data


def write_registration(
    peers_dir: str,
    instance_id: str,
    data: bytes,
    *,
    still_current: Callable[[], bool],
) -> bool:
    """Publish ``data`` as ``<peers_dir>/<instance_id>.json``, atomically and fenced (spec §1.4).

    Steps: ``still_current()`` → exclusive-create ``.<instance_id>.<uuid4>.tmp`` at 0600 without
    following links → write everything → set mode 0600 on the descriptor → ``still_current()``
    again → rename onto the final name. The temp file is removed in every outcome.

    Returns ``False``, leaving the final file untouched, when either fence check says no. Raises
    :class:`FileOperationError` on an I/O failure; an exception from ``still_current`` propagates
    unchanged (the temp file is still removed).

    Decisions:

    * **No fsync.** A registration only means something while its writer runs; it is rewritten
      every 30 s, and after a crash of the machine the pid, socket and runtime dir are gone anyway.
      A lost or torn file after power loss is skipped by readers' validation. An fsync per write
      (every heartbeat and every busy/idle change) would hold a worker thread on slow disks for
      nothing. The reference does not sync either.
    * **Mode set before the rename** (``fchmod`` on the temp), not by a ``chmod`` of the final path
      after it as in the reference: the file on disk ends identical (0600 whatever the umask or the
      mode of a stale file it replaces), the final name never shows another mode, even briefly, and
      nothing follows a path that could have been swapped.
    """
    if not is_instance_id(instance_id):
        raise ValueError("an instance id is 32 lowercase hex characters")
    return _write_atomically(peers_dir, f"{instance_id}.json", instance_id, data, still_current)


def write_private_file(directory: str, name: str, data: bytes) -> None:
    """Write ``data`` as ``<directory>/<name>``, atomically, at mode 0600.

    The same sequence as :func:`write_registration` (exclusive 0600 temp file, rename), for the
    other small private files we keep, such as the command line's sender identity. ``directory``
    must already be private (see :func:`ensure_private_dir`).
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError("a private file name is one plain path component")
    _write_atomically(directory, name, name, data, lambda: True)


def _write_atomically(
    directory: str,
    final_name: str,
    temp_stem: str,
    data: bytes,
    still_current: Callable[[], bool],
) -> bool:
    if not still_current():
        return False
    temp = os.path.join(directory, f".{temp_stem}.{uuid.uuid4()}.tmp")
    final = os.path.join(directory, final_name)
    created = False
    try:
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = _open(temp, flags, FILE_MODE)
        except OSError as exc:
            raise _failed(temp, "create", exc) from exc
        created = True
        try:
            try:
                _write_all(fd, data)
                # The creation mode was filtered by the umask; this makes it exactly 0600.
                os.fchmod(fd, FILE_MODE)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _failed(temp, "write", exc) from exc
        if not still_current():
            return False
        try:
            os.rename(temp, final)
        except OSError as exc:
            raise _failed(final, "rename the new file onto", exc) from exc
        created = False
        return True
    finally:
        if created:
            _discard_temp(temp)


def _write_all(fd: int, data: bytes) -> None:
    # ``write`` may take less than it is given (a signal, a full pipe); loop until all is out.
    view = memoryview(data)
    while view:
        written = _write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "the write made no progress")
        view = view[written:]


def _discard_temp(temp: str) -> None:
    # Never mask the error that brought us here; a left-over dot-file is never listed.
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("could not remove the temporary registration %r: %s", temp, exc)


def open_private_file(path: str, *, append: bool, uid: int | None = None) -> tuple[int, int]:
    """Open a private file of ours for appending (created at 0600 if missing) or for reading.

    Returns the descriptor and the size ``fstat`` saw; the caller closes the descriptor. Opened
    with ``O_NOFOLLOW|O_NONBLOCK`` (a symlink is refused, a FIFO cannot block), then judged on the
    descriptor: a regular file owned by ``uid`` (default: ours). A file opened to append gets mode
    0600 through its descriptor, whatever the umask or an older mode (it lies in a private dir of
    ours, so nobody but us made it so); one opened to read with group/other bits is refused. Used
    for the event journal, whose writer appends whole lines to one descriptor.

    Raises :class:`UnsafePathError` or :class:`FileOperationError`.
    """
    owner = resolve_uid(uid)
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_WRONLY | os.O_APPEND | os.O_CREAT if append else os.O_RDONLY
    try:
        fd = _open(path, flags, FILE_MODE)
    except OSError as exc:
        raise _failed(path, "open", exc) from exc
    try:
        try:
            st = os.fstat(fd)
            _check_owner_and_type(
                path,
                st,
                owner,
                is_type=stat.S_ISREG,
                wrong_type=Reason.NOT_REGULAR,
                wrong_type_detail="it is not a regular file",
            )
            mode = stat.S_IMODE(st.st_mode)
            if append and mode != FILE_MODE:
                os.fchmod(fd, FILE_MODE)
            elif not append and mode & _FOREIGN_BITS:
                detail = f"mode {mode:04o} gives others access"
                raise UnsafePathError(path, Reason.LOOSE_MODE, detail)
        except OSError as exc:
            raise _failed(path, "inspect", exc) from exc
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def remove_file(path: str) -> None:
    """``rm -f``: remove the file, symlink or socket at ``path``; a missing one is fine.

    Used for a registration and a socket at shutdown, for a reaped peer, and before binding a
    socket (spec §2). A symlink is removed itself, never its target. Raises
    :class:`FileOperationError` for anything else (a directory, permission denied …).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise FileOperationError(path, "remove", exc) from exc


# -- endpoint ------------------------------------------------------------------------------------


def vet_socket(path: str, *, uid: int | None = None) -> str | None:
    """Sender-side vetting of a peer's socket before connecting (spec §2); never raises.

    ``None`` means "safe to connect": ``lstat`` shows a real socket (not a symlink), owned by
    ``uid`` (default: ours), with no group/other bits. Otherwise a code: the errno name of a failed
    ``lstat`` (``ENOENT`` …) or ``missing_endpoint`` when there is none, and ``unsafe_endpoint``
    for the wrong type, mode or owner.

    The path equality check (registered vs recomputed) is the caller's, and comes first.
    """
    try:
        owner = resolve_uid(uid)
        st = os.lstat(path)
    except OSError as exc:
        return _errno_name(exc, Code.MISSING_ENDPOINT)
    except (ValueError, TypeError):
        # An embedded NUL or a non-path: nothing we could ever connect to safely.
        return Code.UNSAFE_ENDPOINT
    if not stat.S_ISSOCK(st.st_mode) or st.st_mode & _FOREIGN_BITS or st.st_uid != owner:
        return Code.UNSAFE_ENDPOINT
    return None


#: Filesystems whose metadata calls answer from the local kernel (no network, no user-space
#: server), so a check on them may run on the event loop without risking a stall.
LOCAL_FILESYSTEMS: Final = frozenset(
    {
        "tmpfs", "ramfs", "devtmpfs", "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs",
        "bcachefs", "jfs", "reiserfs", "overlay", "vfat", "exfat", "ntfs3",
    }
)  # fmt: skip
_MOUNTINFO: Final = "/proc/self/mountinfo"
_OCTAL_ESCAPE: Final = re.compile(r"\\([0-7]{3})")


def on_local_filesystem(path: str) -> bool:
    """True when ``path`` lies on a local filesystem (by the kernel's mount table), so that
    ``lstat`` and small reads there cannot stall on a network.

    False whenever unsure: not Linux, an unreadable mount table, a network or FUSE filesystem,
    an unknown type. Resolves symlinks in ``path``, which can itself stall on a network
    filesystem: call it off the event loop, once, and keep the answer. A process short of a
    kernel resource (out of descriptors, say) cannot even ask: that :class:`OSError` is raised,
    so the caller asks again later instead of keeping "not local" for good.
    """
    try:
        real = os.path.realpath(path)
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError as exc:
        if exc.errno in RESOURCE_ERRNOS:
            raise
        return False
    except ValueError:
        return False
    best_mount, best_type = "", None
    for line in lines:
        # "<id> <parent> <maj:min> <root> <mount point> <options> [optional…] - <type> …"
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 5 or not tail:
            continue
        mount = _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best_mount):
            best_mount, best_type = mount, tail[0]
    return best_type in LOCAL_FILESYSTEMS


def make_socket_private(path: str, *, uid: int | None = None) -> None:
    """After ``bind``/``listen``: set our socket to 0600 and confirm it passes :func:`vet_socket`.

    The runtime dir is already 0700 (:func:`ensure_private_dir`), so no other uid could reach the
    socket while it had the umask's mode, nor swap it. A symlink, a non-socket or a foreign owner at
    the path is refused before the ``chmod``. Raises :class:`UnsafePathError` or
    :class:`FileOperationError`.
    """
    owner = resolve_uid(uid)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise _failed(path, "inspect the socket", exc) from exc
    _check_owner_and_type(
        path,
        st,
        owner,
        is_type=stat.S_ISSOCK,
        wrong_type=Reason.NOT_SOCKET,
        wrong_type_detail="it is not a socket",
    )
    try:
        os.chmod(path, FILE_MODE)
    except OSError as exc:
        raise _failed(path, "set the mode of the socket", exc) from exc
    verdict = vet_socket(path, uid=owner)
    if verdict is not None:
        detail = f"the socket still fails vetting ({verdict})"
        raise UnsafePathError(path, Reason.LOOSE_MODE, detail)


def pid_is_dead(pid: int) -> bool:
    """True only when the process is proven gone: ``kill(pid, 0)`` fails with ``ESRCH``.

    Success, ``EPERM`` (alive, another user's) and any other outcome are "not proven dead", and a
    registration is reaped only on proof (spec §1.5). ``pid <= 0`` is refused (``False``) without
    a system call, since those values address process groups; so is a bool or a value the OS cannot
    represent. Never raises. Not reuse-proof, as the contract says.
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False
    return False


class NotedLock:
    """An exclusive ``flock`` on a file that also carries a note from its holder (who holds it,
    since when), for those who find it taken.

    The one way we lock a file by hand, for the two locks whose holders leave a note inside the
    held file (a command-line identity's slot; the one gateway of an agent dir, whose pid
    ``remote status`` reads only while that process has the very file open). ``filelock`` does
    every other lock; it cannot do these: before 4.x (our floor is 3.13) a waiter opening the
    file truncates it, erasing the note when it is wanted most, and no version offers a way to
    write into the held file. The file is opened without following a symlink and never
    truncated on open; the kernel drops the lock when the holder's process ends, however it ends.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free, without waiting. :class:`FileOperationError` when the
        file cannot be opened or locked for another reason than being held."""
        if self._fd is not None:
            raise RuntimeError("this lock is already held")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise FileOperationError(self.path, "open the lock file", exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise FileOperationError(self.path, "lock", exc) from exc
        self._fd = fd
        return True

    def write_note(self, note: bytes) -> None:
        """Say who holds the lock (best effort: a note that cannot be written is only missing)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, note, 0)
        except OSError:
            pass

    def release(self) -> None:
        """Clear the note and let the lock go."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the descriptor releases the flock
