"""The receiver's admission state machine (spec §4.1-4.2, spec §5, spec §10 items 9-14),
one rule per test.

Every reply goes through :func:`check_reply` (code == state == status, retryable only for load
refusals, peer only on ok, requestId echoed). Time only moves through the fake clock.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pi_cross_session._internal.protocol.bridge import BRIDGE_PREFIX
from pi_cross_session._internal.protocol.codes import ROW_STATES, Code
from pi_cross_session._internal.security.admission import (
    FINAL_STATES,
    Delivery,
    LatchReason,
    Phase,
    ResumeOutcome,
)
from pi_cross_session._internal.security.limits import MessageIdLedger, RateLimiter, TextDedup
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support.admission_kit import (
    RECEIVER,
    Kit,
    bridge_text,
    caller,
    check_reply,
    probe_caller,
    registration,
    status_query,
)

ALICE = caller("alice")
BOB = caller("bob")
CAROL = caller("carol")
LEGACY = caller("legacy", capable=False)

_ALICE_ID = registration("alice").instance_id
UNSAFE_ENDINGS = [e for e in TurnEnding if e is not TurnEnding.STOP]


def busy_kit(source: Provenance = Provenance.USER, **options: object) -> Kit:
    """A receiver in the middle of a turn started by ``source``."""
    kit = Kit(**options)  # type: ignore[arg-type]
    kit.turn_started(source)
    return kit


def latched_kit() -> Kit:
    kit = busy_kit()
    kit.turn_aborted()
    return kit


def settle(kit: Kit, ending: TurnEnding = TurnEnding.STOP) -> bool:
    """End the running turn; True when the runtime should flush one message."""
    return kit.turn_ended(ending)


def cycle(kit: Kit) -> None:
    """Our submission starts a turn, which then ends cleanly."""
    kit.turn_started(Provenance.UNKNOWN)
    kit.turn_ended(TurnEnding.STOP)


# -- step 2: an authenticated sender ---------------------------------------------------------------


def test_a_probe_caller_cannot_deliver() -> None:
    kit = Kit()
    reply = kit.send(probe_caller(), request_id="probe-msg")
    assert reply.status == Code.AUTHENTICATION_FAILED
    assert reply.request_id == "probe-msg"
    assert kit.host.attempts == 0


# -- step 3: blank text ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", " ", "\t\r\n", "\ufeff", "\u3000", "\u00a0\u2028\u2029", " \ufeff\u3000\u205f\v\f "],
    ids=["empty", "space", "tab-crlf", "bom", "ideographic", "nbsp-separators", "mixed"],
)
def test_blank_text_is_invalid_message(text: str) -> None:
    kit = Kit()
    assert kit.send(ALICE, text).status == Code.INVALID_MESSAGE
    assert kit.host.attempts == 0


@pytest.mark.parametrize("text", ["\x1c", "\x1f", "\x85", "\u200b"])
def test_python_only_whitespace_is_not_blank(text: str) -> None:
    # str.isspace() is true for U+001C..U+001F and U+0085, JS trim() leaves them (and U+200B).
    kit = Kit()
    assert kit.send(ALICE, text).status == Code.SUBMITTED


# -- step 4: inbound policy ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["refuse", "", "Accept"])
def test_refused_unless_inbound_is_accept(policy: str) -> None:
    kit = Kit(inbound=policy)
    assert kit.send(ALICE).status == Code.REFUSED
    assert kit.host.attempts == 0


# -- step 5: the latch -----------------------------------------------------------------------------


def test_stopped_while_latched() -> None:
    kit = latched_kit()
    assert kit.send(ALICE).status == Code.STOPPED
    settle(kit, TurnEnding.ABORTED)
    assert kit.admission.phase is Phase.IDLE
    assert kit.send(ALICE).status == Code.STOPPED  # idle does not reopen it
    assert kit.host.attempts == 0


# -- step 6: the timestamp window ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age_ms", "expected"),
    [
        (29_999, Code.SUBMITTED),
        (30_000, Code.SUBMITTED),
        (30_001, Code.EXPIRED),
        (-4_999, Code.SUBMITTED),
        (-5_000, Code.SUBMITTED),
        (-5_001, Code.EXPIRED),
    ],
)
def test_sent_at_window(age_ms: int, expected: Code) -> None:
    kit = Kit()
    assert kit.send(ALICE, age_ms=age_ms).status == expected


def test_a_wall_clock_jump_moves_the_window() -> None:
    kit = Kit()
    msg = kit.message(age_ms=0)
    kit.clock.step_wall(30_001)
    reply = kit.admission.admit(ALICE, msg)
    assert reply.status == Code.EXPIRED


# -- step 7: bridge envelopes ----------------------------------------------------------------------


@pytest.mark.parametrize("who", [ALICE, LEGACY], ids=["capable", "legacy"])
def test_a_valid_bridge_is_unsupported(who: object) -> None:
    kit = Kit()
    text = bridge_text(kit.clock.wall_ms())
    assert kit.send(who, text).status == Code.UNSUPPORTED  # type: ignore[arg-type]
    assert kit.host.attempts == 0


@pytest.mark.parametrize(
    "text",
    [
        BRIDGE_PREFIX + "not json",
        BRIDGE_PREFIX + "[]",
        BRIDGE_PREFIX,
    ],
)
def test_an_invalid_bridge_is_invalid_bridge(text: str) -> None:
    kit = Kit()
    assert kit.send(ALICE, text).status == Code.INVALID_BRIDGE


def test_an_expired_bridge_is_invalid_bridge() -> None:
    kit = Kit()
    text = bridge_text(kit.clock.wall_ms(), expiresAt=kit.clock.wall_ms())
    assert kit.send(ALICE, text).status == Code.INVALID_BRIDGE


def test_the_bridge_check_uses_the_admission_clock() -> None:
    kit = Kit()
    text = bridge_text(kit.clock.wall_ms(), expiresAt=kit.clock.wall_ms() + 1_000)
    msg = kit.message(text)
    kit.clock.advance(1.0)  # still within the 30 s message window, but the envelope expired
    assert kit.admission.admit(ALICE, msg).status == Code.INVALID_BRIDGE


@pytest.mark.parametrize(
    "text",
    ["cross-session:bridge:v1 {}", "cross-session:bridge:v2\n{}", " " + BRIDGE_PREFIX + "{}"],
)
def test_text_without_the_exact_prefix_is_ordinary(text: str) -> None:
    kit = Kit()
    assert kit.send(ALICE, text).status == Code.SUBMITTED


# -- step 8: the gate ------------------------------------------------------------------------------


def test_idle_capable_sender_is_submitted() -> None:
    kit = Kit()
    reply = kit.send(ALICE, "hello")
    assert reply.ok
    assert reply.status == Code.SUBMITTED
    assert [d.text for d in kit.host.submitted] == ["hello"]


def test_legacy_sender_to_idle_is_submitted() -> None:
    # spec §10 item 9, first half: old v1 semantics are kept for a safe idle receiver.
    kit = Kit()
    assert kit.send(LEGACY).status == Code.SUBMITTED
    assert kit.host.attempts == 1


@pytest.mark.parametrize("source", list(Provenance))
def test_legacy_sender_to_busy_is_busy_with_no_host_call(source: Provenance) -> None:
    # spec §10 item 9, second half.
    kit = busy_kit(source)
    assert kit.send(LEGACY).status == Code.BUSY
    assert kit.host.attempts == 0


def test_legacy_sender_to_preflight_is_busy_with_no_host_call() -> None:
    kit = Kit()
    kit.turn_preparing()
    assert kit.send(LEGACY).status == Code.BUSY
    assert kit.host.attempts == 0


def test_preflight_is_busy_for_a_capable_sender() -> None:
    kit = Kit()
    kit.turn_preparing()
    assert kit.admission.phase is Phase.PREFLIGHT
    assert kit.send(ALICE).status == Code.BUSY
    assert kit.host.attempts == 0


def test_our_own_submission_waiting_to_start_is_busy() -> None:
    kit = Kit()
    kit.send(ALICE)
    assert kit.admission.phase is Phase.PREFLIGHT
    assert kit.send(BOB).status == Code.BUSY
    assert kit.host.attempts == 1


def test_a_turn_of_unknown_source_is_busy_for_a_capable_sender() -> None:
    # spec §10 item 10: agent_start without a signal cannot be queued behind.
    kit = busy_kit(Provenance.UNKNOWN)
    assert not kit.admission.can_queue()
    assert kit.send(ALICE).status == Code.BUSY
    assert kit.host.attempts == 0


def test_a_host_that_says_busy_is_busy() -> None:
    kit = Kit()
    kit.host.idle = False
    assert kit.admission.phase is Phase.IDLE
    assert kit.send(ALICE).status == Code.BUSY
    assert kit.host.attempts == 0


def test_a_cancelled_turn_cannot_be_queued_behind() -> None:
    kit = busy_kit()
    kit.turn_aborted()
    assert not kit.admission.can_queue()


@pytest.mark.parametrize("source", [Provenance.USER, Provenance.PEER])
def test_busy_with_a_known_turn_queues_for_a_capable_sender(source: Provenance) -> None:
    kit = busy_kit(source)
    reply = kit.send(ALICE)
    assert reply.ok
    assert reply.status == Code.QUEUED
    assert kit.host.attempts == 0
    assert kit.admission.snapshot().queued == 1


# -- step 9: the queue bound -----------------------------------------------------------------------


@pytest.mark.parametrize(("queued", "expected"), [(49, Code.QUEUED), (50, Code.QUEUE_FULL)])
def test_queue_holds_50(queued: int, expected: Code) -> None:
    kit = busy_kit()
    kit.queue_from("alice", min(queued, 30))
    kit.queue_from("bob", queued - min(queued, 30))
    assert kit.send(CAROL).status == expected
    assert kit.admission.snapshot().queued == min(queued + 1, 50)


def test_second_sender_fills_the_queue_then_queue_full() -> None:
    # spec §10 item 12, second half: a second sender fills the queue to 50, then queue_full.
    kit = busy_kit()
    kit.queue_from("alice", 30)
    kit.queue_from("bob", 20)
    assert kit.send(BOB).status == Code.QUEUE_FULL
    assert kit.send(CAROL).status == Code.QUEUE_FULL
    assert kit.admission.snapshot().queued == 50


@pytest.mark.parametrize(("queued", "expected"), [(1, Code.QUEUED), (2, Code.QUEUE_FULL)])
def test_queue_bound_override(queued: int, expected: Code) -> None:
    kit = busy_kit(max_queued=2)
    kit.queue_from("alice", queued)
    assert kit.send(ALICE).status == expected


def test_a_message_never_jumps_ahead_of_a_pending_flush() -> None:
    # Between a safe settle and its flush the receiver is idle but older messages wait: a new
    # one is not submitted ahead of them (our FIFO choice); it is told to retry.
    kit = busy_kit(max_queued=2)
    queued = kit.queue_from("alice", 2)
    assert settle(kit) is True
    assert kit.admission.can_submit()
    assert kit.send(BOB).status == Code.BUSY
    assert kit.admission.flush_one() is not None
    assert kit.state("alice", queued[0]) == Code.SUBMITTED


# -- step 10: the lifetime budget ------------------------------------------------------------------


def test_budget_exhausted_at_zero() -> None:
    kit = Kit(budget=0)
    assert kit.send(ALICE).status == Code.BUDGET_EXHAUSTED
    assert kit.host.attempts == 0


@pytest.mark.parametrize(("budget", "expected"), [(1, Code.SUBMITTED), (2, Code.SUBMITTED)])
def test_the_last_unit_is_spendable(budget: int, expected: Code) -> None:
    kit = Kit(budget=budget)
    assert kit.send(ALICE).status == expected
    assert kit.admission.snapshot().remaining_budget == budget - 1


def test_256_admissions_then_budget_exhausted_and_resume_does_not_refill() -> None:
    # spec §10 item 13: a new incarnation admits 256, then budget_exhausted; nothing refills it.
    kit = Kit()
    senders = [caller(f"sender{n}") for n in range(9)]  # 9 x 30 tokens > 256
    for index in range(256):
        reply = kit.send(senders[index % 9], f"message {index}")
        assert reply.status == Code.SUBMITTED, (index, reply)
        cycle(kit)
    snap = kit.admission.snapshot()
    assert snap.remaining_budget == 0
    assert snap.admitted == 256
    assert len(snap.rows) == 256
    assert kit.send(caller("newcomer")).status == Code.BUDGET_EXHAUSTED
    outcome = kit.admission.resume()
    assert outcome.reopened
    assert kit.admission.snapshot().remaining_budget == 0
    assert kit.send(caller("newcomer")).status == Code.BUDGET_EXHAUSTED
    assert kit.host.attempts == 256


# -- step 11: duplicates and rate ------------------------------------------------------------------


def test_same_message_id_is_a_duplicate_even_after_31_seconds() -> None:
    kit = Kit()
    assert kit.send(ALICE, "first", message_id="same").status == Code.SUBMITTED
    cycle(kit)
    kit.clock.advance(31.0)
    assert kit.send(ALICE, "different text", message_id="same").status == Code.DUPLICATE
    assert kit.host.attempts == 1


def test_same_message_id_from_another_sender_is_new() -> None:
    kit = Kit()
    kit.send(ALICE, "one", message_id="same")
    cycle(kit)
    assert kit.send(BOB, "two", message_id="same").status == Code.SUBMITTED


@pytest.mark.parametrize(("elapsed", "expected"), [(29.5, Code.DUPLICATE), (30.0, Code.SUBMITTED)])
def test_same_text_new_id_is_a_duplicate_within_30_seconds(elapsed: float, expected: Code) -> None:
    kit = Kit()
    assert kit.send(ALICE, "echo").status == Code.SUBMITTED
    cycle(kit)
    kit.clock.advance(elapsed)
    assert kit.send(ALICE, "echo").status == expected


def test_a_b_a_across_settles_is_a_duplicate_and_budget_counts_only_admissions() -> None:
    # spec §10 item 11 and 13: remaining budget goes 256 -> 253 -> 252 in the reference's
    # dedup test.
    kit = Kit()
    for text in ("A", "B", "C"):
        assert kit.send(ALICE, text).status == Code.SUBMITTED
        cycle(kit)
    assert kit.admission.snapshot().remaining_budget == 253
    assert kit.send(ALICE, "A").status == Code.DUPLICATE
    assert kit.send(ALICE, "B").status == Code.DUPLICATE
    assert kit.admission.snapshot().remaining_budget == 253
    kit.clock.advance(30.0)
    assert kit.send(ALICE, "A").status == Code.SUBMITTED
    assert kit.admission.snapshot().remaining_budget == 252


def test_another_senders_identical_text_is_accepted() -> None:
    kit = Kit()
    kit.send(ALICE, "shared words")
    cycle(kit)
    assert kit.send(BOB, "shared words").status == Code.SUBMITTED


def test_the_goal_id_separates_text_dedup() -> None:
    kit = Kit()
    kit.send(ALICE, "scoped", goal_id="goal1")
    cycle(kit)
    assert kit.send(ALICE, "scoped", goal_id="goal2").status == Code.SUBMITTED
    cycle(kit)
    assert kit.send(ALICE, "scoped", goal_id="goal1").status == Code.DUPLICATE


def test_dedup_covers_only_the_text() -> None:
    kit = Kit()
    kit.send(ALICE, "body")
    cycle(kit)
    reply = kit.admission.admit(
        ALICE, kit.message("body", request_id="other-request", age_ms=1_234)
    )
    assert reply.status == Code.DUPLICATE


def test_one_sender_gets_30_queued_then_rate_limited() -> None:
    # spec §10 item 12, first half.
    kit = busy_kit()
    kit.queue_from("alice", 30)
    assert kit.send(ALICE).status == Code.RATE_LIMITED
    assert kit.send(BOB).status == Code.QUEUED


@pytest.mark.parametrize(("elapsed", "expected"), [(1.5, Code.RATE_LIMITED), (2.0, Code.QUEUED)])
def test_the_bucket_refills_one_token_per_two_seconds(elapsed: float, expected: Code) -> None:
    kit = busy_kit()
    kit.queue_from("alice", 30)
    kit.clock.advance(elapsed)
    assert kit.send(ALICE).status == expected


INJECTION_BUG = (
    "BUG: Admission.__init__ (admission.py:239-241) takes `rate or RateLimiter()`, and the same "
    "for message_ids and texts; the policy classes define __len__, so a fresh injected instance is "
    "falsy and silently replaced by a default one: keyword overrides never take effect"
)


def test_an_injected_rate_limiter_is_the_one_used() -> None:
    kit = busy_kit(rate=RateLimiter(capacity=2))
    kit.queue_from("alice", 2)
    assert kit.send(ALICE).status == Code.RATE_LIMITED


def test_an_injected_message_id_ledger_is_the_one_used() -> None:
    ledger = MessageIdLedger()
    kit = Kit(message_ids=ledger)
    kit.send(ALICE, message_id="m-1")
    assert ledger.seen(_ALICE_ID, "m-1")


def test_an_injected_text_dedup_is_the_one_used() -> None:
    kit = Kit(texts=TextDedup(window_s=2.0))
    kit.send(ALICE, "same")
    cycle(kit)
    kit.clock.advance(2.0)
    assert kit.send(ALICE, "same").status == Code.SUBMITTED


def test_a_policy_that_is_already_in_use_is_kept() -> None:
    # The flip side of the bug above: a non-empty instance is truthy, so it is kept.
    rate = RateLimiter(capacity=2)
    rate.commit("someone-else", 0.0)
    kit = busy_kit(rate=rate)
    kit.queue_from("alice", 2)
    assert kit.send(ALICE).status == Code.RATE_LIMITED


# -- the order of the checks (spec §5): the earlier check answers ----------------------------------


def _refuse_and_latched() -> tuple[Kit, Callable[[Kit], object]]:
    kit = latched_kit()
    kit.inbound = "refuse"
    return kit, lambda k: k.send(ALICE)


def _probe_and_blank() -> tuple[Kit, Callable[[Kit], object]]:
    return Kit(), lambda k: k.send(probe_caller(), " ")


def _blank_and_refused() -> tuple[Kit, Callable[[Kit], object]]:
    return Kit(inbound="refuse"), lambda k: k.send(ALICE, "\u3000")


def _latched_and_expired() -> tuple[Kit, Callable[[Kit], object]]:
    return latched_kit(), lambda k: k.send(ALICE, age_ms=60_000)


def _shut_down_and_expired() -> tuple[Kit, Callable[[Kit], object]]:
    kit = Kit()
    kit.admission.shutdown()
    return kit, lambda k: k.send(ALICE, age_ms=-60_000)


def _expired_and_invalid_bridge() -> tuple[Kit, Callable[[Kit], object]]:
    return Kit(), lambda k: k.send(ALICE, BRIDGE_PREFIX + "{", age_ms=31_000)


def _expired_and_busy() -> tuple[Kit, Callable[[Kit], object]]:
    kit = Kit()
    kit.turn_preparing()
    return kit, lambda k: k.send(ALICE, age_ms=30_001)


def _invalid_bridge_and_busy() -> tuple[Kit, Callable[[Kit], object]]:
    return busy_kit(), lambda k: k.send(LEGACY, BRIDGE_PREFIX + "{")


def _bridge_and_busy() -> tuple[Kit, Callable[[Kit], object]]:
    return busy_kit(), lambda k: k.send(LEGACY, bridge_text(k.clock.wall_ms()))


def _bridge_and_budget() -> tuple[Kit, Callable[[Kit], object]]:
    return Kit(budget=0), lambda k: k.send(ALICE, bridge_text(k.clock.wall_ms()))


def _busy_and_budget() -> tuple[Kit, Callable[[Kit], object]]:
    kit = Kit(budget=0)
    kit.turn_preparing()
    return kit, lambda k: k.send(ALICE)


def _busy_and_queue_full() -> tuple[Kit, Callable[[Kit], object]]:
    kit = busy_kit(max_queued=1)
    kit.queue_from("alice", 1)
    return kit, lambda k: k.send(LEGACY)


def _queue_full_and_budget() -> tuple[Kit, Callable[[Kit], object]]:
    kit = busy_kit(budget=2, max_queued=2)
    kit.queue_from("alice", 2)
    assert kit.admission.snapshot().remaining_budget == 0
    return kit, lambda k: k.send(BOB)


def _budget_and_duplicate() -> tuple[Kit, Callable[[Kit], object]]:
    kit = Kit(budget=1)
    kit.send(ALICE, "only", message_id="only")
    cycle(kit)
    return kit, lambda k: k.send(ALICE, "only", message_id="only")


def _duplicate_and_rate() -> tuple[Kit, Callable[[Kit], object]]:
    kit = busy_kit()
    ids = kit.queue_from("alice", 30)
    return kit, lambda k: k.send(ALICE, message_id=ids[0])


def _duplicate_text_and_rate() -> tuple[Kit, Callable[[Kit], object]]:
    kit = busy_kit()
    kit.send(ALICE, "same")
    kit.queue_from("alice", 29)
    return kit, lambda k: k.send(ALICE, "same")


ORDER_CASES = {
    "refused before stopped": (_refuse_and_latched, Code.REFUSED),
    "authentication before blank": (_probe_and_blank, Code.AUTHENTICATION_FAILED),
    "blank before refused": (_blank_and_refused, Code.INVALID_MESSAGE),
    "stopped before expired": (_latched_and_expired, Code.STOPPED),
    "shut down before expired": (_shut_down_and_expired, Code.STOPPED),
    "expired before invalid bridge": (_expired_and_invalid_bridge, Code.EXPIRED),
    "expired before busy": (_expired_and_busy, Code.EXPIRED),
    "invalid bridge before busy": (_invalid_bridge_and_busy, Code.INVALID_BRIDGE),
    "unsupported before busy": (_bridge_and_busy, Code.UNSUPPORTED),
    "unsupported before budget": (_bridge_and_budget, Code.UNSUPPORTED),
    "busy before budget": (_busy_and_budget, Code.BUSY),
    "busy before queue full": (_busy_and_queue_full, Code.BUSY),
    "queue full before budget": (_queue_full_and_budget, Code.QUEUE_FULL),
    "budget before duplicate": (_budget_and_duplicate, Code.BUDGET_EXHAUSTED),
    "duplicate id before rate": (_duplicate_and_rate, Code.DUPLICATE),
    "duplicate text before rate": (_duplicate_text_and_rate, Code.DUPLICATE),
}


@pytest.mark.parametrize(("setup", "expected"), ORDER_CASES.values(), ids=ORDER_CASES.keys())
def test_the_earlier_check_wins(
    setup: Callable[[], tuple[Kit, Callable[[Kit], object]]], expected: Code
) -> None:
    kit, act = setup()
    reply = act(kit)
    assert reply.status == expected  # type: ignore[attr-defined]


# -- refusals cost nothing -------------------------------------------------------------------------

REFUSAL_CASES = {
    "authentication_failed": (_probe_and_blank, Code.AUTHENTICATION_FAILED),
    "invalid_message": (_blank_and_refused, Code.INVALID_MESSAGE),
    "refused": (_refuse_and_latched, Code.REFUSED),
    "stopped": (_latched_and_expired, Code.STOPPED),
    "expired": (_expired_and_busy, Code.EXPIRED),
    "invalid_bridge": (_invalid_bridge_and_busy, Code.INVALID_BRIDGE),
    "unsupported": (_bridge_and_busy, Code.UNSUPPORTED),
    "busy": (_busy_and_budget, Code.BUSY),
    "queue_full": (_queue_full_and_budget, Code.QUEUE_FULL),
    "budget_exhausted": (_budget_and_duplicate, Code.BUDGET_EXHAUSTED),
    "duplicate": (_duplicate_and_rate, Code.DUPLICATE),
    "rate_limited": (lambda: _rate_limited(), Code.RATE_LIMITED),
}


def _rate_limited() -> tuple[Kit, Callable[[Kit], object]]:
    kit = busy_kit()
    kit.queue_from("alice", 30)
    return kit, lambda k: k.send(ALICE, "one too many")


@pytest.mark.parametrize(("setup", "expected"), REFUSAL_CASES.values(), ids=REFUSAL_CASES.keys())
def test_a_refusal_spends_nothing(
    setup: Callable[[], tuple[Kit, Callable[[Kit], object]]], expected: Code
) -> None:
    kit, act = setup()
    now = kit.clock.monotonic()
    alice = registration("alice").instance_id
    before = (
        kit.budget.remaining,
        kit.rate.tokens(alice, now),
        len(kit.rate),
        len(kit.ids),
        len(kit.texts),
        kit.admission.snapshot().rows,
        kit.admission.snapshot().admitted,
        kit.host.attempts,
    )
    reply = act(kit)
    assert reply.status == expected  # type: ignore[attr-defined]
    after = (
        kit.budget.remaining,
        kit.rate.tokens(alice, now),
        len(kit.rate),
        len(kit.ids),
        len(kit.texts),
        kit.admission.snapshot().rows,
        kit.admission.snapshot().admitted,
        kit.host.attempts,
    )
    assert after == before
    assert kit.admission.snapshot().refusals.get(expected, 0) >= 1


def test_a_refused_message_id_stays_usable() -> None:
    kit = busy_kit()
    assert kit.send(LEGACY, "x", message_id="retry-me").status == Code.BUSY
    settle(kit)
    assert kit.send(LEGACY, "x", message_id="retry-me").status == Code.SUBMITTED


# -- commit and submission -------------------------------------------------------------------------


def test_an_admission_spends_one_unit_one_token_and_remembers_id_and_text() -> None:
    kit = Kit()
    alice = registration("alice").instance_id
    kit.send(ALICE, "hi", message_id="m-1")
    now = kit.clock.monotonic()
    assert kit.budget.remaining == 255
    assert kit.rate.tokens(alice, now) == 29
    assert kit.ids.seen(alice, "m-1")
    assert len(kit.texts) == 1
    assert kit.admission.snapshot().admitted == 1


def test_submit_is_called_exactly_once_with_the_delivery() -> None:
    kit = Kit()
    kit.send(ALICE, "payload", message_id="m-9", goal_id="g")
    assert kit.host.attempts == 1
    (delivery,) = kit.host.submitted
    assert delivery == Delivery(
        message_id="m-9",
        sender=registration("alice"),
        text="payload",
        summary="a summary",
        sent_at=kit.clock.wall_ms(),
        goal_id="g",
    )


def test_a_submission_row_says_submitted_and_the_phase_waits_for_the_turn() -> None:
    kit = Kit()
    kit.send(ALICE, message_id="m-1")
    row = kit.row("alice", "m-1")
    assert row is not None
    assert row.state == Code.SUBMITTED
    assert row.final
    assert row.diagnostic
    assert kit.admission.phase is Phase.PREFLIGHT
    assert not kit.admission.can_submit()


def test_a_failing_submit_answers_injection_failed_and_latches() -> None:
    kit = Kit()
    kit.host.failure = RuntimeError("host said no")
    reply = kit.send(BOB, message_id="doomed")
    assert not reply.ok
    assert reply.status == Code.INJECTION_FAILED
    assert not reply.retryable
    assert kit.host.attempts == 1
    row = kit.row("bob", "doomed")
    assert row is not None
    assert row.state == Code.INJECTION_FAILED
    assert row.diagnostic is not None
    assert "host said no" in row.diagnostic
    assert kit.admission.stopped
    assert kit.latches == [LatchReason.SUBMIT_FAILED.value]
    snap = kit.admission.snapshot()
    assert snap.remaining_budget == 255  # nothing after the commit refunds
    assert snap.admitted == 1
    assert Code.INJECTION_FAILED not in snap.refusals  # admitted, so not counted as refused
    assert kit.send(BOB).status == Code.STOPPED


def test_a_failing_flush_marks_the_entry_and_latches() -> None:
    kit = busy_kit()
    first, second = kit.queue_from("alice", 2)
    assert settle(kit) is True
    kit.host.failure = ValueError("gone")
    row = kit.admission.flush_one()
    assert row is not None
    assert row.message_id == first
    assert row.state == Code.INJECTION_FAILED
    assert kit.state("alice", second) == Code.DROPPED_CANCELLED
    assert kit.admission.stopped
    assert kit.host.attempts == 1


# -- status queries --------------------------------------------------------------------------------


def test_the_same_sender_sees_its_queued_message() -> None:
    # spec §10 item 14.
    kit = busy_kit()
    (message_id,) = kit.queue_from("alice", 1)
    reply = kit.query(ALICE, message_id)
    assert reply.ok
    assert reply.status == Code.QUEUED


def test_the_diagnostic_travels_in_error_with_ok_true() -> None:
    kit = Kit()
    kit.send(ALICE, message_id="m-1")
    reply = kit.query(ALICE, "m-1")
    assert reply.ok
    assert reply.status == Code.SUBMITTED
    row = kit.row("alice", "m-1")
    assert row is not None
    assert reply.error == row.diagnostic is not None


def test_another_sender_sees_unknown() -> None:
    kit = busy_kit()
    (message_id,) = kit.queue_from("alice", 1)
    reply = kit.query(BOB, message_id)
    assert reply.ok
    assert reply.status == Code.UNKNOWN
    assert reply.error is None


def test_an_unknown_id_is_unknown() -> None:
    assert Kit().query(ALICE, "never-sent").status == Code.UNKNOWN


def test_a_status_query_costs_nothing() -> None:
    kit = busy_kit()
    (message_id,) = kit.queue_from("alice", 1)
    alice = registration("alice").instance_id
    now = kit.clock.monotonic()
    before = (kit.budget.remaining, kit.rate.tokens(alice, now), kit.admission.snapshot())
    for _ in range(100):
        kit.query(ALICE, message_id)
        kit.query(BOB, message_id)
    after = (kit.budget.remaining, kit.rate.tokens(alice, now), kit.admission.snapshot())
    assert after == before


def test_a_status_query_from_a_probe_is_invalid_frame() -> None:
    kit = Kit()
    reply = kit.admission.status(probe_caller(), status_query("x", request_id="q-1"))
    check_reply(reply, request_id="unknown")
    assert reply.status == Code.INVALID_FRAME


# -- queue expiry ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("elapsed", "state"), [(29.5, Code.QUEUED), (30.0, Code.EXPIRED)])
def test_a_queued_message_expires_after_30_seconds(elapsed: float, state: Code) -> None:
    # spec §10 item 14, last part.
    kit = busy_kit()
    (message_id,) = kit.queue_from("alice", 1)
    kit.clock.advance(elapsed)
    kit.admission.tick()
    assert kit.state("alice", message_id) == state
    assert kit.query(ALICE, message_id).status == state
    assert kit.host.attempts == 0


def test_expiry_counts_from_sent_at_when_that_is_earlier() -> None:
    kit = busy_kit()
    kit.send(ALICE, message_id="old", age_ms=20_000)
    kit.send(ALICE, message_id="new")
    assert kit.admission.next_deadline() == kit.clock.monotonic() + 10.0
    kit.clock.advance(9.5)
    kit.admission.tick()
    assert kit.state("alice", "old") == Code.QUEUED
    kit.clock.advance(0.5)
    kit.admission.tick()
    assert kit.state("alice", "old") == Code.EXPIRED
    assert kit.state("alice", "new") == Code.QUEUED
    assert kit.admission.snapshot().queued == 1


def test_a_future_sent_at_does_not_extend_the_ttl() -> None:
    kit = busy_kit()
    kit.send(ALICE, message_id="ahead", age_ms=-5_000)
    assert kit.admission.next_deadline() == kit.clock.monotonic() + 30.0


def test_next_deadline_reports_the_earliest() -> None:
    kit = busy_kit()
    assert kit.admission.next_deadline() is None
    start = kit.clock.monotonic()
    kit.send(ALICE, message_id="a")
    kit.clock.advance(4.0)
    kit.send(ALICE, message_id="b", age_ms=25_000)  # expires 5 s from now: start + 9
    kit.send(ALICE, message_id="c")
    assert kit.admission.next_deadline() == start + 9.0
    kit.clock.advance(5.0)
    kit.admission.tick()
    assert kit.admission.next_deadline() == start + 30.0


def test_next_deadline_includes_the_turn_start_grace() -> None:
    kit = Kit()
    kit.send(ALICE)
    assert kit.admission.next_deadline() == kit.clock.monotonic() + 5.0


def test_tick_before_any_deadline_changes_nothing() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 3)
    before = kit.admission.snapshot()
    kit.admission.tick()
    assert kit.admission.snapshot() == before


# -- flushing after a safe settle ------------------------------------------------------------------


@pytest.mark.parametrize("source", [Provenance.USER, Provenance.PEER])
def test_a_clean_end_of_a_known_turn_asks_for_a_flush(source: Provenance) -> None:
    kit = busy_kit(source)
    kit.queue_from("alice", 1)
    assert settle(kit) is True
    assert kit.admission.phase is Phase.IDLE
    assert not kit.admission.stopped


def test_nothing_queued_means_no_flush() -> None:
    kit = busy_kit()
    assert settle(kit) is False
    assert not kit.admission.stopped


def test_flush_one_submits_exactly_the_oldest() -> None:
    kit = busy_kit()
    first, second, third = kit.queue_from("alice", 3)
    assert settle(kit) is True
    row = kit.admission.flush_one()
    assert row is not None
    assert row.message_id == first
    assert row.state == Code.SUBMITTED
    assert [d.message_id for d in kit.host.submitted] == [first]
    assert kit.state("alice", second) == kit.state("alice", third) == Code.QUEUED
    # The next waits for the next safe settle, not for another flush call.
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 1


def test_the_queue_drains_one_per_safe_settle() -> None:
    kit = busy_kit()
    ids = kit.queue_from("alice", 3)
    flushed = []
    while settle(kit):
        row = kit.admission.flush_one()
        assert row is not None
        flushed.append(row.message_id)
        kit.turn_started(Provenance.UNKNOWN)  # our submission's turn: a peer turn
    assert flushed == ids
    assert kit.admission.snapshot().queued == 0


def test_flush_skips_and_marks_expired_entries() -> None:
    kit = busy_kit()
    kit.send(ALICE, message_id="old", age_ms=25_000)
    kit.send(ALICE, message_id="fresh")
    kit.clock.advance(6.0)
    assert settle(kit) is True
    row = kit.admission.flush_one()
    assert row is not None
    assert row.message_id == "fresh"
    assert kit.state("alice", "old") == Code.EXPIRED


def test_flush_with_only_expired_entries_submits_nothing() -> None:
    kit = busy_kit()
    (message_id,) = kit.queue_from("alice", 1)
    assert settle(kit) is True
    kit.clock.advance(30.0)
    assert kit.admission.flush_one() is None
    assert kit.state("alice", message_id) == Code.EXPIRED
    assert kit.host.attempts == 0
    assert kit.admission.can_submit()


def test_flush_does_nothing_while_a_turn_runs() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 1)
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 0


def test_flush_does_nothing_when_the_host_is_not_idle() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 1)
    assert settle(kit) is True
    kit.host.idle = False
    assert kit.admission.flush_one() is None
    assert kit.admission.snapshot().queued == 1


def test_flush_does_nothing_in_preflight() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 1)
    assert settle(kit) is True
    kit.turn_preparing()
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 0


def test_flush_does_nothing_when_latched() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 1)
    assert settle(kit) is True
    kit.turn_aborted()
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 0


def test_flush_does_nothing_after_shutdown() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 1)
    assert settle(kit) is True
    kit.admission.shutdown()
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 0


# -- turns and provenance --------------------------------------------------------------------------


@pytest.mark.parametrize("reported", list(Provenance))
def test_the_turn_after_our_submission_is_a_peer_turn(reported: Provenance) -> None:
    kit = Kit()
    kit.send(ALICE)
    kit.turn_started(reported)
    assert kit.admission.phase is Phase.BUSY
    assert kit.admission.can_queue()  # even UNKNOWN: we know we started it
    assert kit.send(BOB).status == Code.QUEUED


def test_a_host_retry_keeps_the_original_source() -> None:
    kit = busy_kit(Provenance.UNKNOWN)
    kit.turn_started(Provenance.USER)
    assert not kit.admission.can_queue()


def test_message_started_confirms_a_submitted_row() -> None:
    kit = Kit()
    kit.send(ALICE, message_id="m-1")
    before = kit.row("alice", "m-1")
    kit.clock.advance(1.0)
    kit.message_started("m-1", registration("alice").instance_id)
    after = kit.row("alice", "m-1")
    assert before is not None
    assert after is not None
    assert after.state == Code.SUBMITTED
    assert after.diagnostic != before.diagnostic
    assert after.updated_at_ms == before.updated_at_ms + 1_000


def test_message_started_ignores_rows_that_are_not_submitted() -> None:
    kit = busy_kit()
    (message_id,) = kit.queue_from("alice", 1)
    before = kit.row("alice", message_id)
    kit.message_started(message_id, registration("alice").instance_id)
    kit.message_started("nope", registration("alice").instance_id)
    assert kit.row("alice", message_id) == before


@pytest.mark.parametrize(("elapsed", "latched"), [(4.999, False), (5.0, True)])
def test_a_submission_that_starts_no_turn_within_5_seconds_latches(
    elapsed: float, latched: bool
) -> None:
    kit = busy_kit()
    first, second = kit.queue_from("alice", 2)
    assert settle(kit) is True
    kit.admission.flush_one()
    kit.clock.advance(elapsed)
    kit.admission.tick()
    assert kit.admission.stopped is latched
    assert kit.state("alice", first) == Code.SUBMITTED
    assert kit.state("alice", second) == (Code.DROPPED_CANCELLED if latched else Code.QUEUED)
    if latched:
        assert kit.latches == [LatchReason.NO_TURN_START.value]
        assert kit.admission.phase is Phase.IDLE
        assert kit.admission.next_deadline() is None


def test_a_turn_start_in_time_clears_the_grace_deadline() -> None:
    kit = Kit()
    kit.send(ALICE)
    kit.clock.advance(4.0)
    kit.turn_started(Provenance.UNKNOWN)
    kit.clock.advance(10.0)
    kit.admission.tick()
    assert not kit.admission.stopped


@pytest.mark.parametrize("ending", UNSAFE_ENDINGS)
def test_an_unknown_turn_ending_unsafely_latches(ending: TurnEnding) -> None:
    # spec §10 item 10: the turn we could not queue behind settles badly: stopped until resume.
    kit = busy_kit(Provenance.UNKNOWN)
    assert settle(kit, ending) is False
    assert kit.admission.stopped
    assert kit.send(ALICE).status == Code.STOPPED
    assert kit.admission.resume().reopened
    assert kit.send(ALICE).status == Code.SUBMITTED


def test_an_unknown_turn_ending_cleanly_latches() -> None:
    # Spec §5.5–5.6 and spec §10 item 10: a settle we cannot vouch for (unknown source) is unsafe.
    kit = busy_kit(Provenance.UNKNOWN)
    assert settle(kit, TurnEnding.STOP) is False
    assert kit.admission.stopped
    assert kit.latches == [LatchReason.UNSAFE_END.value]


@pytest.mark.parametrize("ending", UNSAFE_ENDINGS)
def test_an_unsafe_end_of_a_known_turn_latches_and_drops_the_queue(ending: TurnEnding) -> None:
    kit = busy_kit()
    ids = kit.queue_from("alice", 3)
    assert settle(kit, ending) is False
    assert kit.admission.stopped
    assert kit.latches == [LatchReason.UNSAFE_END.value]
    assert [kit.state("alice", m) for m in ids] == [Code.DROPPED_CANCELLED] * 3
    assert kit.admission.snapshot().queued == 0
    assert kit.host.attempts == 0


def test_an_abort_latches_and_drops_everything_queued() -> None:
    kit = busy_kit()
    alice_ids = kit.queue_from("alice", 2)
    bob_ids = kit.queue_from("bob", 1)
    kit.turn_aborted()
    snap = kit.admission.snapshot()
    assert snap.stopped
    assert snap.latch_reason == LatchReason.ABORT.value
    assert snap.queued == 0
    for who, ids in (("alice", alice_ids), ("bob", bob_ids)):
        for message_id in ids:
            assert kit.state(who, message_id) == Code.DROPPED_CANCELLED
            assert kit.query(who, message_id).status == Code.DROPPED_CANCELLED
    # The cancelled turn's own end never asks for a flush, even with a clean stop.
    assert settle(kit, TurnEnding.STOP) is False
    assert kit.host.attempts == 0


def test_the_latch_callback_runs_once_per_closing() -> None:
    kit = busy_kit()
    kit.turn_aborted()
    kit.turn_aborted()
    settle(kit, TurnEnding.ERROR)
    assert kit.latches == [LatchReason.ABORT.value]


# -- resume ----------------------------------------------------------------------------------------


def test_resume_is_refused_while_a_turn_runs() -> None:
    kit = latched_kit()
    outcome = kit.admission.resume()
    assert outcome.reopened is False
    assert outcome.dropped == 0
    assert outcome.reason
    assert kit.admission.stopped


def test_resume_is_refused_while_our_submission_waits_to_start() -> None:
    kit = Kit()
    kit.send(ALICE)
    outcome = kit.admission.resume()
    assert not outcome.reopened
    assert outcome.reason


def test_resume_is_refused_while_the_host_is_busy() -> None:
    kit = latched_kit()
    settle(kit, TurnEnding.ABORTED)
    kit.host.idle = False
    assert not kit.admission.resume().reopened
    kit.host.idle = True
    assert kit.admission.resume() == ResumeOutcome(reopened=True, dropped=0)


def test_resume_reopens_without_refilling() -> None:
    kit = Kit()
    kit.send(ALICE)
    kit.turn_started(Provenance.PEER)
    kit.turn_aborted()
    settle(kit, TurnEnding.ABORTED)
    budget = kit.admission.snapshot().remaining_budget
    outcome = kit.admission.resume()
    assert outcome.reopened
    snap = kit.admission.snapshot()
    assert not snap.stopped
    assert snap.latch_reason is None
    assert snap.phase is Phase.IDLE
    assert snap.remaining_budget == budget == 255
    assert kit.send(BOB).status == Code.SUBMITTED


def test_resume_drops_leftovers_as_user_reset_and_never_replays() -> None:
    kit = busy_kit()
    ids = kit.queue_from("alice", 2)
    assert settle(kit) is True  # idle, two still queued
    outcome = kit.admission.resume()
    assert outcome == ResumeOutcome(reopened=True, dropped=2, was_open=True)
    assert [kit.state("alice", m) for m in ids] == [Code.DROPPED_USER_RESET] * 2
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 0


def test_resume_after_shutdown_does_nothing() -> None:
    kit = Kit()
    kit.admission.shutdown()
    outcome = kit.admission.resume()
    assert not outcome.reopened
    assert outcome.reason
    assert kit.send(ALICE).status == Code.STOPPED


# -- shutdown --------------------------------------------------------------------------------------


def test_shutdown_drops_the_queue_and_stops_admission() -> None:
    kit = busy_kit()
    ids = kit.queue_from("alice", 3)
    assert kit.admission.shutdown() == 3
    assert [kit.state("alice", m) for m in ids] == [Code.DROPPED_SHUTDOWN] * 3
    snap = kit.admission.snapshot()
    assert snap.shut_down
    assert snap.queued == 0
    assert kit.send(BOB).status == Code.STOPPED
    assert kit.admission.shutdown() == 0  # idempotent
    assert kit.host.attempts == 0


def test_shutdown_forgets_the_turn_start_grace() -> None:
    kit = Kit()
    kit.send(ALICE)
    kit.admission.shutdown()
    assert kit.admission.next_deadline() is None
    kit.clock.advance(10.0)
    kit.admission.tick()
    assert kit.latches == []


# -- the status table ------------------------------------------------------------------------------


def test_rows_are_capped_by_evicting_final_rows_only() -> None:
    kit = Kit(max_rows=3)
    for message_id in ("s1", "s2", "s3"):
        kit.send(ALICE, message_id=message_id)
        cycle(kit)
    kit.send(ALICE, message_id="s4")
    kit.turn_started(Provenance.PEER)
    kit.queue_from("bob", 2)  # two pending rows: never evicted, and they take nobody's place
    snap = kit.admission.snapshot()
    assert len(snap.rows) == 5
    assert snap.evicted_rows == 1
    assert kit.query(ALICE, "s1").status == Code.UNKNOWN
    assert kit.query(ALICE, "s2").status == Code.SUBMITTED
    assert kit.query(ALICE, "s4").status == Code.SUBMITTED


def test_pending_rows_are_never_evicted() -> None:
    kit = busy_kit(max_rows=2)
    ids = kit.queue_from("alice", 4)
    snap = kit.admission.snapshot()
    assert len(snap.rows) == 4  # over the cap rather than lose a pending row
    assert snap.evicted_rows == 0
    assert [kit.state("alice", m) for m in ids] == [Code.QUEUED] * 4


@pytest.mark.parametrize(("admitted", "evicted"), [(2, 0), (3, 0), (4, 1)])
def test_row_cap_boundary(admitted: int, evicted: int) -> None:
    kit = Kit(max_rows=3)
    for _ in range(admitted):
        assert kit.send(ALICE).status == Code.SUBMITTED
        cycle(kit)
    snap = kit.admission.snapshot()
    assert snap.evicted_rows == evicted
    assert len(snap.rows) == admitted - evicted


def test_every_row_state_is_a_row_state() -> None:
    assert FINAL_STATES <= ROW_STATES
    pending = ROW_STATES - FINAL_STATES
    assert pending == {Code.ACCEPTED, Code.QUEUED}


# -- snapshot --------------------------------------------------------------------------------------


def test_snapshot_of_a_fresh_receiver() -> None:
    snap = Kit().admission.snapshot()
    assert snap.phase is Phase.IDLE
    assert not snap.stopped
    assert snap.latch_reason is None
    assert not snap.shut_down
    assert (snap.remaining_budget, snap.total_budget) == (256, 256)
    assert (snap.queued, snap.max_queued) == (0, 50)
    assert snap.rows == ()
    assert snap.evicted_rows == 0
    assert snap.refusals == {}
    assert snap.admitted == 0


def test_snapshot_counts_and_states() -> None:
    kit = busy_kit()
    kit.queue_from("alice", 2)
    kit.send(LEGACY)
    kit.send(LEGACY)
    kit.send(ALICE, " ")
    snap = kit.admission.snapshot()
    assert snap.phase is Phase.BUSY
    assert snap.queued == 2
    assert snap.admitted == 2
    assert snap.remaining_budget == 254
    assert snap.refusals == {Code.BUSY: 2, Code.INVALID_MESSAGE: 1}
    assert [r.state for r in snap.rows] == [Code.QUEUED, Code.QUEUED]
    assert snap.rows[0].sender_name == "alice"
    kit.turn_aborted()
    snap = kit.admission.snapshot()
    assert snap.stopped
    assert snap.latch_reason == LatchReason.ABORT.value


def test_snapshot_recent_limits_rows_to_the_newest() -> None:
    kit = busy_kit()
    ids = kit.queue_from("alice", 4)
    assert [r.message_id for r in kit.admission.snapshot(recent=2).rows] == ids[-2:]
    assert kit.admission.snapshot(recent=0).rows == ()
    assert len(kit.admission.snapshot(recent=10).rows) == 4


def test_snapshot_is_a_copy() -> None:
    kit = busy_kit()
    kit.send(LEGACY)
    snap = kit.admission.snapshot()
    snap.refusals.clear()
    assert kit.admission.snapshot().refusals == {Code.BUSY: 1}


# -- replies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "expected"),
    [*ORDER_CASES.values(), (lambda: (Kit(), lambda k: k.send(ALICE)), Code.SUBMITTED)],
)
def test_every_reply_has_the_wire_shape(
    setup: Callable[[], tuple[Kit, Callable[[Kit], object]]], expected: Code
) -> None:
    kit, act = setup()
    reply = act(kit)  # Kit.send already ran check_reply
    assert reply.status == expected  # type: ignore[attr-defined]
    assert reply.to_wire()["code"] == reply.to_wire()["state"] == expected  # type: ignore[attr-defined]


def test_only_load_refusals_are_retryable() -> None:
    kit = busy_kit(max_queued=1)
    assert kit.send(LEGACY).retryable is True  # busy
    kit.queue_from("alice", 1)
    assert kit.send(BOB).retryable is True  # queue_full
    assert kit.send(ALICE, " ").retryable is False
    rated = busy_kit()
    rated.queue_from("alice", 30)
    reply = rated.send(ALICE)
    assert reply.status == Code.RATE_LIMITED
    assert reply.retryable is True


def test_ok_replies_name_this_receiver() -> None:
    reply = Kit().send(ALICE)
    assert reply.peer_identity() == RECEIVER.peer_identity()


# -- a host that reports events from inside submit -------------------------------------------------


def test_a_turn_started_inside_submit_is_our_peer_turn() -> None:
    kit = Kit()
    kit.host.during_submit = lambda _: kit.turn_started(Provenance.USER)
    assert kit.send(ALICE).status == Code.SUBMITTED
    assert kit.admission.phase is Phase.BUSY
    assert kit.send(BOB).status == Code.QUEUED  # queueable: a known (peer) turn is running
    settle(kit)
    kit.clock.advance(5.0)
    kit.admission.tick()
    assert not kit.admission.stopped


def test_a_confirmation_inside_submit_is_kept() -> None:
    kit = Kit()
    kit.host.during_submit = lambda d: kit.message_started(d.message_id, d.sender.instance_id)
    kit.send(ALICE, message_id="m-1")
    row = kit.row("alice", "m-1")
    assert row is not None
    assert row.diagnostic == "The host confirmed the message entered the conversation"


def test_the_grace_latch_updates_the_submitted_diagnostic() -> None:
    kit = Kit()
    kit.send(ALICE, message_id="m-1")
    before = kit.row("alice", "m-1")
    kit.clock.advance(5.0)
    kit.admission.tick()
    after = kit.row("alice", "m-1")
    assert before is not None
    assert after is not None
    assert kit.admission.stopped
    assert after.diagnostic != before.diagnostic


# -- the row observer ------------------------------------------------------------------------------


def test_the_row_observer_sees_every_state_in_order() -> None:
    seen: list[tuple[str, str]] = []
    kit = busy_kit(on_row=lambda row: seen.append((row.message_id, row.state)))
    kit.send(ALICE, message_id="q")
    assert settle(kit) is True
    kit.admission.flush_one()
    kit.turn_started(Provenance.UNKNOWN)
    kit.send(BOB, message_id="late")
    kit.turn_aborted()
    assert seen == [
        ("q", Code.ACCEPTED),
        ("q", Code.QUEUED),
        ("q", Code.SUBMITTED),
        ("late", Code.ACCEPTED),
        ("late", Code.QUEUED),
        ("late", Code.DROPPED_CANCELLED),
    ]


def test_the_row_observer_sees_nothing_for_refusals() -> None:
    seen: list[str] = []
    kit = busy_kit(on_row=lambda row: seen.append(row.state))
    kit.send(LEGACY)
    kit.send(ALICE, " ")
    assert seen == []


def test_a_failing_row_observer_never_disturbs_admission(caplog: pytest.LogCaptureFixture) -> None:
    def explode(row: object) -> None:
        raise RuntimeError("observer broke")

    kit = Kit(on_row=explode)
    reply = kit.send(ALICE, message_id="m-1")
    assert reply.status == Code.SUBMITTED
    assert kit.state("alice", "m-1") == Code.SUBMITTED
    assert not kit.admission.stopped
    assert "observer" in caplog.text
