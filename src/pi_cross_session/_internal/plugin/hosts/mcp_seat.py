"""When an MCP host can take a peer message: the MCP adapter's whole model of turns, in one place.

An MCP host (Claude Code, Codex CLI, Gemini CLI, Cursor, Zed) never tells its servers when its
model's turn starts or ends, and a server cannot start a turn. What a server does see is the
moment it hands a message over: a channel notification written to the host (**push**), or a
``read_pi_messages`` / ``wait_pi_message`` result that carries it (**pull**). So the adapter does
not pretend to know the host's turns; it reports to the runtime a model of its own, with one rule:

    *The host is safely idle exactly while someone is ready to take a message now.*

* **Push** (a host with Claude Code's channels): ready whenever no notification is being written,
  once the host has finished initializing.
* **Pull** (every other host): ready only while a read or a wait is in progress. The rest of the
  time the host is "busy with its own work" (reported as a turn of the local user's, the one
  source admission accepts as known): messages from senders that understand ``queued`` wait in the
  receiver's one bounded queue (50 messages, 30 s each) and end ``expired`` when nobody reads them
  in time; a sender that does not understand ``queued`` is told ``busy``.
* **A hand-over is a turn.** Each message handed over starts a peer turn (inside the host's
  ``submit``, so admission sees its turn start at once) that ends cleanly when the hand-over is
  done: the notification is written, or the message is in the read result. A clean end lets the
  runtime flush the next queued message, one per hand-over, exactly as after a real turn. A
  write that fails ends the turn unsafely, which closes the inbox (the host connection is gone).
* **Delivered** is reported only for pull, when the read result that carries the message is
  complete (:meth:`Seat.delivered`). A pushed notification gives no sign that it entered the
  conversation, so a pushed message stays ``submitted``.

Pure: no I/O, no clock. The adapter calls :meth:`Seat.take` from the host's ``submit`` and
everything else from its own tasks; the runtime is reached only through :class:`TurnReports`,
which :class:`~pi_cross_session._internal.plugin.runtime.SessionRuntime` satisfies. This class is
the one place that translates the MCP host into the turn tracker's events
(:mod:`~pi_cross_session._internal.security.turns`): the tracker, not the seat, decides what
admission and the inbox latch make of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.security.admission import Delivery
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import (
    ModelReplied,
    OurMessageStarted,
    TurnEnded,
    TurnEnding,
    TurnEvent,
    TurnStarted,
)


class DeliveryMode(StrEnum):
    """How peer messages reach the host's model."""

    #: Channel notifications, written as messages arrive (Claude Code's channels).
    PUSH = "push"
    #: ``read_pi_messages`` / ``wait_pi_message`` results (any MCP host).
    PULL = "pull"


class TurnReports(Protocol):
    """Where the seat reports its turn events (the runtime, which feeds its turn tracker)."""

    def on_turn(self, event: TurnEvent) -> None:
        """A normalised turn event happened."""
        ...


class SeatBusyError(LocalProtocolError):
    """A message was handed over while nobody could take it (admission never does this)."""


class Seat:
    """The MCP host's turn model; see the module docstring."""

    def __init__(self, mode: DeliveryMode, reports: TurnReports) -> None:
        self.mode = mode
        self._reports = reports
        self._own_turn = False
        self._handing: Delivery | None = None
        self._readers = 0
        self._ready = False
        self._closed = False

    # -- what the runtime asks -------------------------------------------------------------------

    def is_idle(self) -> bool:
        """True exactly while a message handed over now would be taken at once."""
        if self._closed or not self._ready or self._handing is not None or self._own_turn:
            return False
        return self.mode is DeliveryMode.PUSH or self._readers > 0

    @property
    def handing(self) -> Delivery | None:
        """The message being handed over, if any."""
        return self._handing

    @property
    def readers(self) -> int:
        """Reads and waits in progress."""
        return self._readers

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """The runtime is running: until the host is ready, it is busy with its own work."""
        if not self._closed:
            self._begin_own_turn()

    def host_ready(self) -> None:
        """The host finished initializing: in push mode it can take messages from now on."""
        if self._closed or self._ready:
            return
        self._ready = True
        if self.mode is DeliveryMode.PUSH or self._readers > 0:
            self._end_own_turn()

    def close(self) -> None:
        """The host connection is ending: nothing is taken any more."""
        self._closed = True

    # -- hand-overs ------------------------------------------------------------------------------

    def take(self, delivery: Delivery) -> None:
        """Called from the host's ``submit``: the message is being handed over (a peer turn)."""
        if not self.is_idle():
            raise SeatBusyError("the MCP host cannot take a message now")
        self._handing = delivery
        self._reports.on_turn(TurnStarted(by=Provenance.PEER))

    def handed(self, *, ok: bool = True) -> Delivery | None:
        """The hand-over is done (``ok``) or failed: its turn ends; returns its message.

        A failed hand-over (the host connection broke) ends the turn unsafely, which closes the
        inbox; in pull mode with no reader left, the host goes back to its own work.
        """
        delivery = self._handing
        if delivery is None:
            return None
        self._handing = None
        self._reports.on_turn(TurnEnded(TurnEnding.STOP if ok else TurnEnding.ERROR))
        if self.mode is DeliveryMode.PULL and self._readers == 0:
            self._begin_own_turn()
        return delivery

    def delivered(self, delivery: Delivery) -> None:
        """A read result carrying ``delivery`` is complete: report it delivered."""
        self._reports.on_turn(OurMessageStarted(delivery.message_id, delivery.sender.instance_id))

    # -- readers (pull) --------------------------------------------------------------------------

    def reader_arrived(self) -> None:
        """A read or wait began: the host's own work pauses, so queued messages flow."""
        self._readers += 1
        if self._ready and self._handing is None:
            self._end_own_turn()

    def reader_left(self) -> None:
        """A read or wait ended: with nobody left to read, the host is busy with its own work."""
        self._readers = max(0, self._readers - 1)
        if self.mode is DeliveryMode.PULL and self._readers == 0 and self._handing is None:
            self._begin_own_turn()

    # -- internals -------------------------------------------------------------------------------

    def _begin_own_turn(self) -> None:
        if self._own_turn or self._closed:
            return
        self._own_turn = True
        # Reported as the local user's: the host's conversation is its user's, and admission
        # queues only behind a turn of known source. Its opening is over at once: nothing that
        # arrives during it (a pulled message reported delivered) relabels it.
        self._reports.on_turn(TurnStarted(by=Provenance.USER))
        self._reports.on_turn(ModelReplied())

    def _end_own_turn(self) -> None:
        if not self._own_turn:
            return
        self._own_turn = False
        self._reports.on_turn(TurnEnded(TurnEnding.STOP))


__all__ = ["DeliveryMode", "Seat", "SeatBusyError", "TurnReports"]
