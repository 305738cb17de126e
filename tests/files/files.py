"""Registration files written by hand, the way an attacker (or a broken writer) would leave them.

Records are built as plain dicts and serialised with the stdlib, never with the package's own
writer, so a test can put any field, size, mode or file type in the peers dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from tests.receiver.model import Identity


def record(
    locations: Locations,
    name: str,
    *,
    instance_id: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A registration record (spec §1.3) of a session in this process, fields in writer order."""
    instance_id = instance_id or os.urandom(16).hex()
    stamp = int(time.time() * 1000)
    body: dict[str, Any] = {
        "version": 2,
        "protocol": 1,
        "id": str(uuid.uuid4()),
        "instanceId": instance_id,
        "name": name,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "startedAt": stamp,
        "updatedAt": stamp,
        "status": "idle",
        "inbound": "accept",
        "socketPath": locations.socket_path(instance_id),
        "token": os.urandom(32).hex(),
    }
    body.update(overrides)
    return body


def record_bytes(body: dict[str, Any]) -> bytes:
    """Compact JSON; non-ASCII escaped, so a forged lone surrogate can be written too."""
    return json.dumps(body, separators=(",", ":")).encode("ascii")


def identity_of(body: dict[str, Any]) -> Identity:
    return Identity(body["id"], body["instanceId"], body["token"])


def padded(data: bytes, size: int) -> bytes:
    """``data`` followed by spaces (still one JSON document) to exactly ``size`` bytes."""
    assert len(data) <= size
    return data + b" " * (size - len(data))


def peers_dir(locations: Locations) -> str:
    fs.ensure_private_dir(locations.peers_dir)
    return locations.peers_dir


def write_raw(locations: Locations, stem: str, data: bytes, *, mode: int = 0o600) -> str:
    """Write ``<peers>/<stem>.json`` with exactly these bytes and this mode."""
    path = os.path.join(peers_dir(locations), f"{stem}.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def write_record(locations: Locations, body: dict[str, Any], *, mode: int = 0o600) -> str:
    return write_raw(locations, body["instanceId"], record_bytes(body), mode=mode)


def write_symlinked(locations: Locations, body: dict[str, Any]) -> str:
    """A valid 0600 record kept outside the peers dir, and a symlink to it named like a record."""
    elsewhere = os.path.join(os.path.dirname(locations.peers_dir), "elsewhere")
    os.makedirs(elsewhere, mode=0o700, exist_ok=True)
    real = os.path.join(elsewhere, f"{body['instanceId']}.json")
    with open(real, "wb") as file:
        file.write(record_bytes(body))
    os.chmod(real, 0o600)
    link = os.path.join(peers_dir(locations), f"{body['instanceId']}.json")
    os.symlink(real, link)
    return link


def write_decoys(locations: Locations, count: int, pid: int) -> list[str]:
    """``count`` well-formed registrations naming ``pid`` and a socket nobody made: decoys a
    listing can neither reach nor prove stale while ``pid`` runs. Returns their instance ids.

    Each is a full :func:`record` with its own ids and token, written like :func:`write_raw`;
    the directory is made private once, not per file, as tests write ten thousand of them.
    """
    directory = peers_dir(locations)
    assert directory == locations.peers_dir
    ids = []
    for index in range(count):
        body = record(locations, f"decoy-{index}", pid=pid)
        instance_id = body["instanceId"]
        path = os.path.join(directory, f"{instance_id}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, record_bytes(body))
        finally:
            os.close(fd)
        ids.append(instance_id)
    return ids


@contextmanager
def unrelated_process() -> Iterator[int]:
    """The pid of a live process of ours that is no session (``sleep``), ended afterwards."""
    child = subprocess.Popen(["sleep", "600"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()
