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
from collections.abc import Callable, Mapping, Sequence
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
    PlainStep,
    encode_event,
    journal_dir,
    party_json,
    plain_lines,
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
    # Imported here: the common case (a known value) needs no words.
    from pi_cross_session._internal.plugin.render.host_status import journal_setting_unknown

    return JournalSetting(_POLICIES["off"], journal_setting_unknown(JOURNAL_ENV, value))


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

    ``name`` gives this session's name at the moment of each event (a session may be renamed);
    ``wall_ms`` is the clock of the events this side times itself (refusals, sends).

    Without text, lines are built by :func:`~pi_cross_session._internal.security.io.journal.
    plain_lines` from values already checked, the parties' JSON cached, and a send's lines go out
    in one ``write``: the generic path (an :class:`Event`, ``json.dumps``) cost the sender 1.17×
    and the receiver 1.09× CPU per send (docs/performance.md). With text, every event takes the
    generic path, which also cuts an over-long line.
    """

    def __init__(
        self,
        writer: JournalWriter,
        *,
        instance_id: str,
        name: Callable[[], str],
        wall_ms: Callable[[], int],
        on_moved: Callable[[], None] | None = None,
    ) -> None:
        self.writer = writer
        self.instance_id = instance_id
        self._name = name
        self._me_name: str | None = None
        self._me_json = ""
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
        name: Callable[[], str],
        wall_ms: Callable[[], int],
        on_moved: Callable[[], None] | None = None,
    ) -> SessionJournal:
        """The journal of ``instance_id`` under ``agent_dir`` (nothing is created before the
        first event, and nothing at all when ``policy`` is off)."""
        writer = JournalWriter(journal_dir(agent_dir, instance_id), policy=policy)
        return cls(writer, instance_id=instance_id, name=name, wall_ms=wall_ms, on_moved=on_moved)

    @property
    def enabled(self) -> bool:
        """True unless the user turned journaling off."""
        return self.writer.policy.enabled

    @property
    def directory(self) -> str:
        """This session's journal dir."""
        return self.writer.directory

    def _me(self) -> str:
        # This session's party JSON, made again only when its name changed.
        name = self._name()
        if name != self._me_name:
            self._me_name, self._me_json = name, party_json(name, self.instance_id)
        return self._me_json

    def _lines(
        self,
        direction: Direction,
        message_id: str,
        peer: tuple[str, str],
        steps: Sequence[PlainStep],
        summary: str | None = None,
        text: str | None = None,
    ) -> bytes | None:
        """One message's lines, one per step (the first step's carries the text, when kept), or
        ``None`` when they cannot be built (a word outside the vocabulary from a socket's errno,
        say): counted as failures, never raised at the send or the admission they describe."""
        writer = self.writer
        try:
            if not writer.policy.keep_text:
                return plain_lines(direction, message_id, self._me(), party_json(*peer), steps)
            me, other = Party(self._name(), self.instance_id), Party(*peer)
            lines = []
            for index, (at, kind, code) in enumerate(steps):
                event = Event(
                    at,
                    kind,
                    message_id,
                    me,
                    other,
                    code=code,
                    summary=summary,
                    text=text if index == 0 else None,
                    direction=direction,
                )
                line = encode_event(event, keep_text=True, max_line_bytes=writer.max_line_bytes)
                if line is None:
                    return None
                lines.append(line)
        except (TypeError, ValueError):
            return None
        return b"".join(lines)

    def _write(self, lines: bytes | None, count: int = 1) -> None:
        self.writer.record_lines(lines, count)

    # -- the receiver's side (AdmissionJournal) ------------------------------------------------

    def moved(self, row: Row, text: str | None) -> None:
        """A row was born or moved: journal its new state."""
        if not self.writer.policy.enabled:
            return
        kind = _ROW_EVENTS[row.state]
        if kind is EventKind.SUBMITTED and row.delivered:
            kind = EventKind.DELIVERED
        code = row.state.value if kind is EventKind.DROPPED else None
        self._write(
            self._lines(
                Direction.IN,
                row.message_id,
                (row.sender_name, row.sender_instance_id),
                ((row.updated_at_ms, kind, code),),
                summary=row.summary,
                text=text,
            )
        )
        if self._on_moved is not None:
            self._on_moved()

    def refused(self, sender: Registration, message: Message, code: str) -> None:
        """An authenticated sender's message was refused."""
        if not self.writer.policy.enabled:
            return
        self._write(
            self._lines(
                Direction.IN,
                message.message_id,
                (sender.name, sender.instance_id),
                ((self._wall_ms(), EventKind.REFUSED, code),),
                summary=message.summary,
                text=message.text,
            )
        )

    # -- the sender's side ---------------------------------------------------------------------

    def send_ended(self, report: SendReport, message: Message) -> None:
        """A send of ``message`` ended as ``report``: ``sent`` if its frame went out, then its
        receipt, refusal or unknown ending, in one ``write`` (a wait for delivery is told by
        :meth:`learnt`)."""
        target = report.target
        if not self.writer.policy.enabled or target is None:
            return
        steps: list[PlainStep] = []
        if report.message_written:
            # Stamped with the message's own time (taken just before the exchange), so that the
            # merged history shows it before the receiver's ``admitted``.
            steps.append((message.sent_at, EventKind.SENT, None))
        receipt = _RECEIPT_EVENTS.get(report.status) if report.ok else None
        if receipt is not None:
            steps.append((self._wall_ms(), receipt, None))
        elif report.state is SenderState.RECEIPT_UNKNOWN:
            steps.append((self._wall_ms(), EventKind.RECEIPT_UNKNOWN, report.status))
        else:
            steps.append((self._wall_ms(), EventKind.REFUSED, report.status))
        # One write for the send; the text (when kept) on its first line.
        lines = self._lines(
            Direction.OUT,
            message.message_id,
            (target.name, target.instance_id),
            steps,
            summary=message.summary,
            text=message.text,
        )
        self._write(lines, len(steps))

    def learnt(
        self, report: SendReport, message_id: str, state: str, summary: str | None = None
    ) -> None:
        """A receiver answered that the message sent as ``report`` is now ``state``: journal it
        when it is an ending (delivered, expired, dropped…)."""
        kind = _DELIVERY_EVENTS.get(state)
        target = report.target
        if not self.writer.policy.enabled or kind is None or target is None:
            return
        code = state if kind is EventKind.DROPPED else None
        self._write(
            self._lines(
                Direction.OUT,
                message_id,
                (target.name, target.instance_id),
                ((self._wall_ms(), kind, code),),
                summary=summary,
            )
        )

    def close(self) -> None:
        """Close the journal's file."""
        self.writer.close()


__all__ = ["JOURNAL_ENV", "JournalSetting", "SessionJournal", "journal_setting"]
