"""The outcome enums say exactly the words scripts read, and follow the vocabulary they mirror."""

from __future__ import annotations

import json

from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.plugin.reports import DeliveryOutcome, SendOutcome, SendReport
from pi_cross_session._internal.protocol.codes import (
    FINAL_ROW_STATES,
    OK_RECEIPTS,
    Code,
    SenderState,
)


def test_a_send_outcome_is_a_receipt_or_a_sender_state() -> None:
    assert {outcome.value for outcome in SendOutcome} == (
        {code.value for code in OK_RECEIPTS} | {state.value for state in SenderState}
    )
    assert {outcome for outcome in SendOutcome if outcome.admitted} == {
        SendOutcome.SUBMITTED,
        SendOutcome.QUEUED,
        SendOutcome.ACCEPTED,
    }


def test_a_delivery_outcome_names_every_way_a_message_can_end_undelivered() -> None:
    # A new final row state in the vocabulary must become a delivery outcome too.
    assert {o.value for o in DeliveryOutcome if o.ended_undelivered} == {
        state.value for state in FINAL_ROW_STATES - {Code.SUBMITTED}
    }
    assert [o.value for o in DeliveryOutcome if not o.ended_undelivered] == [
        "delivered",
        "not_confirmed",
        "unconfirmable",
        "unknown",
        "invalid_receipt",
    ]


def test_every_delivery_outcome_has_a_clause() -> None:
    for outcome in DeliveryOutcome:
        text = sending.delivery_text(outcome)
        if outcome.ended_undelivered:
            assert text == f"it will not be delivered: it ended {outcome.value} at the receiver"
        else:
            assert text == sending.DELIVERY_MEANINGS[outcome]


def report(**fields: object) -> SendReport:
    base: dict[str, object] = {"ok": True, "status": "submitted", "message_id": "m", "target": None}
    return SendReport(**{**base, **fields})  # type: ignore[arg-type]


def test_the_outcome_of_a_report() -> None:
    assert report().outcome is SendOutcome.SUBMITTED
    assert report(status=Code.QUEUED).outcome is SendOutcome.QUEUED
    refused = report(ok=False, status=Code.BUSY, state=SenderState.REFUSED)
    assert refused.outcome is SendOutcome.REFUSED
    unknown = report(ok=False, status=Code.TIMEOUT, state=SenderState.RECEIPT_UNKNOWN)
    assert unknown.outcome is SendOutcome.RECEIPT_UNKNOWN
    # An answered status question reports a message state, not a receipt.
    assert report(status=Code.EXPIRED).outcome is None


def test_the_details_carry_the_same_words_as_plain_strings_did() -> None:
    typed = report(delivery=DeliveryOutcome.NOT_CONFIRMED)
    plain = report(delivery="not_confirmed")
    assert json.dumps(sending.send_details(typed)) == json.dumps(sending.send_details(plain))
    assert sending.send_details(typed)["delivery"] == "not_confirmed"
    assert sending.send_result(typed) == sending.send_result(plain)
    failed = report(ok=False, status=Code.TIMEOUT, state=SenderState.RECEIPT_UNKNOWN)
    assert sending.send_details(failed)["state"] == "receipt_unknown"
    assert json.dumps(sending.send_details(failed)).count('"receipt_unknown"') == 1
