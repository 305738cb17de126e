"""Capability names and negotiation.

A capability is a string both sides list (the sender in its hello, the receiver in every response).
A feature that changes what crosses the wire is used only when the other side listed it; a missing
capability never leads to a silent fallback with weaker guarantees.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: The receiver queues only for senders that understand ``queued`` (a v1 base feature).
CANCEL_SAFE_QUEUE: Final = "cancel-safe-queue-v1"
#: Goal-scoped peer grants (``goalId`` on message frames).
GOAL_SCOPED_PEER: Final = "goal-scoped-peer-v1"

#: Delivery receipts (ours, not the reference's): a status query may answer ``delivered`` once the
#: receiving host confirmed the message entered its conversation. Only asked of receivers that
#: advertise it, and only given to senders that advertised it: everyone else sees v1 words only.
DELIVERY_RECEIPTS: Final = "delivery-receipts-v1"

#: What this implementation advertises, in the order it is written on the wire (the sender in its
#: hello, the receiver in every response): the reference's capabilities first, then ours. Every
#: session enforces goal grants (membership, revocation, the gate), so goal scope is advertised by
#: all of them; a receiver with no goal answers every scoped message ``goal_not_authorized``.
ADVERTISED: Final[tuple[str, ...]] = (CANCEL_SAFE_QUEUE, GOAL_SCOPED_PEER, DELIVERY_RECEIPTS)


def supports(capabilities: Iterable[str] | None, name: str) -> bool:
    """True when ``name`` is in a peer's advertised ``capabilities`` (absent means none)."""
    return capabilities is not None and name in capabilities


def can_queue(capabilities: Iterable[str] | None) -> bool:
    """A sender that lacks the safe-queue capability must never be told ``queued``."""
    return supports(capabilities, CANCEL_SAFE_QUEUE)


def can_report_delivery(capabilities: Iterable[str] | None) -> bool:
    """The peer understands (as a sender) or gives (as a receiver) ``delivered``."""
    return supports(capabilities, DELIVERY_RECEIPTS)


def can_scope_to_goal(capabilities: Iterable[str] | None) -> bool:
    """A goal-scoped message may only be written to a receiver that advertised goal scope."""
    return supports(capabilities, GOAL_SCOPED_PEER)
