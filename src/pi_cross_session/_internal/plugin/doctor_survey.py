"""What ``doctor`` finds on disk and in the process table, gathered in one worker thread.

Facts only, no advice (that is :mod:`pi_cross_session._internal.plugin.doctor`'s job). Everything
here is read-only and bounded whatever fills the dirs:

* the peers dir is walked once; the names a listing reads (the first 512 in directory order) and a
  sample past them are judged one by one, the rest only counted;
* every file is judged by :mod:`pi_cross_session._internal.security.io.fs` with the listing's own
rules;
  a file those rules refuse is read once more, without trust, only to learn which process it names;
* the runtime dir's sockets (at most 512) are asked, with one non-blocking ``connect`` each, which
  process listens on them (the kernel's ``SO_PEERCRED``), never sent a byte;
* a process is "gone" only when ``kill(pid, 0)`` says ``ESRCH``; its name comes from
  ``/proc/<pid>/comm`` where that exists. One that ``kill`` still finds but whose
  ``/proc/<pid>/stat`` says ``Z`` is a zombie: it has exited and its parent has not reaped it, so
  it answers nothing, yet no listing reaps its files (they too wait for ``ESRCH``).

Every string another process chose (a name, a path, a process name) is escaped here, once, with
:func:`~pi_cross_session._internal.protocol.sanitize.line`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import stat
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.plugin.doctor_settings import (
    DISPLAY_PROCESS_NAME_CODE_POINTS,
    DOCTOR_SAMPLE_PAST_WINDOW,
    DOCTOR_SOCKETS_CHECKED,
)
from pi_cross_session._internal.protocol import paths, sanitize
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.peercred import read_peer_credentials
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_DIAGNOSTIC_CODE_POINTS,
    MAX_LISTED_REGISTRATIONS,
    MAX_NAME_CODE_POINTS,
    MAX_PID,
)
from pi_cross_session._internal.protocol.paths import Locations, instance_id_from_filename
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.security.io import fs

#: A socket path in some namespace's runtime dir: ``/tmp/pi-peers-<uid>-<ns12>/<id>.sock``.
_SOCKET_PATH: Final = re.compile(
    rf"{re.escape(paths.RUNTIME_PARENT)}/pi-peers-(\d+)-([0-9a-f]{{{paths.NAMESPACE_CHARS}}})/"
    r"([0-9a-f]{32})\.sock"
)
_PROC: Final = "/proc"


# -- spellings of the agent dir --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spelling:
    """Another string for the same agent dir, which gives another namespace (spec §1.1)."""

    agent_dir: str
    #: How it differs from the spelling in effect, for a person ("without the trailing slash").
    how: str
    locations: Locations


def other_spellings(where: Locations) -> list[Spelling]:
    """The spellings a user most likely meant or used elsewhere: the trailing slash toggled, the
    absolute form of a relative dir, and the path with symbolic links resolved."""
    agent_dir = where.agent_dir
    candidates: list[tuple[str, str]] = []
    if len(agent_dir) > 1 and agent_dir.endswith("/"):
        candidates.append((agent_dir.rstrip("/") or "/", "without the trailing slash"))
    elif agent_dir != "/":
        candidates.append((agent_dir + "/", "with a trailing slash"))
    if not os.path.isabs(agent_dir):
        candidates.append((os.path.abspath(agent_dir), "as an absolute path"))
    real = os.path.realpath(agent_dir)
    if real not in (agent_dir, agent_dir.rstrip("/")):
        candidates.append((real, "with symbolic links resolved"))
    seen = {agent_dir}
    spellings = []
    for spelled, how in candidates:
        if spelled in seen:
            continue
        seen.add(spelled)
        locations = environment.resolve(env={paths.AGENT_DIR_ENV: spelled}, uid=where.uid)
        spellings.append(Spelling(spelled, how, locations))
    return spellings


# -- processes -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Process:
    """A pid as the kernel answers for it: proven gone (``ESRCH``), or not."""

    pid: int
    gone: bool
    #: ``/proc/<pid>/comm``, escaped; ``None`` when gone or unreadable.
    name: str | None = None
    #: Not gone, but a zombie (``/proc/<pid>/stat`` state ``Z``): it has exited and waits for its
    #: parent to reap it. Not proven gone: ``kill`` still finds the pid, so no listing reaps it.
    zombie: bool = False
    #: A zombie's parent, the process that has to reap it (``None`` if it could not be read).
    parent: Process | None = None

    def describe(self) -> str:
        """``process 1234 (python3)``."""
        return f"process {self.pid}" + (f" ({self.name})" if self.name else "")


def _process_name(pid: int) -> str | None:
    try:
        with open(f"{_PROC}/{pid}/comm", "rb") as comm:
            raw = comm.read(256)
    except OSError:
        return None
    # The kernel ends the name with a line feed; the rest is the process's own choice.
    text = raw.decode("utf-8", "replace").removesuffix("\n")
    return sanitize.line(text, DISPLAY_PROCESS_NAME_CODE_POINTS) or None


def _zombie_parent(pid: int) -> int | None:
    """The parent's pid if ``pid`` is a zombie (``/proc/<pid>/stat`` state ``Z``), else ``None``.

    The line is ``pid (comm) state ppid …``; the name may hold spaces and parentheses, so the
    fields are read after its last ``)``. Linux only: elsewhere nothing is a zombie here.
    """
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as stat_file:
            raw = stat_file.read(4096)
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 1 :].split()
    if len(fields) < 2 or fields[0] != b"Z" or not fields[1].isdigit():
        return None
    return int(fields[1])


def look_up_process(pid: int) -> Process:
    """What the kernel says about ``pid``, changing nothing."""
    if fs.pid_is_dead(pid):
        return Process(pid, gone=True)
    name = _process_name(pid)
    parent_pid = _zombie_parent(pid)
    if parent_pid is None:
        return Process(pid, gone=False, name=name)
    parent = Process(parent_pid, gone=False, name=_process_name(parent_pid)) if parent_pid else None
    return Process(pid, gone=False, name=name, zombie=True, parent=parent)


# -- registrations ---------------------------------------------------------------------------------


class Standing(StrEnum):
    """How the listing rules judge one registration file."""

    #: Valid for the agent dir in effect.
    OURS = "ours"
    #: Valid for one of :func:`other_spellings`.
    OTHER_SPELLING = "other_spelling"
    #: Well formed, but its socket lies in the runtime dir of a namespace we cannot name.
    OTHER_NAMESPACE = "other_namespace"
    #: The file fails the owner, mode, type or size checks.
    REFUSED = "refused"
    #: The content breaks the contract.
    INVALID = "invalid"
    #: It vanished, or the OS refused to read it.
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Entry:
    """One registration file as a listing would judge it, and what it says about its process."""

    instance_id: str
    path: str
    #: Among the names a listing reads (False: read here only as a sample past the window).
    in_window: bool
    standing: Standing
    #: Why it is refused, invalid or unreadable (escaped).
    problem: str = ""
    reason: fs.Reason | None = None
    registration: Registration | None = None
    spelling: Spelling | None = None
    #: The namespace of an :attr:`Standing.OTHER_NAMESPACE` socket path.
    namespace: str | None = None
    #: The registration's process, read without trust from a file the rules refuse.
    process: Process | None = None
    #: The display name it gives itself (escaped), if any.
    name: str | None = None
    #: :func:`fs.vet_socket`'s answer for a valid registration (``None``: safe to connect).
    socket_refusal: str | None = None
    #: The file's owner, for a refused file.
    owner_uid: int | None = None


def _lenient(raw: bytes) -> dict[str, object]:
    """The JSON object in a file the rules refuse, or ``{}``: evidence, never trusted."""
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _pid_in(data: dict[str, object]) -> int | None:
    pid = data.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= MAX_PID:
        return pid
    return None


def _name_in(data: dict[str, object]) -> str | None:
    name = data.get("name")
    return sanitize.line(name, MAX_NAME_CODE_POINTS) or None if isinstance(name, str) else None


def _problem(exc: BaseException) -> str:
    return sanitize.line(str(exc), DISPLAY_DIAGNOSTIC_CODE_POINTS)


def judge_entry(
    where: Locations, spellings: list[Spelling], instance_id: str, *, in_window: bool
) -> Entry:
    """Judge one registration file with the listing's rules, then learn what it can tell."""
    path = where.registration_path(instance_id)
    try:
        raw = fs.read_registration_bytes(path)
    except fs.UnsafePathError as exc:
        return _refused(path, instance_id, in_window, exc)
    except CrossSessionError as exc:
        return Entry(instance_id, path, in_window, Standing.UNREADABLE, problem=_problem(exc))
    data = _lenient(raw)
    socket_path = data.get("socketPath")
    expected = where.socket_path(instance_id)
    owners = [(where, None)] + [(s.locations, s) for s in spellings]
    for locations, spelling in owners:
        if socket_path != locations.socket_path(instance_id):
            continue
        expected = locations.socket_path(instance_id)
        try:
            registration = parse_registration(
                raw, file_stem=instance_id, expected_socket_path=expected
            )
        except CrossSessionError:
            break  # the right place, but wrong content: judged as invalid below
        return Entry(
            instance_id,
            path,
            in_window,
            Standing.OURS if spelling is None else Standing.OTHER_SPELLING,
            registration=registration,
            spelling=spelling,
            process=look_up_process(registration.pid),
            name=sanitize.line(registration.name, MAX_NAME_CODE_POINTS),
            socket_refusal=fs.vet_socket(registration.socket_path),
        )
    pid = _pid_in(data)
    process = None if pid is None else look_up_process(pid)
    match = _SOCKET_PATH.fullmatch(socket_path) if isinstance(socket_path, str) else None
    if match is not None and match.group(3) == instance_id and match.group(2) != where.namespace:
        try:
            parse_registration(raw, file_stem=instance_id, expected_socket_path=match.group(0))
        except CrossSessionError:
            pass
        else:
            return Entry(
                instance_id,
                path,
                in_window,
                Standing.OTHER_NAMESPACE,
                namespace=match.group(2),
                process=process,
                name=_name_in(data),
            )
    try:
        parse_registration(raw, file_stem=instance_id, expected_socket_path=expected)
    except CrossSessionError as exc:
        problem = _problem(exc)
    else:  # pragma: no cover - a valid file was recognised above
        problem = "unrecognised"
    return Entry(
        instance_id,
        path,
        in_window,
        Standing.INVALID,
        problem=problem,
        process=process,
        name=_name_in(data),
    )


def _refused(path: str, instance_id: str, in_window: bool, exc: fs.UnsafePathError) -> Entry:
    """A file the listing refuses: read it again without trust, only for the pid it names."""
    try:
        owner_uid: int | None = os.lstat(path).st_uid
    except OSError:
        owner_uid = None
    data: dict[str, object] = {}
    if exc.reason in (fs.Reason.LOOSE_MODE, fs.Reason.FOREIGN_OWNER):
        try:
            data = _lenient(fs.read_refused_registration(path))
        except CrossSessionError:
            data = {}
    pid = _pid_in(data)
    return Entry(
        instance_id,
        path,
        in_window,
        Standing.REFUSED,
        problem=sanitize.line(exc.detail, DISPLAY_DIAGNOSTIC_CODE_POINTS),
        reason=exc.reason,
        process=None if pid is None else look_up_process(pid),
        name=_name_in(data),
        owner_uid=owner_uid,
    )


# -- sockets ---------------------------------------------------------------------------------------


class Listener(StrEnum):
    """What a non-blocking ``connect`` learned about who listens on a socket."""

    #: Connected: the kernel named the listening process.
    PROCESS = "process"
    #: ``ECONNREFUSED``: nobody listens on it.
    NOBODY = "nobody"
    #: Something listens but its backlog is full, or the kernel names no pid here.
    SOMEONE = "someone"
    #: Not asked: not a socket, or it fails the socket check (never connect to those).
    NOT_ASKED = "not_asked"
    #: Any other failure.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class SocketEntry:
    """A ``<instanceId>.sock`` in the runtime dir and who listens on it."""

    instance_id: str
    path: str
    is_socket: bool
    #: :func:`fs.vet_socket`'s answer (``None``: a socket of ours at 0600).
    refusal: str | None
    listener: Listener
    process: Process | None = None


def who_listens(path: str) -> tuple[Listener, int | None]:
    """Connect without blocking and ask the kernel who listens; close without a byte."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.setblocking(False)
            try:
                probe.connect(path)
            except OSError as exc:
                if exc.errno == errno.ECONNREFUSED:
                    return Listener.NOBODY, None
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINPROGRESS):
                    return Listener.SOMEONE, None
                return Listener.UNKNOWN, None
            credentials = read_peer_credentials(probe)
    except OSError:
        return Listener.UNKNOWN, None
    if credentials is None or credentials.pid is None:
        return Listener.SOMEONE, None
    return Listener.PROCESS, credentials.pid


def _socket_entry(runtime_dir: str, name: str) -> SocketEntry | None:
    instance_id = name[: -len(".sock")]
    if not paths.is_instance_id(instance_id):
        return None
    path = os.path.join(runtime_dir, name)
    try:
        is_socket = stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return None
    refusal = fs.vet_socket(path)
    if not is_socket or refusal is not None:
        return SocketEntry(instance_id, path, is_socket, refusal, Listener.NOT_ASKED)
    listener, pid = who_listens(path)
    process = None if pid is None else look_up_process(pid)
    return SocketEntry(instance_id, path, True, None, listener, process)


def _socket_names(runtime_dir: str, limit: int) -> tuple[list[str], int]:
    """Up to ``limit`` ``*.sock`` names of a runtime dir, and how many more there are."""
    names: list[str] = []
    more = 0
    try:
        with os.scandir(runtime_dir) as entries:
            for entry in entries:
                if not entry.name.endswith(".sock"):
                    continue
                if len(names) < limit:
                    names.append(entry.name)
                else:
                    more += 1
    except OSError:
        return [], 0
    return sorted(names), more


# -- the survey ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Survey:
    """Everything ``doctor`` judges, gathered once."""

    spellings: list[Spelling]
    agent_dir_exists: bool
    peers_dir: fs.DirInspection
    runtime_dir: fs.DirInspection
    #: The peers dir could not be listed (escaped OS error), when it exists.
    listing_error: str | None = None
    #: Registration names in the peers dir, all of them (the window plus the rest).
    total: int = 0
    #: Names a listing leaves unread: past the 512-entry window.
    unread: int = 0
    #: The window's entries, then the sample's (``in_window`` tells them apart).
    entries: list[Entry] = field(default_factory=list)
    #: Names past the window that were not even sampled.
    unsampled: int = 0
    temps: int = 0
    #: Sockets of the runtime dir that no valid registration in the window accounts for.
    sockets: list[SocketEntry] = field(default_factory=list)
    sockets_unchecked: int = 0
    #: Registration names that exist but are past the window, by instance id (for sockets).
    past_window: set[str] = field(default_factory=set)
    #: For each other spelling whose runtime dir exists: how many sockets it holds.
    spelling_sockets: dict[str, int] = field(default_factory=dict)
    #: The instance ids of the command line's own sender identities (its pool).
    cli_instance_ids: frozenset[str] = frozenset()
    #: The listing window (the contract's 512; tests use less).
    window: int = MAX_LISTED_REGISTRATIONS


def survey(
    where: Locations,
    cli_instance_ids: frozenset[str] = frozenset(),
    *,
    window: int = MAX_LISTED_REGISTRATIONS,
) -> Survey:
    """Gather every fact ``doctor`` judges (blocking: run it in a worker thread)."""
    spellings = other_spellings(where)
    found = Survey(
        window=window,
        spellings=spellings,
        agent_dir_exists=os.path.lexists(where.agent_dir),
        peers_dir=fs.inspect_private_dir(where.peers_dir),
        runtime_dir=fs.inspect_private_dir(where.runtime_dir),
        cli_instance_ids=cli_instance_ids,
    )
    if found.peers_dir.state is not fs.DirState.MISSING:
        _survey_peers_dir(where, spellings, found)
    if found.runtime_dir.state is fs.DirState.PRIVATE:
        _survey_runtime_dir(where, found)
    for spelling in spellings:
        runtime_dir = spelling.locations.runtime_dir
        if os.path.isdir(runtime_dir) and not os.path.islink(runtime_dir):
            names, more = _socket_names(runtime_dir, DOCTOR_SOCKETS_CHECKED)
            found.spelling_sockets[spelling.agent_dir] = len(names) + more
    return found


def _survey_peers_dir(where: Locations, spellings: list[Spelling], found: Survey) -> None:
    window_and_sample = found.window + DOCTOR_SAMPLE_PAST_WINDOW
    try:
        names, unsampled = fs.list_registration_names(where.peers_dir, limit=window_and_sample)
        with os.scandir(where.peers_dir) as entries:
            found.temps = sum(
                1 for entry in entries if entry.name.startswith(".") and entry.name.endswith(".tmp")
            )
    except (CrossSessionError, OSError) as exc:
        found.listing_error = _problem(exc)
        return
    found.total = len(names) + unsampled
    found.unread = max(0, found.total - found.window)
    found.unsampled = unsampled
    for index, name in enumerate(names):
        instance_id = instance_id_from_filename(name)
        assert instance_id is not None  # the file layer keeps only such names
        in_window = index < found.window
        found.entries.append(judge_entry(where, spellings, instance_id, in_window=in_window))


def _survey_runtime_dir(where: Locations, found: Survey) -> None:
    window = {e.instance_id for e in found.entries if e.in_window}
    accounted = {
        e.instance_id for e in found.entries if e.in_window and e.standing is Standing.OURS
    }
    known = {e.instance_id: e for e in found.entries}
    names, more = _socket_names(where.runtime_dir, DOCTOR_SOCKETS_CHECKED)
    found.sockets_unchecked = more
    for name in names:
        entry = _socket_entry(where.runtime_dir, name)
        if entry is None or entry.instance_id in accounted:
            continue
        found.sockets.append(entry)
        instance_id = entry.instance_id
        if instance_id in window:
            continue
        if instance_id not in known and _is_regular(where.registration_path(instance_id)):
            # A registration a listing never reads: past the window (or written since the walk).
            judged = judge_entry(where, found.spellings, instance_id, in_window=False)
            known[instance_id] = judged
            found.entries.append(judged)
        if instance_id in known:
            found.past_window.add(instance_id)


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
