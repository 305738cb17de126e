"""How the command line shows a journal event: one line for people, one JSON object for tools.

Shared by ``log`` and ``watch``. Names, summaries and texts are a peer's strings (a hostile peer
chose its own name and its message's words): each goes through
:func:`~pi_cross_session._internal.protocol.sanitize.line` before it is placed in a line, and the
JSON form is written with :func:`~pi_cross_session._internal.protocol.sanitize.dumps` by the
caller, which escapes what a terminal would act on.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any, Final

from pi_cross_session._internal.protocol.sanitize import line
from pi_cross_session._internal.security.io.journal import Direction, Event, Party

#: A name is shown at most this long in a line (the JSON form has it whole).
NAME_CELL: Final = 40
#: A summary is shown at most this long in a line.
SUMMARY_CELL: Final = 80


def clock(at_ms: int, *, now_ms: int | None = None) -> str:
    """An event's time for a line: ``HH:MM:SS`` today, ``YYYY-MM-DD HH:MM:SS`` otherwise."""
    stamp = time.localtime(at_ms / 1000)
    today = time.localtime((time.time() * 1000 if now_ms is None else now_ms) / 1000)
    if stamp[:3] == today[:3]:
        return time.strftime("%H:%M:%S", stamp)
    return time.strftime("%Y-%m-%d %H:%M:%S", stamp)


def party(who: Party) -> str:
    """A session as a line names it: its (escaped, cut) name and the start of its instance id."""
    return f"{line(who.name, NAME_CELL)} [{who.instance_id[:6]}]"


def ends(event: Event) -> tuple[Party, Party]:
    """(sender, receiver) of the message the event is about."""
    if event.direction is Direction.OUT:
        return event.session, event.peer
    return event.peer, event.session


def state_word(event: Event) -> str:
    """The event's state, with its code when it has one (``refused busy``, ``dropped
    dropped_shutdown`` is said ``dropped (shutdown)``)."""
    kind = event.kind.value
    code = event.code
    if code is None or code == kind:
        return kind
    if code.startswith(f"{kind}_"):
        return f"{kind} ({code[len(kind) + 1 :]})"
    return f"{kind} {code}"


def event_line(
    event: Event,
    *,
    journaled: Collection[str] = (),
    now_ms: int | None = None,
) -> str:
    """One line: time, sender → receiver, state, message id, the side that wrote it, summary.

    ``journaled`` holds the instance ids that have a journal of ours: when the other end of the
    event has none (a Node session, or one of ours with journaling off), the line says its side
    is unknown.
    """
    sender, receiver = ends(event)
    side = "sender" if event.direction is Direction.OUT else "receiver"
    parts = [
        clock(event.at, now_ms=now_ms),
        f"{party(sender)} → {party(receiver)}",
        state_word(event),
        event.message_id,
        f"(as the {side} saw it)",
    ]
    if journaled and event.peer.instance_id not in journaled:
        other = "receiver" if event.direction is Direction.OUT else "sender"
        parts.append(f"[{other}'s side unknown: no journal]")
    if event.summary is not None:
        parts.append(f"“{line(event.summary, SUMMARY_CELL)}”")
    if event.cut:
        parts.append("(cut to fit)")
    return "  ".join(parts)


def event_json(event: Event, *, journaled: Collection[str] | None = None) -> dict[str, Any]:
    """The event as ``--json`` prints it: the journal's own fields, plus ``from``/``to`` (the
    message's sender and receiver) and, when ``journaled`` is given, ``otherSideKnown``."""
    data = event.to_json()
    del data["v"]
    sender, receiver = ends(event)
    data["from"] = {"name": sender.name, "instanceId": sender.instance_id}
    data["to"] = {"name": receiver.name, "instanceId": receiver.instance_id}
    if journaled is not None:
        data["otherSideKnown"] = event.peer.instance_id in journaled
    return data


def skipped_note(skipped: int, skipped_bytes: int, unreadable: int) -> str | None:
    """What a reader passed over, for stderr; ``None`` when nothing was."""
    notes = []
    if skipped:
        notes.append(f"{skipped:,} line{'s' if skipped != 1 else ''} that were not events")
    if skipped_bytes:
        notes.append(f"{skipped_bytes:,} bytes of files larger than a journal grows")
    if unreadable:
        notes.append(f"{unreadable:,} file{'s' if unreadable != 1 else ''} or dir(s) not ours")
    if not notes:
        return None
    return "skipped " + ", ".join(notes) + " (run with -v for where)"


__all__ = [
    "clock",
    "ends",
    "event_json",
    "event_line",
    "party",
    "skipped_note",
    "state_word",
]
