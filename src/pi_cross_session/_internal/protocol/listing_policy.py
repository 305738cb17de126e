"""What a listing does with each registration it meets (spec §1.5), decided from facts alone.

The listing (:func:`~pi_cross_session._internal.protocol.io.discovery.list_peers`) learns about
one registration a stage at a time, and asks :func:`judge` after each stage. The verdict is either
the next thing to find out (a *step*: read the file, probe the peer, ask the kernel about its pid,
reap it) or the bucket the registration ends in, one of the counters of a listing. The rules, in
the order they apply:

1. A name that is not a registration file's is **invalid**; our own registration is **self**:
   never read, probed or reaped (a listing must not depend on our own file, nor remove it).
2. A file refused by the file checks is **unsafe**; one that vanished or that the OS would not
   hand over is **unreadable**; bad content is **invalid**. A read that failed because *this*
   process ran short of descriptors, buffers or memory is **unchecked**: the file is not at fault,
   and nothing is known of the peer.
3. A peer that answers ``ready`` is **live**. A probe that ran short the same way leaves it
   **unchecked** (never hidden, never reaped: a lister under pressure must not delete the
   sessions it failed to reach). A silent peer, and one whose probe raised or overran the
   listing's guard, are failed alike: a probe's bug proves nothing, but the peer did not show
   itself live either.
4. A failed peer is **hidden** unless the kernel proved its pid dead (``kill(pid, 0)`` said
   ``ESRCH``): a busy or wedged session, or a pid this process cannot see, must keep its file.
5. A proven-dead peer is **reaped** only when its files were removed under the reap lock;
   otherwise (another lister holds the lock, the lock could not be taken, a removal failed) it is
   **reap deferred**, and a later listing finishes the job.

Besides, the listing's window and order: a listing that took ``limit`` names is :func:`at_limit`
(more may exist), and the live peers come newest ``updatedAt`` first, ties by instance id, so a
listing is deterministic (:func:`newest_first`).

Pure: the caller does every read, probe, kernel call and removal, and passes what it saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.pressure import shortage
from pi_cross_session._internal.protocol.registration import Registration

__all__ = [
    "Answer",
    "Facts",
    "Read",
    "Reap",
    "Verdict",
    "at_limit",
    "judge",
    "newest_first",
    "probe_failure",
    "read_failure",
]


class Read(Enum):
    """How reading and parsing one registration file went."""

    VALID = "valid"
    #: Read, but the content is not a registration of this file's name and socket path.
    INVALID = "invalid"
    #: Refused by the file checks: symlink, not a regular file, foreign owner, loose mode, size.
    UNSAFE = "unsafe"
    #: Vanished, or the OS refused for a reason of its own.
    UNREADABLE = "unreadable"
    #: This process ran short of a kernel resource while reading it.
    SHORTAGE = "shortage"


class Answer(Enum):
    """What probing one peer gave."""

    #: It answered ``ready`` within its deadline.
    READY = "ready"
    #: The probe said no: dead, silent or refusing.
    SILENT = "silent"
    #: The probe raised, or overran the listing's guard.
    FAULT = "fault"
    #: The probe raised because this process ran short of a kernel resource.
    SHORTAGE = "shortage"


class Reap(Enum):
    """How removing one proven-dead peer's files went."""

    REMOVED = "removed"
    #: Another process held the reap lock past the wait.
    LOCK_BUSY = "lock_busy"
    #: The lock file could not be opened or locked.
    LOCK_FAILED = "lock_failed"
    #: The lock was held, but removing the registration or the socket failed.
    REMOVE_FAILED = "remove_failed"


class Verdict(Enum):
    """A step to take next, or the bucket a registration ends in (its :attr:`final`)."""

    READ = "read"
    PROBE = "probe"
    ASK_KERNEL = "ask_kernel"
    REAP = "reap"

    SELF = "self"
    INVALID = "invalid"
    UNSAFE = "unsafe"
    UNREADABLE = "unreadable"
    UNCHECKED = "unchecked"
    LIVE = "live"
    HIDDEN = "hidden"
    REAPED = "reaped"
    REAP_DEFERRED = "reap_deferred"

    @property
    def final(self) -> bool:
        """Whether this is a bucket rather than a step."""
        return self not in _STEPS


_STEPS = frozenset({Verdict.READ, Verdict.PROBE, Verdict.ASK_KERNEL, Verdict.REAP})


@dataclass(frozen=True, slots=True)
class Facts:
    """What the listing knows of one registration so far; ``None`` is "not found out yet".

    Later facts only count once the earlier ones lead to them: a file that was never read has no
    answer, whatever ``answer`` says.
    """

    #: The file name is a registration's (``<instanceId>.json``).
    named: bool = True
    #: The name is our own incarnation's.
    is_self: bool = False
    read: Read | None = None
    answer: Answer | None = None
    #: The kernel's word on the pid: True only when it proved the process gone.
    pid_dead: bool | None = None
    reap: Reap | None = None


_READ_BUCKETS = {
    Read.INVALID: Verdict.INVALID,
    Read.UNSAFE: Verdict.UNSAFE,
    Read.UNREADABLE: Verdict.UNREADABLE,
    Read.SHORTAGE: Verdict.UNCHECKED,
}


def judge(facts: Facts) -> Verdict:
    """The next step for this registration, or its bucket (see the module docstring)."""
    if not facts.named:
        return Verdict.INVALID
    if facts.is_self:
        return Verdict.SELF
    if facts.read is None:
        return Verdict.READ
    if facts.read is not Read.VALID:
        return _READ_BUCKETS[facts.read]
    if facts.answer is None:
        return Verdict.PROBE
    if facts.answer is Answer.READY:
        return Verdict.LIVE
    if facts.answer is Answer.SHORTAGE:
        return Verdict.UNCHECKED
    if facts.pid_dead is None:
        return Verdict.ASK_KERNEL
    if not facts.pid_dead:
        return Verdict.HIDDEN
    if facts.reap is None:
        return Verdict.REAP
    return Verdict.REAPED if facts.reap is Reap.REMOVED else Verdict.REAP_DEFERRED


def read_failure(exc: CrossSessionError) -> Read:
    """What a failed read says: the file checks' refusal first, since it is the file's fault
    whatever else went wrong; then our own shortage; anything else the OS's."""
    if exc.code == Code.UNSAFE_ENDPOINT:
        return Read.UNSAFE
    if shortage(exc) is not None:
        return Read.SHORTAGE
    return Read.UNREADABLE


def probe_failure(exc: BaseException) -> Answer:
    """What a probe that raised says: a probe reports a dead or silent peer by answering no, so
    raising is a fault, unless this process ran short of a kernel resource."""
    return Answer.SHORTAGE if shortage(exc) is not None else Answer.FAULT


def at_limit(taken: int, limit: int) -> bool:
    """Whether a listing that took ``taken`` names may have missed some: the file layer stops at
    ``limit``, so a full window cannot tell "exactly that many" from "more"."""
    return taken >= limit


def newest_first(registration: Registration) -> tuple[float, str]:
    """The sort key of the live peers: newest ``updatedAt`` first, ties by instance id."""
    return (-registration.updated_at, registration.instance_id)
