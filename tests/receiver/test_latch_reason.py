"""Why a closed inbox is closed (issue 24, item 2): the latch's record, and what a refused sender
is told.

Admission keeps, for each closing, the trigger, how the host said the turn ended and the peer
message whose turn it was; the local user sees all of it (rendered by
``plugin/render/receiving.py``), a sender only the trigger and the stop reason.
"""

from __future__ import annotations

import pytest

from pi_cross_session._internal.plugin.render import receiving
from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.security.admission import LatchReason, TurnOutcome
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support.admission_kit import Kit, caller, registration

ALICE = caller("alice")
BOB = caller("bob")


def peer_turn(kit: Kit, message_id: str = "m-alice") -> None:
    """Alice's message is submitted, starts a turn and enters the conversation."""
    assert kit.send(ALICE, message_id=message_id).status == Code.SUBMITTED
    kit.turn_started(Provenance.UNKNOWN)
    kit.message_started(message_id, registration("alice").instance_id)


def test_a_failed_peer_turn_keeps_its_message_sender_and_the_host_words() -> None:
    kit = Kit()
    peer_turn(kit)
    kit.admission.note_turn_outcome(TurnOutcome("error", "Connection error."))
    kit.turn_ended(TurnEnding.ERROR)
    latch = kit.admission.latch
    assert latch is not None
    assert latch.reason is LatchReason.UNSAFE_END
    assert latch.message_id == "m-alice"
    assert latch.sender_instance_id == registration("alice").instance_id
    assert latch.sender_name == "alice"
    assert latch.outcome == TurnOutcome("error", "Connection error.")
    assert kit.admission.snapshot().latch == latch


def test_a_refused_sender_is_told_the_trigger_and_stop_reason_only() -> None:
    kit = Kit()
    peer_turn(kit)
    kit.admission.note_turn_outcome(TurnOutcome("error", "401: key sk-secret rejected"))
    kit.turn_ended(TurnEnding.ERROR)
    reply = kit.send(BOB)
    assert reply.status == Code.STOPPED
    assert reply.error == (
        f"{refusal_text(Code.STOPPED)}: a turn ended without a clean stop (stop reason: error)"
    )
    assert "m-alice" not in str(reply.error)
    assert "sk-secret" not in str(reply.error)


def test_a_refusal_while_shut_down_claims_no_latch() -> None:
    kit = Kit()
    kit.admission.shutdown()
    reply = kit.send(BOB)
    assert reply.status == Code.STOPPED
    assert reply.error == refusal_text(Code.STOPPED)


@pytest.mark.hostile
def test_a_hostile_stop_reason_is_escaped_and_cut_on_the_wire() -> None:
    kit = Kit()
    peer_turn(kit)
    kit.admission.note_turn_outcome(TurnOutcome("err\x1b[2J\nor" + "x" * 500, None))
    kit.turn_ended(TurnEnding.OTHER)
    error = str(kit.send(BOB).error)
    assert "\x1b" not in error
    assert "\n" not in error
    assert "(stop reason: err\\x1b[2J\\x0aor" in error
    assert len(error) < 200


@pytest.mark.hostile
def test_the_host_words_are_escaped_and_cut_for_the_local_user() -> None:
    kit = Kit()
    peer_turn(kit)
    kit.admission.note_turn_outcome(TurnOutcome("error", "bad\x1b]0;t\x07\n" + "y" * 5000))
    kit.turn_ended(TurnEnding.ERROR)
    latch = kit.admission.latch
    assert latch is not None
    assert latch.outcome is not None
    assert len(str(latch.outcome.error)) == 1000  # kept bounded
    shown = receiving.closed_reason(latch)
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "\n" not in shown
    assert 'stop reason error: "bad\\x1b]0;t\\x07 y' in shown
    assert len(shown) < 600


def test_a_submission_that_starts_no_turn_names_its_message() -> None:
    kit = Kit()
    assert kit.send(ALICE, message_id="late").status == Code.SUBMITTED
    kit.clock.advance(5.0)
    kit.admission.tick()
    latch = kit.admission.latch
    assert latch is not None
    assert latch.reason is LatchReason.NO_TURN_START
    assert latch.message_id == "late"
    assert latch.outcome is None
    assert receiving.closed_reason(latch) == (
        f"message late from alice [{registration('alice').ref}] did not start a turn within 5 s"
    )


def test_a_failed_submission_names_its_message_and_the_host_error() -> None:
    kit = Kit()
    kit.host.failure = RuntimeError("host said no")
    kit.send(BOB, message_id="doomed")
    latch = kit.admission.latch
    assert latch is not None
    assert latch.reason is LatchReason.SUBMIT_FAILED
    assert latch.message_id == "doomed"
    assert latch.outcome == TurnOutcome(None, "host said no")


def test_an_abort_of_a_user_turn_names_no_message() -> None:
    kit = Kit()
    kit.turn_started(Provenance.USER)
    kit.admission.note_turn_outcome(TurnOutcome("aborted", "Operation aborted"))
    kit.turn_aborted()
    latch = kit.admission.latch
    assert latch is not None
    assert latch.reason is LatchReason.ABORT
    assert latch.message_id is None
    assert receiving.closed_reason(latch) == (
        'a turn was aborted (the host reported stop reason aborted: "Operation aborted")'
    )


def test_the_first_closing_is_the_one_kept_and_the_next_turn_forgets_the_last() -> None:
    kit = Kit()
    peer_turn(kit)
    kit.admission.note_turn_outcome(TurnOutcome("aborted", None))
    kit.turn_aborted()
    kit.admission.note_turn_outcome(TurnOutcome("aborted", None))
    kit.turn_ended(TurnEnding.ABORTED)
    latch = kit.admission.latch
    assert latch is not None
    assert latch.reason is LatchReason.ABORT
    assert latch.message_id == "m-alice"
    assert kit.admission.resume().reopened
    assert kit.admission.latch is None
    # A user turn after it fails: the earlier peer message is not blamed.
    kit.turn_started(Provenance.USER)
    kit.turn_ended(TurnEnding.ERROR)
    latch = kit.admission.latch
    assert latch is not None
    assert latch.message_id is None
    assert latch.outcome is None


def test_a_clean_stop_nobody_vouched_for_says_so() -> None:
    kit = Kit()
    kit.turn_started(Provenance.UNKNOWN)
    kit.admission.note_turn_outcome(TurnOutcome("stop", None))
    kit.turn_ended(TurnEnding.STOP)
    latch = kit.admission.latch
    assert latch is not None
    assert receiving.closed_reason(latch) == (
        "a turn ended without anything showing who started it (the host reported stop reason stop)"
    )


def test_resume_on_an_open_inbox_says_it_was_open() -> None:
    kit = Kit()
    outcome = kit.admission.resume()
    assert outcome.was_open
    text = receiving.resume_text(outcome)
    assert text.startswith("The inbox was already open")
    assert "reopened" not in text


def test_the_status_says_how_this_host_reopens() -> None:
    kit = Kit()
    kit.turn_started(Provenance.USER)
    kit.turn_aborted()
    snapshot = kit.admission.snapshot()
    text = receiving.status_text(snapshot, reopen=receiving.REOPEN_CLI_INBOX)
    assert "; inbox closed until its user reopens it: a turn was aborted" in text
    assert text.endswith(f"To reopen the inbox: {receiving.REOPEN_CLI_INBOX}.")
    assert "/cross-session-resume" not in text
