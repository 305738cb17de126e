"""The ``pi-cross-session`` command: use the session network without an agent host.

Subcommands:

* ``paths`` — where sessions of this environment register and listen;
* ``inbox`` — a live session without a model that prints what it receives;
* ``peers`` — the live sessions, as the model's ``list_pi`` shows them;
* ``send`` — send one message and print its receipt;
* ``status`` — ask a session what became of a message sent from here;
* ``doctor`` — find what keeps sessions from seeing or reaching each other.

Exit codes of ``send`` and ``status``: 0 the receiver took it (or answered), 2 refused, 3 receipt
unknown, 4 no such target (not found or ambiguous), 1 a usage or local error.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any, Final, NoReturn, TextIO

import anyio

from pi_cross_session import __version__
from pi_cross_session.plugin import cli_identity, doctor, outbound, render
from pi_cross_session.plugin.hosts.headless import DEFAULT_BUSY_S, HeadlessHost, HostEvent
from pi_cross_session.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session.protocol import paths
from pi_cross_session.protocol.codes import Code, SenderState
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.frames import ID_RE, INSTANCE_ID_RE
from pi_cross_session.protocol.limits import MAX_DELIVERY_WAIT_S
from pi_cross_session.protocol.registration import PublicPeer
from pi_cross_session.protocol.text import clean_line
from pi_cross_session.security.admission import Row

EXIT_OK: Final = 0
EXIT_LOCAL: Final = 1
EXIT_REFUSED: Final = 2
EXIT_UNKNOWN: Final = 3
EXIT_NO_TARGET: Final = 4


def _instance_id(value: str) -> str:
    if INSTANCE_ID_RE.fullmatch(value) is None:
        raise argparse.ArgumentTypeError("an instance id is 32 lowercase hex characters")
    return value


def _wait_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_DELIVERY_WAIT_S:  # NaN fails this too
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds above 0 and at most {MAX_DELIVERY_WAIT_S:g}"
        )
    return seconds


def _message_id(value: str) -> str:
    if ID_RE.fullmatch(value) is None:
        raise argparse.ArgumentTypeError("a message id is 1 to 128 of A-Z a-z 0-9 _ -")
    return value


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("a number of seconds") from exc
    if not 0 <= seconds <= 60:
        raise argparse.ArgumentTypeError("between 0 and 60 seconds")
    return seconds


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which here means "refused": exit 1 instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_LOCAL, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; exposed so tests and docs can inspect it."""
    parser = _Parser(
        prog="pi-cross-session",
        description="Discover and message agent sessions on this machine.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    show = commands.add_parser(
        "paths",
        help="show the agent dir, namespace, runtime dir and socket path in effect",
        description=(
            "Show where sessions of this environment register and listen. Two sessions see "
            "each other only when they resolve the same agent dir (PI_CODING_AGENT_DIR)."
        ),
    )
    show.add_argument(
        "--instance-id",
        type=_instance_id,
        help="compute the socket path for this instance id (default: a random example id)",
    )
    show.add_argument("--json", action="store_true", help="print one JSON object")

    inbox = commands.add_parser(
        "inbox",
        help="run a live session without a model and print what it receives",
        description=(
            "Register a session that receives messages and prints each one as its state changes "
            "(admitted, queued, submitted, expired, dropped). Each delivered message keeps the "
            "inbox busy for --busy seconds, so senders see queueing as with a real agent. "
            "Ctrl-C or SIGTERM stops it and removes its files; SIGUSR1 prints its status."
        ),
    )
    inbox.add_argument("--name", help="the session name others address it by")
    inbox.add_argument("--cwd", help="the working directory it advertises (default: the current)")
    inbox.add_argument("--refuse", action="store_true", help="refuse every inbound message")
    inbox.add_argument(
        "--busy",
        type=_positive_seconds,
        default=DEFAULT_BUSY_S,
        metavar="SECONDS",
        help=f"how long a delivered message keeps it busy (default {DEFAULT_BUSY_S:g})",
    )
    inbox.add_argument("--json", action="store_true", help="one JSON object per event")

    peers = commands.add_parser("peers", help="list the live sessions")
    peers.add_argument("--json", action="store_true", help="print one JSON object")

    send = commands.add_parser(
        "send",
        help="send one message to a session",
        description=(
            "Send MESSAGE to TARGET (a name, 'name [ref]', a session or instance id, or 6+ hex "
            "of an instance id). Prints the receipt and the messageId. Nothing is retried."
        ),
    )
    send.add_argument("target")
    send.add_argument("message")
    send.add_argument("--summary", help="a one-line preview (default: the first line)")
    send.add_argument(
        "--wait",
        type=_wait_seconds,
        default=0.0,
        metavar="S",
        help=(
            "after a good receipt, wait up to S seconds (at most 30) for the receiver to confirm "
            "the message entered its conversation; reports delivered or not confirmed"
        ),
    )
    send.add_argument("--json", action="store_true", help="print one JSON object")

    status = commands.add_parser(
        "status", help="ask a session what became of a message sent from this command line"
    )
    status.add_argument("target")
    status.add_argument("message_id", metavar="MESSAGE_ID", type=_message_id)
    status.add_argument("--json", action="store_true", help="print one JSON object")

    check = commands.add_parser(
        "doctor", help="check dirs, registrations and sockets, and say how to fix problems"
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


# -- paths -----------------------------------------------------------------------------------------


def _paths(args: argparse.Namespace) -> int:
    where = paths.resolve()
    example = args.instance_id is None
    instance_id = args.instance_id or secrets.token_hex(16)
    report = {
        "agentDir": where.agent_dir,
        "namespace": where.namespace,
        "uid": where.uid,
        "peersDir": where.peers_dir,
        "runtimeDir": where.runtime_dir,
        "instanceId": instance_id,
        "instanceIdIsExample": example,
        "socketPath": where.socket_path(instance_id),
        "registrationPath": where.registration_path(instance_id),
    }
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return EXIT_OK
    rows = (
        ("agent dir", where.agent_dir),
        ("namespace", where.namespace),
        ("peers dir", where.peers_dir),
        ("runtime dir", where.runtime_dir),
        ("example instance" if example else "instance", instance_id),
        ("socket path", report["socketPath"]),
        ("registration", report["registrationPath"]),
    )
    for label, value in rows:
        print(f"{label:<18}{value}")
    return EXIT_OK


# -- inbox -----------------------------------------------------------------------------------------


class _InboxPrinter:
    """Prints inbox events as text lines or JSON objects, flushing each one."""

    def __init__(self, *, as_json: bool, out: TextIO) -> None:
        self._json = as_json
        self._out = out

    def emit(self, event: str, line: str, **data: Any) -> None:
        if self._json:
            self._out.write(json.dumps({"event": event, **data}, ensure_ascii=False) + "\n")
        else:
            stamp = time.strftime("%H:%M:%S")
            self._out.write(f"[{stamp}] {line}\n")
        self._out.flush()

    def row(self, row: Row) -> None:
        who = f"{clean_line(row.sender_name)} [{row.sender_instance_id[:8]}]"
        line = f"{row.state:<18} {row.message_id} from {who}: {clean_line(row.summary)}"
        self.emit(
            "state",
            line,
            messageId=row.message_id,
            state=row.state,
            source=row.sender_instance_id,
            sender=row.sender_name,
            summary=row.summary,
            diagnostic=row.diagnostic,
        )

    def host_event(self, event: HostEvent) -> None:
        delivery = event.delivery
        if delivery is None:
            self.emit("notice", f"notice: {event.text}", text=event.text)
            return
        sender = delivery.sender
        body = "\n".join(f"    {line}" for line in delivery.text.splitlines() or [""])
        self.emit(
            "message",
            f"message {delivery.message_id} from {clean_line(sender.name)} [{sender.ref}]\n{body}",
            messageId=delivery.message_id,
            sender={"name": sender.name, "sessionId": sender.id, "instanceId": sender.instance_id},
            summary=delivery.summary,
            text=delivery.text,
            sentAt=delivery.sent_at,
        )

    def status(self, runtime: SessionRuntime) -> None:
        snapshot = runtime.snapshot()
        if snapshot is None:
            return
        checks = runtime.peer_checks()
        if self._json:
            self.emit(
                "status", "", **render.status_data(snapshot), **render.peer_check_data(checks)
            )
            return
        registration = runtime.registration()
        me = None if registration is None else PublicPeer.from_registration(registration)
        lines = [render.status_text(snapshot, me=me), *render.peer_check_lines(checks)]
        self.emit("status", "status:\n" + "\n".join(lines))


async def _inbox(args: argparse.Namespace) -> int:
    printer = _InboxPrinter(as_json=args.json, out=sys.stdout)
    host = HeadlessHost(name=args.name, cwd=args.cwd, busy_s=args.busy, on_event=printer.host_event)
    runtime = SessionRuntime(
        host,
        options=RuntimeOptions(inbound="refuse" if args.refuse else "accept"),
        on_row=printer.row,
    )
    host.runtime = runtime
    try:
        await _serve_inbox(printer, host, runtime)
    except BaseExceptionGroup as group:
        cause = _first_cross_session_error(group)
        if cause is None:
            raise
        printer.emit("stopped", f"stopped: {cause}", error=str(cause), code=cause.code)
        print(f"pi-cross-session: {cause.code}: {cause}", file=sys.stderr)
        return EXIT_LOCAL
    failure = runtime.last_error
    printer.emit(
        "stopped",
        "stopped" + (f" after an error: {failure}" if failure else "; files removed"),
        error=None if failure is None else str(failure),
    )
    return EXIT_LOCAL if failure is not None else EXIT_OK


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


async def _serve_inbox(printer: _InboxPrinter, host: HeadlessHost, runtime: SessionRuntime) -> None:
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    with anyio.open_signal_receiver(*signals) as received:
        async with anyio.create_task_group() as group:
            await group.start(host.run_turns)
            await group.start(runtime.run)
            registration = runtime.registration()
            assert registration is not None
            printer.emit(
                "ready",
                f"inbox {render.address(registration)} listening as session "
                f"{registration.id} (pid {os.getpid()}); Ctrl-C to stop",
                name=registration.name,
                sessionId=registration.id,
                instanceId=registration.instance_id,
                ref=registration.ref,
                inbound=registration.inbound,
                pid=registration.pid,
            )

            async def watch_signals() -> None:
                async for number in received:
                    if number == signal.SIGUSR1:
                        printer.status(runtime)
                        continue
                    runtime.request_stop()
                    return

            group.start_soon(watch_signals)
            await runtime.wait_finished()
            printer.status(runtime)
            group.cancel_scope.cancel()


# -- peers, send, status ---------------------------------------------------------------------------


async def _peers(args: argparse.Namespace) -> int:
    async with cli_identity.publishing(paths.resolve()) as outbox:
        listing = await outbox.list_peers()
    if args.json:
        print(
            json.dumps(
                {"peers": [peer.to_dict() for peer in listing.peers]}, ensure_ascii=False, indent=2
            )
        )
        return EXIT_OK
    print("\n".join(render.peer_lines(listing.peers, unchecked=listing.unchecked)))
    return EXIT_OK


def _exit_code(report: render.SendReport) -> int:
    if report.ok:
        return EXIT_OK
    if report.status in (Code.NOT_FOUND, Code.AMBIGUOUS):
        return EXIT_NO_TARGET
    if report.status in (Code.INVALID_TARGET, Code.INVALID_MESSAGE, Code.NOT_READY):
        return EXIT_LOCAL
    if report.state == SenderState.RECEIPT_UNKNOWN:
        return EXIT_UNKNOWN
    return EXIT_REFUSED


def _print_report(report: render.SendReport, *, as_json: bool, text: str) -> None:
    if as_json:
        print(json.dumps(render.send_details(report), ensure_ascii=False, indent=2))
    else:
        print(text, file=sys.stdout if report.ok else sys.stderr)


async def _send(args: argparse.Namespace) -> int:
    problem = outbound.check_input(args.target, args.message, args.summary)
    if problem is not None:
        report = outbound.local_failure(*problem)
    else:
        async with cli_identity.publishing(paths.resolve()) as outbox:
            report = await outbound.send(
                outbox, args.target, args.message, summary=args.summary, wait_s=args.wait
            )
    _print_report(report, as_json=args.json, text=render.send_result(report))
    return _exit_code(report)


async def _status(args: argparse.Namespace) -> int:
    async with cli_identity.publishing(paths.resolve()) as outbox:
        report = await outbound.query_status(outbox, args.target, args.message_id)
    text = render.status_query_result(report)
    _print_report(report, as_json=args.json, text=text)
    return _exit_code(report)


# -- doctor ----------------------------------------------------------------------------------------


async def _doctor(args: argparse.Namespace) -> int:
    findings = await doctor.diagnose()
    bad = any(f.severity is doctor.Severity.ERROR for f in findings)
    if args.json:
        data = [
            {"severity": f.severity, "subject": f.subject, "detail": f.detail, "fix": f.fix}
            for f in findings
        ]
        print(json.dumps({"findings": data, "healthy": not bad}, ensure_ascii=False, indent=2))
    else:
        for finding in findings:
            print(f"{finding.severity:<8}{finding.subject}: {finding.detail}")
            if finding.fix:
                print(f"{'':<8}fix: {finding.fix}")
    return EXIT_LOCAL if bad else EXIT_OK


# -- entry point -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "paths":
        return _paths(args)
    runners = {
        "inbox": _inbox,
        "peers": _peers,
        "send": _send,
        "status": _status,
        "doctor": _doctor,
    }
    runner = runners.get(args.command)
    if runner is None:
        parser.print_help(sys.stderr)
        return EXIT_LOCAL
    try:
        return anyio.run(runner, args)
    except CrossSessionError as exc:
        print(f"pi-cross-session: {exc.code}: {exc}", file=sys.stderr)
        return EXIT_LOCAL
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
