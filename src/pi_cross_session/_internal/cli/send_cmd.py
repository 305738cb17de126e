"""``pi-cross-session send``: send one message, print its receipt, optionally follow it.

1. Read the message: the ``MESSAGE`` argument, stdin (``-``) or ``--file``; a file or stdin is
   read only up to one frame's size, so a huge input is refused without being read whole.
2. Check every bound before anything is published, each failure saying which bound and by how
   much (exit 1, nothing sent): the text (1,000,000 UTF-16 code units), its frame once
   JSON-escaped (1 MiB), and a ``--summary`` (400 UTF-16 units, as the tool takes it). A summary
   longer than the 200 code points a receiver keeps is sent cut, and the user is told so.
3. Make sure the agent dir exists (a send never creates one: a mistyped ``PI_CODING_AGENT_DIR``
   would become a new, empty network), take a free sender identity (waiting out loud if all are
   busy), list the live sessions as it, and resolve the target, explaining in command-line words
   when no single session matches.
4. Send (:func:`pi_cross_session._internal.plugin.outbound.send`; nothing is retried), and
   remember which identity sent which message id, so ``status`` asks as the same sender.
5. With ``--wait S``: follow the message by status questions (free for the receiver) under the
   rule of :mod:`.follow`, show each state change on a terminal, and report the latest state.

Ctrl-C (SIGINT) cancels the step in progress: before the message was written nothing was sent,
and it says so; after, it prints what is known (the message id, the receipt or the last state
seen, and the ``status`` command that asks later), as text or ``--json``, and exits 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import threading
import time
from dataclasses import dataclass

import anyio
import anyio.abc

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.cli.follow import Follow, FollowResult
from pi_cross_session._internal.cli.sender import (
    AddressFailure,
    IdentityWaitNotes,
    missing_agent_dir,
    resolve,
)
from pi_cross_session._internal.cli.settings import MAX_MESSAGE_INPUT_BYTES
from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.capabilities import can_report_delivery
from pi_cross_session._internal.protocol.codes import RECEIVER_REFUSALS, Code, SenderState
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.frames import frame_to_bytes
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.exchange import ExchangeError
from pi_cross_session._internal.protocol.limits import (
    DELIVERY_POLL_S,
    MAX_FRAME_BYTES,
    MAX_SUMMARY_CODE_POINTS,
    MAX_TEXT_UNITS,
    MAX_TOOL_SUMMARY_UNITS,
)
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.protocol.sanitize import line
from pi_cross_session._internal.protocol.text import (
    is_blank,
    is_well_formed,
    utf16_length,
)

#: Local failures: the input, or this process, not the receiver.
_LOCAL_CODES = frozenset({Code.INVALID_TARGET, Code.INVALID_MESSAGE, Code.NOT_READY})


class InputError(CrossSessionError):
    """The message could not be read (the text says why); nothing was sent."""

    code = Code.INVALID_MESSAGE


def _read_bounded(stream_fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_MESSAGE_INPUT_BYTES:
        chunk = os.read(stream_fd, MAX_MESSAGE_INPUT_BYTES + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_message(args: argparse.Namespace, console: Console) -> str:
    """The message text from the argument, stdin or ``--file`` (raises :class:`InputError`)."""
    if args.file is not None and args.message is not None:
        raise InputError(words.INPUT_CONFLICT)
    if args.file is None and args.message is None:
        raise InputError(words.INPUT_MISSING)
    if args.message is not None and args.message != "-":
        text: str = args.message
        return text
    if args.file is not None:
        source = line(args.file)
        try:
            fd = os.open(args.file, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise InputError(words.input_unreadable(source, exc.strerror or str(exc))) from exc
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_MESSAGE_INPUT_BYTES:
                # Its size is known: say by how much it is over, without reading any of it.
                raise InputError(words.input_too_large(source, MAX_MESSAGE_INPUT_BYTES, st.st_size))
            raw = _read_bounded(fd)
        except OSError as exc:
            raise InputError(words.input_unreadable(source, exc.strerror or str(exc))) from exc
        finally:
            os.close(fd)
    else:
        source = "stdin"
        if sys.stdin.isatty():
            console.problem(words.READING_STDIN)
        raw = _read_bounded(sys.stdin.fileno())
    if len(raw) > MAX_MESSAGE_INPUT_BYTES:
        raise InputError(words.input_too_large(source, MAX_MESSAGE_INPUT_BYTES))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(words.input_not_utf8(source)) from exc


@dataclass(frozen=True, slots=True)
class Checked:
    """A message within every bound, and what the receiver will keep of its summary."""

    #: ``(code points once folded, code points kept)`` when the summary is sent cut.
    summary_cut: tuple[int, int] | None = None


def frame_size(text: str, summary: str | None) -> int:
    """The bytes of the message frame a send of ``text`` writes, newline included: the frame
    :func:`outbound.send` builds (:func:`outbound.new_message`): only its ids and its time differ,
    and not in length."""
    message = outbound.new_message(text, summary, sent_at=time.time_ns() // 1_000_000, goal_id=None)
    return len(frame_to_bytes(message, max_frame_bytes=sys.maxsize))


def check_message(target: str, text: str, summary: str | None) -> Checked | tuple[str, str]:
    """Every bound of the contract, checked before anything is sent: ``(code, detail)`` for
    the first one missed (its words say which and by how much), else what was checked."""
    if is_well_formed(text) and utf16_length(text) > MAX_TEXT_UNITS:
        return (Code.INVALID_MESSAGE, words.text_too_long(utf16_length(text), MAX_TEXT_UNITS))
    cut = None
    if summary is not None and is_well_formed(summary) and not is_blank(summary):
        units = utf16_length(summary)
        if units > MAX_TOOL_SUMMARY_UNITS:
            return (Code.INVALID_MESSAGE, words.summary_too_long(units, MAX_TOOL_SUMMARY_UNITS))
        folded = outbound.cut_summary_length(summary)
        if folded is not None:
            cut = (folded, MAX_SUMMARY_CODE_POINTS)
    problem = outbound.check_input(target, text, summary)
    if problem is not None:
        return problem
    size = frame_size(text, summary)
    if size > MAX_FRAME_BYTES:
        return (Code.MESSAGE_TOO_LARGE, words.frame_too_large(size, MAX_FRAME_BYTES))
    return Checked(summary_cut=cut)


def exit_code(report: SendReport, follow: FollowResult | None = None) -> int:
    """How a send ends for a script (see :mod:`.exits`)."""
    if report.ok:
        return exits.EXIT_OK if follow is None else exits.for_state(follow.last_state)
    if report.status in (Code.NOT_FOUND, Code.AMBIGUOUS):
        return exits.EXIT_NO_TARGET
    if not report.message_written and (
        report.status in _LOCAL_CODES or report.status not in RECEIVER_REFUSALS
    ):
        # Nothing left this process (a socket that failed its check or its connection, a frame
        # over its bound…): certainly not delivered, and safe to send again.
        return exits.EXIT_LOCAL
    if report.status == Code.UNREACHABLE:
        # The proxy took it, but this machine's gateway has no NATS connection: nothing left
        # the machine, and the fault is on this side.
        return exits.EXIT_LOCAL
    if report.state == SenderState.RECEIPT_UNKNOWN:
        return exits.EXIT_UNKNOWN
    return exits.EXIT_REFUSED


def _print(
    console: Console,
    report: SendReport,
    *,
    as_json: bool,
    follow: FollowResult | None = None,
    failure: AddressFailure | None = None,
    checked: Checked | None = None,
) -> None:
    target = None if report.target is None else words.peer_address(report.target)
    next_text = (
        None
        if report.ok
        else words.next_step(
            report.status,
            target=target,
            message_id=report.message_id if report.message_written else None,
            machine=None if report.target is None else words.remote_machine(report.target),
        )
    )
    if as_json:
        console.json(
            words.send_json(
                report,
                next_text=next_text,
                follow=follow,
                candidates=() if failure is None else failure.candidates,
                summary_cut=None if checked is None else checked.summary_cut,
            )
        )
    elif report.ok:
        console.result(words.sent(report, follow))
    else:
        trusted = None if failure is None else failure.text
        console.problem(words.not_delivered(report, next_text, trusted_detail=trusted))


def _print_interrupted(
    console: Console,
    report: SendReport | None,
    follow: FollowResult | None,
    *,
    as_json: bool,
    checked: Checked,
) -> None:
    console.done()
    if report is None or not report.message_written:
        console.problem(words.interrupted(report, follow))
        return
    if as_json:
        console.json(
            words.send_json(
                report,
                next_text=words.interrupted_next(report),
                follow=follow,
                interrupted=True,
                summary_cut=checked.summary_cut,
            )
        )
    else:
        console.result(words.interrupted(report, follow))


def run(args: argparse.Namespace, console: Console) -> int:
    """Read, check, send, and print; returns the exit code."""
    try:
        text = read_message(args, console)
    except InputError as exc:
        report = outbound.local_failure(Code.INVALID_MESSAGE, str(exc))
        _print(console, report, as_json=args.json)
        return exits.EXIT_LOCAL
    checked = check_message(args.target, text, args.summary)
    if not isinstance(checked, Checked):
        report = outbound.local_failure(*checked)
        _print(console, report, as_json=args.json)
        return exits.EXIT_LOCAL  # decided here: nothing was sent
    if checked.summary_cut is not None:
        console.problem(words.summary_cut(*checked.summary_cut))
    return anyio.run(_send, args, console, text, checked)


class Interrupt:
    """Turns Ctrl-C (the first SIGINT) into the cancellation of the step in progress, so that
    what was known by then can still be said. A second Ctrl-C stops the process at once."""

    def __init__(self) -> None:
        self.happened = False
        self._step: anyio.CancelScope | None = None

    def step(self, scope: anyio.CancelScope | None = None) -> anyio.CancelScope:
        """The scope an interrupt cancels from now on (a new one by default); already cancelled
        when the interrupt came before."""
        scope = scope or anyio.CancelScope()
        if self.happened:
            scope.cancel()
        self._step = scope
        return scope

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Wait for SIGINT, then cancel the step in progress (once). Signals reach the main
        thread only: run elsewhere (a caller's worker thread), there is nothing to watch."""
        if threading.current_thread() is not threading.main_thread():
            task_status.started()
            return
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                self.happened = True
                if self._step is not None:
                    self._step.cancel()
                return


async def _send(args: argparse.Namespace, console: Console, text: str, checked: Checked) -> int:
    locations = environment.resolve()
    missing = missing_agent_dir(locations)
    if missing is not None:
        _print(console, missing, as_json=args.json)
        return exits.EXIT_LOCAL
    interrupt = Interrupt()
    failure: Exception | None = None
    async with anyio.create_task_group() as watcher:
        await watcher.start(interrupt.watch)
        try:
            code = await _send_watched(args, console, locations, text, checked, interrupt)
        except Exception as exc:  # raised below as itself, not inside the group's exception group
            failure = exc
        finally:
            watcher.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return code


async def _send_watched(
    args: argparse.Namespace,
    console: Console,
    locations: paths.Locations,
    text: str,
    checked: Checked,
    interrupt: Interrupt,
) -> int:
    report: SendReport | None = None
    follow: Follow | None = None
    with interrupt.step() as whole:
        async with cli_identity.holding(
            locations,
            name=args.name,
            purpose=words.identity_purpose("send", args.target),
            reporter=IdentityWaitNotes(console),
        ) as held:
            resolved = await resolve(held, args.target)
            if isinstance(resolved, AddressFailure):
                _print(console, resolved.report, as_json=args.json, failure=resolved)
                return resolved.exit_code
            outbox = resolved.outbox(held.outbox)
            # The exchange is cut by its own scope: outbound.send then reports what was known.
            report = await outbound.send(
                outbox, args.target, text, summary=args.summary, scope=interrupt.step()
            )
            interrupt.step(whole)
            if report.message_written and report.message_id is not None:
                with anyio.CancelScope(shield=True):  # so that status asks as this identity
                    await held.remember(report.message_id)
            wanted = report.ok and args.wait > 0 and report.status != Code.ACCEPTED
            if wanted and not interrupt.happened:
                registration = resolved.listing.registrations[resolved.peer.instance_id]
                follow = Follow(report.status, started=time.monotonic(), wait_s=args.wait)
                await follow_message(held, registration, report, follow, console)
                if outbox.journal is not None and report.message_id is not None:
                    # The receiver's answer, as this side learnt it (an ending only).
                    outbox.journal.learnt(report, report.message_id, follow.last_state)
    result = None if follow is None else follow.result(time.monotonic())
    if interrupt.happened:
        _print_interrupted(console, report, result, as_json=args.json, checked=checked)
        return exits.EXIT_INTERRUPTED
    assert report is not None
    _print(console, report, as_json=args.json, follow=result, checked=checked)
    return exit_code(report, result)


async def follow_message(
    held: cli_identity.Held,
    registration: Registration,
    report: SendReport,
    follow: Follow,
    console: Console,
) -> None:
    """Ask the receiver about the message until the rule of :mod:`.follow` says it is over;
    ``follow`` keeps what was learnt (also when the wait is cut short)."""
    assert report.message_id is not None
    clock = time.monotonic
    started = follow.started
    console.milestone(words.follow_milestone(report.status, 0.0))
    try:
        # The rule decides when to stop; this bound only keeps a slow last question inside it.
        with anyio.move_on_after(follow.bound_s):
            while not follow.finished(clock()):
                await anyio.sleep(DELIVERY_POLL_S)
                try:
                    answer = await held.outbox.exchanger.query_status(
                        registration, sender=held.outbox.sender, message_id=report.message_id
                    )
                except ExchangeError:
                    follow.failed_query()  # a failed question says nothing about the message
                    continue
                now = clock()
                confirmable = can_report_delivery(answer.peer_capabilities)
                if follow.observe(answer.status, confirmable=confirmable):
                    console.milestone(words.follow_milestone(answer.status, now - started))
                console.progress(
                    words.follow_progress(follow.last_state, now - started, follow.remaining(now))
                )
    finally:
        console.done()
