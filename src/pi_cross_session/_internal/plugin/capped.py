"""Sessions of other machines that this machine's gateway sees but keeps no proxy for.

A gateway keeps at most a cap of proxies, shared fairly between the machines it trusts
(docs/remote.md, "Proxies"). A session left without one cannot be listed or messaged from here,
and a person must be told so, not shown a listing that silently lacks it. The gateway writes what
it sees into its snapshot (``remote-peers.json``); this reads it, with the file checks every
reader applies and without the remote plane's extra, for ``peers``, ``list_pi`` and a send by
name. A snapshot whose gateway is gone says nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Final

from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.paths import Locations, node_join

#: The gateway's snapshot, under ``<agentDir>/cross-session/remote/``.
SNAPSHOT_FILE: Final = "remote-peers.json"
#: The snapshot holds up to 10,000 records of a few KiB at most.
MAX_SNAPSHOT_BYTES: Final = 64 * 1024 * 1024


def snapshot_path(locations: Locations) -> str:
    """Where the gateway of ``locations`` writes its snapshot."""
    return node_join(locations.agent_dir, "cross-session", "remote", SNAPSHOT_FILE)


@dataclass(frozen=True, slots=True)
class Capped:
    """Remote sessions without a proxy because of the cap, and the cap they met."""

    names: tuple[str, ...]
    cap: int
    share: int


def read_live_snapshot(locations: Locations) -> dict[str, Any] | None:
    """The snapshot of a gateway that is still running, or ``None`` (blocking)."""
    path = snapshot_path(locations)
    if not os.path.lexists(path):
        return None  # no gateway ever ran here: the common case, and the file layer not loaded
    from pi_cross_session._internal.security.io import fs

    try:
        body: Any = json.loads(fs.read_registration_bytes(path, max_bytes=MAX_SNAPSHOT_BYTES))
    except (CrossSessionError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    pid = body.get("pid")
    if not isinstance(pid, int) or pid <= 0 or fs.pid_is_dead(pid):
        return None
    return body


def capped_sessions(locations: Locations) -> Capped | None:
    """The remote sessions the local gateway keeps no proxy for because of its cap, if any."""
    body = read_live_snapshot(locations)
    if body is None:
        return None
    records = body.get("records")
    cap, share = body.get("maxProxies"), body.get("proxyShare")
    if not isinstance(records, list) or not isinstance(cap, int) or not isinstance(share, int):
        return None
    names = tuple(
        f"{record['name']}@{record['machine']}"
        for record in records
        if isinstance(record, dict)
        and record.get("noProxy") == "cap"
        and isinstance(record.get("name"), str)
        and isinstance(record.get("machine"), str)
    )
    return Capped(names, cap, share) if names else None
