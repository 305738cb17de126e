"""The host extension's slash commands as the user meets them: their descriptions and usage,
what ``/cross-session-inbound`` and ``/cross-session-name`` show and did, and the warnings about an
inbound or name setting (or ``agent.toml``) that cannot be used."""

from __future__ import annotations

from typing import Final

from pi_cross_session._internal.plugin.render.peer_text import shown_diagnostic
from pi_cross_session._internal.protocol import sanitize

PEERS_COMMAND_DESCRIPTION: Final = "List the other live agent sessions on this machine"


LIST_PI_COMMAND_DESCRIPTION: Final = "List the other live agent sessions (same as /peers)"


STATUS_COMMAND_DESCRIPTION: Final = (
    "Show this session's cross-session inbox: state, budget, queue and recent messages "
    "(--json for the raw data)"
)


RESUME_COMMAND_DESCRIPTION: Final = (
    "Reopen the cross-session inbox after an aborted or failed turn closed it (when idle)"
)


INBOUND_COMMAND_DESCRIPTION: Final = (
    "Accept or refuse messages from other sessions: /cross-session-inbound accept|refuse"
)


STATUS_USAGE: Final = "Usage: /cross-session-status [--json]"


INBOUND_USAGE: Final = (
    "Usage: /cross-session-inbound accept|refuse (without an argument: show the current setting)"
)


#: How each source of the inbound setting is named to the user.
INBOUND_SOURCES: Final = {
    "default": "the default",
    "env": "the environment variable PI_CROSS_SESSION_INBOUND",
    "config": "[cross_session] in agent.toml",
    "session": "/cross-session-inbound in this session",
}


def inbound_current(value: str, source: str) -> str:
    """``/cross-session-inbound`` without an argument."""
    where = INBOUND_SOURCES.get(source, source)
    verb = "accepts" if value == "accept" else "refuses"
    return f"This session {verb} messages from other sessions (set by {where}).\n{INBOUND_USAGE}"


def inbound_changed(value: str, *, saved: bool, error: str | None = None) -> str:
    """What ``/cross-session-inbound accept|refuse`` did, and how long it lasts."""
    if value == "accept":
        did = "This session now accepts messages from other sessions."
    else:
        did = (
            "This session now refuses messages from other sessions; senders are told "
            "'refused'. Messages already queued are still delivered."
        )
    if saved:
        lasts = (
            "The choice is saved with this session and applies when it is resumed; new sessions "
            "still follow PI_CROSS_SESSION_INBOUND or [cross_session] inbound in agent.toml."
        )
    else:
        reason = shown_diagnostic(error or "unknown error")
        lasts = f"It could not be saved ({reason}), so it lasts until this session ends."
    return f"{did} {lasts}"


def invalid_inbound_option(where: str, value: object) -> str:
    """An inbound setting that is neither ``accept`` nor ``refuse``: we refuse, and say so."""
    shown = sanitize.line(repr(value), 80)
    return (
        f'Cross-session: {where} sets inbound to {shown}, which is neither "accept" nor '
        '"refuse"; messages from other sessions are refused until it is fixed.'
    )


def unreadable_config(path: str, error: str) -> str:
    """``agent.toml`` exists but cannot be read or parsed: fail closed, and say so."""
    reason = shown_diagnostic(error)
    return (
        f"Cross-session: could not read {sanitize.line(path, 500)} ({reason}); messages from "
        "other sessions are refused until it is fixed or PI_CROSS_SESSION_INBOUND is set."
    )


def invalid_config_entry(key: str, expected: str) -> str:
    """A ``[cross_session]`` key with a value of the wrong shape; it is ignored."""
    return f"Cross-session: [cross_session] {key} in agent.toml must be {expected}; it is ignored."


NAME_COMMAND_DESCRIPTION: Final = (
    "Show or change the name other sessions address this one by: /cross-session-name [NEW]"
)


NAME_USAGE: Final = (
    "Usage: /cross-session-name NEW (without an argument: show the current name and its source)"
)


#: How each source of the session's name is named to the user.
NAME_SOURCES: Final = {
    "host": "the host's session name, or the default",
    "env": "the environment variable PI_CROSS_SESSION_NAME",
    "config": "[cross_session] name in agent.toml",
    "session": "/cross-session-name in this session",
}


def name_line(name: str | None, source: str) -> str:
    """The name line of ``/cross-session-status``."""
    where = NAME_SOURCES.get(source, source)
    shown = "not registered" if name is None else sanitize.line(name)
    return f"Name: {shown} (set by {where})"


def name_current(name: str | None, source: str) -> str:
    """``/cross-session-name`` without an argument."""
    return f"{name_line(name, source)}\n{NAME_USAGE}"


def name_changed(name: str, *, saved: bool, error: str | None = None) -> str:
    """What ``/cross-session-name NEW`` did, and how long it lasts."""
    did = (
        f"This session is now named {sanitize.line(name)}; its registration says so from now on "
        "(other sessions address it by the new name and its unchanged ref)."
    )
    if saved:
        lasts = (
            "The name is saved with this session and applies when it is resumed; new sessions "
            "still follow PI_CROSS_SESSION_NAME or [cross_session] name in agent.toml."
        )
    else:
        reason = shown_diagnostic(error or "unknown error")
        lasts = f"It could not be saved ({reason}), so it lasts until this session ends."
    return f"{did} {lasts}"


def invalid_name_option(where: str) -> str:
    """A session name that is blank once cleaned: ignored, and said."""
    return f"Cross-session: {where} sets a blank session name; it is ignored."


__all__ = [
    "INBOUND_COMMAND_DESCRIPTION",
    "INBOUND_SOURCES",
    "INBOUND_USAGE",
    "LIST_PI_COMMAND_DESCRIPTION",
    "NAME_COMMAND_DESCRIPTION",
    "NAME_SOURCES",
    "NAME_USAGE",
    "PEERS_COMMAND_DESCRIPTION",
    "RESUME_COMMAND_DESCRIPTION",
    "STATUS_COMMAND_DESCRIPTION",
    "STATUS_USAGE",
    "inbound_changed",
    "inbound_current",
    "invalid_config_entry",
    "invalid_inbound_option",
    "invalid_name_option",
    "name_changed",
    "name_current",
    "name_line",
    "unreadable_config",
]
