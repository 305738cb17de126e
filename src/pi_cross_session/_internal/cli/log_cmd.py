"""``pi-cross-session log``: what passed between the sessions of this agent dir (their journals).

Every session of ours appends what it saw of each message to its own journal
(``<agentDir>/cross-session/journal/<instanceId>/``, :mod:`~pi_cross_session._internal.security.
io.journal`); ``log`` reads them all, keeps the events that pass the filters, and prints the newest
``--limit`` of them oldest first: one line each for people
(:func:`~pi_cross_session._internal.cli.journal_words.event_line`), or one JSON object per line
with ``--json``.

* **Bounded whatever is on disk.** The journals are streamed one file at a time (one descriptor
  open at once), each line bounded by the reader; only the newest ``--limit`` events that pass are
  held, in a heap. A file larger than a journal ever grows is read only at its end (the reader's
  rule), so a 100 MiB file costs no more than a full journal.
* **Only what is ours.** The journal root and each session's dir must be private dirs of ours
  (0700, ours, not a symbolic link); files in them must be private regular files of ours. Anything
  else is not read, and one note on stderr says how much was passed over (``-v``: where, escaped).
  Lines that are not events (cut by a kill, corrupt, hostile) are skipped and counted the same way.
* **Hostile strings stay inert.** Names and summaries are a peer's: lines escape them
  (:func:`~pi_cross_session._internal.protocol.sanitize.line`), and JSON goes through
  :meth:`Console.json` (:func:`~pi_cross_session._internal.protocol.sanitize.dumps`).
* **Reads only.** It creates nothing, and repairs nothing: a dir with loose modes is said, not
  fixed (its session sets it back to 0700 when it opens its journal).
* **Cheap to start.** No event loop and no protocol frames: the reader, the words and the paths.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterable, Sequence

from pi_cross_session._internal.cli import exits, journal_words
from pi_cross_session._internal.cli.console import PREFIX, Console
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.security.io.journal import EventFilter, EventKind
from pi_cross_session._internal.security.io.journal_network import NetworkRead, read_network


def _kinds(words: Sequence[str] | None) -> tuple[frozenset[EventKind] | None, list[str]]:
    """The kinds ``--state`` names (repeated, or separated by commas; ``receipt-unknown`` is
    ``receipt_unknown``), and the words that are no kind."""
    if not words:
        return None, []
    kinds: set[EventKind] = set()
    unknown: list[str] = []
    for given in words:
        for word in given.split(","):
            normal = word.strip().lower().replace("-", "_")
            if not normal:
                continue
            try:
                kinds.add(EventKind(normal))
            except ValueError:
                unknown.append(word.strip())
    return (frozenset(kinds) if kinds else None), unknown


def _usage_error(console: Console, message: str) -> int:
    # As the parser says a usage error (and exits as it does: 1, nothing was done).
    console.problem(f"{PREFIX} log: error: {message}")
    return exits.EXIT_LOCAL


def _filter(args: argparse.Namespace, kinds: frozenset[EventKind] | None) -> EventFilter:
    since = None
    if args.since is not None:
        since = max(0, time.time_ns() // 1_000_000 - int(args.since) * 1000)
    return EventFilter(
        kinds=kinds,
        since=since,
        message_id=args.message_id,
        end=args.session,
        other_end=args.peer,
    )


def _filtered(args: argparse.Namespace) -> bool:
    return any(
        value is not None
        for value in (args.session, args.peer, args.state, args.since, args.message_id)
    )


def _print_events(console: Console, history: NetworkRead, *, as_json: bool) -> None:
    if as_json:
        for event in history.events:
            # One compact object per line (JSON Lines), escaped for a terminal.
            console.json(journal_words.event_json(event, journaled=history.journaled), indent=None)
        return
    now_ms = time.time_ns() // 1_000_000
    lines = (
        journal_words.event_line(event, journaled=history.journaled, now_ms=now_ms)
        for event in history.events
    )
    _write_lines(console, lines)


def _write_lines(console: Console, lines: Iterable[str], batch: int = 256) -> None:
    """Lines to stdout, a batch per write (a thousand flushes would cost more than the reading)."""
    pending: list[str] = []
    for text in lines:
        pending.append(text)
        if len(pending) >= batch:
            console.result("\n".join(pending))
            pending.clear()
    if pending:
        console.result("\n".join(pending))


def _notes(console: Console, history: NetworkRead) -> None:
    """What was passed over, on stderr: one note, and where with ``-v``."""
    if history.capped:
        read = len(history.journaled)
        console.problem(
            f"{PREFIX} log: {journal_words.journals_capped(read, read + history.capped)}"
        )
    if len(history.events) < history.matched:
        limited = journal_words.limited_note(len(history.events), history.matched)
        console.problem(f"{PREFIX} log: {limited}")
    skipped = journal_words.skipped_note(
        history.skipped, history.skipped_bytes, len(history.unreadable)
    )
    if skipped is None:
        return
    console.problem(f"{PREFIX} log: {skipped}")
    if console.verbosity > 0:
        for path, why in history.unreadable:
            console.problem(journal_words.refused_where(path, why))
        for directory, lines, skipped_bytes in history.skipped_in:
            console.problem(journal_words.skipped_where(directory, lines, skipped_bytes))


def _nothing(agent_dir: str, history: NetworkRead, *, filtered: bool) -> str:
    if not history.journals:
        return journal_words.no_journals(agent_dir)
    return journal_words.no_events(agent_dir, history.journals, filtered=filtered)


def run(args: argparse.Namespace, console: Console) -> int:
    """Read every session's journal and print the events that pass the filters."""
    kinds, unknown = _kinds(args.state)
    if unknown:
        known = [kind.value for kind in EventKind]
        return _usage_error(console, journal_words.unknown_states(unknown, known))
    if args.limit < 1:
        return _usage_error(console, journal_words.bad_limit(args.limit))
    agent_dir = environment.resolve().agent_dir
    history = read_network(agent_dir, where=_filter(args, kinds), limit=args.limit)
    try:
        if history.events:
            _print_events(console, history, as_json=args.json)
        else:
            said = _nothing(agent_dir, history, filtered=_filtered(args))
            # A script reading --json gets no lines; the words go where people look.
            if args.json:
                console.problem(said)
            else:
                console.result(said)
    except BrokenPipeError:
        # The reader went away (``log | head``): nothing more to say, and nothing to say it to.
        _silence_stdout()
        return exits.EXIT_OK
    _notes(console, history)
    return exits.EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
