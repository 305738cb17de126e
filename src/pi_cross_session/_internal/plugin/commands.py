"""The user's slash commands, independent of any host: each handler returns the text to show.

=========================  =================================================================
``/peers``, ``/list-pi``   the same listing the model's ``list_pi`` shows
``/cross-session-status``  a readable summary of the inbox; ``--json`` prints the raw object
``/cross-session-resume``  reopen a latched inbox, only when nothing is running
``/cross-session-inbound`` show, or set to ``accept`` / ``refuse``, and save the choice
``/cross-session-name``    show, or change (and save) the name other sessions address this by
=========================  =================================================================

Commands are the local user's own channel: nothing a peer sends can reach them (a peer's text is
delivered as a typed message that a host never parses as a command). Handlers never raise for a
bad argument; they answer with the usage line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio

from pi_cross_session._internal.plugin.capped import capped_sessions
from pi_cross_session._internal.plugin.options import Inbound, parse_inbound, parse_name
from pi_cross_session._internal.plugin.render import host_commands, host_status, listings, receiving
from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.registration import PublicPeer

PEERS: Final = "peers"
LIST_PI: Final = "list-pi"
STATUS: Final = "cross-session-status"
RESUME: Final = "cross-session-resume"
INBOUND: Final = "cross-session-inbound"
NAME: Final = "cross-session-name"


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """A command's name (without the slash) and the one line a host shows beside it."""

    name: str
    description: str


COMMAND_SPECS: Final = (
    CommandSpec(PEERS, host_commands.PEERS_COMMAND_DESCRIPTION),
    CommandSpec(LIST_PI, host_commands.LIST_PI_COMMAND_DESCRIPTION),
    CommandSpec(STATUS, host_commands.STATUS_COMMAND_DESCRIPTION),
    CommandSpec(RESUME, host_commands.RESUME_COMMAND_DESCRIPTION),
    CommandSpec(INBOUND, host_commands.INBOUND_COMMAND_DESCRIPTION),
    CommandSpec(NAME, host_commands.NAME_COMMAND_DESCRIPTION),
)


@dataclass(frozen=True, slots=True)
class HostReport:
    """What the host adapter adds to a status display: where the inbound setting came from, the
    warnings about options, and the problems its hooks ran into (newest last)."""

    inbound_source: str = "default"
    warnings: Sequence[str] = ()
    #: Which level named the session
    #: (:class:`~pi_cross_session._internal.plugin.options.NameSource`).
    name_source: str = "host"
    problems: Sequence[str] = ()


async def peers(runtime: SessionRuntime) -> str:
    """``/peers`` and ``/list-pi``: this session, then one line per live peer."""
    me = await runtime.me()
    listing = await runtime.list_peers()
    capped = await anyio.to_thread.run_sync(capped_sessions, runtime.locations)
    return listings.listing(
        me,
        listing.peers,
        unread=listing.unread,
        unchecked=listing.unchecked,
        capped=capped,
        agent_dir=runtime.locations.agent_dir,
        closed=closed_line(runtime),
    )


def closed_line(runtime: SessionRuntime) -> str | None:
    """The line a listing of this session adds while its inbox is closed: why, and how its user
    reopens it (the registration cannot say it: spec §1.3 allows only ``idle``/``busy`` and
    ``accept``/``refuse``, so only this session's own listings show it)."""
    latch = runtime.latch
    return None if latch is None else receiving.closed_line(latch, runtime.reopen)


def _me(runtime: SessionRuntime) -> PublicPeer | None:
    # The status display needs only the address, so no git lookup (a command should answer fast).
    registration = runtime.registration()
    return None if registration is None else PublicPeer.from_registration(registration)


def status_data(runtime: SessionRuntime, report: HostReport) -> dict[str, Any]:
    """The raw object of ``/cross-session-status --json``.

    The receiver's fields of spec §6.3 (``stopped``, ``phase``, ``remainingBudget``, ``pending``,
    ``messages``) plus ours: whether the inbox runs, its address, the inbound setting and its
    source, option warnings and host problems.
    """
    snapshot = runtime.snapshot()
    me = _me(runtime)
    data: dict[str, Any] = {"running": runtime.identity is not None}
    if snapshot is not None:
        data.update(receiving.status_data(snapshot))
    data.update(
        {
            "instanceId": None if me is None else me.instance_id,
            "address": None if me is None else listings.address(me),
            "name": runtime.name,
            "nameSource": report.name_source,
            "inbound": runtime.inbound,
            "inboundSource": report.inbound_source,
            "warnings": list(report.warnings),
            "problems": list(report.problems),
        }
    )
    view = runtime.goal_view()
    data.update(host_status.goal_data(view))
    data.update(host_status.peer_check_data(runtime.peer_checks()))
    return data


def status(runtime: SessionRuntime, args: str, report: HostReport) -> str:
    """``/cross-session-status [--json]``."""
    words = args.split()
    if words == ["--json"]:
        return host_status.status_command_json(status_data(runtime, report))
    if words:
        return host_commands.STATUS_USAGE
    return host_status.host_status_text(
        runtime.snapshot(),
        me=_me(runtime),
        inbound=runtime.inbound,
        inbound_source=report.inbound_source,
        warnings=report.warnings,
        problems=report.problems,
        sections=_status_sections(runtime, report),
        reopen=runtime.reopen,
    )


def _status_sections(runtime: SessionRuntime, report: HostReport) -> list[str]:
    view = runtime.goal_view()
    lines = host_status.goal_lines(view)
    return [
        host_commands.name_line(runtime.name, report.name_source),
        *lines,
        *host_status.peer_check_lines(runtime.peer_checks()),
    ]


def resume(runtime: SessionRuntime) -> str:
    """``/cross-session-resume``: reopen the inbox if nothing runs, and say what that means."""
    return receiving.resume_text(runtime.resume())


def inbound(
    runtime: SessionRuntime,
    args: str,
    *,
    source: str,
    persist: Callable[[Inbound], None],
) -> str:
    """``/cross-session-inbound [accept|refuse]``: show, or change and save, the inbound policy.

    ``persist`` saves the choice; if it raises, the change still holds for this session and the
    text says it was not saved.
    """
    words = args.split()
    if not words:
        return host_commands.inbound_current(runtime.inbound, source)
    choice = parse_inbound(words[0]) if len(words) == 1 else None
    if choice is None:
        return host_commands.INBOUND_USAGE
    runtime.set_inbound(choice)
    try:
        persist(choice)
    except Exception as exc:  # the runtime change stands; only its persistence failed
        return host_commands.inbound_changed(choice, saved=False, error=str(exc))
    return host_commands.inbound_changed(choice, saved=True)


async def name(
    runtime: SessionRuntime,
    args: str,
    *,
    source: str,
    persist: Callable[[str], None],
) -> str:
    """``/cross-session-name [NEW]``: show the name, or publish a new one and save it.

    The whole argument is the name, cleaned as the wire cleans names. A rename keeps the
    incarnation (ref and message states); the registration is rewritten before the reply.
    ``persist`` saves the choice; if it raises, the new name still holds for this session.
    """
    if not args.strip():
        return host_commands.name_current(runtime.name, source)
    chosen = parse_name(args)
    if chosen is None:
        return host_commands.NAME_USAGE
    await runtime.rename(chosen)
    try:
        persist(chosen)
    except Exception as exc:  # the new name stands; only its persistence failed
        return host_commands.name_changed(chosen, saved=False, error=str(exc))
    return host_commands.name_changed(chosen, saved=True)


__all__ = [
    "COMMAND_SPECS",
    "INBOUND",
    "LIST_PI",
    "NAME",
    "PEERS",
    "RESUME",
    "STATUS",
    "CommandSpec",
    "HostReport",
    "closed_line",
    "inbound",
    "name",
    "peers",
    "resume",
    "status",
    "status_data",
]
