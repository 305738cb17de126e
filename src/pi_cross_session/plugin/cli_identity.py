"""The command line's sender identity: one per user and agent dir, kept between invocations.

A receiver keys rate limits, duplicate detection and status rows by the sender's *instance id*. If
every ``pi-cross-session send`` were a new incarnation, a script could dodge every limit by sending
from a loop, and ``pi-cross-session status`` could never find the message it asks about. So the
command line keeps one identity (session id, instance id, token) in
``<agentDir>/cross-session/cli-identity.json`` (0600, in a 0700 dir), and publishes its
registration only while it is sending or querying. A lock file serialises invocations, because
two of them publishing and withdrawing the same registration would break each other's hellos.

The registration says ``inbound: refuse`` and points at a socket nobody listens on: the command
line sends, it never receives. Listers see it fail its probe while its process lives, and hide it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final

import anyio
import filelock

from pi_cross_session.plugin.outbound import Outbox
from pi_cross_session.protocol import discovery
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.exchange import Exchanger
from pi_cross_session.protocol.frames import INSTANCE_ID_RE, TOKEN_RE, Sender
from pi_cross_session.protocol.paths import Locations, node_join
from pi_cross_session.protocol.registration import (
    PublicPeer,
    build_registration,
    serialize,
)
from pi_cross_session.security import fs
from pi_cross_session.security.tokens import new_instance_id, new_token

STATE_DIR: Final = "cross-session"
IDENTITY_FILE: Final = "cli-identity.json"
LOCK_FILE: Final = "cli.lock"
DEFAULT_NAME: Final = "pi-cross-session-cli"
#: How long an invocation waits for another one holding the identity.
LOCK_TIMEOUT_S: Final = 15.0


class IdentityBusyError(CrossSessionError):
    """Another invocation holds the command line's identity for too long."""

    code = "identity_busy"


@dataclass(frozen=True, slots=True)
class CliIdentity:
    """The persistent sender identity of the command line."""

    session_id: str
    instance_id: str
    token: str

    def sender(self) -> Sender:
        """How this identity names itself in a hello."""
        return Sender(id=self.session_id, instance_id=self.instance_id, token=self.token)


def state_dir(locations: Locations) -> str:
    """``<agentDir>/cross-session``: private state of this package."""
    return node_join(locations.agent_dir, STATE_DIR)


def parse_identity(raw: bytes) -> CliIdentity | None:
    """The identity in a stored file, or ``None`` when it is not a valid one."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    session_id, instance_id, token = (
        data.get("sessionId"),
        data.get("instanceId"),
        data.get("token"),
    )
    if not (
        isinstance(session_id, str)
        and 0 < len(session_id) <= 128
        and isinstance(instance_id, str)
        and INSTANCE_ID_RE.fullmatch(instance_id)
        and isinstance(token, str)
        and TOKEN_RE.fullmatch(token)
    ):
        return None
    return CliIdentity(session_id=session_id, instance_id=instance_id, token=token)


def load_or_create(locations: Locations) -> CliIdentity:
    """The stored identity, or a new one written 0600 (blocking: call from a worker thread).

    A stored file that fails any safety or format check is replaced, never trusted.
    """
    directory = state_dir(locations)
    fs.ensure_private_dir(directory)
    path = node_join(directory, IDENTITY_FILE)
    try:
        existing = parse_identity(fs.read_registration_bytes(path))
    except CrossSessionError:
        existing = None
    if existing is not None:
        return existing
    identity = CliIdentity(
        session_id=f"cli-{uuid.uuid4()}", instance_id=new_instance_id(), token=new_token()
    )
    body = {
        "version": 1,
        "sessionId": identity.session_id,
        "instanceId": identity.instance_id,
        "token": identity.token,
    }
    fs.write_private_file(directory, IDENTITY_FILE, json.dumps(body).encode())
    return identity


@asynccontextmanager
async def publishing(
    locations: Locations,
    *,
    name: str = DEFAULT_NAME,
    with_git: bool = True,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
) -> AsyncIterator[Outbox]:
    """Hold the identity, publish its registration, and yield what to send with."""
    identity = await anyio.to_thread.run_sync(load_or_create, locations)
    lock = filelock.FileLock(node_join(state_dir(locations), LOCK_FILE), mode=0o600)
    try:
        await anyio.to_thread.run_sync(partial(lock.acquire, timeout=lock_timeout_s))
    except filelock.Timeout as exc:
        raise IdentityBusyError("another pi-cross-session command is using the identity") from exc
    registration_path = locations.registration_path(identity.instance_id)
    try:
        stamp = _now_ms()
        registration = build_registration(
            session_id=identity.session_id,
            session_name=name,
            instance_id=identity.instance_id,
            cwd=os.getcwd(),
            pid=os.getpid(),
            started_at=stamp,
            updated_at=stamp,
            status="idle",
            inbound="refuse",
            socket_path=locations.socket_path(identity.instance_id),
            token=identity.token,
        )
        await anyio.to_thread.run_sync(fs.ensure_private_dir, locations.peers_dir)
        await anyio.to_thread.run_sync(
            partial(
                fs.write_registration,
                locations.peers_dir,
                identity.instance_id,
                serialize(registration),
                still_current=lambda: True,
            )
        )
        exchanger = Exchanger(locations, fs)

        async def list_peers() -> discovery.Listing:
            return await discovery.list_peers(
                locations,
                fs,
                exchanger.is_live,
                self_instance_id=identity.instance_id,
                with_git=with_git,
            )

        yield Outbox(
            sender=identity.sender(),
            exchanger=exchanger,
            list_peers=list_peers,
            wall_ms=_now_ms,
            me=PublicPeer.from_registration(registration),
        )
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(fs.remove_file, registration_path)
            finally:
                await anyio.to_thread.run_sync(lock.release)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
