"""The accounting table the goal tests rely on (``tests.support.wire_session``): which row states
a message may reach after each receipt. Goal revocation adds exactly one legitimate ending, and
only for a message that waited in the queue."""

from __future__ import annotations

from pi_cross_session._internal.protocol.codes import (
    OK_RECEIPTS,
    PENDING_ROW_STATES,
    ROW_STATES,
    Code,
)
from tests.support.wire_session import _AFTER_RECEIPT


def test_only_a_queued_message_may_end_dropped_goal_revoked() -> None:
    assert Code.DROPPED_GOAL_REVOKED in _AFTER_RECEIPT[Code.QUEUED]
    # A submitted message already reached the host: revoking its goal cannot un-submit it.
    assert _AFTER_RECEIPT[Code.SUBMITTED] == {Code.SUBMITTED}
    assert Code.DROPPED_GOAL_REVOKED not in _AFTER_RECEIPT[Code.INJECTION_FAILED]


def test_the_table_covers_every_receipt_our_receiver_gives_and_only_row_states() -> None:
    # ``accepted`` is never a receipt of ours (no in-process listener), least of all for a
    # scoped message (goal-scoped-v1 §2.3 step 19).
    assert set(_AFTER_RECEIPT) == (OK_RECEIPTS - {Code.ACCEPTED}) | {Code.INJECTION_FAILED}
    for receipt, states in _AFTER_RECEIPT.items():
        assert states <= ROW_STATES, receipt
    # Only a queued receipt may still be pending when a test looks.
    pending = {r for r, states in _AFTER_RECEIPT.items() if states & PENDING_ROW_STATES}
    assert pending == {Code.QUEUED}
