"""Registrations the gateway writes for remote sessions: proxies and remote senders.

Both are ordinary v2 registrations in the peers dir, 0600, naming the gateway's pid and a socket
path every reader computes for the instance id (docs/remote.md, "Proxies"). After the contract's
keys comes one more, ``"remote":{"machine":…,"via":"gateway"}``, which every reader ignores and
Node's listing passes through to its details.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from pi_cross_session._internal.protocol.limits import MAX_NAME_CODE_POINTS, MAX_SESSION_ID_UNITS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Inbound,
    Registration,
    Status,
    build_registration,
    serialize,
)
from pi_cross_session._internal.protocol.remote.settings import REMOTE_RECORD_CWD_CHARS
from pi_cross_session._internal.protocol.text import clean_name, utf16_length
from pi_cross_session._internal.security.io import fs


def _cut_units(value: str, units: int) -> str:
    """The longest prefix of ``value`` within ``units`` UTF-16 units, never splitting a pair."""
    taken = 0
    for index, char in enumerate(value):
        taken += 2 if ord(char) > 0xFFFF else 1
        if taken > units:
            return value[:index]
    return value


def remote_session_id(remote_id: str, machine: str) -> str:
    """``<remote id>@<machine>``, cut (the remote part) to the session id limit."""
    suffix = f"@{machine}"
    return _cut_units(remote_id, MAX_SESSION_ID_UNITS - utf16_length(suffix)) + suffix


def remote_name(name: str, machine: str) -> str:
    """``<remote name>@<machine>``, the machine kept whole within the name limit."""
    suffix = f"@{machine}"
    return clean_name(name)[: MAX_NAME_CODE_POINTS - len(suffix)] + suffix


def remote_cwd(cwd: str, machine: str) -> str:
    """``<machine>:<remote cwd>``: never an absolute path here, so no listing runs git in it."""
    return f"{machine}:{cwd[:REMOTE_RECORD_CWD_CHARS]}"


@dataclass(frozen=True, slots=True)
class Written:
    """A registration the gateway published, with the machine it stands for."""

    registration: Registration
    machine: str


def build(
    locations: Locations,
    *,
    local_id: str,
    machine: str,
    remote_id: str,
    name: str,
    cwd: str,
    status: Status,
    inbound: Inbound,
    started_at: int,
    updated_at: int,
    token: str,
) -> Registration:
    """The registration of a remote session here."""
    return build_registration(
        session_id=remote_session_id(remote_id, machine),
        session_name=remote_name(name, machine),
        instance_id=local_id,
        cwd=remote_cwd(cwd, machine),
        pid=os.getpid(),
        started_at=started_at,
        updated_at=updated_at,
        status=status,
        inbound=inbound,
        socket_path=locations.socket_path(local_id),
        token=token,
    )


def file_bytes(registration: Registration, machine: str) -> bytes:
    """The contract's bytes, then the remote marker."""
    marker = json.dumps({"machine": machine, "via": "gateway"}, separators=(",", ":"))
    return serialize(registration)[:-1] + b',"remote":' + marker.encode() + b"}"


def write(locations: Locations, registration: Registration, machine: str) -> None:
    """Publish (or replace) the registration file (blocking)."""
    fs.ensure_private_dir(locations.peers_dir)
    fs.write_registration(
        locations.peers_dir,
        registration.instance_id,
        file_bytes(registration, machine),
        still_current=lambda: True,
    )


def remove(locations: Locations, local_id: str) -> None:
    """Remove the registration file (blocking; missing is fine)."""
    fs.remove_file(locations.registration_path(local_id))
