"""``watch``'s full-screen view: the model (:mod:`.watch_model`) drawn with rich.

Imported only by the full view, and rich with it (the ``watch`` extra): the line and JSON modes,
and every other command, never import rich.

Every string a peer chose (names, summaries, reasons, goal objectives, host kinds) reaches rich as
a :class:`~rich.text.Text` built from :func:`~pi_cross_session._internal.protocol.sanitize.line`'s
result: escaped for the terminal first, and never read as rich markup (``[bold]`` in a name is
shown as typed). No markup string here is built from peer data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pi_cross_session._internal.cli import journal_words
from pi_cross_session._internal.cli.watch_model import MessageRow, SessionView, WatchModel
from pi_cross_session._internal.protocol.sanitize import line
from pi_cross_session._internal.security.io.journal import Event, EventKind, Party

#: A name in a feed cell (the line modes show 40; the screen has two of them per row).
FEED_NAME_CELL: Final = 24
#: Characters of a message id shown (a UUID's first group).
MESSAGE_ID_CHARS: Final = 8
#: Lines the view spends on anything but rows: the title, two table headers, the gap between the
#: tables and the footer.
_FIXED_LINES: Final = 5
#: At most this share of the screen goes to the sessions; the rest is the feed's.
_SESSIONS_SHARE: Final = 0.4

KEYS: Final = "f filter  p pause  q quit"

#: How a state is coloured: settled well, still moving, ended badly.
_GOOD: Final = frozenset({EventKind.DELIVERED, EventKind.SUBMITTED, EventKind.ADMITTED})
_BAD: Final = frozenset(
    {
        EventKind.REFUSED,
        EventKind.EXPIRED,
        EventKind.DROPPED,
        EventKind.INJECTION_FAILED,
        EventKind.RECEIPT_UNKNOWN,
    }
)


def _party(who: Party) -> Text:
    return Text(f"{line(who.name, FEED_NAME_CELL)} [{who.instance_id[:6]}]")


def _side(event: Event | None, *, known: bool) -> Text:
    text = Text(journal_words.side_view(event, known=known))
    if event is None:
        text.stylize("dim")
    elif event.kind in _BAD:
        text.stylize("red")
    elif event.kind in _GOOD:
        text.stylize("green")
    else:
        text.stylize("yellow")
    return text


def _inbound(view: SessionView) -> Text:
    text = Text(journal_words.inbound_word(view))
    if view.inbound == "latched":
        text.stylize("bold red")
    elif view.inbound != "open":
        text.stylize("yellow")
    return text


def _title(model: WatchModel, agent_dir: str) -> Text:
    title = Text("pi-cross-session watch", style="bold")
    title.append(f"  {line(agent_dir, 60)}")
    count = len(model.sessions)
    title.append(f"  {count} live session{'s' if count != 1 else ''}" if model.listed else "")
    wanted = model.wanted
    if wanted is not None:
        shown = model.filter_session()
        label = line(wanted, 40) if shown is None else journal_words.session_party(shown)
        title.append("  feed: ")
        title.append(label, style="bold cyan")
    else:
        title.append("  feed: all")
    if model.paused:
        title.append("  ")
        title.append(" PAUSED (p resumes) ", style="bold reverse yellow")
    return title


def _sessions(model: WatchModel, limit: int) -> Table:
    # As wide as its cells: a latched inbox's reason gets the room a short goal leaves.
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("KIND", "SESSION", "STATUS", "INBOUND", "QUEUE", "GOAL", "JOURNAL"):
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    sessions = model.sessions
    wanted = model.filter_session()
    shown = sessions if len(sessions) <= limit else sessions[: max(limit - 1, 0)]
    for view in shown:
        style = "bold cyan" if wanted is not None and view.instance_id == wanted.instance_id else ""
        table.add_row(
            Text(journal_words.kind_word(view)),
            Text(journal_words.session_party(view), style=style),
            Text(line(view.status, 16)),
            _inbound(view),
            Text("-" if view.queue is None else str(view.queue)),
            Text(journal_words.goal_word(view)),
            Text(journal_words.journal_word(view), style="" if view.journaled else "dim"),
        )
    if len(shown) < len(sessions):
        table.add_row(Text(f"… {len(sessions) - len(shown)} more", style="dim"))
    if not model.listed:
        table.add_row(Text("listing…", style="dim"))
    elif not sessions:
        table.add_row(Text("no live session", style="dim"))
    return table


def _feed(rows: Sequence[MessageRow], journaled: frozenset[str], limit: int) -> Table:
    table = Table(box=None, pad_edge=False, expand=True, header_style="bold")
    for name, ratio in (
        ("TIME", None),
        ("FROM", None),
        ("TO", None),
        ("MESSAGE", None),
        ("SENDER SAW", None),
        ("RECEIVER SAW", None),
        ("SUMMARY", 1),
    ):
        table.add_column(name, ratio=ratio, no_wrap=True, overflow="ellipsis")
    for row in rows[:limit]:
        summary = Text("" if row.summary is None else line(row.summary, journal_words.SUMMARY_CELL))
        table.add_row(
            Text(journal_words.clock(row.changed_at)),
            _party(row.sender),
            _party(row.receiver),
            Text(row.message_id[:MESSAGE_ID_CHARS]),
            _side(row.sender_event, known=row.sender.instance_id in journaled),
            _side(row.receiver_event, known=row.receiver.instance_id in journaled),
            summary,
        )
    if not rows:
        table.add_row(Text("-"), Text("no message yet", style="dim"))
    return table


def _footer(model: WatchModel, held: int, shown: int, note: str | None) -> Text:
    footer = Text(KEYS, style="dim")
    footer.append(f"  {shown} of {held} message{'s' if held != 1 else ''} shown")
    skipped = model.skipped
    said = journal_words.skipped_note(skipped.lines, skipped.bytes, skipped.unreadable)
    if said is not None:
        footer.append("  ")
        footer.append(said, style="yellow")
    if model.listing_problem is not None:
        footer.append("  ")
        footer.append(line(model.listing_problem, 120), style="red")
    if note is not None:
        footer.append("  ")
        footer.append(line(note, 120), style="yellow")
    return footer


def render(
    model: WatchModel, *, agent_dir: str, height: int, note: str | None = None
) -> RenderableType:
    """The whole screen for a terminal ``height`` lines tall: the title, the sessions, the feed
    (newest first, as many rows as fit) and a footer with the keys and what was skipped.
    ``note`` is a line of ours for the footer (the last warning logged)."""
    room = max(height - _FIXED_LINES, 2)
    sessions_room = max(1, min(len(model.sessions) or 1, int(room * _SESSIONS_SHARE)))
    feed_room = max(1, room - sessions_room)
    rows = model.rows()
    return Group(
        _title(model, agent_dir),
        _sessions(model, sessions_room),
        Text(""),
        _feed(rows, model.journaled, feed_room),
        _footer(model, model.size, min(len(rows), feed_room), note),
    )


__all__ = ["KEYS", "render"]
