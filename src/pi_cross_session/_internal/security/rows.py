"""The receiver's status rows: their states, the moves allowed between them, and the bounded table.

**States and moves.** Every admitted message gets one :class:`Row`, born ``accepted`` at the
commit. From there it moves only along :data:`TRANSITIONS`, and :meth:`RowTable.put` refuses any
other move (:class:`RowTransitionError`: a bug of ours, never a peer's doing)::

    accepted ──▶ submitted | injection_failed          (safely idle: handed to the host)
        │
        └──────▶ queued ──▶ submitted | injection_failed   (one flush after a safe settle)
                        ──▶ expired                         (30 s in the queue)
                        ──▶ dropped_cancelled               (the abort latch)
                        ──▶ dropped_user_reset              (/cross-session-resume)
                        ──▶ dropped_shutdown                (the incarnation ended)
                        ──▶ dropped_goal_revoked            (its goal ended, or its sender unbound)

Every other state is final: a row never leaves it. A final row's diagnostic may still change (a
``submitted`` row records whether the host confirmed the message), never its state. ``dropped``
(the reference's unclaimed bridge) is part of the wire vocabulary, but this receiver never produces
it: it runs no bridge listener and refuses bridges before the commit.

**The bound.** A row is kept for every admitted message of the incarnation, in admission order,
until the table is full. The bound applies to *final* rows only: a pending row (``accepted``,
``queued``) is never evicted and is already bounded by the queue (50) plus the one message being
admitted. When a row becomes final and more than ``max_final`` final rows are kept, one final row
goes, chosen by :class:`~pi_cross_session._internal.security.shares.SenderShares`: its sender's own
oldest other final row, or, when it holds none, the oldest of the sender holding the most final
rows. The caller names a row that must stay whatever happens (the submitted row whose turn is still
due).

An evicted row turns its sender's status query into ``unknown``; under this rule one sender's
admissions — even a goal member's, which the lifetime budget does not bound — never do that to a
sender it shares the table with while it holds final rows of its own.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.protocol.limits import MAX_CACHE_ENTRIES
from pi_cross_session._internal.security.shares import SenderShares

RowKey = tuple[str, str]


class RowState(StrEnum):
    """Where an admitted message is; each value is the wire word a status query answers."""

    ACCEPTED = Code.ACCEPTED.value
    QUEUED = Code.QUEUED.value
    SUBMITTED = Code.SUBMITTED.value
    INJECTION_FAILED = Code.INJECTION_FAILED.value
    EXPIRED = Code.EXPIRED.value
    DROPPED = Code.DROPPED.value
    DROPPED_CANCELLED = Code.DROPPED_CANCELLED.value
    DROPPED_USER_RESET = Code.DROPPED_USER_RESET.value
    DROPPED_SHUTDOWN = Code.DROPPED_SHUTDOWN.value
    DROPPED_GOAL_REVOKED = Code.DROPPED_GOAL_REVOKED.value


_HANDED_OVER: Final = frozenset({RowState.SUBMITTED, RowState.INJECTION_FAILED})

#: The moves a row may make: from each state, the states it may go to next (see the diagram).
TRANSITIONS: Final[Mapping[RowState, frozenset[RowState]]] = {
    RowState.ACCEPTED: _HANDED_OVER | {RowState.QUEUED},
    RowState.QUEUED: _HANDED_OVER
    | {
        RowState.EXPIRED,
        RowState.DROPPED_CANCELLED,
        RowState.DROPPED_USER_RESET,
        RowState.DROPPED_SHUTDOWN,
        RowState.DROPPED_GOAL_REVOKED,
    },
    RowState.SUBMITTED: frozenset(),
    RowState.INJECTION_FAILED: frozenset(),
    RowState.EXPIRED: frozenset(),
    RowState.DROPPED: frozenset(),
    RowState.DROPPED_CANCELLED: frozenset(),
    RowState.DROPPED_USER_RESET: frozenset(),
    RowState.DROPPED_SHUTDOWN: frozenset(),
    RowState.DROPPED_GOAL_REVOKED: frozenset(),
}

#: States a row is born in.
INITIAL_STATE: Final = RowState.ACCEPTED
#: States a message can still move from.
PENDING_STATES: Final = frozenset(state for state, nxt in TRANSITIONS.items() if nxt)
#: States a message can end in; a row never leaves one of these.
FINAL_STATES: Final = frozenset(RowState) - PENDING_STATES


def may_move(old: RowState, new: RowState) -> bool:
    """True when a row in ``old`` may be stored in ``new`` (the same state: an update only)."""
    return new == old or new in TRANSITIONS[old]


class RowTransitionError(LocalProtocolError):
    """A row was about to make a move :data:`TRANSITIONS` does not allow; nothing was stored."""


@dataclass(frozen=True, slots=True)
class Row:
    """What the receiver knows of one admitted message."""

    sender_instance_id: str
    sender_name: str
    message_id: str
    summary: str
    state: RowState
    admitted_at_ms: int
    updated_at_ms: int
    diagnostic: str | None = None
    goal_id: str | None = None
    #: The sender's session id as authenticated (with the instance id, its goal membership key).
    sender_session_id: str = ""
    #: The host confirmed the message entered its conversation (a ``submitted`` row only).
    delivered: bool = False

    @property
    def key(self) -> RowKey:
        """The row's key: (sender instance id, message id)."""
        return (self.sender_instance_id, self.message_id)

    @property
    def final(self) -> bool:
        """True once the message reached a state it never leaves."""
        return self.state in FINAL_STATES


class RowTable:
    """Rows by (sender instance id, message id), in admission order; at most ``max_final`` final
    rows, every pending row."""

    def __init__(self, *, max_final: int = MAX_CACHE_ENTRIES) -> None:
        self._max_final = max_final
        self._rows: OrderedDict[RowKey, Row] = OrderedDict()
        self._final: SenderShares[RowKey] = SenderShares()
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self) -> Iterator[RowKey]:
        return iter(self._rows)

    def get(self, key: RowKey) -> Row | None:
        """The row of ``key``, unless it was never made or has been evicted."""
        return self._rows.get(key)

    def values(self) -> tuple[Row, ...]:
        """Every row kept, oldest admission first."""
        return tuple(self._rows.values())

    @property
    def evicted(self) -> int:
        """Final rows evicted so far in this incarnation."""
        return self._evicted

    def put(self, row: Row, *, keep: RowKey | None = None) -> None:
        """Store a new row (last) or a row's new version (in place), if its move is allowed
        (else :class:`RowTransitionError`). When it has just become final and too many final
        rows are kept, evict one, never ``keep`` nor this one."""
        key = row.key
        old = self._rows.get(key)
        if old is None and row.state != INITIAL_STATE:
            raise RowTransitionError(f"a new row must be {INITIAL_STATE}, not {row.state}")
        if old is not None and not may_move(old.state, row.state):
            raise RowTransitionError(f"a row may not move from {old.state} to {row.state}")
        self._rows[key] = row
        if not row.final or key in self._final:
            return
        self._final.add(row.sender_instance_id, key)
        spare = (key,) if keep is None else (key, keep)
        # Over the bound only if nothing but spared rows is left (at most those two).
        for gone in self._final.make_room(self._max_final, row.sender_instance_id, spare=spare):
            del self._rows[gone]
            self._evicted += 1


__all__ = [
    "FINAL_STATES",
    "INITIAL_STATE",
    "PENDING_STATES",
    "TRANSITIONS",
    "Row",
    "RowKey",
    "RowState",
    "RowTable",
    "RowTransitionError",
    "may_move",
]
