"""The argument parser of ``pi-cross-session``: what each command takes, and its ``--help``.

Light on purpose: it imports nothing but argparse and the limits, because every invocation builds
it before it knows which command (and so which modules) it needs.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import NoReturn

from pi_cross_session import __version__
from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.cli.settings import (
    MAX_INBOX_BUSY_S,
    QUEUE_FATE_MARGIN_S,
)
from pi_cross_session._internal.plugin.cli_identity_settings import (
    CLI_IDENTITY_POOL,
)
from pi_cross_session._internal.protocol.limits import (
    MAX_DELIVERY_WAIT_S,
    MAX_FRAME_BYTES,
    MAX_LISTED_REGISTRATIONS,
    MAX_SUMMARY_CODE_POINTS,
    MAX_TEXT_UNITS,
    MAX_TOOL_SUMMARY_UNITS,
    QUEUE_TTL_S,
)
from pi_cross_session._internal.protocol.paths import is_instance_id
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_PROXIES,
    MAX_REMOTE_RECORD_TTL_S,
    MIN_REMOTE_RECORD_TTL_S,
    REMOTE_RECORD_TTL_S,
)

PROG = "pi-cross-session"


def _instance_id(value: str) -> str:
    if not is_instance_id(value):
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


#: A message id as every send of this package makes it (``uuid4``, lowercase): the only ids
#: ``status`` can ask about, since a receiver keeps rows per sender and the command line's
#: identities send nothing else. Anything else is a usage error, not an "unknown" answer.
_MESSAGE_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _message_id(value: str) -> str:
    if _MESSAGE_ID_RE.fullmatch(value) is None:
        from pi_cross_session._internal.cli.words import message_id_invalid  # only on a typo

        raise argparse.ArgumentTypeError(message_id_invalid(value))
    return value


def _busy_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("a number of seconds") from exc
    if not 0 <= seconds <= MAX_INBOX_BUSY_S:
        raise argparse.ArgumentTypeError(f"between 0 and {MAX_INBOX_BUSY_S:g} seconds")
    return seconds


def _record_ttl(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("a number of seconds") from exc
    if not MIN_REMOTE_RECORD_TTL_S <= seconds <= MAX_REMOTE_RECORD_TTL_S:
        raise argparse.ArgumentTypeError(
            f"between {MIN_REMOTE_RECORD_TTL_S:g} and {MAX_REMOTE_RECORD_TTL_S:g} seconds"
        )
    return seconds


def _max_proxies(value: str) -> int:
    try:
        count = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("a whole number") from exc
    # Up to half the listing window: local sessions keep the rest (docs/remote.md).
    if not 0 <= count <= MAX_LISTED_REGISTRATIONS // 2:
        raise argparse.ArgumentTypeError(f"between 0 and {MAX_LISTED_REGISTRATIONS // 2}")
    return count


_HOST_RE = re.compile(r"[A-Za-z0-9._\-:]{1,253}")


def _host(value: str) -> str:
    """A host name or an address, as a server's certificate names it."""
    if _HOST_RE.fullmatch(value) is None or value.startswith(("-", ".")):
        raise argparse.ArgumentTypeError("a host name or an IP address (e.g. 10.0.0.5)")
    return value


def _listen(value: str) -> str:
    """``ADDR:PORT`` (``[::]:PORT`` for IPv6) with a port a server can listen on."""
    host, _, port = value.rpartition(":")
    if (
        not port.isdigit()
        or not 0 < int(port) < 65536
        or not _HOST_RE.fullmatch(host.removeprefix("[").removesuffix("]"))
    ):
        raise argparse.ArgumentTypeError("ADDR:PORT, e.g. 0.0.0.0:4222")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which here means "refused": exit 1 instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exits.EXIT_LOCAL, f"{self.prog}: error: {message}\n")


class _CommandParser(_Parser):
    """A command's parser: options and positionals in any order (``send bob --wait 5 hi``).

    Plain argparse gives an optional positional (``MESSAGE``) nothing once an option follows
    the target; intermixed parsing reads the positionals after every option is set aside.
    """

    _intermixed = False

    def _has_actions(self) -> bool:
        return any(isinstance(action, argparse._SubParsersAction) for action in self._actions)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixed or self._has_actions():
            # The intermixed parse calls back in, twice; and it cannot handle a command with
            # actions of its own (``remote init``), which parses plainly.
            return super().parse_known_args(args, namespace)
        self._intermixed = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixed = False


def _with_verbose(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        help="log what happens to stderr (-vv for debug detail)",
    )


_WAIT_HELP = (
    "after a good receipt, follow the message for up to S seconds (at most "
    f"{MAX_DELIVERY_WAIT_S:g}) until the receiver confirms delivery; a message still queued "
    f"then is followed until it leaves the queue (at most {QUEUE_TTL_S:g} s, its time to live, "
    f"plus {QUEUE_FATE_MARGIN_S:g} s). Reports the last state known; exits as status does"
)


#: The commands of the remote plane, whose many options and actions are built only when one of
#: them runs (``remote_plane``): every other command's start-up pays for its own parser only.
REMOTE_PLANE_COMMANDS = frozenset({"gateway", "remote"})


def command_word(argv: Sequence[str]) -> str | None:
    """The command an invocation names: its first word that is not an option (the top-level
    options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(*, remote_plane: bool = True) -> argparse.ArgumentParser:
    """The argument parser; exposed so tests and docs can inspect it. Without ``remote_plane``,
    ``gateway`` and ``remote`` are listed (with their help) but take no options: for an
    invocation of another command, which never parses them."""
    parser = _Parser(
        prog=PROG,
        description="Discover and message agent sessions on this machine.",
        epilog=exits.TABLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _with_verbose(parser, default=0)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    def command(
        name: str, help: str, description: str | None = None, epilog: str | None = None
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help,
            # Filled here: the raw formatter (which keeps the exit-code table as written) would not.
            description=None if description is None else textwrap.fill(description, 79),
            # The table of exit codes is send's and status's (and the top level's); the other
            # commands say their own in their description or in one line.
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # After the command word too (``send -v``); SUPPRESS keeps a top-level -v when absent.
        _with_verbose(sub, default=argparse.SUPPRESS)
        return sub

    show = command(
        "paths",
        help="show the agent dir, namespace, runtime dir and socket path in effect",
        description=(
            "Show where sessions of this environment register and listen. Two sessions see "
            "each other only when they resolve the same agent dir (PI_CODING_AGENT_DIR). "
            "Creates nothing."
        ),
        epilog=exits.SIMPLE,
    )
    show.add_argument(
        "--instance-id",
        type=_instance_id,
        help="compute the socket path for this instance id (default: a random example id)",
    )
    show.add_argument("--json", action="store_true", help="print one JSON object")

    inbox = command(
        "inbox",
        help="run a live session without a model and print what it receives",
        description=(
            "Register a session that receives messages and prints each one as its state changes "
            "(accepted, queued, submitted, delivered, expired, dropped). Each delivered message "
            "keeps the inbox busy for --busy seconds, so senders see queueing as with a real "
            "agent. Ctrl-C or SIGTERM stops it and removes its files; SIGUSR1 prints its status; "
            "SIGUSR2 ends the current busy turn at once."
        ),
        epilog=exits.SIMPLE,
    )
    inbox.add_argument("--name", help="the session name others address it by")
    inbox.add_argument("--cwd", help="the working directory it advertises (default: the current)")
    inbox.add_argument("--refuse", action="store_true", help="refuse every inbound message")
    inbox.add_argument(
        "--busy",
        type=_busy_seconds,
        metavar="SECONDS",
        help="how long each delivered message keeps it busy, as a turn would (default: 1)",
    )
    inbox.add_argument(
        "--json", action="store_true", help="one JSON object per event, each with its time"
    )

    peers = command(
        "peers",
        help="list the live sessions",
        description=(
            "List the live sessions of this agent dir: address (name [ref]), status, inbound "
            "policy, working directory, git branch and session id. Needs no identity and creates "
            "nothing. A listing reads at most the first 512 registrations in the peers dir; if "
            "there are more, the last line (and 'unread' in --json) says how many were left "
            "unread."
        ),
        epilog=exits.SIMPLE,
    )
    peers.add_argument("--json", action="store_true", help="print one JSON object")
    peers.add_argument(
        "--remote",
        action="store_true",
        help="list the sessions of other machines this machine's gateway sees (docs/remote.md)",
    )

    send = command(
        "send",
        help="send one message to a session",
        description=(
            "Send a message to TARGET (a name, 'name [ref]', a session or instance id, or 6+ hex "
            "of an instance id). The message is MESSAGE, or stdin when MESSAGE is '-', or the "
            "file given with --file. Prints the receipt and the messageId. Nothing is retried. "
            f"Up to {CLI_IDENTITY_POOL} sends may run at once; another one waits and says for "
            f"whom. Every bound is checked before anything is sent: the text ({MAX_TEXT_UNITS:,} "
            f"UTF-16 code units) and its frame once JSON-escaped ({MAX_FRAME_BYTES:,} bytes, "
            "1 MiB). It never creates the agent "
            "dir. Ctrl-C once the message was sent prints its messageId, what is known of it "
            "and the status command that asks later (exit 130)."
        ),
        epilog=exits.TABLE,
    )
    send.add_argument("target", metavar="TARGET")
    send.add_argument("message", metavar="MESSAGE", nargs="?", help="the text, or - for stdin")
    send.add_argument("--file", metavar="PATH", help="read the message from this file (UTF-8)")
    send.add_argument(
        "--summary",
        help=(
            f"a one-line preview (default: the message's first line), at most "
            f"{MAX_TOOL_SUMMARY_UNITS} UTF-16 code units; its whitespace is folded and a receiver "
            f"keeps the first {MAX_SUMMARY_CODE_POINTS} characters, so a longer one is sent cut, "
            "with a note on stderr (and summaryCut in --json)"
        ),
    )
    send.add_argument("--wait", type=_wait_seconds, default=0.0, metavar="S", help=_WAIT_HELP)
    send.add_argument(
        "--name", help="the sender name the receiver sees (default: pi-cross-session-cli)"
    )
    send.add_argument("--json", action="store_true", help="print one JSON object")

    status = command(
        "status",
        help="ask a session what became of a message sent from this command line",
        description=(
            "Ask TARGET what became of MESSAGE_ID (the messageId a send printed), as the "
            "command-line identity that sent it. The exit code says the state (see below). It "
            "never creates the agent dir."
        ),
        epilog=exits.TABLE,
    )
    status.add_argument("target", metavar="TARGET")
    status.add_argument("message_id", metavar="MESSAGE_ID", type=_message_id)
    status.add_argument("--json", action="store_true", help="print one JSON object")

    check = command(
        "doctor",
        help="check dirs, registrations and sockets, and say how to fix problems",
        description=(
            "Judge the agent dir, the peers and runtime dirs, the registrations and the sockets "
            "with the rules sessions use, probe the sessions found, and print each finding with "
            "its fix. It changes and creates nothing, and suggests removing a file only when the "
            "process it names is gone (or nobody listens on a socket). It names sessions "
            "registered under another spelling of the agent dir, and stays short however full "
            "the peers dir is. Exit 1 when something is broken, 0 otherwise (warnings included)."
        ),
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")

    mcp = command(
        "mcp",
        help="serve MCP on stdin/stdout: an MCP host (Claude Code, Codex, ...) joins as a peer",
        description=(
            "Run a stdio MCP server that is one live session of this agent dir, for an MCP host "
            "such as Claude Code, Codex CLI, Gemini CLI, Cursor or Zed: the tools list_pi and "
            "send_pi_message, and either channel notifications (--delivery push, Claude Code "
            "with channels) or the tools read_pi_messages and wait_pi_message (--delivery pull). "
            "The host starts it; it ends when the host closes its stdin, or on SIGINT/SIGTERM, "
            "and removes its files. It writes nothing but MCP to stdout. See docs/mcp.md."
        ),
    )
    mcp.add_argument(
        "--name",
        help="the session name others address it by (default: PI_CROSS_SESSION_NAME, else the "
        "name of the working directory)",
    )
    mcp.add_argument("--cwd", help="the working directory it advertises (default: the current)")
    mcp.add_argument(
        "--inbound",
        choices=("accept", "refuse"),
        help="accept or refuse inbound messages (default: PI_CROSS_SESSION_INBOUND, else accept)",
    )
    mcp.add_argument(
        "--delivery",
        choices=("pull", "push"),
        default="pull",
        help="push: channel notifications (Claude Code with channels enabled); pull (default): "
        "the model reads with read_pi_messages / wait_pi_message",
    )
    history = command(
        "log",
        help="show what passed between the sessions of this agent dir (their journals)",
        description=(
            "Print the events the sessions of this agent dir wrote to their journals, oldest "
            "first: each message sent, admitted, refused (with its code), queued, submitted, "
            "delivered, expired or dropped, with both ends. Sessions that ended still show (for "
            "two weeks). Node sessions write no journal: what our sessions saw of them shows, "
            "and their side is marked unknown. Lines that are not events are skipped and "
            "counted on stderr. Reads only; creates nothing."
        ),
        epilog=exits.SIMPLE,
    )
    history.add_argument(
        "--session", metavar="NAME_OR_ID", help="only events of this session (either end)"
    )
    history.add_argument("--peer", metavar="NAME_OR_ID", help="only events with this other end")
    history.add_argument(
        "--state",
        metavar="STATE",
        action="append",
        help="only events of this state (sent, admitted, refused, queued, submitted, delivered, "
        "expired, dropped, ...); may be repeated",
    )
    history.add_argument(
        "--since",
        type=_duration,
        metavar="AGE",
        help="only events newer than this (90s, 30m, 1h, 2d)",
    )
    history.add_argument("--id", dest="message_id", metavar="MESSAGE_ID", type=_message_id)
    history.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="at most the newest N (default 1000)"
    )
    history.add_argument("--json", action="store_true", help="one JSON object per event")

    watch = command(
        "watch",
        help="a live view of the sessions and the messages between them",
        description=(
            "Show every live session of this agent dir (kind, name, status, inbound state, "
            "queue depth, active goal) and a feed of the messages between them as they move "
            "through their states, updating in place. Keys: f filters by session, p pauses, q "
            "quits. Without a terminal it prints one line per event; --json streams the events "
            "as JSON objects. The full view needs the 'watch' extra (pip install '.[watch]' in "
            "a clone, or pip install 'rich>=13.7'). Reads only; creates nothing."
        ),
        epilog=exits.SIMPLE,
    )
    watch.add_argument("--session", metavar="NAME_OR_ID", help="start filtered to this session")
    watch.add_argument("--json", action="store_true", help="stream one JSON object per event")
    _remote_commands(command, full=remote_plane)
    return parser


def _duration(text: str) -> int:
    """``90``, ``90s``, ``30m``, ``2h`` or ``1d`` as seconds (at least one, at most 30 days)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = int(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError("a duration such as 90s, 30m, 2h or 1d") from None
    if not 1 <= seconds <= 30 * 86400:
        raise argparse.ArgumentTypeError("between 1 s and 30 days")
    return seconds


def _gateway_options(gateway: argparse.ArgumentParser) -> None:
    """The gateway's options (also those of ``remote hub`` and ``remote join``, which start it).
    Without ``--nats``, the servers and the CA are those of the deployment this machine joined."""
    gateway.add_argument(
        "--nats",
        action="append",
        default=[],
        metavar="URL",
        help=(
            "a NATS server (nats:// or tls://); repeat or separate with commas for a cluster; "
            "default: the servers of the deployment this machine joined"
        ),
    )
    gateway.add_argument("--inbound", choices=("on", "off"), help="override remote inbound")
    gateway.add_argument("--account", help="the NATS account envelopes are signed and MACed for")
    gateway.add_argument("--tls-ca", metavar="FILE", help="CA that signed the server certificate")
    gateway.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    gateway.add_argument("--tls-key", metavar="FILE", help="client certificate's key")
    gateway.add_argument(
        "--user", help="NATS user name (the password is read from PI_XS_NATS_PASSWORD)"
    )
    gateway.add_argument(
        "--kv-replicas",
        type=int,
        default=1,
        metavar="N",
        help="replicas of the key-value bucket when this gateway creates it (3 in a cluster)",
    )
    gateway.add_argument(
        "--record-ttl",
        type=_record_ttl,
        default=REMOTE_RECORD_TTL_S,
        metavar="S",
        help=(
            f"how long a published session outlives its last refresh (default "
            f"{REMOTE_RECORD_TTL_S:g} s; the bucket's max_age when this gateway creates it); "
            "every gateway of a deployment should use the same"
        ),
    )
    gateway.add_argument(
        "--max-proxies",
        type=_max_proxies,
        default=MAX_PROXIES,
        metavar="N",
        help=f"proxies kept at most (default {MAX_PROXIES})",
    )


def _remote_commands(command: Callable[..., argparse.ArgumentParser], *, full: bool) -> None:
    """``gateway`` and ``remote``: the remote plane (docs/remote.md; needs the [remote] extra);
    without ``full``, their names and help only."""
    gateway = command(
        "gateway",
        help="carry messages between this machine's sessions and other machines over NATS",
        description=(
            "Run this machine's gateway: publish its live sessions to the NATS key-value bucket, "
            "keep a local proxy (a registration and a socket) for each live session of a trusted "
            "machine, carry messages and status queries sent to a proxy to that machine, and "
            "deliver the ones other machines send here when remote inbound is on. One gateway per "
            "agent dir. Set it up first with 'remote init' and 'remote trust'."
        ),
    )
    if full:
        _gateway_options(gateway)

    remote = command(
        "remote",
        help="this machine's identity and trust for the remote plane",
        description=(
            "Show how the remote plane is doing here (status); make this machine's identity "
            "(init), show its card (show: the line to paste into "
            "another machine's 'remote trust' and into 'remote deploy'), edit the allow-list "
            "(trust, untrust), turn remote inbound on or off, install the deployment's NATS "
            "credentials for this machine (credentials); for the deployment's administrator: "
            "write the NATS server's configuration and each machine's JWT (deploy), create or "
            "repair the discovery bucket (bucket), or write a private CA and certificates (pki)."
        ),
    )
    if not full:
        return
    actions = remote.add_subparsers(dest="remote_command", metavar="ACTION")
    init = actions.add_parser("init", help="create this machine's identity")
    init.add_argument("--machine", required=True, help="this machine's name (a-z, 0-9, -)")
    init.add_argument("--replace", action="store_true", help="replace an existing identity")
    init.add_argument("--inbound", choices=("on", "off"), help="remote inbound (default off)")
    init.add_argument("--account", help="the NATS account to sign for (default pi-xs)")
    hub = actions.add_parser(
        "hub",
        help="run a deployment's NATS server here and print a line other machines join with",
        description=(
            "Run the deployment's NATS server on this machine (JetStream, TLS from a private CA, "
            "a NATS user and permissions per machine), admit this machine, print one join line "
            "for another machine (valid once, until it lapses), answer joiners, and run this "
            "machine's gateway; all until interrupted. The deployment lives in --dir (made on "
            "first use). With --write-service, write a systemd unit instead of running. With "
            "--join (the line 'remote invite --server' printed on the hub), run one more server "
            "of that deployment here instead: a second and a third server keep the deployment "
            "up when one is lost."
        ),
    )
    hub.add_argument(
        "--host",
        action="append",
        default=[],
        type=_host,
        metavar="NAME",
        help="a name or address other machines reach this one by (repeat; kept for next time)",
    )
    hub.add_argument(
        "--listen",
        type=_listen,
        metavar="ADDR:PORT",
        help="where the server listens (0.0.0.0:4222)",
    )
    hub.add_argument(
        "--cluster-listen",
        type=_listen,
        metavar="ADDR:PORT",
        help="where the server listens for the other servers' routes (0.0.0.0:6222)",
    )
    hub.add_argument(
        "--join",
        nargs=2,
        metavar=("URL[,URL]", "TOKEN"),
        help="serve as one more server of the deployment whose hub printed this line",
    )
    hub.add_argument(
        "--dir", metavar="DIR", help="the deployment's directory (default: in the agent dir)"
    )
    hub.add_argument("--machine", help="this machine's name, when it has no identity yet")
    hub.add_argument(
        "--valid",
        type=_duration,
        default=3600,
        metavar="DURATION",
        help="how long the printed join line stays good (default 1h; e.g. 30m, 2h)",
    )
    hub.add_argument("--no-gateway", action="store_true", help="run no gateway on this machine")
    hub.add_argument(
        "--write-service",
        metavar="FILE",
        help="write a systemd unit that runs this hub, then exit",
    )
    _gateway_options(hub)
    join = actions.add_parser(
        "join",
        help="join a deployment with the line its hub printed, then run this machine's gateway",
        description=(
            "Join the deployment whose hub printed this line: check the server is the "
            "deployment's, make this machine's identity if it has none, be admitted (the line "
            "works once), keep the credentials, and run this machine's gateway until "
            "interrupted. Every machine of the deployment trusts this one within seconds, and "
            "this one trusts them."
        ),
    )
    join.add_argument("servers", metavar="URL[,URL]", help="the servers, as the line gives them")
    join.add_argument("token", metavar="TOKEN", help="the join token (PIXS1-…)")
    join.add_argument("--machine", help="this machine's name (default: its host name)")
    join.add_argument("--no-gateway", action="store_true", help="join only; start no gateway")
    _gateway_options(join)
    invite = actions.add_parser(
        "invite",
        help="print another join line (on the hub's machine)",
    )
    invite.add_argument("--dir", metavar="DIR", help="the deployment's directory")
    invite.add_argument(
        "--server",
        action="store_true",
        help="a line for a machine that joins as one more server (run with 'remote hub --join')",
    )
    invite.add_argument(
        "--valid",
        type=_duration,
        default=3600,
        metavar="DURATION",
        help="how long the join line stays good (default 1h)",
    )
    revoke = actions.add_parser(
        "revoke",
        help="remove a machine from the deployment, everywhere, now (on the hub's machine)",
    )
    revoke.add_argument("machine")
    revoke.add_argument("--dir", metavar="DIR", help="the deployment's directory")
    actions.add_parser(
        "rotate",
        help="replace this machine's keys, keeping its name (a machine that joined a hub)",
        description=(
            "Replace this machine's identity key and NATS user key through its deployment's hub "
            "(which must be running), keeping its name: the new keys are made here, the current "
            "ones sign the ask, the new ones confirm it; the hub then revokes the old NATS key, "
            "and every gateway of the deployment takes the new identity key from the roster. A "
            "gateway running here starts again with the new keys. Run again after a failure, it "
            "goes on from where it stopped."
        ),
    )
    status_remote = actions.add_parser(
        "status",
        help="show the gateway, its NATS server, the machines it sees, proxies and recent errors",
        description=(
            "Show this agent dir's remote plane: whether its gateway runs (pid, since when, "
            "ready), the NATS server it is connected to (TLS, JetStream), whether the deployment "
            "enforces permissions, the bucket, each trusted machine with when it was last heard "
            "of and how far its clock is from ours, the proxies and the cap, and the gateway's "
            "recent warnings and errors. Without a gateway it says how to start one and shows "
            "what is configured. Reads files only: no NATS connection, and no extra needed."
        ),
    )
    status_remote.add_argument("--json", action="store_true", help="print one JSON object")
    show_remote = actions.add_parser("show", help="print this machine's name and public key")
    show_remote.add_argument("--json", action="store_true", help="print one JSON object")
    trust = actions.add_parser("trust", help="allow a machine (its name and public key)")
    trust.add_argument("machine")
    trust.add_argument("key", help="its public key, as 'remote show' prints it (ed25519:…)")
    trust.add_argument(
        "rest", nargs="*", help=argparse.SUPPRESS
    )  # the rest of a pasted card (nats:U…), which trust does not need
    untrust = actions.add_parser("untrust", help="remove a machine from the allow-list")
    untrust.add_argument("machine")
    inbound = actions.add_parser("inbound", help="turn remote delivery to this machine on or off")
    inbound.add_argument("state", choices=("on", "off"))
    credentials = actions.add_parser(
        "credentials", help="install this machine's NATS user JWT from the deployment"
    )
    credentials.add_argument("file", metavar="FILE", help="the JWT 'remote deploy' wrote for us")
    deploy = actions.add_parser(
        "deploy",
        help="write a NATS deployment: server configuration, TLS, each machine's JWT",
        description=(
            "Create (or update) a NATS deployment in DIR: its operator and account keys, a server "
            "configuration with JetStream, TLS from a private CA and per-machine permissions, "
            "and a user JWT for each machine named by its card ('remote show' on that machine). "
            "Run it again to admit or revoke machines; --push hands the change to running servers."
        ),
    )
    deploy.add_argument("--out", required=True, metavar="DIR", help="the deployment's directory")
    deploy.add_argument(
        "--host",
        action="append",
        default=[],
        help="a name or address machines reach the server by (repeatable; for its certificate)",
    )
    deploy.add_argument(
        "--listen", metavar="HOST:PORT", help="where the server listens (default 0.0.0.0:4222)"
    )
    deploy.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="CARD",
        help="admit a machine: its card, as 'remote show' prints it (repeatable)",
    )
    deploy.add_argument(
        "--revoke", action="append", default=[], metavar="NAME", help="revoke a machine"
    )
    deploy.add_argument(
        "--push",
        metavar="URL",
        help="hand the changed account to the servers at URL (a revocation applies at once)",
    )
    deploy.add_argument(
        "--tls-ca", metavar="FILE", help="CA for --push (default: the deployment's)"
    )
    bucket = actions.add_parser(
        "bucket", help="create the discovery bucket, or put its configuration back"
    )
    bucket.add_argument("--nats", required=True, metavar="URL", help="a server of the deployment")
    bucket.add_argument(
        "--creds", required=True, metavar="FILE", help="the deployment's admin.creds"
    )
    bucket.add_argument("--tls-ca", metavar="FILE", help="CA that signed the server certificate")
    bucket.add_argument(
        "--record-ttl",
        type=_record_ttl,
        default=REMOTE_RECORD_TTL_S,
        metavar="S",
        help="the records' TTL (the same as every gateway's --record-ttl)",
    )
    bucket.add_argument(
        "--replicas", type=int, default=1, metavar="N", help="servers keeping each record"
    )
    pki = actions.add_parser("pki", help="write a private CA and certificates for NATS")
    pki.add_argument("--out", required=True, metavar="DIR", help="where to write them")
    pki.add_argument(
        "--host",
        action="append",
        required=True,
        help="a name or address the NATS server is reached by (repeatable)",
    )
