"""The sender's half of the goal budget rules (goal-scoped-v1 §2.4): confirmed receiver/goal pairs.

A scoped send that a receiver took (``submitted`` or ``queued``) refunds its budget unit and
confirms the pair; at zero budget only a confirmed pair may still send, one attempt at a time.
:class:`GoalConfirmations` keeps those pairs, bounded, and :class:`Reservation` is one attempt's
claim on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pi_cross_session._internal.protocol.codes import OK_RECEIPTS, Code
from pi_cross_session._internal.security.goals.bounds import MAX_GOAL_CONFIRMATIONS
from pi_cross_session._internal.security.goals.ids import valid_id, valid_instance_id
from pi_cross_session._internal.security.shares import SenderShares


@dataclass(frozen=True, slots=True)
class Reservation:
    """One outbound attempt's claim on the budget.

    ``charged``: the caller spends one budget unit now. ``key`` is ``<receiver>:<goalId>`` for a
    scoped send. ``epoch`` ties it to the confirmation set it came from, so a settle after a
    reset (reload, shutdown) neither confirms nor refunds.
    """

    key: str | None
    charged: bool
    epoch: int


class GoalConfirmations:
    """Receiver/goal pairs whose last scoped send was taken (``submitted``/``queued``).

    At zero budget a confirmed pair may still send, uncharged, one attempt at a time: reserving
    removes the key for the flight, and only a good receipt puts it back. Any other outcome
    (refusal, unknown receipt) removes it, so a forged or ended goal cannot keep sending for free.
    At most ``max_keys`` are kept. Past the bound the confirming receiver gives up its own least
    recently confirmed key; a receiver holding no other takes that of the receiver holding the
    most (:class:`~pi_cross_session._internal.security.shares.SenderShares`), so the receipts of one
    receiver (for as many goal ids as it makes us send to) never push out another receiver's pairs.
    """

    def __init__(self, *, max_keys: int = MAX_GOAL_CONFIRMATIONS) -> None:
        self._max_keys = max_keys
        self._keys: SenderShares[str] = SenderShares()
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def has_goal(self, goal_id: str) -> bool:
        """True when some receiver confirmed ``goal_id`` (so a send at zero budget may go on)."""
        return any(key.endswith(f":{goal_id}") for key in self._keys)

    @staticmethod
    def key(receiver_instance_id: str, goal_id: str) -> str:
        """The confirmation key of a receiver and a goal."""
        return f"{receiver_instance_id}:{goal_id}"

    def reserve(
        self, receiver_instance_id: str, goal_id: str | None, budget_left: int
    ) -> Reservation | Code:
        """Claim the right to attempt one send, or the refusal code (before any connection)."""
        if goal_id is not None and not valid_id(goal_id):
            return Code.INVALID_GOAL
        if goal_id is not None and not valid_instance_id(receiver_instance_id):
            return Code.INVALID_TARGET
        key = None if goal_id is None else self.key(receiver_instance_id, goal_id)
        if budget_left > 0:
            return Reservation(key, charged=True, epoch=self._epoch)
        if key is None or key not in self._keys:
            return Code.BUDGET_EXHAUSTED
        self._keys.remove(key)  # one free attempt in flight per pair: no concurrent fan-out
        return Reservation(key, charged=False, epoch=self._epoch)

    def settle(self, reservation: Reservation, outcome: str) -> bool:
        """Record how the attempt ended; returns True when the caller refunds the charged unit."""
        if reservation.key is None or reservation.epoch != self._epoch:
            return False
        if outcome in OK_RECEIPTS and outcome != Code.ACCEPTED:
            key = reservation.key
            receiver = key.partition(":")[0]  # see :meth:`key`; an instance id has no colon
            self._keys.add(receiver, key)
            self._keys.make_room(self._max_keys, receiver, spare=(key,))
            return reservation.charged
        # A refusal, an unknown receipt or an ``accepted`` a scoped send can never get.
        self._keys.remove(reservation.key)
        return False

    def clear(self) -> None:
        """Forget every confirmation (``session_start``, ``session_shutdown``)."""
        self._keys = SenderShares()
        self._epoch += 1


__all__ = ["GoalConfirmations", "Reservation"]
