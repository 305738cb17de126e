"""The ``pi-cross-session`` command.

Subcommands exist only once they really work. Today: ``paths`` shows where this environment's
sessions register and listen, which is the first thing to check when two sessions cannot see each
other (they must resolve the same agent dir string, byte for byte).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from collections.abc import Sequence

from pi_cross_session import __version__
from pi_cross_session.protocol import paths
from pi_cross_session.protocol.frames import INSTANCE_ID_RE


def _instance_id(value: str) -> str:
    if INSTANCE_ID_RE.fullmatch(value) is None:
        raise argparse.ArgumentTypeError("an instance id is 32 lowercase hex characters")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; exposed so tests and docs can inspect it."""
    parser = argparse.ArgumentParser(
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
    return parser


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
        return 0
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
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "paths":
        return _paths(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
