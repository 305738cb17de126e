"""Helpers for socket tests: sender identities, liveness checks, and peers that stop cleanly.

Why peers here wait before stopping: anyio's asyncio socket stream waits for readability with a
future that the selector completes through ``add_reader``. When the task waiting on it is cancelled
in the same loop iteration in which the peer's close makes the socket readable, the queued
``set_result`` meets a cancelled future and asyncio reports ``InvalidStateError`` to the loop's
exception handler (which the anyio pytest plugin turns into a test failure). A probe client closes
without waiting for the receiver (spec §3.7 step 5), so a test that stops its endpoint right after
a probe would hit that race. :func:`settled_peer` and :func:`serving` therefore wait until the
endpoint has finished every connection before cancelling it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from pi_cross_session.protocol.frames import Sender
from pi_cross_session.protocol.io.endpoint import Endpoint, EndpointConfig
from pi_cross_session.protocol.io.exchange import Exchanger
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.protocol.registration import Registration
from pi_cross_session.security.auth import Authenticator, LocalIdentity
from pi_cross_session.security.io import fs
from pi_cross_session.security.io.sender_files import PeersDirFiles
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.memory_inbox import MemoryInbox
from tests.support.peers import PeerHandle, make_registration, publish, running_peer

#: How often :func:`wait_until_idle` looks at the endpoint's counters, and for how long at most.
POLL_S = 0.005
SETTLE_TIMEOUT_S = MUST_HAPPEN_S


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


async def wait_until_idle(endpoint: Endpoint[object]) -> None:
    """Wait until ``endpoint`` has no open connection.

    Polling is the only way: the endpoint exposes counters, not events, and the client side has
    already closed, so no handshake is left to wait on.
    """
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        # Polling a counter: no event exists to wait on.
        while endpoint.statistics().open_connections:  # noqa: ASYNC110
            await anyio.sleep(POLL_S)


@asynccontextmanager
async def settled_peer(
    locations: Locations, name: str, *, config: EndpointConfig | None = None
) -> AsyncIterator[PeerHandle]:
    """:func:`running_peer` that, on a normal exit, lets its connections finish first."""
    async with running_peer(locations, name, config=config) as peer:
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
    identity = LocalIdentity(
        session_id=registration.id,
        instance_id=registration.instance_id,
        token=registration.token,
        pid=registration.pid,
    )
    inbox = MemoryInbox(Authenticator(identity, locations, files=PeersDirFiles(locations)))
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
