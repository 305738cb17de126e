"""What ``pi-cross-session watch`` shows, as plain state: the live sessions and the message feed.

No I/O, no clock, no terminal: :mod:`.watch_cmd` reads the registrations, the journals and each
session's ``live.json`` and hands what it read to a :class:`WatchModel`; :mod:`.watch_view` (the
full-screen view) and the line and JSON modes show what the model holds. So every decision here is
tested as a table (``tests/cli/test_watch_model.py``).

* **Sessions.** One :class:`SessionView` per live registration (the listing's word on liveness),
  enriched by the session's live state when it published one: its kind (the host that wrote it),
  its inbound state and why, its queue depth and its active goal. A session without a live state
  (a Node session, or one of ours with journaling off) has an unknown kind and no journal; a
  remote proxy of the gateway says which machine it stands for. Each refresh answers the
  :class:`SessionChange` s since the last one (appeared, gone, inbound state, goal).
* **Feed.** One :class:`MessageRow` per message, keyed by its id and its sender's instance id (a
  message id is chosen by its sender, so two senders may use the same one): the last event each
  end wrote about it. At most ``max_messages`` rows are kept, the most recently changed, so memory
  does not grow with time.
* **Filter and pause.** The feed can be narrowed to one session (either end), cycling through
  the live sessions; pausing freezes the rows shown while the model keeps taking events in.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    Party,
    names_session,
)
from pi_cross_session._internal.security.io.journal_network import LiveGoal, LiveState

#: Messages the feed keeps (the most recently changed); older ones are forgotten.
MAX_FEED_MESSAGES: Final = 200
#: How long a session without a live state is listed before its appearance is reported: a
#: session of ours publishes its live state within a second of registering, and a Node session
#: never does; waiting this long reports most sessions of ours once, already knowing their kind.
APPEAR_GRACE_MS: Final = 2_500

#: The registration's inbound policy, in the words of a live state.
_INBOUND_OF_POLICY: Final = {"accept": "open", "refuse": "refusing"}


@dataclass(frozen=True, slots=True)
class Registered:
    """What the listing says of one live session (from its registration; no token, no git)."""

    instance_id: str
    name: str
    #: ``idle`` or ``busy``, as the session last wrote it.
    status: str
    #: ``accept`` or ``refuse``: the registration's inbound policy.
    inbound: str
    #: The machine a remote proxy stands for (already escaped for display), ``None`` if local.
    remote_machine: str | None = None


@dataclass(frozen=True, slots=True)
class SessionView:
    """One live session as watch shows it. Strings are a peer's: escape them when shown."""

    instance_id: str
    name: str
    status: str
    #: The host kind its live state names (``pi-python``, ``mcp``, ``inbox``…); ``None`` when it
    #: published none (a Node session, or journaling off) or it is remote.
    kind: str | None
    #: ``open``, ``refusing`` or ``latched``.
    inbound: str
    reason: str | None = None
    #: Messages waiting in its queue; ``None`` when unknown (no live state).
    queue: int | None = None
    goal: LiveGoal | None = None
    #: True when its live state was read (so its journal is ours to read).
    journaled: bool = False
    remote_machine: str | None = None

    def matches(self, wanted: str) -> bool:
        """True when ``wanted`` names this session (see :func:`names_session`)."""
        return names_session(wanted, self.name, self.instance_id)


def session_view(registered: Registered, live: LiveState | None) -> SessionView:
    """One session from its registration and the live state its journal dir holds, if any.

    The registration decides the name and the status (it is what others address and probe); a
    live state of another instance id is not this session's and is ignored.
    """
    base = SessionView(
        instance_id=registered.instance_id,
        name=registered.name,
        status=registered.status,
        kind=None,
        inbound=_INBOUND_OF_POLICY.get(registered.inbound, registered.inbound),
        remote_machine=registered.remote_machine,
    )
    if registered.remote_machine is not None:
        return base  # a proxy: its journal, if any, is on its own machine
    if live is None or live.instance_id != registered.instance_id:
        return base
    return replace(
        base,
        kind=live.host,
        inbound=live.inbound.value,
        reason=live.reason,
        queue=live.queue,
        goal=live.goal,
        journaled=True,
    )


class ChangeKind(StrEnum):
    """What changed about a session, for the line and JSON modes."""

    APPEARED = "appeared"
    GONE = "gone"
    #: Its live state appeared (or went): what kind of session it is became known.
    KIND = "kind"
    INBOUND = "inbound"
    GOAL = "goal"


@dataclass(frozen=True, slots=True)
class SessionChange:
    """A session appeared, went, or changed its inbound state or its goal; ``before`` is how it
    was (``None`` for one that appeared)."""

    what: ChangeKind
    at: int
    session: SessionView
    before: SessionView | None = None


def changes(
    before: Mapping[str, SessionView], after: Mapping[str, SessionView], at: int
) -> list[SessionChange]:
    """The changes from ``before`` to ``after`` (both by instance id): appearances, kind, inbound
    and goal changes in ``after``'s order, then the sessions gone."""
    found: list[SessionChange] = []
    for instance_id, now in after.items():
        was = before.get(instance_id)
        if was is None:
            found.append(SessionChange(ChangeKind.APPEARED, at, now))
            continue
        if (was.kind, was.journaled) != (now.kind, now.journaled):
            found.append(SessionChange(ChangeKind.KIND, at, now, was))
        if (was.inbound, was.reason) != (now.inbound, now.reason):
            found.append(SessionChange(ChangeKind.INBOUND, at, now, was))
        if was.goal != now.goal:
            found.append(SessionChange(ChangeKind.GOAL, at, now, was))
    found.extend(
        SessionChange(ChangeKind.GONE, at, was, was)
        for instance_id, was in before.items()
        if instance_id not in after
    )
    return found


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One message of the feed: its two ends, when it last changed, its summary when a journal
    kept one, and the last event each end wrote about it (``None``: nothing from that end)."""

    message_id: str
    sender: Party
    receiver: Party
    changed_at: int
    summary: str | None = None
    sender_event: Event | None = None
    receiver_event: Event | None = None

    def involves(self, wanted: str) -> bool:
        """True when either end is the session ``wanted`` names."""
        return any(
            names_session(wanted, end.name, end.instance_id) for end in (self.sender, self.receiver)
        )


def _ends(event: Event) -> tuple[Party, Party]:
    if event.direction is Direction.OUT:
        return event.session, event.peer
    return event.peer, event.session


def _row_key(event: Event) -> tuple[str, str]:
    return event.message_id, _ends(event)[0].instance_id


def fold(row: MessageRow | None, event: Event) -> MessageRow:
    """``row`` after ``event`` (a new row when ``row`` is ``None``).

    Each end's view is the last event it wrote: one session's events reach us in the order it
    wrote them. The time is the latest seen, whichever end's; the parties are named as the latest
    event names them (a session may be renamed).
    """
    sender, receiver = _ends(event)
    if row is None:
        row = MessageRow(event.message_id, sender, receiver, event.at)
    summary = event.summary if event.summary is not None else row.summary
    out = event.direction is Direction.OUT
    return replace(
        row,
        sender=sender,
        receiver=receiver,
        changed_at=max(row.changed_at, event.at),
        summary=summary,
        sender_event=event if out else row.sender_event,
        receiver_event=row.receiver_event if out else event,
    )


@dataclass(frozen=True, slots=True)
class Skipped:
    """What the journal readers passed over: lines that were not events, bytes of files larger
    than a journal grows, and dirs or files that are not ours."""

    lines: int = 0
    bytes: int = 0
    unreadable: int = 0

    def __bool__(self) -> bool:
        return bool(self.lines or self.bytes or self.unreadable)


class WatchModel:
    """The sessions and the feed (see the module's docstring). Whatever changes what is shown
    raises :attr:`version`, so the view redraws only then."""

    def __init__(
        self,
        *,
        max_messages: int = MAX_FEED_MESSAGES,
        wanted: str | None = None,
        appear_grace_ms: int = APPEAR_GRACE_MS,
    ) -> None:
        if max_messages < 1:
            raise ValueError("the feed keeps at least one message")
        self.max_messages = max_messages
        self.appear_grace_ms = appear_grace_ms
        #: The session the feed is narrowed to (a name, an instance id or its start), or ``None``.
        self.wanted = wanted
        self.paused = False
        self.skipped = Skipped()
        #: A problem with the listing itself (the peers dir unusable), shown until it clears.
        self.listing_problem: str | None = None
        self.listed = False
        #: Grows whenever something shown changed: the view redraws only then.
        self.version = 0
        self._sessions: dict[str, SessionView] = {}
        #: The sessions as the line modes last reported them, and when each was first listed.
        self._reported: dict[str, SessionView] = {}
        self._first_seen: dict[str, int] = {}
        self._rows: dict[tuple[str, str], MessageRow] = {}
        self._journaled: set[str] = set()
        self._frozen: tuple[MessageRow, ...] = ()

    # -- sessions --------------------------------------------------------------------------------

    @property
    def sessions(self) -> tuple[SessionView, ...]:
        """The live sessions, in the listing's order (newest first)."""
        return tuple(self._sessions.values())

    def update_sessions(
        self, registered: Sequence[Registered], live: Mapping[str, LiveState], at: int
    ) -> list[SessionChange]:
        """Take a new listing (and the live states read beside it, by instance id); answer what
        changed since the last one. A new session without a live state is reported only once it
        was listed for :attr:`appear_grace_ms` (its live state may be a moment behind it)."""
        after: dict[str, SessionView] = {}
        for entry in registered:
            after.setdefault(entry.instance_id, session_view(entry, live.get(entry.instance_id)))
        if after != self._sessions or not self.listed:
            self.version += 1
        self._sessions = after
        self.listed = True
        # Reported: the sessions already reported, and the new ones whose kind is known (or
        # that have been listed for the grace without a live state).
        first_seen = {key: self._first_seen.get(key, at) for key in after}
        self._first_seen = first_seen
        reported = {
            key: view
            for key, view in after.items()
            if key in self._reported
            or view.journaled
            or view.remote_machine is not None
            or at - first_seen[key] >= self.appear_grace_ms
        }
        found = changes(self._reported, reported, at)
        self._reported = reported
        return found

    # -- the feed --------------------------------------------------------------------------------

    @property
    def journaled(self) -> frozenset[str]:
        """Instance ids with a journal of ours (their side of a message is known)."""
        return frozenset(self._journaled)

    def set_journaled(self, instance_ids: Collection[str]) -> bool:
        """The journal dirs found; answers whether that changed what a row says."""
        new = set(instance_ids)
        if new == self._journaled:
            return False
        self._journaled = new
        self.version += 1
        return True

    def add_events(self, events: Iterable[Event]) -> bool:
        """Fold events into the feed; answers whether any arrived. A session that wrote an event
        has a journal, whatever the last listing of dirs said."""
        added = False
        rows = self._rows
        for event in events:
            added = True
            self._journaled.add(event.session.instance_id)
            key = _row_key(event)
            rows[key] = fold(rows.get(key), event)
            if len(rows) > 2 * self.max_messages:
                self._trim()  # amortised: a long history read at start stays bounded too
        if len(rows) > self.max_messages:
            self._trim()
        if added:
            self.version += 1
        return added

    def _trim(self) -> None:
        kept = heapq.nlargest(self.max_messages, self._rows.items(), key=lambda i: i[1].changed_at)
        # In place: add_events holds the dict while it trims.
        self._rows.clear()
        self._rows.update(kept)

    def rows(self) -> tuple[MessageRow, ...]:
        """The feed as shown: the newest change first, narrowed by the filter; while paused, the
        rows as they were when the pause began."""
        if self.paused:
            return self._frozen
        return self._current()

    def _current(self) -> tuple[MessageRow, ...]:
        ordered = sorted(self._rows.values(), key=lambda row: row.changed_at, reverse=True)
        wanted = self.wanted
        if wanted is None:
            return tuple(ordered)
        return tuple(row for row in ordered if row.involves(wanted))

    @property
    def size(self) -> int:
        """Messages held (whatever the filter)."""
        return len(self._rows)

    # -- keys ------------------------------------------------------------------------------------

    def toggle_pause(self) -> None:
        """Pause the feed (its rows stay as they are) or resume it."""
        self.paused = not self.paused
        self._frozen = self._current() if self.paused else ()
        self.version += 1

    def cycle_filter(self) -> None:
        """all → each live session in turn → all."""
        ids = list(self._sessions)
        current = self.filter_session()
        if not ids:
            self.wanted = None
        elif self.wanted is None:
            self.wanted = ids[0]
        elif current is not None:
            index = ids.index(current.instance_id) + 1
            self.wanted = ids[index] if index < len(ids) else None
        else:
            # A --session naming no live session, or one that went: start at the first.
            self.wanted = ids[0]
        if self.paused:
            self._frozen = self._current()
        self.version += 1

    def filter_session(self) -> SessionView | None:
        """The live session the filter names, if one does."""
        wanted = self.wanted
        if wanted is None:
            return None
        found = self._sessions.get(wanted)
        if found is not None:
            return found
        return next((view for view in self._sessions.values() if view.matches(wanted)), None)

    def note_skipped(self, skipped: Skipped) -> bool:
        """The readers' totals; answers whether they changed."""
        if skipped == self.skipped:
            return False
        self.skipped = skipped
        self.version += 1
        return True

    def note_listing_problem(self, problem: str | None) -> None:
        """The listing failed (or works again, with ``None``)."""
        if problem != self.listing_problem:
            self.listing_problem = problem
            self.version += 1


__all__ = [
    "APPEAR_GRACE_MS",
    "MAX_FEED_MESSAGES",
    "ChangeKind",
    "MessageRow",
    "Registered",
    "SessionChange",
    "SessionView",
    "Skipped",
    "WatchModel",
    "changes",
    "fold",
    "session_view",
]
