"""``pi-cross-session peers --remote``: the sessions of other machines, as this machine's gateway
last saw them (its snapshot file, docs/remote.md). One file read: no probe, no NATS connection.

Every field in the snapshot came from another machine, so every one is escaped for the terminal
before it is printed. A snapshot whose gateway is gone, or that is older than the records' time to
live, is reported as such rather than listed as live.
"""

from __future__ import annotations

import time
from typing import Any

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_CWD_CODE_POINTS,
    DISPLAY_SESSION_ID_CODE_POINTS,
    MAX_NAME_CODE_POINTS,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.settings import (
    REMOTE_RECORD_TTL_S,
)
from pi_cross_session._internal.security.io import fs

_SEP = " \u2014 "


def _alive(pid: object) -> bool:
    """A pid the snapshot may name: a positive integer whose process is not proven gone."""
    return type(pid) is int and pid > 0 and not fs.pid_is_dead(pid)


def _line(record: dict[str, Any]) -> str:
    def text(key: str, limit: int) -> str:
        value = record.get(key)
        return sanitize.line(value, limit) if isinstance(value, str) else "?"

    proxy = record.get("proxy")
    via = (
        f"as {sanitize.line(str(proxy.get('name')), MAX_NAME_CODE_POINTS)} "
        f"[{sanitize.line(str(proxy.get('ref')), 8)}]"
        if isinstance(proxy, dict)
        else "no local proxy"
    )
    return _SEP.join(
        [
            f"{text('name', MAX_NAME_CODE_POINTS)} on {text('machine', 32)}",
            text("status", 8),
            f"inbound {text('inbound', 8)}",
            text("cwd", DISPLAY_CWD_CODE_POINTS),
            f"session {text('id', DISPLAY_SESSION_ID_CODE_POINTS)}",
            via,
        ]
    )


def show_remote(locations: Locations, console: Console, *, as_json: bool) -> int:
    """Print the remote sessions the gateway of this agent dir sees."""
    from pi_cross_session._internal.plugin.remote import files

    snapshot = files.read_snapshot(locations)
    age_s = None
    if snapshot is not None and isinstance(snapshot.get("writtenAt"), int):
        age_s = time.time() - snapshot["writtenAt"] / 1000
    stale = (
        snapshot is None
        or not _alive(snapshot.get("pid"))
        or age_s is None
        or age_s > REMOTE_RECORD_TTL_S
    )
    records = [] if stale or snapshot is None else snapshot.get("records", [])
    records = [r for r in records if isinstance(r, dict)]
    if as_json:
        console.json({"gateway": not stale, "peers": records})
        return exits.EXIT_OK
    if stale:
        console.result("No gateway runs for this agent dir (pi-cross-session gateway).")
        return exits.EXIT_OK
    if not records:
        console.result("The gateway sees no session on another machine.")
        return exits.EXIT_OK
    console.result("\n".join(_line(r) for r in records))
    return exits.EXIT_OK
