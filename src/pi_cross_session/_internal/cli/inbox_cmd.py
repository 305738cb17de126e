"""``pi-cross-session inbox``: a live session without a model that prints what happens to it.

It runs on the same code as every headless session
(:func:`pi_cross_session._internal.plugin.hosts.headless.serve_inbox`); this module adds only the
signals (SIGINT/SIGTERM stop it, SIGUSR1 prints its status, SIGUSR2 ends the current busy turn at
once) and the printing:

* text: one line per event, stamped with the local time; a received message's body follows its
  header indented by four spaces (sanitised: a peer's line can never start where ours do, nor
  clear the screen, set the title or write the clipboard);
* ``--json``: one object per event, each with ``at`` (epoch ms) and, for a message state, the
  state as a sender asking about it would hear it — ``delivered`` once the host confirmed the
  message entered its conversation (the row itself stays ``submitted``), with ``delivered`` true.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any

import anyio

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import PREFIX, Console
from pi_cross_session._internal.plugin.hosts.headless import (
    DEFAULT_BUSY_S,
    HeadlessHost,
    HostEvent,
    serve_inbox,
)
from pi_cross_session._internal.plugin.render import host_status, receiving
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.registration import PublicPeer
from pi_cross_session._internal.protocol.sanitize import line
from pi_cross_session._internal.security.rows import Row


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class InboxPrinter:
    """Prints inbox events as stamped text lines or JSON objects, flushing each one."""

    def __init__(self, console: Console, *, as_json: bool, refusing: bool) -> None:
        self._console = console
        self._json = as_json
        self._refusing = refusing

    def emit(self, event: str, shown: str, *, at_ms: int | None = None, **data: Any) -> None:
        """One event: ``shown`` (already sanitised) in text mode, ``data`` as JSON."""
        at = _now_ms() if at_ms is None else at_ms
        if self._json:
            self._console.json({"event": event, "at": at, **data}, indent=None)
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(at / 1000))
            self._console.result(f"[{stamp}] {shown}")

    def ready(self, runtime: SessionRuntime) -> None:
        """The inbox is registered and listening."""
        registration = runtime.registration()
        assert registration is not None
        self.emit(
            "ready",
            words.inbox_ready(
                registration.name,
                registration.ref,
                registration.id,
                os.getpid(),
                refusing=self._refusing,
            ),
            name=registration.name,
            sessionId=registration.id,
            instanceId=registration.instance_id,
            ref=registration.ref,
            inbound=registration.inbound,
            pid=registration.pid,
        )

    def row(self, row: Row) -> None:
        """A message changed state (or its diagnostic changed)."""
        shown = Code.DELIVERED if row.delivered else row.state
        self.emit(
            "state",
            receiving.inbox_row(row),
            at_ms=row.updated_at_ms,
            messageId=row.message_id,
            state=shown,
            delivered=row.delivered,
            source=row.sender_instance_id,
            sender=row.sender_name,
            summary=row.summary,
            diagnostic=row.diagnostic,
        )

    def host_event(self, event: HostEvent) -> None:
        """A message entered the (simulated) conversation, or the runtime has a notice."""
        delivery = event.delivery
        if delivery is None:
            self.emit("notice", f"notice: {line(event.text)}", text=event.text)
            return
        sender = delivery.sender
        self.emit(
            "message",
            receiving.inbox_message(delivery),
            messageId=delivery.message_id,
            sender={"name": sender.name, "sessionId": sender.id, "instanceId": sender.instance_id},
            summary=delivery.summary,
            text=delivery.text,
            sentAt=delivery.sent_at,
        )

    def status(self, runtime: SessionRuntime) -> None:
        """The receiver's figures (SIGUSR1, and once more when the inbox stops)."""
        snapshot = runtime.snapshot()
        if snapshot is None:
            return
        checks = runtime.peer_checks()
        if self._json:
            data = {**receiving.status_data(snapshot), **host_status.peer_check_data(checks)}
            self.emit("status", "", **data, inbound=runtime.inbound)
            return
        registration = runtime.registration()
        me = None if registration is None else PublicPeer.from_registration(registration)
        lines = [
            receiving.status_text(snapshot, me=me, reopen=runtime.reopen),
            *host_status.peer_check_lines(checks),
            words.inbox_inbound(self._refusing),
        ]
        self.emit("status", "status:\n" + "\n".join(lines))

    def stopped(self, error: BaseException | None) -> None:
        """The inbox's last event."""
        text = None if error is None else str(error)
        extra: dict[str, Any] = {"error": text}
        if isinstance(error, CrossSessionError):
            extra["code"] = error.code
        self.emit("stopped", words.inbox_stopped(text), **extra)


def run(args: argparse.Namespace, console: Console) -> int:
    """Serve until a signal stops the inbox."""
    return anyio.run(_inbox, args, console)


async def _inbox(args: argparse.Namespace, console: Console) -> int:
    printer = InboxPrinter(console, as_json=args.json, refusing=args.refuse)
    busy_s = DEFAULT_BUSY_S if args.busy is None else args.busy
    host = HeadlessHost(name=args.name, cwd=args.cwd, busy_s=busy_s, on_event=printer.host_event)
    runtime = SessionRuntime(
        host,
        options=RuntimeOptions(inbound="refuse" if args.refuse else "accept", kind="inbox"),
        on_row=printer.row,
        # No /cross-session-resume here: a closed inbox says what reopens this one.
        reopen=receiving.REOPEN_CLI_INBOX,
    )
    try:
        await _serve(printer, host, runtime)
    except (CrossSessionError, BaseExceptionGroup) as exc:
        cause = exc if isinstance(exc, CrossSessionError) else _first_cross_session_error(exc)
        if cause is None:
            raise
        printer.stopped(cause)
        console.problem(f"{PREFIX}: {line(cause.code)}: {line(str(cause))}")
        return exits.EXIT_LOCAL
    failure = runtime.last_error
    printer.stopped(failure)
    return exits.EXIT_LOCAL if failure is not None else exits.EXIT_OK


def _first_cross_session_error(
    group: BaseExceptionGroup[BaseException],
) -> CrossSessionError | None:
    for exc in group.exceptions:
        if isinstance(exc, CrossSessionError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_cross_session_error(exc)
            if found is not None:
                return found
    return None


async def _serve(printer: InboxPrinter, host: HeadlessHost, runtime: SessionRuntime) -> None:
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    with anyio.open_signal_receiver(*signals) as received:
        async with anyio.create_task_group() as group:
            await group.start(serve_inbox, host, runtime)
            printer.ready(runtime)

            async def watch_signals() -> None:
                async for number in received:
                    if number == signal.SIGUSR1:
                        printer.status(runtime)
                        continue
                    if number == signal.SIGUSR2:
                        host.end_turn()
                        continue
                    runtime.request_stop()
                    return

            group.start_soon(watch_signals)
            await runtime.wait_finished()
            printer.status(runtime)
            group.cancel_scope.cancel()
