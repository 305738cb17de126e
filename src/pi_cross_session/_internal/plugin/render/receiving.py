"""What this session's inbox looks like to its own user: the messages and state changes
``pi-cross-session inbox`` prints, the receiver's part of ``/cross-session-status`` (readable and
``--json``), why a closed inbox is closed and how to reopen it, and what
``/cross-session-resume`` did."""

from __future__ import annotations

from typing import Any, Final

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
from pi_cross_session._internal.security.admission import (
    Delivery,
    Latch,
    LatchReason,
    ResumeOutcome,
    Row,
    Snapshot,
)

#: How the user of a host session reopens its closed inbox.
REOPEN_WITH_COMMAND: Final = "run /cross-session-resume in this session once nothing is running"
#: How the user of ``pi-cross-session inbox`` does: it has no command of its own, so a new one.
REOPEN_CLI_INBOX: Final = (
    "stop this inbox (Ctrl-C) and start it again; the new one is a new incarnation"
)
#: What a closed inbox is, wherever its own state is shown.
CLOSED: Final = "closed until its user reopens it"
#: Why a session's live state (what ``watch`` shows) says it refuses: its policy, or it is a
#: command-line sender, which takes nothing.
LIVE_REFUSING: Final = "its inbound policy is refuse"
LIVE_CLI_SENDER: Final = "a command-line sender: it takes no messages"


def _latched_message(latch: Latch) -> str | None:
    """``message <id> from <name> [ref]`` of the peer message whose turn it was, if any."""
    if latch.message_id is None:
        return None
    who = "" if latch.sender_name is None else f"{shown_name(latch.sender_name)} "
    ref = shown_word((latch.sender_instance_id or "")[:8])
    return f"message {shown_message_id(latch.message_id)} from {who}[{ref}]"


def _what_closed(latch: Latch) -> str:
    message = _latched_message(latch)
    outcome = latch.outcome
    if latch.reason is LatchReason.SUBMIT_FAILED:
        return f"the host could not take {message or 'a message'} into its conversation"
    if latch.reason is LatchReason.NO_TURN_START:
        return f"{message or 'a message'} did not start a turn within 5 s"
    turn = "a turn" if message is None else f"the turn in which {message} arrived"
    if latch.reason is LatchReason.ABORT:
        return f"{turn} was aborted"
    if outcome is not None and outcome.stop_reason == "stop":
        # A clean stop closes the inbox only when nothing showed who started the turn.
        return f"{turn} ended without anything showing who started it"
    return f"{turn} ended without a clean stop"


def closed_reason(latch: Latch) -> str:
    """Why the inbox closed, one escaped line: which turn (the peer message it carried and its
    sender, if one did), how, and the host's own words on how it ended (its stop reason, and its
    error text, cut)."""
    text = _what_closed(latch)
    outcome = latch.outcome
    said: list[str] = []
    if outcome is not None:
        if outcome.stop_reason is not None:
            said.append(f"stop reason {shown_word(outcome.stop_reason)}")
        elif latch.reason is LatchReason.UNSAFE_END:
            said.append("no stop reason")
        if outcome.error:
            said.append(f'"{shown_diagnostic(outcome.error)}"')
    if said:
        text += f" (the host reported {': '.join(said)})"
    return text


def live_latched(latch: Latch, reopen: str) -> str:
    """Why a latched session's live state says it is latched, and how to reopen it."""
    return f"{closed_reason(latch)}; to reopen: {reopen}"


def closed_line(latch: Latch, reopen: str = REOPEN_WITH_COMMAND) -> str:
    """One line wherever this session's own state is listed: closed, why, how to reopen."""
    return (
        f"This session's inbox is {CLOSED}: {closed_reason(latch)}. Other sessions' messages are "
        f"refused (stopped) meanwhile. To reopen it: {reopen}."
    )


def closed_data(latch: Latch | None) -> dict[str, Any] | None:
    """Why the inbox is closed, for ``--json`` (``None`` while it is open)."""
    if latch is None:
        return None
    outcome = latch.outcome
    return {
        "reason": latch.reason.value,
        "at": latch.at_ms,
        "stopReason": None if outcome is None else outcome.stop_reason,
        "hostError": None if outcome is None else outcome.error,
        "messageId": latch.message_id,
        "sender": None
        if latch.sender_instance_id is None
        else {"name": latch.sender_name, "instanceId": latch.sender_instance_id},
        "text": closed_reason(latch),
    }


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


def status_text(
    snapshot: Snapshot,
    *,
    me: PublicPeer | None = None,
    recent: int = 20,
    reopen: str = REOPEN_WITH_COMMAND,
) -> str:
    """The readable ``/cross-session-status`` (``reopen``: how this host's user reopens a
    closed inbox)."""
    if not snapshot.stopped:
        latch = "open"
    elif snapshot.latch is not None:
        latch = f"{CLOSED}: {closed_reason(snapshot.latch)}"
    else:
        latch = f"{CLOSED}: {shown_diagnostic(str(snapshot.latch_reason))}"
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
    if snapshot.stopped and not snapshot.shut_down:
        lines.append(f"To reopen the inbox: {reopen}.")
    return "\n".join(lines)


def status_data(snapshot: Snapshot) -> dict[str, Any]:
    """The raw ``/cross-session-status --json`` object."""
    return {
        "stopped": snapshot.stopped,
        "latchReason": snapshot.latch_reason,
        "latch": closed_data(snapshot.latch),
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
    if outcome.was_open:
        text = (
            "The inbox was already open: other sessions can message this one; there was nothing "
            "to reopen."
        )
        if outcome.dropped:
            text += (
                f" {outcome.dropped} pending message(s) were dropped all the same and will not "
                "be replayed."
            )
        return text
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
    "CLOSED",
    "LIVE_CLI_SENDER",
    "LIVE_REFUSING",
    "REOPEN_CLI_INBOX",
    "REOPEN_WITH_COMMAND",
    "closed_data",
    "closed_line",
    "closed_reason",
    "inbox_message",
    "inbox_row",
    "live_latched",
    "resume_text",
    "status_data",
    "status_json",
    "status_text",
]
