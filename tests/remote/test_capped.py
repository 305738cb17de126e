"""Remote sessions without a proxy because of the cap are said so in every listing (the
gateway's snapshot read without the remote extra), and a snapshot whose gateway is gone says
nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pi_cross_session._internal.plugin.capped import capped_sessions, snapshot_path
from pi_cross_session._internal.plugin.render import listings
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs


def _locations(tmp_path: Path) -> Locations:
    return environment.resolve(env={"PI_CODING_AGENT_DIR": str(tmp_path / "agent")})


def _snapshot(locations: Locations, pid: int, records: list[dict[str, object]]) -> None:
    directory = str(Path(snapshot_path(locations)).parent)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    body = {"pid": pid, "maxProxies": 4, "proxyShare": 2, "records": records}
    fs.write_private_file(directory, "remote-peers.json", json.dumps(body).encode())


RECORDS: list[dict[str, object]] = [
    {"machine": "crowd", "name": "busy1", "noProxy": "cap"},
    {"machine": "crowd", "name": "busy2", "noProxy": None},
    {"machine": "evil", "name": "\x1b[2Jx", "noProxy": "cap"},
    {"machine": "crowd", "name": 7, "noProxy": "cap"},  # not a name: skipped
]


def test_a_live_gateways_snapshot_names_the_sessions_without_a_proxy(tmp_path: Path) -> None:
    locations = _locations(tmp_path)
    _snapshot(locations, os.getpid(), RECORDS)
    capped = capped_sessions(locations)
    assert capped is not None
    assert capped.names == ("busy1@crowd", "\x1b[2Jx@evil")
    line = listings.capped_line(capped)
    assert line.startswith("2 sessions of other machines have no proxy here")
    assert "at most 4 proxies, 2 guaranteed" in line
    assert "\x1b" not in line  # a remote name is sanitised for the terminal and the model
    assert listings.capped_line(capped) in listings.listing(None, [], capped=capped)
    assert "keeps no proxy for" in listings.capped_hint("busy1@crowd", capped)
    assert listings.capped_hint("someone@else", capped) == line


def test_nothing_is_said_without_a_live_gateway_or_a_capped_session(tmp_path: Path) -> None:
    locations = _locations(tmp_path)
    assert capped_sessions(locations) is None  # no snapshot at all
    _snapshot(locations, os.getpid(), [RECORDS[1]])
    assert capped_sessions(locations) is None  # nobody capped
    dead = 2**22 + 12_345  # above the default pid_max: no such process
    _snapshot(locations, dead, RECORDS)
    assert capped_sessions(locations) is None  # its gateway is gone
