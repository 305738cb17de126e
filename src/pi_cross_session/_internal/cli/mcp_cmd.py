"""``pi-cross-session mcp``: a stdio MCP server that gives an MCP host a seat on the network.

The server is :mod:`pi_cross_session._internal.plugin.hosts.mcp`; this module resolves its options
and stops it on SIGINT or SIGTERM (the host closing stdin stops it too). Nothing but MCP messages
is ever written to stdout; what a person should read goes to stderr, which MCP hosts keep in
their logs.

Options, narrowest first: ``--name``, then ``PI_CROSS_SESSION_NAME``, then the name of the
working directory the host started the server in; ``--inbound``, then
``PI_CROSS_SESSION_INBOUND`` (anything but ``accept`` or ``refuse`` means refuse, and says so),
then ``accept``; ``--delivery push`` for Claude Code with channels, ``pull`` (the default) for
every other host. The agent dir is ``PI_CODING_AGENT_DIR``, else ``~/.pi/agent``; the server says
on stderr which one it serves in once it is registered.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
from functools import partial
from typing import TYPE_CHECKING

import anyio

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.plugin.options import INBOUND_ENV, parse_inbound, parse_name

if TYPE_CHECKING:
    from pi_cross_session._internal.plugin.hosts.mcp import McpOptions
    from pi_cross_session._internal.plugin.runtime import SessionRuntime


def run(args: argparse.Namespace, console: Console) -> int:
    """Serve MCP on stdin and stdout until the host closes stdin or a signal stops it."""
    if importlib.util.find_spec("mcp") is None:
        console.problem(words.MCP_EXTRA_MISSING)
        return exits.EXIT_LOCAL
    # Imported here: the SDK and its dependencies load only for this command.
    from pi_cross_session._internal.plugin.hosts.mcp import McpOptions, name_origin
    from pi_cross_session._internal.plugin.hosts.mcp_seat import DeliveryMode
    from pi_cross_session._internal.protocol.paths import AGENT_DIR_ENV

    cwd = os.path.abspath(args.cwd or os.getcwd())
    name = parse_name(args.name) if args.name is not None else None
    name, name_source = (name, "flag") if name is not None else name_origin(cwd)
    inbound, source, warnings = _inbound(args.inbound)
    for warning in warnings:
        console.problem(f"{words.PROG} mcp: {warning}")
    options = McpOptions(
        name=name,
        cwd=cwd,
        delivery=DeliveryMode(args.delivery),
        inbound=inbound,
        inbound_source=source,
        warnings=warnings,
        name_source=name_source,
        agent_dir_from_env=bool(os.environ.get(AGENT_DIR_ENV)),
    )
    return anyio.run(_serve, options, console)


async def _serve(options: McpOptions, console: Console) -> int:
    from pi_cross_session._internal.plugin.hosts.mcp import serve

    stop = anyio.Event()
    finished = anyio.Event()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async with anyio.create_task_group() as group:
            listening = anyio.CancelScope()

            async def on_signal() -> None:
                with listening:
                    async for _ in received:
                        stop.set()
                        return

            group.start_soon(on_signal)
            runtime = await group.start(partial(serve, options, stop=stop, finished=finished))
            _say_where(runtime, options, console)
            await finished.wait()
            code = _exit_code(runtime, console)
            if stop.is_set():
                # Signalled: the peer has withdrawn, but the SDK's transport still waits in a
                # thread for a line on stdin that may never come; nothing is left to do.
                console.done()
                sys.stderr.flush()
                os._exit(code)
            listening.cancel()  # the host closed stdin: the transport ends by itself
    return code


def _say_where(runtime: SessionRuntime, options: McpOptions, console: Console) -> None:
    """One line on stderr: who this server is and which agent dir it serves in (two sides on
    different agent dirs never see each other, and an MCP host may not pass the variable on)."""
    from pi_cross_session._internal.plugin.render import mcp_host

    registration = runtime.registration()
    name = runtime.name or options.name
    ref = "" if registration is None else registration.ref
    console.problem(
        mcp_host.mcp_started(
            name,
            ref,
            options.delivery.value,
            runtime.locations.agent_dir,
            from_env=options.agent_dir_from_env,
        )
    )


def _exit_code(runtime: SessionRuntime, console: Console) -> int:
    failure = runtime.last_error
    if failure is not None:
        console.problem(words.mcp_stopped(str(failure)))
        return exits.EXIT_LOCAL
    return exits.EXIT_OK


def _inbound(flag: str | None) -> tuple[str, str, tuple[str, ...]]:
    """The inbound policy, where it came from, and a warning when an invalid value refused."""
    if flag is not None:
        return flag, "flag", ()
    raw = os.environ.get(INBOUND_ENV)
    if raw is None:
        return "accept", "default", ()
    value = parse_inbound(raw)
    if value is None:
        return "refuse", "env", (words.mcp_invalid_inbound(raw),)
    return value, "env", ()
