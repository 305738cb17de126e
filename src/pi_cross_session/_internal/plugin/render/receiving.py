"""What this session's inbox looks like to its own user: the messages and state changes
``pi-cross-session inbox`` prints, the receiver's part of ``/cross-session-status`` (readable and
``--json``), and what ``/cross-session-resume`` did."""

from __future__ import annotations

from typing import Any

from pi_cross_session._internal.plugin.render.listings import address
from pi_cross_session._internal.plugin.render.peer_text import (
    shown_diagnostic,
    shown_message_id,
    shown_name,
    shown_word,
)
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.limits import MAX_SUMMARY_CODE_POINTS
from pi_cross_session._internal.protocol.registration import PublicPeer
from pi_cross_session._internal.security.admission import Delivery, ResumeOutcome, Row, Snapshot


def inbox_message(delivery: Delivery) -> str:
    """What ``pi-cross-session inbox`` prints for one message: who sent it, then its text
    escaped with :func:`~pi_cross_session._internal.protocol.sanitize.block` and indented four
    spaces, so
    that no line of the peer's starts where a line of ours does."""
    sender = delivery.sender
    body = "\n".join(f"    {line}" for line in sanitize.block(delivery.text).split("\n"))
    who = f"{shown_name(sender.name)} [{sender.ref}]"
    return f"message {shown_message_id(delivery.message_id)} from {who}\n{body}"


def inbox_row(row: Row) -> str:
    """What ``pi-cross-session inbox`` prints when a message changes state (one line): the state
    a sender asking about it would hear (``delivered`` once the host confirmed it), and the
    receiver's note on it, if any."""
    shown = Code.DELIVERED if row.delivered else row.state
    who = f"{shown_name(row.sender_name)} [{shown_word(row.sender_instance_id[:8])}]"
    summary = sanitize.line(row.summary, MAX_SUMMARY_CODE_POINTS)
    text = f"{shown_word(shown):<18} {shown_message_id(row.message_id)} from {who}: {summary}"
    if row.diagnostic:
        text += f" ({shown_diagnostic(row.diagnostic)})"
    return text


def _row_line(row: Row) -> str:
    who = shown_name(row.sender_name)
    # A submitted message the host confirmed is shown as delivered (the row stays submitted).
    state = shown_word(Code.DELIVERED if row.delivered else row.state)
    line = (
        f"{state:<20} {shown_message_id(row.message_id)} from {who} "
        f"[{shown_word(row.sender_instance_id[:8])}]"
    )
    if row.diagnostic:
        line += f" — {shown_diagnostic(row.diagnostic)}"
    return line


def status_text(snapshot: Snapshot, *, me: PublicPeer | None = None, recent: int = 20) -> str:
    """The readable ``/cross-session-status``."""
    latch = (
        f"closed ({shown_diagnostic(str(snapshot.latch_reason))})" if snapshot.stopped else "open"
    )
    lines = [
        f"Inbox: {address(me) if me is not None else 'not registered'}",
        f"Phase: {snapshot.phase}; inbox {latch}" + ("; shut down" if snapshot.shut_down else ""),
        f"Budget: {snapshot.remaining_budget} of {snapshot.total_budget} left; "
        f"queue {snapshot.queued}/{snapshot.max_queued}; admitted {snapshot.admitted}",
    ]
    if snapshot.refusals:
        refused = ", ".join(
            f"{shown_word(code)} {n}" for code, n in sorted(snapshot.refusals.items())
        )
        lines.append(f"Refused: {refused}")
    rows = snapshot.rows[-recent:] if recent > 0 else ()
    if rows:
        lines.append("Recent messages (oldest first):")
        lines.extend(f"  {_row_line(row)}" for row in rows)
    else:
        lines.append("No messages received in this incarnation.")
    if snapshot.evicted_rows:
        lines.append(f"({snapshot.evicted_rows} older finished messages no longer kept)")
    if snapshot.stopped:
        lines.append("Run /cross-session-resume once idle to reopen the inbox.")
    return "\n".join(lines)


def status_data(snapshot: Snapshot) -> dict[str, Any]:
    """The raw ``/cross-session-status --json`` object."""
    return {
        "stopped": snapshot.stopped,
        "latchReason": snapshot.latch_reason,
        "phase": str(snapshot.phase),
        "remainingBudget": snapshot.remaining_budget,
        "pending": snapshot.queued,
        "admitted": snapshot.admitted,
        "refusals": dict(snapshot.refusals),
        "messages": [
            {
                "messageId": row.message_id,
                "source": row.sender_instance_id,
                "state": row.state,
                "delivered": row.delivered,
                "updatedAt": row.updated_at_ms,
                **({"diagnostic": row.diagnostic} if row.diagnostic else {}),
            }
            for row in snapshot.rows
        ],
    }


def status_json(snapshot: Snapshot) -> str:
    """``status_data`` as indented JSON, escaped for a terminal."""
    return sanitize.dumps(status_data(snapshot), indent=2)


def resume_text(outcome: ResumeOutcome) -> str:
    """What ``/cross-session-resume`` tells the user, including what it does not do."""
    if not outcome.reopened:
        return f"The inbox was not reopened: {shown_diagnostic(str(outcome.reason))}."
    dropped = (
        f"{outcome.dropped} pending message(s) were dropped and will not be replayed"
        if outcome.dropped
        else "nothing was pending"
    )
    return (
        f"Inbox reopened: other sessions can message this one again; {dropped}. "
        "The message budget is not refilled, and no earlier message is delivered again."
    )


__all__ = [
    "inbox_message",
    "inbox_row",
    "resume_text",
    "status_data",
    "status_json",
    "status_text",
]
