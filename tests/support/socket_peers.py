"""In-process peers on real Unix sockets: registrations, a listening endpoint, a memory inbox.

:func:`running_peer` publishes a registration and serves a :class:`MemoryInbox` until its block
ends; :func:`settled_peer` does the same but lets its connections finish first; :func:`serving`
serves a given registration without publishing it. :func:`make_registration`, :func:`publish` and
:func:`published_sender` make the files a receiver authenticates senders by.

Why peers here wait before stopping: anyio's asyncio socket stream waits for readability with a
future that the selector completes through ``add_reader``. When the task waiting on it is cancelled
in the same loop iteration in which the peer's close makes the socket readable, the queued
``set_result`` meets a cancelled future and asyncio reports ``InvalidStateError`` to the loop's
exception handler (which the anyio pytest plugin turns into a test failure). A probe client closes
without waiting for the receiver (spec §3.7 step 5), so a test that stops its endpoint right after a
probe would hit that race. :func:`settled_peer` and :func:`serving` therefore wait
(:func:`~tests.support.waiting.wait_until_idle`) until the endpoint has finished every connection
before cancelling it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.fairness import SharedCap
from pi_cross_session._internal.protocol.frames import Message, Sender
from pi_cross_session._internal.protocol.io.endpoint import Endpoint, EndpointConfig
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.io.peercred import (
    PeerCredentialsReader,
    read_peer_credentials,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    build_registration,
    serialize,
)
from pi_cross_session._internal.security.auth import Authenticator, LocalIdentity
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from pi_cross_session._internal.security.tokens import new_instance_id, new_token
from tests.support.memory_inbox import MemoryInbox
from tests.support.waiting import wait_until_idle


def now_ms() -> int:
    return int(time.time() * 1000)


def make_registration(
    locations: Locations,
    name: str,
    *,
    instance_id: str | None = None,
    session_id: str | None = None,
    pid: int | None = None,
    token: str | None = None,
) -> Registration:
    """A registration as a live session of this agent dir would publish it."""
    instance_id = instance_id or new_instance_id()
    stamp = now_ms()
    return build_registration(
        session_id=session_id or str(uuid.uuid4()),
        session_name=name,
        instance_id=instance_id,
        cwd=os.getcwd(),
        pid=pid or os.getpid(),
        started_at=stamp,
        updated_at=stamp,
        status="idle",
        inbound="accept",
        socket_path=locations.socket_path(instance_id),
        token=token or new_token(),
    )


def authenticator_for(
    locations: Locations,
    registration: Registration,
    *,
    capabilities: tuple[str, ...] = ADVERTISED,
) -> Authenticator:
    """The authenticator of the session ``registration`` describes: its ids, token and pid."""
    identity = LocalIdentity(
        session_id=registration.id,
        instance_id=registration.instance_id,
        token=registration.token,
        pid=registration.pid,
    )
    return Authenticator(
        identity, locations, files=PeersDirFiles(locations), capabilities=capabilities
    )


def publish(locations: Locations, registration: Registration) -> None:
    """Write a registration file the way a session does (0600 in a 0700 dir)."""
    fs.ensure_private_dir(locations.peers_dir)
    fs.write_registration(
        locations.peers_dir,
        registration.instance_id,
        serialize(registration),
        still_current=lambda: True,
    )


@dataclass
class PeerHandle:
    """A running test peer."""

    locations: Locations
    registration: Registration
    inbox: MemoryInbox
    endpoint: Endpoint[object]
    authenticator: Authenticator

    @property
    def sender(self) -> Sender:
        """How this peer names itself in an authenticated hello."""
        reg = self.registration
        return Sender(id=reg.id, instance_id=reg.instance_id, token=reg.token)

    def exchanger(self) -> Exchanger:
        return Exchanger(self.locations, fs)

    async def send(self, to: PeerHandle | Registration, text: str, **fields: object) -> object:
        target = to.registration if isinstance(to, PeerHandle) else to
        message = make_message(text, **fields)
        return await self.exchanger().send(target, sender=self.sender, message=message)


def make_message(text: str, **fields: object) -> Message:
    body: dict[str, object] = {
        "v": 1,
        "type": "message",
        "requestId": str(uuid.uuid4()),
        "messageId": str(uuid.uuid4()),
        "text": text,
        "summary": (text.strip().splitlines() or ["message"])[0][:200] or "message",
        "sentAt": now_ms(),
    }
    body.update(fields)
    return Message.model_validate(body)


@asynccontextmanager
async def running_peer(
    locations: Locations,
    name: str,
    *,
    config: EndpointConfig | None = None,
    peer_credentials: PeerCredentialsReader = read_peer_credentials,
    shared: SharedCap | None = None,
) -> AsyncIterator[PeerHandle]:
    """Publish a registration and serve an inbox until the block ends, then clean up.

    ``peer_credentials`` replaces the kernel's answer to "who connected" (tests play other uids
    and platforms without peer credentials with it); ``shared`` is a cap the endpoint shares with
    others (as a gateway's proxies do)."""
    registration = make_registration(locations, name)
    # The ready reply advertises what the endpoint's config says (tests play older receivers).
    capabilities = (config or EndpointConfig()).capabilities
    authenticator = authenticator_for(locations, registration, capabilities=capabilities)
    inbox = MemoryInbox(authenticator)
    endpoint: Endpoint[object] = Endpoint(
        registration.socket_path,
        inbox,  # type: ignore[arg-type]
        files=fs,
        config=config,
        peer_credentials=peer_credentials,
        shared=shared,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(endpoint.serve)
        publish(locations, registration)
        try:
            yield PeerHandle(locations, registration, inbox, endpoint, authenticator)
        finally:
            # Let clients that already closed be seen as closed before cancelling: cancelling a
            # read in the same loop pass as the peer's close makes asyncio log a stray error.
            with anyio.move_on_after(1):
                while endpoint.statistics().open_connections:  # noqa: ASYNC110 (counters only)
                    await anyio.sleep(0.005)
            tg.cancel_scope.cancel()
            fs.remove_file(locations.registration_path(registration.instance_id))
            fs.remove_file(registration.socket_path)


def published_sender(
    locations: Locations,
    name: str = "alpha",
    *,
    instance_id: str | None = None,
    session_id: str | None = None,
    token: str | None = None,
) -> Registration:
    """A registration written to the peers dir, so a receiver can authenticate it."""
    registration = make_registration(
        locations, name, instance_id=instance_id, session_id=session_id, token=token
    )
    publish(locations, registration)
    return registration


def as_sender(registration: Registration) -> Sender:
    """How ``registration`` names itself in an authenticated hello."""
    return Sender(
        id=registration.id, instance_id=registration.instance_id, token=registration.token
    )


async def assert_still_serving(locations: Locations, target: Registration) -> None:
    """A fresh probe of ``target`` ends in ``ready`` from ``target``."""
    receipt = await Exchanger(locations, fs).probe(target)
    assert receipt.status == "ready"
    identity = receipt.ready.peer_identity()
    assert identity is not None
    assert (identity.id, identity.instance_id) == (target.id, target.instance_id)


@asynccontextmanager
async def settled_peer(
    locations: Locations,
    name: str,
    *,
    config: EndpointConfig | None = None,
    shared: SharedCap | None = None,
) -> AsyncIterator[PeerHandle]:
    """:func:`running_peer` that, on a normal exit, lets its connections finish first."""
    async with running_peer(locations, name, config=config, shared=shared) as peer:
        yield peer
        await wait_until_idle(peer.endpoint)


@asynccontextmanager
async def serving(
    locations: Locations,
    registration: Registration,
    *,
    config: EndpointConfig | None = None,
) -> AsyncIterator[tuple[Endpoint[object], MemoryInbox]]:
    """Serve a memory inbox as ``registration`` (whose ids and token may be fixed ones) at its
    socket path, without publishing it; the socket is removed afterwards."""
    inbox = MemoryInbox(authenticator_for(locations, registration))
    endpoint: Endpoint[object] = Endpoint(
        registration.socket_path,
        inbox,  # type: ignore[arg-type]
        files=fs,
        config=config,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(endpoint.serve)
        try:
            yield endpoint, inbox
            await wait_until_idle(endpoint)
        finally:
            tg.cancel_scope.cancel()
            fs.remove_file(registration.socket_path)
