"""The ``pi-cross-session`` command: use the session network without an agent host.

Commands, one module each (imported only when that command runs, so a quick ``peers`` does not
pay for the exchange, the receiver or pydantic's models):

* ``paths`` (:mod:`.paths_cmd`) — where sessions of this environment register and listen;
* ``inbox`` (:mod:`.inbox_cmd`) — a live session without a model that prints what it receives;
* ``peers`` (:mod:`.peers_cmd`) — the live sessions, read-only;
* ``send`` (:mod:`.send_cmd`) — send one message and print its receipt, optionally following it;
* ``status`` (:mod:`.status_cmd`) — ask a session what became of a message sent from here;
* ``doctor`` (:mod:`.doctor_cmd`) — find what keeps sessions from seeing or reaching each other;
* ``mcp`` (:mod:`.mcp_cmd`) — a stdio MCP server: an MCP host (Claude Code, Codex…) as a peer.
* ``log`` (:mod:`.log_cmd`) — the sessions' journals as history;
* ``watch`` (:mod:`.watch_cmd`) — a live view of the sessions and the messages between them;
* ``gateway`` (:mod:`.gateway_cmd`), ``remote`` (:mod:`.remote_cmd`) — the remote plane.

Shared parts: :mod:`.parser` (arguments and ``--help``), :mod:`.exits` (the exit codes),
:mod:`.console` (output streams, logging), :mod:`.words` (every text the command line prints).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Final

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.cli.console import PREFIX, Console, prepare_streams
from pi_cross_session._internal.cli.parser import REMOTE_PLANE_COMMANDS, build_parser, command_word

#: Commands that turn logging on themselves, once they import something that may log (so that a
#: quick ``peers`` or ``paths`` does not pay for importing logging).
_LOG_WHEN_NEEDED: Final = frozenset({"paths", "peers"})
#: The module that runs each command.
_RUNNERS: Final = {
    "paths": "paths_cmd",
    "inbox": "inbox_cmd",
    "peers": "peers_cmd",
    "send": "send_cmd",
    "status": "status_cmd",
    "doctor": "doctor_cmd",
    "mcp": "mcp_cmd",
    "log": "log_cmd",
    "watch": "watch_cmd",
    "gateway": "gateway_cmd",
    "remote": "remote_cmd",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    prepare_streams()
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(remote_plane=command_word(words) in REMOTE_PLANE_COMMANDS)
    args = parser.parse_args(argv)
    module = _RUNNERS.get(args.command or "")
    if module is None:
        parser.print_help(sys.stderr)
        return exits.EXIT_LOCAL
    console = Console(verbosity=args.verbose)
    if args.command not in _LOG_WHEN_NEEDED:
        console.enable_logging()
    try:
        runner = importlib.import_module(f"{__name__}.{module}")
        code: int = runner.run(args, console)
    except KeyboardInterrupt:
        console.done()
        return exits.EXIT_INTERRUPTED
    except Exception as exc:
        # Imported here, as every command imports it only when it needs it (start-up time).
        from pi_cross_session._internal.protocol.errors import CrossSessionError
        from pi_cross_session._internal.protocol.sanitize import line

        if not isinstance(exc, CrossSessionError):
            raise
        # People get words; a script gets the code too, in --json.
        if getattr(args, "json", False):
            console.json({"ok": False, "status": exc.code, "error": str(exc)})
        else:
            console.problem(f"{PREFIX}: {line(str(exc))}")
        return exits.EXIT_LOCAL
    return code


__all__ = ["build_parser", "main"]
