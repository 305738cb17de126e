"""The command line's sender identities: a small pool per user and agent dir, kept between runs.

A receiver keys rate limits, duplicate detection and status rows by the sender's *instance id*. If
every ``pi-cross-session send`` were a new incarnation, a script could dodge every limit by sending
from a loop, and ``pi-cross-session status`` could never find the message it asks about. So the
command line keeps persistent identities (session id, instance id, token) in
``<agentDir>/cross-session/`` (files 0600, in a 0700 dir), and publishes one's registration only
while it is sending or querying.

**Why a pool, and why one process per identity.** A receiver checks that an authenticated hello
comes from the pid the sender's registration names, so two processes cannot publish one identity
at the same moment. With a single identity every invocation waited for the previous one. The pool
holds :data:`~pi_cross_session._internal.protocol.limits.CLI_IDENTITY_POOL` identities, each behind
its own lock file (an exclusive ``flock``, released by the kernel if the holder dies): an invocation
takes the first free one, so that many can send at once. Sequential invocations always take the
first, so to a receiver they are one sender, exactly as before.

**The limits stay honest, with a known factor.** Each identity is a sender of its own: with N
identities a script running N sends in parallel gets at most N times one sender's rate (and the
same text sent from two identities is not a duplicate). The receiver's lifetime budget is per
receiver, so it does not grow.

**Who holds what.** The holder writes a note into its lock file (pid, what it does, since when);
an invocation that has to wait reads the notes and says who holds each identity.

**An unsafe lock file costs one identity, not all.** A slot whose lock file is a symbolic link,
not a regular file, another user's, or cannot be opened or locked is skipped (the reporter is
told once, with why) and the next slot is tried; only when no slot is usable does taking one fail
(:class:`IdentityUnusableError`), at once rather than after the wait for a busy one.

**Status asks the right identity.** Status rows are per sender, so each identity remembers the
message ids it sent (a bounded list beside it); ``status`` asks as the identity that sent the
message, and only waits for that one.

Slot 0 keeps the file names of the single identity of earlier versions (``cli-identity.json``,
``cli.lock``); slot k > 0 adds ``-k``. The registration says ``inbound: refuse`` and points at a
socket nobody listens on: the command line sends, it never receives. Listers see it fail its probe
while its process lives, and hide it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Final, Protocol

import anyio

from pi_cross_session._internal.plugin.cli_identity_settings import (
    CLI_HOLDER_NOTE_BYTES,
    CLI_IDENTITY_POOL,
    CLI_IDENTITY_RETRY_S,
    CLI_IDENTITY_WAIT_S,
    CLI_SENT_IDS_KEPT,
)
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.frames import ID_RE, INSTANCE_ID_RE, TOKEN_RE, Sender
from pi_cross_session._internal.protocol.paths import Locations, node_join
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.tokens import new_instance_id, new_token

if TYPE_CHECKING:  # the outbox and the exchange are built only once an identity is held
    from pi_cross_session._internal.plugin.journaling import SessionJournal
    from pi_cross_session._internal.plugin.outbound import Outbox
    from pi_cross_session._internal.protocol.registration import Registration
    from pi_cross_session._internal.security.io.journal_network import LiveState

STATE_DIR: Final = "cross-session"
#: Slot 0's files, named as the single identity of earlier versions was.
IDENTITY_FILE: Final = "cli-identity.json"
LOCK_FILE: Final = "cli.lock"
SENT_FILE: Final = "cli-sent.json"
DEFAULT_NAME: Final = "pi-cross-session-cli"
#: Kept for callers of the single-identity API: how long :func:`publishing` waits.
LOCK_TIMEOUT_S: Final = CLI_IDENTITY_WAIT_S
#: Every slot of the pool, in the order an invocation tries them.
ALL_SLOTS: Final = tuple(range(CLI_IDENTITY_POOL))

logger = logging.getLogger(__name__)


class IdentityBusyError(CrossSessionError):
    """Every identity an invocation may use stayed in use for too long."""

    code = "identity_busy"


class LockProblem(StrEnum):
    """Why a slot's lock file cannot be used safely (the slot is skipped)."""

    SYMLINK = "symlink"
    NOT_A_FILE = "not_a_file"
    FOREIGN_OWNER = "foreign_owner"
    #: It could not be inspected, opened or locked for another reason (``error`` says which).
    UNUSABLE = "unusable"


@dataclass(frozen=True, slots=True)
class SkippedSlot:
    """A slot left alone because its lock file is unsafe."""

    slot: int
    path: str
    problem: LockProblem
    #: The file's owner, for :attr:`LockProblem.FOREIGN_OWNER`.
    owner: int | None = None
    #: The system's words, for :attr:`LockProblem.UNUSABLE`.
    error: str | None = None

    def reason(self) -> str:
        """Why the slot was skipped, as a person reads it."""
        from pi_cross_session._internal.plugin.render.sending import unsafe_lock

        return unsafe_lock(self.path, self.problem, owner=self.owner, error=self.error)


class IdentityUnusableError(CrossSessionError):
    """No identity an invocation may use has a lock file that is safe to use."""

    code = "identity_unusable"

    def __init__(self, skipped: Sequence[SkippedSlot]) -> None:
        # Imported here: the texts a person reads live with the sender's other texts.
        from pi_cross_session._internal.plugin.render.sending import identities_unusable

        super().__init__(identities_unusable([(entry.slot, entry.reason()) for entry in skipped]))
        self.skipped = tuple(skipped)


@dataclass(frozen=True, slots=True)
class CliIdentity:
    """One persistent sender identity of the command line."""

    session_id: str
    instance_id: str
    token: str

    def sender(self) -> Sender:
        """How this identity names itself in a hello."""
        return Sender(id=self.session_id, instance_id=self.instance_id, token=self.token)


@dataclass(frozen=True, slots=True)
class SlotFiles:
    """The file names of one slot, inside :func:`state_dir`."""

    identity: str
    lock: str
    sent: str


def slot_files(slot: int) -> SlotFiles:
    """The files of ``slot`` (slot 0 keeps the names of the single identity of old)."""
    if not 0 <= slot < CLI_IDENTITY_POOL:
        raise ValueError(f"slot must be 0 to {CLI_IDENTITY_POOL - 1}")
    if slot == 0:
        return SlotFiles(IDENTITY_FILE, LOCK_FILE, SENT_FILE)
    return SlotFiles(f"cli-identity-{slot}.json", f"cli-{slot}.lock", f"cli-sent-{slot}.json")


def state_dir(locations: Locations) -> str:
    """``<agentDir>/cross-session``: private state of this package."""
    return node_join(locations.agent_dir, STATE_DIR)


# -- identity files --------------------------------------------------------------------------------


def parse_identity(raw: bytes) -> CliIdentity | None:
    """The identity in a stored file, or ``None`` when it is not a valid one."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    session_id, instance_id, token = (
        data.get("sessionId"),
        data.get("instanceId"),
        data.get("token"),
    )
    if not (
        isinstance(session_id, str)
        and 0 < len(session_id) <= 128
        and isinstance(instance_id, str)
        and INSTANCE_ID_RE.fullmatch(instance_id)
        and isinstance(token, str)
        and TOKEN_RE.fullmatch(token)
    ):
        return None
    return CliIdentity(session_id=session_id, instance_id=instance_id, token=token)


def load_existing(locations: Locations, slot: int = 0) -> CliIdentity | None:
    """The stored identity of ``slot`` if there is a valid one; creates and changes nothing."""
    path = node_join(state_dir(locations), slot_files(slot).identity)
    try:
        return parse_identity(fs.read_registration_bytes(path))
    except CrossSessionError:
        return None


def load_or_create(locations: Locations, slot: int = 0) -> CliIdentity:
    """The stored identity of ``slot``, or a new one written 0600 (blocking: call from a worker
    thread, holding the slot).

    A stored file that fails any safety or format check is replaced, never trusted.
    """
    directory = state_dir(locations)
    fs.ensure_private_dir(directory)
    existing = load_existing(locations, slot)
    if existing is not None:
        return existing
    identity = CliIdentity(
        session_id=f"cli-{uuid.uuid4()}", instance_id=new_instance_id(), token=new_token()
    )
    body = {
        "version": 1,
        "sessionId": identity.session_id,
        "instanceId": identity.instance_id,
        "token": identity.token,
    }
    fs.write_private_file(directory, slot_files(slot).identity, json.dumps(body).encode())
    return identity


def known_instance_ids(locations: Locations) -> dict[str, int]:
    """The instance id of every stored identity of the pool, with its slot (read-only)."""
    found: dict[str, int] = {}
    for slot in ALL_SLOTS:
        identity = load_existing(locations, slot)
        if identity is not None:
            found[identity.instance_id] = slot
    return found


# -- who sent what ---------------------------------------------------------------------------------


def _read_sent(locations: Locations, slot: int) -> list[str]:
    path = node_join(state_dir(locations), slot_files(slot).sent)
    try:
        data = json.loads(fs.read_registration_bytes(path))
    except (CrossSessionError, ValueError):
        return []
    ids = data.get("messageIds") if isinstance(data, dict) else None
    if not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, str) and ID_RE.fullmatch(i)]


def remember_sent(locations: Locations, slot: int, message_id: str) -> None:
    """Note that ``slot`` sent ``message_id`` (blocking; only the slot's holder calls it)."""
    ids = [i for i in _read_sent(locations, slot) if i != message_id]
    ids = [*ids, message_id][-CLI_SENT_IDS_KEPT:]
    body = json.dumps({"version": 1, "messageIds": ids}).encode()
    fs.write_private_file(state_dir(locations), slot_files(slot).sent, body)


def senders_of(locations: Locations, message_id: str) -> list[int]:
    """The slots that remember sending ``message_id`` (read-only; usually one, or none)."""
    return [slot for slot in ALL_SLOTS if message_id in _read_sent(locations, slot)]


# -- the slot locks ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holder:
    """What a lock's holder wrote about itself."""

    pid: int | None
    purpose: str
    since_ms: int | None

    def to_bytes(self) -> bytes:
        note = {"pid": self.pid, "purpose": self.purpose, "since": self.since_ms}
        return json.dumps(note).encode()


def read_holder(path: str) -> Holder | None:
    """The note in a lock file, or ``None`` when there is none (never raises, never waits)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        raw = os.read(fd, CLI_HOLDER_NOTE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    pid, purpose, since = data.get("pid"), data.get("purpose"), data.get("since")
    return Holder(
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        purpose=purpose if isinstance(purpose, str) else "",
        since_ms=since if isinstance(since, int) and not isinstance(since, bool) else None,
    )


class WaitReporter(Protocol):
    """Told when an invocation has to wait for an identity, and how the wait goes."""

    def started(self, holders: Sequence[tuple[int, Holder | None]], timeout_s: float) -> None:
        """Every wanted slot is in use: by whom (``None`` when its holder left no note)."""

    def still_waiting(self, elapsed_s: float) -> None:
        """Called about once a second while the wait goes on."""

    def ended(self, slot: int, elapsed_s: float) -> None:
        """The wait is over: ``slot`` is ours."""

    def skipped(self, skipped: SkippedSlot) -> None:
        """A slot is left alone because its lock file is unsafe (told once per invocation)."""


def lock_problem(path: str) -> SkippedSlot | None:
    """Why the lock file at ``path`` must not be used (slot -1: the caller fills it in), or
    ``None`` when it is absent or a regular file of ours. Opening it does not follow a link
    either (:class:`~pi_cross_session._internal.security.io.fs.NotedLock`), so a link put
    there after this check is refused then."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return SkippedSlot(-1, path, LockProblem.UNUSABLE, error=exc.strerror or str(exc))
    if stat.S_ISLNK(st.st_mode):
        return SkippedSlot(-1, path, LockProblem.SYMLINK)
    if not stat.S_ISREG(st.st_mode):
        return SkippedSlot(-1, path, LockProblem.NOT_A_FILE)
    if st.st_uid != os.geteuid():
        return SkippedSlot(-1, path, LockProblem.FOREIGN_OWNER, owner=st.st_uid)
    return None


def _try_slot(slot: int, lock: fs.NotedLock) -> bool | SkippedSlot:
    """Take ``lock`` if it is free and safe: True taken, False held by another, else why it
    must be skipped."""
    problem = lock_problem(lock.path)
    if problem is not None:
        return SkippedSlot(slot, problem.path, problem.problem, problem.owner, problem.error)
    try:
        return lock.try_acquire()
    except CrossSessionError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.ELOOP:
            return SkippedSlot(slot, lock.path, LockProblem.SYMLINK)  # put there since the check
        error = (cause.strerror if isinstance(cause, OSError) else None) or str(cause or exc)
        return SkippedSlot(slot, lock.path, LockProblem.UNUSABLE, error=error)


async def acquire_slot(
    locations: Locations,
    slots: Sequence[int] = ALL_SLOTS,
    *,
    purpose: str = "",
    timeout_s: float = CLI_IDENTITY_WAIT_S,
    retry_s: float = CLI_IDENTITY_RETRY_S,
    reporter: WaitReporter | None = None,
) -> tuple[int, fs.NotedLock]:
    """Take the first free slot of ``slots``; if all are in use, tell ``reporter`` who holds
    them and try again until one is free or ``timeout_s`` passed (:class:`IdentityBusyError`)."""
    if not slots:
        raise ValueError("no slot to take")
    directory = state_dir(locations)
    await anyio.to_thread.run_sync(fs.ensure_private_dir, directory)
    locks = [(slot, fs.NotedLock(node_join(directory, slot_files(slot).lock))) for slot in slots]
    started = time.monotonic()
    told = False
    ticks = 0
    skipped: list[SkippedSlot] = []
    untold: list[SkippedSlot] = []
    while True:
        for slot, lock in list(locks):
            taken = _try_slot(slot, lock)
            if isinstance(taken, SkippedSlot):
                # Unsafe: never used, and said once; the other slots stay usable.
                locks.remove((slot, lock))
                skipped.append(taken)
                untold.append(taken)
                continue
            if taken:
                _tell_skipped(untold, reporter)
                lock.write_note(Holder(os.getpid(), purpose, _now_ms()).to_bytes())
                logger.info("took command-line identity %d (%s)", slot, purpose or "no purpose")
                if told and reporter is not None:
                    reporter.ended(slot, time.monotonic() - started)
                return slot, lock
        if not locks:
            raise IdentityUnusableError(skipped)  # which already says every one of them
        _tell_skipped(untold, reporter)
        elapsed = time.monotonic() - started
        holders = None
        if not told:
            told = True
            holders = [(slot, read_holder(lock.path)) for slot, lock in locks]
            if reporter is not None:
                reporter.started(holders, timeout_s)
        if elapsed >= timeout_s:
            holders = holders or [(slot, read_holder(lock.path)) for slot, lock in locks]
            raise IdentityBusyError(_busy_text(holders, timeout_s))
        if reporter is not None and int(elapsed) > ticks:
            ticks = int(elapsed)
            reporter.still_waiting(elapsed)
        await anyio.sleep(retry_s)


def _tell_skipped(untold: list[SkippedSlot], reporter: WaitReporter | None) -> None:
    """Say (once) which slots were skipped, and forget them."""
    for skipped in untold:
        if reporter is None:
            logger.warning(
                "skipped command-line identity %d: its lock file %s is unsafe (%s)",
                skipped.slot,
                skipped.path,
                skipped.problem,
            )
        else:
            reporter.skipped(skipped)
    untold.clear()


def _busy_text(holders: Sequence[tuple[int, Holder | None]], timeout_s: float) -> str:
    pids = ", ".join(
        f"{slot}: pid {holder.pid}" if holder is not None and holder.pid else f"{slot}: unknown"
        for slot, holder in holders
    )
    return f"every command-line identity it may use stayed in use for {timeout_s:g} s ({pids})"


# -- holding one identity ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Held:
    """An identity this process holds and has published, with what to send with."""

    slot: int
    identity: CliIdentity
    outbox: Outbox
    locations: Locations
    registration: Registration

    async def remember(self, message_id: str) -> None:
        """Note that this identity sent ``message_id`` (so ``status`` asks as it)."""
        await anyio.to_thread.run_sync(remember_sent, self.locations, self.slot, message_id)


@asynccontextmanager
async def holding(
    locations: Locations,
    slots: Sequence[int] = ALL_SLOTS,
    *,
    name: str | None = None,
    purpose: str = "",
    timeout_s: float = CLI_IDENTITY_WAIT_S,
    reporter: WaitReporter | None = None,
) -> AsyncIterator[Held]:
    """Take a free identity of ``slots``, publish its registration under ``name``, and yield it;
    on the way out the registration is removed and the identity released.

    The outbox lists the live sessions without git metadata: it lists to find a target, and a
    target is never named by its branch (``peers`` shows git; see docs/performance.md)."""
    # Imported here: a command that never sends (peers, paths) must not pay for the exchange.
    from pi_cross_session._internal.plugin.outbound import Outbox
    from pi_cross_session._internal.protocol.io import discovery
    from pi_cross_session._internal.protocol.io.exchange import Exchanger
    from pi_cross_session._internal.protocol.registration import (
        PublicPeer,
        build_registration,
        default_name,
        serialize,
    )

    slot, lock = await acquire_slot(
        locations, slots, purpose=purpose, timeout_s=timeout_s, reporter=reporter
    )
    registration_path: str | None = None
    journal: SessionJournal | None = None
    try:
        identity = await anyio.to_thread.run_sync(load_or_create, locations, slot)
        stamp = _now_ms()
        registration = build_registration(
            session_id=identity.session_id,
            session_name=default_name(identity.session_id, name or DEFAULT_NAME),
            instance_id=identity.instance_id,
            cwd=os.getcwd(),
            pid=os.getpid(),
            started_at=stamp,
            updated_at=stamp,
            status="idle",
            inbound="refuse",
            socket_path=locations.socket_path(identity.instance_id),
            token=identity.token,
        )
        await anyio.to_thread.run_sync(fs.ensure_private_dir, locations.peers_dir)
        registration_path = locations.registration_path(identity.instance_id)
        await anyio.to_thread.run_sync(
            partial(
                fs.write_registration,
                locations.peers_dir,
                identity.instance_id,
                serialize(registration),
                still_current=lambda: True,
            )
        )
        exchanger = Exchanger(locations, fs)

        async def list_peers() -> discovery.Listing:
            return await discovery.list_peers(
                locations,
                fs,
                exchanger.is_live,
                self_instance_id=identity.instance_id,
                with_git=False,
                probe_guard_s=exchanger.listing_guard_s,
            )

        journal = await anyio.to_thread.run_sync(
            _open_journal, locations, identity.instance_id, registration.name
        )
        outbox = Outbox(
            sender=identity.sender(),
            exchanger=exchanger,
            list_peers=list_peers,
            wall_ms=_now_ms,
            me=PublicPeer.from_registration(registration),
            journal=journal,
        )
        logger.info(
            "identity %d published as %s [%s] in %s",
            slot,
            registration.name,
            registration.ref,
            locations.peers_dir,
        )
        yield Held(slot, identity, outbox, locations, registration)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                if registration_path is not None:
                    await anyio.to_thread.run_sync(fs.remove_file, registration_path)
                if journal is not None:
                    await anyio.to_thread.run_sync(_close_journal, journal, registration)
            finally:
                lock.release()
                logger.info("released command-line identity %d", slot)


@asynccontextmanager
async def publishing(
    locations: Locations,
    *,
    name: str = DEFAULT_NAME,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
) -> AsyncIterator[Outbox]:
    """Hold a free identity of the pool, publish it, and yield what to send with."""
    async with holding(locations, name=name, timeout_s=lock_timeout_s) as held:
        yield held.outbox


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


#: The kind ``watch`` is told of a command-line sender while it holds its identity.
_CLI_KIND: Final = "cli"


def _cli_live_state(instance_id: str, name: str, *, ended: bool) -> LiveState:
    from pi_cross_session._internal.plugin.render.receiving import LIVE_CLI_SENDER
    from pi_cross_session._internal.security.io.journal_network import InboundState, LiveState

    return LiveState(
        at=_now_ms(),
        instance_id=instance_id,
        name=name,
        host=_CLI_KIND,
        inbound=InboundState.REFUSING,
        reason=LIVE_CLI_SENDER,
        ended=ended,
    )


def _open_journal(locations: Locations, instance_id: str, name: str) -> SessionJournal | None:
    """The journal a command-line send writes under its identity's instance id (and the live
    state ``watch`` shows while it sends); ``None`` when the user turned journaling off."""
    from pi_cross_session._internal.plugin.journaling import SessionJournal, journal_setting
    from pi_cross_session._internal.security.io.journal_network import write_live_state

    setting = journal_setting()
    if setting.warning is not None:
        logger.warning("%s", setting.warning)
    if not setting.policy.enabled:
        return None
    journal = SessionJournal.open(
        locations.agent_dir,
        instance_id,
        setting.policy,
        name=lambda: name,
        wall_ms=_now_ms,
    )
    try:
        write_live_state(journal.directory, _cli_live_state(instance_id, name, ended=False))
    except (OSError, CrossSessionError) as exc:
        logger.info("could not publish the live state: %s", exc)
    return journal


def _close_journal(journal: SessionJournal, registration: Registration) -> None:
    from pi_cross_session._internal.security.io.journal_network import write_live_state

    journal.close()
    try:
        state = _cli_live_state(registration.instance_id, registration.name, ended=True)
        write_live_state(journal.directory, state)
    except (OSError, CrossSessionError) as exc:
        logger.info("could not publish the live state: %s", exc)
