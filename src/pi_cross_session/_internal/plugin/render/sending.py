"""What a sender reads about a send: the one-line result of ``send_pi_message`` and
``pi-cross-session send``, what a status query learned, the structured details for tool results
and ``--json``, and what each receipt and delivery outcome means."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pi_cross_session._internal.plugin.render.listings import address
from pi_cross_session._internal.plugin.render.peer_text import (
    shown_diagnostic,
    shown_message_id,
    shown_word,
)
from pi_cross_session._internal.plugin.render.remote_plane import remote_machine, remote_refusal
from pi_cross_session._internal.plugin.reports import DeliveryOutcome, SendOutcome, SendReport
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.codes import REMOTE_NOT_SENT, SenderState


def library_send_purpose(target: str) -> str:
    """What a library send notes on the command-line identity it holds (``doctor`` and an
    invocation waiting for that identity show it)."""
    return f"library send to {sanitize.line(target, 80)}"


def unsafe_lock(path: str, problem: str, *, owner: int | None, error: str | None) -> str:
    """Why a command-line identity's lock file was left alone (its path escaped); ``problem``
    is a :class:`~pi_cross_session._internal.plugin.cli_identity.LockProblem`."""
    where = f"its lock file {sanitize.line(path)}"
    if problem == "symlink":
        return f"{where} is a symbolic link"
    if problem == "not_a_file":
        return f"{where} is not a regular file"
    if problem == "foreign_owner":
        return f"{where} belongs to another user (uid {owner})"
    return f"{where} cannot be used ({sanitize.line(error or 'unknown error', 120)})"


#: What to do about an unsafe lock file.
UNSAFE_LOCK_FIX: Final = (
    "remove it if you did not put it there (it is made again, safely, when needed)"
)


def identities_unusable(reasons_by_slot: Sequence[tuple[int, str]]) -> str:
    """No command-line identity has a lock file safe to use: which, and why (each reason as
    :func:`unsafe_lock` says it)."""
    reasons = "; ".join(f"identity {slot}: {reason}" for slot, reason in reasons_by_slot)
    return (
        f"no command-line identity can be used ({reasons}); remove those files if you did not "
        "put them there (each is made again, safely, when needed)"
    )


#: ``next`` of a send that ended for lack of a kernel resource before anything was written.
NEXT_SHORT_OF_RESOURCES: Final = (
    "Nothing was sent: this process ran out of file descriptors (or buffers, or memory); "
    "retry once it holds fewer open files"
)


def listing_short(shortage: str) -> str:
    """The detail of a send whose listing failed for lack of a kernel resource."""
    return f"could not list the sessions: this process is out of resources ({shortage})"


def target_unchecked(unchecked: int) -> str:
    """The detail of a send whose target was not found while sessions went unchecked."""
    return (
        f"the target was not among the sessions checked, and {unchecked} could not be checked: "
        "this process is out of file descriptors (or buffers, or memory)"
    )


#: What each delivery outcome means, in the words the model and the user read.
DELIVERY_MEANINGS: Final[Mapping[DeliveryOutcome, str]] = {
    DeliveryOutcome.DELIVERED: "the receiving session confirmed it entered its conversation "
    "(delivered)",
    DeliveryOutcome.NOT_CONFIRMED: "submitted, but not yet confirmed as delivered within the wait",
    DeliveryOutcome.UNCONFIRMABLE: "the receiver cannot confirm delivery (no delivery receipts); "
    "the receipt above is all that is known",
    DeliveryOutcome.UNKNOWN: "the receiver no longer knows this message (it may have restarted)",
    DeliveryOutcome.INVALID_RECEIPT: "the receiver answered with a state outside the protocol, "
    "so whether it was delivered is unknown",
}


def delivery_text(delivery: DeliveryOutcome) -> str:
    """One clause on what a wait for delivery learned."""
    meaning = DELIVERY_MEANINGS.get(delivery)
    if meaning is not None:
        return meaning
    return f"it will not be delivered: it ended {shown_word(delivery)} at the receiver"


#: What each receipt means, in the words the model and the user read.
RECEIPT_MEANINGS: Final[Mapping[SendOutcome, str]] = {
    SendOutcome.SUBMITTED: "it was handed to that session's conversation (not yet read or acted "
    "on)",
    SendOutcome.QUEUED: "it waits in that session's queue until its current turn ends",
    SendOutcome.ACCEPTED: "an in-process handler of that session took it",
}


def send_result(report: SendReport) -> str:
    """One honest sentence about a send: what is known, and nothing more."""
    where = address(report.target) if report.target is not None else "the target"
    if report.ok:
        outcome = report.outcome
        meaning = "the receiver took it" if outcome is None else RECEIPT_MEANINGS[outcome]
        text = f"Message {shown_word(report.status)} to {where}: {meaning}."
        if report.delivery is not None:
            text += f" Then: {delivery_text(report.delivery)}."
        return f"{text} messageId={shown_message_id(report.message_id)}"
    explained = remote_refusal(report.status, remote_machine(report.target))
    next_step = report.next
    if explained is not None:
        # The remote plane's endings in our own words, by their code alone: the proxy's text
        # would only say the same less precisely.
        head = "not sent to" if report.status in REMOTE_NOT_SENT else "refused for"
        parts = [f"Message {head} {where}: {shown_word(report.status)}", explained]
    else:
        # Said as it is: never written (and why), refused by the receiver, or unknown.
        if report.status in NOT_SENT_HEADS and not report.message_written:
            parts = [NOT_SENT_HEADS[report.status]]
            next_step = NOT_SENT_NEXT[report.status]
        elif not report.message_written:
            parts = [f"Message not sent to {where}: {shown_word(report.status)}"]
        elif report.state == SenderState.RECEIPT_UNKNOWN:
            parts = [f"Message to {where}: outcome unknown ({shown_word(report.status)})"]
        else:
            parts = [f"Message refused by {where}: {shown_word(report.status)}"]
        if report.detail:
            parts.append(shown_diagnostic(report.detail))
    if report.state == SenderState.RECEIPT_UNKNOWN:
        if report.message_written:
            parts.append("it may or may not have been admitted")
        else:
            parts.append("it was not delivered")
    if next_step:
        parts.append(f"next: {shown_diagnostic(next_step)}")
    if report.message_id and report.message_written:
        parts.append(f"messageId={shown_message_id(report.message_id)}")
    return "; ".join(parts)


#: The first words of a send whose target names no single live session (nothing was sent).
NOT_SENT_HEADS: Final[Mapping[str, str]] = {
    "not_found": "Message not sent: there is no such live session",
    "ambiguous": "Message not sent: the target names more than one live session",
}
#: What to do then (instead of the generic advice of a refusal).
NOT_SENT_NEXT: Final[Mapping[str, str]] = {
    "not_found": "list the live sessions with list_pi, then address one as @name [ref]",
    "ambiguous": "address one of them as @name [ref], with a ref from the list",
}


def status_query_result(report: SendReport) -> str:
    """What a wire status query learned about one message."""
    if not report.ok:
        return send_result(report)
    where = address(report.target) if report.target is not None else "the target"
    if report.status == "unknown":
        meaning = (
            "that session has no record of it. This does not mean it was not delivered: a "
            "restarted session forgets everything, and a message it never admitted is unknown too"
        )
    else:
        meaning = STATE_MEANINGS.get(report.status, "as reported by the receiver")
    line = (
        f"Message {shown_message_id(report.message_id)} at {where}: "
        f"{shown_word(report.status)} — {meaning}"
    )
    if report.detail:
        line += f" ({shown_diagnostic(report.detail)})"
    return line


#: What each row state means, for people.
STATE_MEANINGS: Final = {
    "accepted": "admitted, being handed over",
    "queued": "waiting in the receiver's queue for its current turn to end",
    "submitted": "handed to the receiver's conversation (not a sign it was read or acted on)",
    "delivered": "the receiver confirmed it entered its conversation (still not a sign it was "
    "read or acted on)",
    "expired": "waited too long in the queue and was dropped",
    "dropped": "dropped before it reached the conversation",
    "dropped_cancelled": "dropped because the receiver's turn was aborted",
    "dropped_shutdown": "dropped because the receiving session shut down",
    "dropped_user_reset": "dropped when the receiver's user reopened the inbox",
    "dropped_goal_revoked": "dropped because its goal ended",
    "injection_failed": "the receiving host could not take it",
}


def send_details(report: SendReport) -> dict[str, Any]:
    """Structured details of a send, for tool results and ``--json``.

    ``status``, ``state``, ``next`` and ``delivery`` are words and texts of ours (a receiver's
    word outside the protocol never becomes one), escaped all the same; ``error`` holds the
    receiver's texts only as escaped lines, and is itself escaped again (line feeds of ours
    kept), so the details are safe in a sink that does not escape. ``target`` is the peer's
    public registration as data: the JSON sinks escape it
    (:func:`~pi_cross_session._internal.protocol.sanitize.dumps`).
    """
    return {
        "ok": report.ok,
        "status": shown_word(report.status),
        "state": shown_word(report.state or report.status),
        "retryable": report.retryable,
        "next": None if report.next is None else sanitize.line(report.next),
        "messageId": None if report.message_id is None else shown_message_id(report.message_id),
        "target": None if report.target is None else report.target.to_dict(),
        "error": None if report.detail is None else sanitize.block(report.detail),
        "messageWritten": report.message_written,
        **({} if report.delivery is None else {"delivery": shown_word(report.delivery)}),
    }


__all__ = [
    "DELIVERY_MEANINGS",
    "NEXT_SHORT_OF_RESOURCES",
    "NOT_SENT_HEADS",
    "NOT_SENT_NEXT",
    "RECEIPT_MEANINGS",
    "STATE_MEANINGS",
    "UNSAFE_LOCK_FIX",
    "delivery_text",
    "identities_unusable",
    "library_send_purpose",
    "listing_short",
    "send_details",
    "send_result",
    "status_query_result",
    "target_unchecked",
    "unsafe_lock",
]
