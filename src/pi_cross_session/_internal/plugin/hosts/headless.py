"""A host without a model: a live session that receives messages and reports them.

The command line's ``inbox`` runs on it, and so do tests that need a receiving session without an
agent. A submitted message is "processed" as a short simulated turn: the host goes busy at once,
shows the message, stays busy for ``busy_s`` seconds (or until :meth:`HeadlessHost.end_turn`) and
ends the turn cleanly. While it is busy, capable senders are told ``queued`` and their messages are
delivered one per settled turn, exactly as in a real session.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.security.admission import Delivery
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import (
    OurMessageStarted,
    TurnEnded,
    TurnEnding,
    TurnStarted,
)

logger = logging.getLogger(__name__)

#: How long a simulated turn keeps the inbox busy.
DEFAULT_BUSY_S: Final = 1.0
#: Submissions waiting for their simulated turn; the receiver submits one at a time, so one
#: slot would do — a few more only absorb scheduling jitter.
MAX_PENDING_TURNS: Final = 4


@dataclass(frozen=True, slots=True)
class HostEvent:
    """Something the headless host reports: a delivered message, or a notice."""

    kind: str  # "message" or "notice"
    text: str
    delivery: Delivery | None = None


class HeadlessHost:
    """A :class:`~pi_cross_session._internal.plugin.host.HostPort` whose turns are simulated."""

    def __init__(
        self,
        *,
        name: str | None,
        cwd: str | None = None,
        session_id: str | None = None,
        busy_s: float = DEFAULT_BUSY_S,
        on_event: Callable[[HostEvent], None] | None = None,
    ) -> None:
        self._name = name
        self._cwd = cwd or os.getcwd()
        self._session_id = session_id or str(uuid.uuid4())
        self._busy_s = busy_s
        self._on_event = on_event
        self._busy = False
        self._turn_over: anyio.Event | None = None
        self.runtime: SessionRuntime | None = None
        send: MemoryObjectSendStream[Delivery]
        receive: MemoryObjectReceiveStream[Delivery]
        send, receive = anyio.create_memory_object_stream[Delivery](MAX_PENDING_TURNS)
        self._turns_in = send
        self._turns_out = receive
        self.delivered: list[Delivery] = []

    # -- HostPort --------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """A fresh id per inbox process."""
        return self._session_id

    @property
    def session_name(self) -> str | None:
        """The ``--name`` given, if any."""
        return self._name

    @property
    def cwd(self) -> str:
        """The ``--cwd`` given, else the process's."""
        return self._cwd

    def is_idle(self) -> bool:
        """True unless a simulated turn is running."""
        return not self._busy

    def submit(self, delivery: Delivery, content: str) -> None:
        """Queue the simulated turn; raises when the host cannot take it (never blocks)."""
        del content  # there is no model to read the framed text
        self._turns_in.send_nowait(delivery)

    def notify(self, text: str) -> None:
        """Report a notice to whoever watches this inbox."""
        self._emit(HostEvent(kind="notice", text=text))

    def end_turn(self) -> bool:
        """End the simulated turn in progress now rather than after ``busy_s``.

        Returns whether a turn was running; with none, nothing happens (the next turn still
        lasts ``busy_s``). Call it from the loop the host runs on.
        """
        if self._turn_over is None:
            return False
        self._turn_over.set()
        return True

    # -- the simulated turns ---------------------------------------------------------------------

    async def run_turns(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Process submitted messages one turn at a time, until cancelled."""
        task_status.started()
        async with self._turns_in, self._turns_out:
            async for delivery in self._turns_out:
                await self._turn(delivery)

    async def _turn(self, delivery: Delivery) -> None:
        runtime = self.runtime
        self._busy = True
        try:
            if runtime is not None:
                runtime.on_turn(TurnStarted(by=Provenance.PEER))
            # Shown first, then confirmed: a watcher sees the message before it is "delivered",
            # as a real host shows a message when it enters the conversation.
            self.delivered.append(delivery)
            self._emit(HostEvent(kind="message", text=delivery.text, delivery=delivery))
            if runtime is not None:
                runtime.on_turn(OurMessageStarted(delivery.message_id, delivery.sender.instance_id))
            self._turn_over = anyio.Event()
            with anyio.move_on_after(self._busy_s):
                await self._turn_over.wait()
        finally:
            self._turn_over = None
            self._busy = False
            if runtime is not None:
                runtime.on_turn(TurnEnded(TurnEnding.STOP))

    def _emit(self, event: HostEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a broken printer must not break the inbox
            logger.exception("inbox event handler failed")


async def serve_inbox(
    host: HeadlessHost,
    runtime: SessionRuntime,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run a headless session until cancelled or until the runtime stops."""
    host.runtime = runtime
    async with anyio.create_task_group() as group:
        await group.start(host.run_turns)
        try:
            await group.start(runtime.run)
            task_status.started()
            await runtime.wait_finished()
        finally:
            with anyio.CancelScope(shield=True):
                await runtime.stop()
            group.cancel_scope.cancel()
