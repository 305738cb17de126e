"""What a session of ours writes to its event journal, and where the user turns it off.

:class:`SessionJournal` turns what happens to messages into journal events: the receiver's row
moves and refusals (it is the :class:`~pi_cross_session._internal.security.admission.
AdmissionJournal` of an incarnation) and the sender's endings (:mod:`.outbound` tells it each
send's report). Every session of ours has one: the pi-python extension, the MCP server, the
command line's inbox (through :class:`~pi_cross_session._internal.plugin.runtime.SessionRuntime`)
and the command line's sends (under their sender identity's instance id).

**Writes on the event loop.** An event is one ``os.write`` of one short line to a file in the page
cache: a few microseconds, less than handing it to a thread would cost, and it keeps the order of
the events. ``bench/exchange.py --journal`` measures what it adds per send.

**The setting.** :data:`JOURNAL_ENV` (``PI_CROSS_SESSION_JOURNAL``) is read by every kind of
session: ``on`` (the default: events without message text), ``text`` (also the message's text and
its summary, whose default is the text's first line), ``off`` (no journal, no live state). Any
other value turns journaling off and says so: the user meant something, and writing less is the
side that cannot leak.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pi_cross_session._internal.protocol.codes import Code, SenderState
from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    JournalPolicy,
    JournalWriter,
    Party,
    journal_dir,
)
from pi_cross_session._internal.security.rows import Row, RowState

if TYPE_CHECKING:  # annotations only: a command-line send imports this module
    from pi_cross_session._internal.plugin.reports import SendReport
    from pi_cross_session._internal.protocol.frames import Message
    from pi_cross_session._internal.protocol.registration import Registration

#: The environment variable every session of ours reads for its journal setting.
JOURNAL_ENV: Final = "PI_CROSS_SESSION_JOURNAL"

_POLICIES: Final = {
    "on": JournalPolicy(enabled=True, keep_text=False),
    "text": JournalPolicy(enabled=True, keep_text=True),
    "off": JournalPolicy(enabled=False, keep_text=False),
}


@dataclass(frozen=True, slots=True)
class JournalSetting:
    """The journal policy in effect, and a sentence for the user when their value was not one
    we know."""

    policy: JournalPolicy
    warning: str | None = None


def journal_setting(environ: Mapping[str, str] | None = None) -> JournalSetting:
    """The policy :data:`JOURNAL_ENV` asks for (unset or empty: the default, ``on``)."""
    value = (os.environ if environ is None else environ).get(JOURNAL_ENV, "").strip()
    if not value:
        return JournalSetting(JournalPolicy())
    policy = _POLICIES.get(value.lower())
    if policy is not None:
        return JournalSetting(policy)
    return JournalSetting(
        _POLICIES["off"],
        f"{JOURNAL_ENV} is {value[:40]!r}, which is not on, text or off: the event journal is off",
    )


#: Row states and the event each one is journaled as (a ``dropped_*`` state keeps its word as
#: the code); a ``submitted`` row the host confirmed is ``delivered``.
_ROW_EVENTS: Final = {
    RowState.ACCEPTED: EventKind.ADMITTED,
    RowState.QUEUED: EventKind.QUEUED,
    RowState.SUBMITTED: EventKind.SUBMITTED,
    RowState.INJECTION_FAILED: EventKind.INJECTION_FAILED,
    RowState.EXPIRED: EventKind.EXPIRED,
    RowState.DROPPED: EventKind.DROPPED,
    RowState.DROPPED_CANCELLED: EventKind.DROPPED,
    RowState.DROPPED_USER_RESET: EventKind.DROPPED,
    RowState.DROPPED_SHUTDOWN: EventKind.DROPPED,
    RowState.DROPPED_GOAL_REVOKED: EventKind.DROPPED,
}

#: A receipt word and the event a sender journals it as.
_RECEIPT_EVENTS: Final = {
    Code.SUBMITTED.value: EventKind.SUBMITTED,
    Code.QUEUED.value: EventKind.QUEUED,
    Code.ACCEPTED.value: EventKind.ADMITTED,
}

#: What a sender's wait for delivery learnt, as an event (the other outcomes say nothing new).
_DELIVERY_EVENTS: Final = {
    Code.DELIVERED.value: EventKind.DELIVERED,
    Code.EXPIRED.value: EventKind.EXPIRED,
    Code.INJECTION_FAILED.value: EventKind.INJECTION_FAILED,
    Code.DROPPED.value: EventKind.DROPPED,
    Code.DROPPED_CANCELLED.value: EventKind.DROPPED,
    Code.DROPPED_SHUTDOWN.value: EventKind.DROPPED,
    Code.DROPPED_USER_RESET.value: EventKind.DROPPED,
    Code.DROPPED_GOAL_REVOKED.value: EventKind.DROPPED,
}


class SessionJournal:
    """The journal of one session identity (one instance id).

    ``me`` names this session at the moment of each event (a session may be renamed);
    ``wall_ms`` is the clock of the events this side times itself (refusals, sends).
    """

    def __init__(
        self,
        writer: JournalWriter,
        *,
        me: Callable[[], Party],
        wall_ms: Callable[[], int],
        on_moved: Callable[[], None] | None = None,
    ) -> None:
        self.writer = writer
        self._me = me
        self._wall_ms = wall_ms
        # Told after each receiver event, so that the live state can follow the queue.
        self._on_moved = on_moved

    @classmethod
    def open(
        cls,
        agent_dir: str,
        instance_id: str,
        policy: JournalPolicy,
        *,
        me: Callable[[], Party],
        wall_ms: Callable[[], int],
        on_moved: Callable[[], None] | None = None,
    ) -> SessionJournal:
        """The journal of ``instance_id`` under ``agent_dir`` (nothing is created before the
        first event, and nothing at all when ``policy`` is off)."""
        writer = JournalWriter(journal_dir(agent_dir, instance_id), policy=policy)
        return cls(writer, me=me, wall_ms=wall_ms, on_moved=on_moved)

    def _record(self, *args: object, **fields: object) -> None:
        # An event our code cannot build (a word outside the vocabulary from a socket's errno, say)
        # is counted as a journal failure; it never fails the send or the admission it describes.
        try:
            event = Event(*args, **fields)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.writer.failures += 1
            return
        self.writer.record(event)

    @property
    def enabled(self) -> bool:
        """True unless the user turned journaling off."""
        return self.writer.policy.enabled

    @property
    def directory(self) -> str:
        """This session's journal dir."""
        return self.writer.directory

    # -- the receiver's side (AdmissionJournal) ------------------------------------------------

    def moved(self, row: Row, text: str | None) -> None:
        """A row was born or moved: journal its new state."""
        if not self.writer.policy.enabled:
            return
        kind = _ROW_EVENTS[row.state]
        if kind is EventKind.SUBMITTED and row.delivered:
            kind = EventKind.DELIVERED
        self._record(
            row.updated_at_ms,
            kind,
            row.message_id,
            self._me(),
            Party(row.sender_name, row.sender_instance_id),
            code=row.state.value if kind is EventKind.DROPPED else None,
            summary=row.summary,
            text=text,
            direction=Direction.IN,
        )
        if self._on_moved is not None:
            self._on_moved()

    def refused(self, sender: Registration, message: Message, code: str) -> None:
        """An authenticated sender's message was refused."""
        if not self.writer.policy.enabled:
            return
        self._record(
            self._wall_ms(),
            EventKind.REFUSED,
            message.message_id,
            self._me(),
            Party(sender.name, sender.instance_id),
            code=code,
            summary=message.summary,
            text=message.text,
            direction=Direction.IN,
        )

    # -- the sender's side ---------------------------------------------------------------------

    def send_ended(self, report: SendReport, message: Message) -> None:
        """A send of ``message`` ended as ``report``: ``sent`` if its frame went out, then its
        receipt, refusal or unknown ending (a wait for delivery is told by :meth:`learnt`)."""
        target = report.target
        if not self.writer.policy.enabled or target is None:
            return
        peer = Party(target.name, target.instance_id)
        at = self._wall_ms()

        def record(kind: EventKind, code: str | None = None, *, first: bool = False) -> None:
            self._record(
                at,
                kind,
                message.message_id,
                self._me(),
                peer,
                code=code,
                summary=message.summary,
                text=message.text if first else None,
                direction=Direction.OUT,
            )

        if report.message_written:
            # Stamped with the message's own time (taken just before the exchange), so that the
            # merged history shows it before the receiver's ``admitted``.
            self._record(
                message.sent_at,
                EventKind.SENT,
                message.message_id,
                self._me(),
                peer,
                summary=message.summary,
                text=message.text,
                direction=Direction.OUT,
            )
        receipt = _RECEIPT_EVENTS.get(report.status) if report.ok else None
        if receipt is not None:
            record(receipt)
        elif report.state is SenderState.RECEIPT_UNKNOWN:
            record(EventKind.RECEIPT_UNKNOWN, report.status)
        else:
            record(EventKind.REFUSED, report.status, first=not report.message_written)

    def learnt(
        self, report: SendReport, message_id: str, state: str, summary: str | None = None
    ) -> None:
        """A receiver answered that the message sent as ``report`` is now ``state``: journal it
        when it is an ending (delivered, expired, dropped…)."""
        kind = _DELIVERY_EVENTS.get(state)
        target = report.target
        if not self.writer.policy.enabled or kind is None or target is None:
            return
        self._record(
            self._wall_ms(),
            kind,
            message_id,
            self._me(),
            Party(target.name, target.instance_id),
            code=state if kind is EventKind.DROPPED else None,
            summary=summary,
            direction=Direction.OUT,
        )

    def close(self) -> None:
        """Close the journal's file."""
        self.writer.close()


__all__ = ["JOURNAL_ENV", "JournalSetting", "SessionJournal", "journal_setting"]
