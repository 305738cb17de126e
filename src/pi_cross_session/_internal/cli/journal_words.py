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
from typing import TYPE_CHECKING, Any, Final

from pi_cross_session._internal.protocol.sanitize import dumps, line
from pi_cross_session._internal.security.io.journal import Direction, Event, Party

if TYPE_CHECKING:  # annotations only: log never needs watch's model
    from pi_cross_session._internal.cli.watch_model import SessionChange, SessionView

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
        notes.append(
            f"{skipped:,} line that was not an event"
            if skipped == 1
            else f"{skipped:,} lines that were not events"
        )
    if skipped_bytes:
        notes.append(f"{skipped_bytes:,} bytes of files larger than a journal grows")
    if unreadable:
        notes.append(f"{unreadable:,} file{'s' if unreadable != 1 else ''} or dir(s) not ours")
    if not notes:
        return None
    return "skipped " + ", ".join(notes) + " (run with -v for where)"


# -- what ``log`` says besides its events ----------------------------------------------------------
# Appended for ``log``: the agent dir comes from the environment and a path or a reason from the
# file system; each is escaped here (a dir name may hold anything but a slash and a NUL).

#: Where the journals' setting is documented, in the words a user types.
_JOURNAL_SETTING: Final = "PI_CROSS_SESSION_JOURNAL"


def _where(agent_dir: str) -> str:
    # Quoted as JSON and escaped, as the empty listing of ``peers`` quotes it: a trailing space or
    # slash shows.
    return dumps(agent_dir)


def no_journals(agent_dir: str) -> str:
    """``log`` found no journal at all in the agent dir."""
    return (
        f"No journals in the agent dir {_where(agent_dir)}. Every session of ours keeps one "
        f"(pi-python sessions, MCP servers, inboxes and the command line's sends) once a "
        f"message passes through it, unless {_JOURNAL_SETTING}=off; Node sessions keep none. A "
        "session that uses another agent dir is not seen from here: set PI_CODING_AGENT_DIR to "
        "that dir to read its journals."
    )


def no_events(agent_dir: str, journals: int, *, filtered: bool) -> str:
    """``log`` read journals but has no event to show (none at all, or none that passed the
    filters)."""
    plural = "s" if journals != 1 else ""
    held = f"the journal{plural} of {journals:,} session{plural}"
    where = f"in the agent dir {_where(agent_dir)}"
    if filtered:
        return f"No events match in {held} {where}."
    return f"No events in {held} {where}."


def limited_note(shown: int, matched: int) -> str:
    """``log`` kept only the newest ``--limit`` of the events that matched."""
    return f"showing the newest {shown:,} of {matched:,} events (--limit N shows more)"


def unknown_states(words: Collection[str], known: Collection[str]) -> str:
    """``--state`` named a state no event has."""
    said = ", ".join(repr(line(word, 40)) for word in words)
    return f"argument --state: unknown state {said}; the states are: {', '.join(known)}"


def bad_limit(value: int) -> str:
    """``--limit`` below one."""
    return f"argument --limit: {value} is not a number of events (1 or more)"


def refused_where(path: str, detail: str) -> str:
    """With ``-v``: a journal file or dir that was not read, and why."""
    return f"  not read: {line(path)}: {line(detail)}"


def skipped_where(directory: str, lines: int, skipped_bytes: int) -> str:
    """With ``-v``: how much of one session's journal was skipped."""
    parts = []
    if lines:
        parts.append(f"{lines:,} line{'s' if lines != 1 else ''} that were not events")
    if skipped_bytes:
        parts.append(f"{skipped_bytes:,} bytes of files larger than a journal grows")
    return f"  skipped in {line(directory)}: {', '.join(parts)}"


def journals_capped(read: int, found: int) -> str:
    """More journal dirs than a reader looks at: the most recently changed were read."""
    return (
        f"read the {read:,} most recently changed journals of {found:,}; the others were not read"
    )


__all__ = [
    "bad_limit",
    "clock",
    "ends",
    "event_json",
    "event_line",
    "journals_capped",
    "limited_note",
    "no_events",
    "no_journals",
    "party",
    "refused_where",
    "skipped_note",
    "skipped_where",
    "state_word",
    "unknown_states",
]


# -- watch: the sessions and each end's view of a message ---------------------------------------

#: A live state's reason and a goal's objective, as a line or a cell shows them.
REASON_CELL: Final = 80
GOAL_CELL: Final = 60
#: The kind of a session that published no live state: a Node session (they write none), or one
#: of ours with journaling off.
UNKNOWN_KIND: Final = "node?"
NO_JOURNAL: Final = "no journal"


def side_view(event: Event | None, *, known: bool) -> str:
    """One end's view of a message: the state it last wrote; "unknown (no journal)" when that end
    keeps no journal, "-" when it has written nothing about it yet."""
    if event is not None:
        return state_word(event)
    return "unknown (no journal)" if not known else "-"


def session_party(view: SessionView) -> str:
    """A live session as watch's lines name it (as :func:`party` names an event's ends)."""
    return f"{line(view.name, NAME_CELL)} [{view.instance_id[:6]}]"


def kind_word(view: SessionView) -> str:
    """``inbox``, ``pi-python``, ``mcp``…; ``remote (machine)`` for a proxy; ``node?`` when the
    session published no live state."""
    if view.remote_machine is not None:
        return f"remote ({view.remote_machine})"
    if view.kind is None:
        return UNKNOWN_KIND
    return line(view.kind, 16)


def inbound_word(view: SessionView) -> str:
    """``open``, ``refusing``, ``latched``, with the reason when the session gave one."""
    word = line(view.inbound, 16)
    if view.reason:
        return f"{word} ({line(view.reason, REASON_CELL)})"
    return word


def goal_word(view: SessionView) -> str:
    """The active goal's objective (cut), or ``-``."""
    if view.goal is None:
        return "-"
    return f"“{line(view.goal.objective, GOAL_CELL)}”"


def journal_word(view: SessionView) -> str:
    """Whether watch reads this session's side: ``journal``, ``no journal``, or where a remote
    session keeps its own."""
    if view.remote_machine is not None:
        return "on its machine"
    return "journal" if view.journaled else NO_JOURNAL


def session_line(change: SessionChange, *, now_ms: int | None = None) -> str:
    """One line for a session that appeared, went, or changed its kind, inbound state or goal."""
    view = change.session
    head = f"{clock(change.at, now_ms=now_ms)}  session {session_party(view)}"
    what = change.what.value
    if what == "appeared":
        parts = [kind_word(view), line(view.status, 16), inbound_word(view)]
        if view.queue:
            parts.append(f"{view.queue} queued")
        if view.goal is not None:
            parts.append(f"goal {goal_word(view)}")
        if view.remote_machine is None and not view.journaled:
            parts.append(NO_JOURNAL)
        return f"{head} appeared: {', '.join(parts)}"
    if what == "gone":
        return f"{head} is gone"
    before = change.before
    if what == "kind":
        was = "" if before is None else f"{kind_word(before)} → "
        known = "" if view.journaled else f", {NO_JOURNAL}"
        return f"{head} kind: {was}{kind_word(view)}{known}"
    if what == "inbound":
        was = "" if before is None else f"{inbound_word(before)} → "
        return f"{head} inbound: {was}{inbound_word(view)}"
    if view.goal is None:
        was = "" if before is None or before.goal is None else f" (was {goal_word(before)})"
        return f"{head} goal: none{was}"
    return f"{head} goal: {goal_word(view)}"


def _session_json(view: SessionView) -> dict[str, Any]:
    return {
        "instanceId": view.instance_id,
        "name": view.name,
        "kind": view.kind,
        "remoteMachine": view.remote_machine,
        "status": view.status,
        "inbound": view.inbound,
        "reason": view.reason,
        "queue": view.queue,
        "goal": None
        if view.goal is None
        else {"id": view.goal.goal_id, "objective": view.goal.objective},
        "journal": view.journaled,
    }


def session_json(change: SessionChange) -> dict[str, Any]:
    """A session change as ``watch --json`` prints it (after ``"type": "session"``): the change,
    its time, the session as it is now and, for a kind, inbound or goal change, as it was."""
    data: dict[str, Any] = {"change": change.what.value, "at": change.at}
    data.update(_session_json(change.session))
    if change.before is not None and change.what.value in ("kind", "inbound", "goal"):
        data["was"] = _session_json(change.before)
    return data


__all__ += [
    "GOAL_CELL",
    "NO_JOURNAL",
    "REASON_CELL",
    "UNKNOWN_KIND",
    "goal_word",
    "inbound_word",
    "journal_word",
    "kind_word",
    "session_json",
    "session_line",
    "session_party",
    "side_view",
]
