"""``pi-cross-session send``: send one message, print its receipt, optionally follow it.

1. Read the message: the ``MESSAGE`` argument, stdin (``-``) or ``--file``; a file or stdin is
   read only up to one frame's size, so a huge input is refused without being read whole.
2. Check the input before anything is published: target, text, and a ``--summary`` the wire
   would have to cut is an error (exit 1), not a silent cut.
3. Take a free sender identity (waiting out loud if all are busy), list the live sessions as it,
   and resolve the target, explaining in command-line words when no single session matches.
4. Send (:func:`pi_cross_session._internal.plugin.outbound.send`; nothing is retried), and remember
which
   identity sent which message id, so ``status`` asks as the same sender.
5. With ``--wait S``: follow the message by status questions (free for the receiver) under the
   rule of :mod:`.follow`, show each state change on a terminal, and report the last state known.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import anyio

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.cli.follow import Follow, FollowResult
from pi_cross_session._internal.cli.sender import AddressFailure, IdentityWaitNotes, resolve
from pi_cross_session._internal.cli.settings import MAX_MESSAGE_INPUT_BYTES
from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.capabilities import can_report_delivery
from pi_cross_session._internal.protocol.codes import Code, SenderState
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.exchange import ExchangeError
from pi_cross_session._internal.protocol.limits import (
    DELIVERY_POLL_S,
    MAX_SUMMARY_CODE_POINTS,
)
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.protocol.sanitize import line
from pi_cross_session._internal.protocol.text import clean_line, is_blank

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


def _summary_problem(summary: str | None) -> str | None:
    """A summary that the wire would cut (more than 200 characters once folded)."""
    if summary is None or is_blank(summary):
        return None
    if len(clean_line(summary, len(summary))) > MAX_SUMMARY_CODE_POINTS:
        return words.summary_too_long(MAX_SUMMARY_CODE_POINTS)
    return None


def exit_code(report: SendReport, follow: FollowResult | None = None) -> int:
    """How a send ends for a script (see :mod:`.exits`)."""
    if report.ok:
        return exits.EXIT_OK if follow is None else exits.for_state(follow.last_state)
    if report.status in (Code.NOT_FOUND, Code.AMBIGUOUS):
        return exits.EXIT_NO_TARGET
    if report.status in _LOCAL_CODES and not report.message_written:
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
            )
        )
    elif report.ok:
        console.result(words.sent(report, follow))
    else:
        trusted = None if failure is None else failure.text
        console.problem(words.not_delivered(report, next_text, trusted_detail=trusted))


def run(args: argparse.Namespace, console: Console) -> int:
    """Read, check, send, and print; returns the exit code."""
    try:
        text = read_message(args, console)
    except InputError as exc:
        report = outbound.local_failure(Code.INVALID_MESSAGE, str(exc))
        _print(console, report, as_json=args.json)
        return exits.EXIT_LOCAL
    problem = outbound.check_input(args.target, text, args.summary)
    if problem is None:
        cut = _summary_problem(args.summary)
        problem = None if cut is None else (Code.INVALID_MESSAGE, cut)
    if problem is not None:
        report = outbound.local_failure(*problem)
        _print(console, report, as_json=args.json)
        return exit_code(report)
    return anyio.run(_send, args, console, text)


async def _send(args: argparse.Namespace, console: Console, text: str) -> int:
    locations = environment.resolve()
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
        report = await outbound.send(outbox, args.target, text, summary=args.summary)
        if report.message_written and report.message_id is not None:
            await held.remember(report.message_id)
        follow = None
        if report.ok and args.wait > 0 and report.status != Code.ACCEPTED:
            registration = resolved.listing.registrations[resolved.peer.instance_id]
            follow = await follow_message(held, registration, report, args.wait, console)
    _print(console, report, as_json=args.json, follow=follow)
    return exit_code(report, follow)


async def follow_message(
    held: cli_identity.Held,
    registration: Registration,
    report: SendReport,
    wait_s: float,
    console: Console,
) -> FollowResult:
    """Ask the receiver about the message until the rule of :mod:`.follow` says it is over."""
    assert report.message_id is not None
    clock = time.monotonic
    started = clock()
    follow = Follow(report.status, started=started, wait_s=wait_s)
    console.milestone(words.follow_milestone(report.status, 0.0))
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
    console.done()
    return follow.result(clock())
