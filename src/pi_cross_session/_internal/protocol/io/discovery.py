"""The discovery plane's I/O: publishing our registration and listing the live peers (spec §1).

Two halves:

* :class:`Registrar` — one per incarnation. It writes ``<agentDir>/peers/<instanceId>.json`` at
  start-up, on every status change and on a heartbeat, and removes it at shutdown. Writes are
  serialised and fenced exactly as spec §1.4 says.
* :func:`list_peers` — reads every registration, probes each peer, reaps the ones whose process is
  proven dead, and returns the live ones newest first, with counters that explain what was
  skipped and why (:class:`Listing`). What becomes of each registration is decided by the pure
  :mod:`~pi_cross_session._internal.protocol.listing_policy`; this half gathers the facts it
  asks for (read and parse outcomes, probe answers, the kernel's word on a pid, how a reap went)
  and carries out its verdicts.

This module decides *when* files are read, written or removed, never *whether a file can be
trusted*: every file operation goes through an injected :class:`RegistryFiles` (in production the
module :mod:`pi_cross_session._internal.security.io.fs` itself, which is the one place that judges
modes, owners and symlinks). Liveness is injected too (``probe``): this module never opens a socket,
so how bytes travel stays behind the exchange seam.

Blocking calls run in worker threads, batched: a listing makes one thread hop to read every
registration, one to settle the peers whose probe failed, and the git lookup makes one more.

Decisions where the contract leaves room:

* **Who stamps updatedAt.** The registrar does, at each write, from its ``clock`` (epoch ms). The
  snapshot supplies every other field; its own ``updated_at`` is ignored. A write is the event the
  field describes, and a snapshot may be built long before the write that uses it (it waits its
  turn behind the previous write).
* **Heartbeat failure.** The reference runs a full cleanup. Here the registrar fences itself,
  removes its own registration file at once (a failing writer must not leave a stale record
  advertising its endpoint), then reports the error once through ``on_failure``; closing the
  endpoint, dropping queued messages and the rest of the cleanup are the runtime's, which calls
  :meth:`Registrar.unregister` again as part of it (harmless: it is idempotent).
* **Except for a shortage.** A write that failed because the process ran out of file
  descriptors, buffers or memory (:func:`~pi_cross_session._internal.protocol.pressure.shortage`)
  says nothing about the registration: the record on disk is still ours and still true, only older.
  Leaving the network for that would hand an attacker who can exhaust our descriptors a way to
  make us vanish. So such a failure is counted (:attr:`Registrar.retries`), and the write is tried
  again after a short pause that doubles up to the heartbeat interval; a refresh that fails so
  asks the heartbeat for that early retry.
* **Reaping is serialised across processes** with a lock file ``.reap.lock`` in the peers dir
  (a dot-file, so no listing ever reads it). A lister that cannot take the lock quickly skips
  reaping this time: another lister is doing it, and the next listing will finish the job.
* **Self is never read, probed or reaped**, and **ties in updatedAt** are ordered by instance id:
  both are the listing policy's, with the rest of what a listing decides.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Final, Protocol

import anyio
from anyio.abc import TaskStatus

from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError, LocalProtocolError
from pi_cross_session._internal.protocol.io.gitinfo import resolve_git_info
from pi_cross_session._internal.protocol.limits import (
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_RETRY_S,
    MAX_LISTED_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
    PROBE_DEADLINE_S,
    PROBE_GUARD_MARGIN_S,
    REAP_LOCK_TIMEOUT_S,
    WRITE_WAIT_S,
)
from pi_cross_session._internal.protocol.listing_policy import (
    Answer,
    Facts,
    Read,
    Reap,
    Verdict,
    at_limit,
    judge,
    newest_first,
    probe_failure,
    read_failure,
)
from pi_cross_session._internal.protocol.name_window import NameWindow
from pi_cross_session._internal.protocol.paths import Locations, instance_id_from_filename
from pi_cross_session._internal.protocol.pressure import Backoff, shortage
from pi_cross_session._internal.protocol.registration import (
    GitInfo,
    InvalidRegistrationError,
    PublicPeer,
    Registration,
    UnpublishableRegistrationError,
    parse_registration,
    serialize,
)

__all__ = [
    "REAP_LOCK_NAME",
    "GitResolver",
    "Listing",
    "NameWindow",
    "Probe",
    "Registrar",
    "RegistrarStoppedError",
    "RegistryFiles",
    "WriteWaitTimeoutError",
    "list_peers",
]

logger = logging.getLogger(__name__)

#: The lock file in the peers dir that serialises reaping between processes.
REAP_LOCK_NAME: Final = ".reap.lock"

#: ``probe(registration)`` is True when the peer answered ``ready`` within its own deadline.
Probe = Callable[[Registration], Awaitable[bool]]
#: Maps each distinct cwd to its git metadata (``None`` when there is none); see
#: :func:`~pi_cross_session._internal.protocol.io.gitinfo.resolve_git_info`.
GitResolver = Callable[[Sequence[str]], Awaitable[Mapping[str, GitInfo | None]]]


class RegistryFiles(Protocol):
    """The file operations discovery needs; :mod:`pi_cross_session._internal.security.io.fs`
    provides them.

    Every method is blocking and raises only
    :class:`~pi_cross_session._internal.protocol.errors.CrossSessionError` subclasses (an unsafe
    path has code ``unsafe_endpoint``; an OS failure has the errno name as its code).
    """

    def ensure_private_dir(self, path: str, *, uid: int | None = ...) -> None:
        """Create the dir if needed; it must be ours and end up 0700."""

    def list_registration_names(self, peers_dir: str, *, limit: int = ...) -> NameWindow:
        """The first ``limit`` registration file names in directory order, and how many more."""

    def read_registration_bytes(
        self, path: str, *, uid: int | None = ..., max_bytes: int = ...
    ) -> bytes:
        """A registration's bytes after the symlink, type, owner, mode and size checks."""

    def write_registration(
        self,
        peers_dir: str,
        instance_id: str,
        data: bytes,
        *,
        still_current: Callable[[], bool],
    ) -> bool:
        """Atomic, fenced write; False when ``still_current()`` said no."""

    def remove_file(self, path: str) -> None:
        """``rm -f``."""

    def pid_is_dead(self, pid: int) -> bool:
        """True only when ``kill(pid, 0)`` fails with ``ESRCH``."""


class RegistrarStoppedError(LocalProtocolError):
    """The registrar was stopped (unregistered, or its heartbeat failed); it never writes again."""

    code = Code.STOPPED


class WriteWaitTimeoutError(CrossSessionError):
    """A registration write waited too long for the previous one to finish; nothing was written."""

    code = Code.TIMEOUT


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


# -- publishing ------------------------------------------------------------------------------------


class Registrar:
    """Publishes one incarnation's registration and keeps it fresh until it stops.

    ``snapshot()`` returns the registration as it should read now (name, cwd, status, inbound …);
    the registrar stamps ``updatedAt`` itself at each write (see the module docstring). The
    instance id, socket path and token must stay those of the first snapshot.

    Writes never overlap (one lock per registrar) and are fenced: once :meth:`unregister` starts,
    or the heartbeat fails, a write still in flight is not renamed into place and no new write
    starts. The heartbeat, :meth:`run_heartbeat`, is meant to run in the runtime's task group.
    """

    def __init__(
        self,
        locations: Locations,
        files: RegistryFiles,
        snapshot: Callable[[], Registration],
        *,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        on_failure: Callable[[BaseException], None] | None = None,
        clock: Callable[[], int | float] = _epoch_ms,
        write_wait_s: float = WRITE_WAIT_S,
        retry_s: float = HEARTBEAT_RETRY_S,
    ) -> None:
        if heartbeat_interval_s <= 0:
            raise ValueError("the heartbeat interval must be positive")
        self._locations = locations
        self._files = files
        self._snapshot = snapshot
        self._interval_s = heartbeat_interval_s
        self._on_failure = on_failure
        self._clock = clock
        self._write_wait_s = write_wait_s
        self._retry_s = min(retry_s, heartbeat_interval_s)
        self._lock = anyio.Lock()
        self._stopped = False
        # Wakes a sleeping heartbeat when the registrar stops (so its task ends promptly), or when
        # a refresh failed for lack of resources (so it retries soon).
        self._wake = anyio.Event()
        self._retries: dict[str, int] = {}
        self._last_retry_at: int | float | None = None
        self._failure_reported = False
        self._instance_id: str | None = None
        self._socket_path: str | None = None
        self._token: str | None = None
        self._last_error: BaseException | None = None
        self._writes = 0

    # -- status ------------------------------------------------------------------------------------

    @property
    def last_error(self) -> BaseException | None:
        """The most recent write or removal failure, for ``/cross-session-status``."""
        return self._last_error

    @property
    def instance_id(self) -> str | None:
        """The incarnation this registrar publishes, known from its first write attempt."""
        return self._instance_id

    @property
    def retries(self) -> Mapping[str, int]:
        """Writes that failed for lack of a kernel resource and were (or will be) tried again,
        by errno name; a copy."""
        return dict(self._retries)

    @property
    def last_retry_at(self) -> int | float | None:
        """When (``clock`` time, epoch ms by default) the newest of those failed."""
        return self._last_retry_at

    @property
    def writes(self) -> int:
        """How many writes reached the registration file."""
        return self._writes

    # -- writes ------------------------------------------------------------------------------------

    def _still_current(self) -> bool:
        # Called from the worker thread between the steps of a write; a bool read is atomic.
        return not self._stopped

    def _stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _stamp(self, registration: Registration) -> Registration:
        """The snapshot with our ``updatedAt``, after checking it is still this incarnation."""
        if self._instance_id is None:
            expected = self._locations.socket_path(registration.instance_id)
            if registration.socket_path != expected:
                raise UnpublishableRegistrationError(
                    "cannot publish this session: its socket path is not the one this agent dir "
                    "gives, so every reader would skip it",
                    field="socketPath",
                )
            self._instance_id = registration.instance_id
            self._socket_path = registration.socket_path
            self._token = registration.token
        elif (registration.instance_id, registration.socket_path, registration.token) != (
            self._instance_id,
            self._socket_path,
            self._token,
        ):
            raise LocalProtocolError(
                "the registration snapshot changed incarnation (instance id, socket path or "
                "token); a new incarnation needs a new registrar"
            )
        return registration.model_copy(update={"updated_at": self._clock()})

    async def _write(self) -> bool:
        """One fenced write; False when the registrar stopped before the rename."""
        if self._stopped:
            return False
        try:
            with anyio.fail_after(self._write_wait_s):
                await self._lock.acquire()
        except TimeoutError:
            raise WriteWaitTimeoutError(
                f"a registration write waited more than {self._write_wait_s} s for the previous one"
            ) from None
        try:
            if self._stopped:
                return False
            # The snapshot is taken inside the lock, so a write that queued behind another one
            # publishes the newest state rather than the state of when it was requested.
            registration = self._stamp(self._snapshot())
            data = serialize(registration)
            if len(data) > MAX_REGISTRATION_BYTES:
                raise UnpublishableRegistrationError(
                    f"cannot publish this session: the record is larger than "
                    f"{MAX_REGISTRATION_BYTES} bytes"
                )
            # Not abandoned on cancellation: the lock must stay held until the thread is done,
            # or unregister could remove the file before a late rename puts it back.
            written = await anyio.to_thread.run_sync(
                partial(
                    self._files.write_registration,
                    self._locations.peers_dir,
                    registration.instance_id,
                    data,
                    still_current=self._still_current,
                )
            )
        except CrossSessionError as exc:
            self._last_error = exc
            raise
        finally:
            self._lock.release()
        if written:
            self._writes += 1
        return written

    async def register(self) -> None:
        """Make the peers dir private (creating it) and publish the registration.

        Called at start-up, once the endpoint listens. Raises :class:`RegistrarStoppedError` on a
        stopped registrar, or the file layer's error (a
        :class:`~pi_cross_session._internal.protocol.errors.CrossSessionError`) when the write
        fails.
        """
        if self._stopped:
            raise RegistrarStoppedError("this registrar was stopped; it cannot register again")
        try:
            await anyio.to_thread.run_sync(
                partial(self._files.ensure_private_dir, self._locations.peers_dir)
            )
        except CrossSessionError as exc:
            self._last_error = exc
            raise
        if not await self._write():
            raise RegistrarStoppedError("the registrar was stopped while registering")

    async def refresh(self) -> bool:
        """Rewrite the registration from a fresh snapshot (a status, name or cwd change).

        Returns False, writing nothing, once the registrar is stopped: a status change racing
        shutdown is normal. Raises the file layer's error if the write fails; when it failed for
        lack of a kernel resource, the heartbeat also tries again soon.
        """
        try:
            return await self._write()
        except CrossSessionError as exc:
            if self._note_shortage(exc):
                self._wake.set()
            raise

    def _note_shortage(self, exc: BaseException) -> bool:
        """Count ``exc`` if it is a shortage (True), else leave it to the caller (False)."""
        name = shortage(exc)
        if name is None:
            return False
        self._retries[name] = self._retries.get(name, 0) + 1
        self._last_retry_at = self._clock()
        return True

    async def run_heartbeat(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Rewrite the registration every ``heartbeat_interval_s`` until the registrar stops.

        Start it with ``await task_group.start(registrar.run_heartbeat)``. It returns when the
        registrar is stopped. A failed write or a snapshot getter that raises ends it too: the
        registrar is fenced, its file removed, and ``on_failure`` called once with the error (or
        the error logged when there is no callback) — except a failure for lack of a kernel
        resource, which is counted and retried after a pause that doubles up to the interval.
        Beats are scheduled on a fixed grid; one that a slow write made late is skipped rather
        than bunched.
        """
        task_status.started()
        backoff = Backoff(self._retry_s, self._interval_s)
        next_beat = anyio.current_time() + self._interval_s
        while not self._stopped:
            with anyio.CancelScope(deadline=next_beat) as sleep:
                await self._wake.wait()
            if self._stopped:
                return
            if not sleep.cancelled_caught:
                # Woken early: a refresh failed for lack of resources. Retry soon, not at once.
                self._wake = anyio.Event()
                next_beat = min(next_beat, anyio.current_time() + backoff.next_delay())
                continue
            try:
                await self._write()
            except Exception as exc:
                if self._note_shortage(exc):
                    logger.warning(
                        "registration write failed for lack of resources (%s); retrying", exc
                    )
                    next_beat = anyio.current_time() + backoff.next_delay()
                    continue
                # Anything else, including a bug in the snapshot getter: an incarnation that
                # cannot keep its record current must stop advertising itself.
                await self._fail(exc)
                return
            backoff.reset()
            now = anyio.current_time()
            next_beat += self._interval_s
            if next_beat <= now:
                next_beat = now + self._interval_s

    async def _fail(self, exc: BaseException) -> None:
        self._last_error = exc
        self._stop()
        await self.unregister()
        # unregister may have recorded its own error; the heartbeat's is the one to show.
        self._last_error = exc
        if self._failure_reported:
            return
        self._failure_reported = True
        if self._on_failure is None:
            logger.error("registration heartbeat failed; the registration was withdrawn: %s", exc)
        else:
            self._on_failure(exc)

    async def unregister(self) -> bool:
        """Stop for good and remove the registration file (``rm -f``). Idempotent.

        The fence goes up first, so no write can start and a write in flight is not renamed into
        place; then this waits (at most ``write_wait_s``) for that write to finish and removes the
        file. Returns True when the file is gone (or was never written), False when removing it
        failed (the error is kept in :attr:`last_error` and logged, not raised, since this runs
        during cleanup). Call it shielded from cancellation if the caller may be cancelled.
        """
        self._stop()
        acquired = False
        with anyio.move_on_after(self._write_wait_s):
            await self._lock.acquire()
            acquired = True
        try:
            if self._instance_id is None:
                return True
            path = self._locations.registration_path(self._instance_id)
            try:
                await anyio.to_thread.run_sync(partial(self._files.remove_file, path))
            except CrossSessionError as exc:
                self._last_error = exc
                logger.warning("could not remove our registration %r: %s", path, exc)
                return False
            return True
        finally:
            if acquired:
                self._lock.release()


# -- listing ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listing:
    """The live peers, newest ``updatedAt`` first, and what the listing saw on the way.

    Every registration considered ends in exactly one bucket: ``peers`` (live), ``unsafe`` (refused
    by the file checks: symlink, not a regular file, foreign owner, loose mode, too large),
    ``unreadable`` (vanished, or the OS refused), ``invalid`` (bad content), ``hidden`` (probe
    failed but the process is not proven dead), ``reaped`` (probe failed, process dead, files
    removed), ``reap_deferred`` (dead, but removal was left to another lister or failed),
    ``unchecked`` (this process ran out of descriptors, buffers or memory reading or probing it),
    or self.
    """

    peers: list[PublicPeer]
    #: The full registrations of the live peers (tokens included) by instance id, for sending.
    #: Never shown: everything displayable is in ``peers``.
    registrations: Mapping[str, Registration] = field(default_factory=dict, repr=False)
    #: Registration file names taken from the dir (at most the limit), our own included.
    considered: int = 0
    #: The dir held at least ``limit`` names; more may exist and were not looked at.
    at_limit: bool = False
    #: Registration names past the limit: left unread, so a live session among them is unseen.
    unread: int = 0
    #: Our own registration was among the names (it is never read, probed or reaped).
    self_seen: bool = False
    unsafe: int = 0
    unreadable: int = 0
    invalid: int = 0
    hidden: int = 0
    reaped: int = 0
    reap_deferred: int = 0
    #: Probes that raised or overran the listing's guard (a bug in the probe, not in the peer).
    probe_faults: int = 0
    #: Registrations that could not be read or probed because this process ran short of a
    #: kernel resource (out of file descriptors …): nothing is known of them, so they are neither
    #: listed nor hidden nor reaped, and a listing with any is incomplete.
    unchecked: int = 0

    @property
    def skipped(self) -> int:
        """Registrations that never reached a probe: unsafe, unreadable or invalid."""
        return self.unsafe + self.unreadable + self.invalid


@dataclass(slots=True)
class _Scan:
    #: Read and valid: each waits for its probe, with the facts that led there.
    pending: list[tuple[Registration, Facts]] = field(default_factory=list)
    #: The registrations that already ended in a bucket, by bucket.
    settled: Counter[Verdict] = field(default_factory=Counter)
    considered: int = 0
    at_limit: bool = False
    unread: int = 0


def _read(
    locations: Locations, files: RegistryFiles, name: str, stem: str
) -> tuple[Read, Registration | None]:
    """Worker thread: one registration's bytes, parsed; the registration only when valid."""
    try:
        raw = files.read_registration_bytes(locations.registration_path(stem))
    except CrossSessionError as exc:
        logger.debug("skipping registration %s: %s", sanitize.line(name), sanitize.line(str(exc)))
        return read_failure(exc), None
    try:
        registration = parse_registration(
            raw, file_stem=stem, expected_socket_path=locations.socket_path(stem)
        )
    except InvalidRegistrationError as exc:
        logger.debug("skipping registration %s: %s", sanitize.line(name), sanitize.line(str(exc)))
        return Read.INVALID, None
    return Read.VALID, registration


def _scan(
    locations: Locations, files: RegistryFiles, self_instance_id: str | None, limit: int
) -> _Scan:
    """Worker thread: make the dir private, take the names, read and validate each file."""
    files.ensure_private_dir(locations.peers_dir)
    names, unread = files.list_registration_names(locations.peers_dir, limit=limit)
    scan = _Scan(considered=len(names), at_limit=at_limit(len(names), limit), unread=unread)
    for name in names:
        # The file layer already filters names; a fake that does not is refused by the policy.
        stem = instance_id_from_filename(name)
        facts = Facts(named=stem is not None, is_self=stem is not None and stem == self_instance_id)
        registration = None
        if stem is not None and judge(facts) is Verdict.READ:
            read, registration = _read(locations, files, name, stem)
            facts = replace(facts, read=read)
        verdict = judge(facts)
        if verdict is Verdict.PROBE and registration is not None:
            scan.pending.append((registration, facts))
        else:
            scan.settled[verdict] += 1
    return scan


def _settle_failed(
    locations: Locations,
    files: RegistryFiles,
    failed: list[tuple[Registration, Facts]],
    lock_timeout_s: float,
) -> Counter[Verdict]:
    """Worker thread: ask the kernel about each failed peer's pid, and reap as the policy says
    (under the lock, taken only when some peer is to be reaped)."""
    settled: Counter[Verdict] = Counter()
    doomed: list[tuple[Registration, Facts]] = []
    for registration, facts in failed:
        facts = replace(facts, pid_dead=files.pid_is_dead(registration.pid))
        verdict = judge(facts)
        if verdict is Verdict.REAP:
            doomed.append((registration, facts))
        else:
            settled[verdict] += 1
    if not doomed:
        return settled
    lock_path = os.path.join(locations.peers_dir, REAP_LOCK_NAME)
    # How many were settled under the lock: a release that fails after them must not count them
    # a second time.
    done = 0
    import filelock  # only when a dead peer is to be reaped (start-up time)

    try:
        lock = filelock.FileLock(lock_path, timeout=lock_timeout_s, mode=0o600)
        with lock:
            for registration, facts in doomed:
                reap = Reap.REMOVED if _reap(locations, files, registration) else Reap.REMOVE_FAILED
                settled[judge(replace(facts, reap=reap))] += 1
                done += 1
    except filelock.Timeout:
        logger.debug(
            "another process holds %s; leaving %d dead peers to it", lock_path, len(doomed)
        )
        settled.update(judge(replace(facts, reap=Reap.LOCK_BUSY)) for _, facts in doomed)
    except OSError as exc:
        logger.warning("the reap lock %r failed: %s", lock_path, exc)
        rest = doomed[done:]
        settled.update(judge(replace(facts, reap=Reap.LOCK_FAILED)) for _, facts in rest)
    return settled


def _reap(locations: Locations, files: RegistryFiles, registration: Registration) -> bool:
    """``rm -f`` a dead peer's registration, then its socket (the order of spec §2's cleanup)."""
    instance_id = registration.instance_id
    try:
        files.remove_file(locations.registration_path(instance_id))
        files.remove_file(locations.socket_path(instance_id))
    except CrossSessionError as exc:
        logger.warning("could not reap dead peer %s: %s", registration.ref, exc)
        return False
    return True


async def _probe_one(
    probe: Probe, registration: Registration, guard_s: float, answers: dict[str, Answer]
) -> None:
    answer = Answer.FAULT
    with anyio.move_on_after(guard_s):
        try:
            answer = Answer.READY if await probe(registration) else Answer.SILENT
        except Exception as exc:
            answer = probe_failure(exc)
            if answer is Answer.FAULT:
                # The listing carries on without this peer; the traceback shows the probe's bug.
                logger.exception("the probe of peer %s raised", registration.ref)
    if answer is Answer.FAULT:
        logger.debug("the probe of peer %s faulted or overran %.3f s", registration.ref, guard_s)
    answers[registration.instance_id] = answer


async def list_peers(
    locations: Locations,
    files: RegistryFiles,
    probe: Probe,
    *,
    self_instance_id: str | None,
    limit: int = MAX_LISTED_REGISTRATIONS,
    with_git: bool = True,
    git_resolver: GitResolver = resolve_git_info,
    probe_guard_s: float = PROBE_DEADLINE_S + PROBE_GUARD_MARGIN_S,
    reap_lock_timeout_s: float = REAP_LOCK_TIMEOUT_S,
) -> Listing:
    """The live peers of this agent dir, per spec §1.5, newest ``updatedAt`` first.

    1. The peers dir is made private (created if missing), and at most ``limit`` names are taken;
       the names past them are counted (:attr:`Listing.unread`), never read.
    2. Each file is read through ``files`` and validated; refused ones are counted, not raised.
    3. Every other peer is probed concurrently; each probe owns its 350 ms deadline, and the
       listing stops waiting for any probe after ``probe_guard_s``.
    4. A peer whose probe failed is reaped (registration and socket removed) when ``files``
       proves its pid dead, and hidden otherwise.
    5. With ``with_git``, the live peers' cwds get their git metadata from ``git_resolver``.

    ``self_instance_id`` is never read, probed or reaped. Raises the file layer's
    :class:`~pi_cross_session._internal.protocol.errors.CrossSessionError` only when the peers dir
    itself cannot be made private or listed.
    """
    scan = await anyio.to_thread.run_sync(partial(_scan, locations, files, self_instance_id, limit))

    answers: dict[str, Answer] = {}
    async with anyio.create_task_group() as group:
        for registration, _ in scan.pending:
            group.start_soon(_probe_one, probe, registration, probe_guard_s, answers)

    settled = Counter(scan.settled)
    live: list[Registration] = []
    failed: list[tuple[Registration, Facts]] = []
    for registration, facts in scan.pending:
        facts = replace(facts, answer=answers[registration.instance_id])
        verdict = judge(facts)
        if verdict is Verdict.LIVE:
            live.append(registration)
        elif verdict is Verdict.ASK_KERNEL:
            failed.append((registration, facts))
        else:
            settled[verdict] += 1
    if failed:
        settled += await anyio.to_thread.run_sync(
            partial(_settle_failed, locations, files, failed, reap_lock_timeout_s)
        )

    git: Mapping[str, GitInfo | None] = {}
    if with_git and live:
        git = await git_resolver([r.cwd for r in live])
    live.sort(key=newest_first)
    peers = [PublicPeer.from_registration(r, git=git.get(r.cwd)) for r in live]
    return Listing(
        peers=peers,
        registrations={r.instance_id: r for r in live},
        considered=scan.considered,
        at_limit=scan.at_limit,
        unread=scan.unread,
        self_seen=settled[Verdict.SELF] > 0,
        unsafe=settled[Verdict.UNSAFE],
        unreadable=settled[Verdict.UNREADABLE],
        invalid=settled[Verdict.INVALID],
        hidden=settled[Verdict.HIDDEN],
        reaped=settled[Verdict.REAPED],
        reap_deferred=settled[Verdict.REAP_DEFERRED],
        probe_faults=sum(1 for answer in answers.values() if answer is Answer.FAULT),
        unchecked=settled[Verdict.UNCHECKED],
    )
