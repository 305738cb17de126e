"""The receiving gateway never knocks on one session's door more often than the door admits
(docs/remote.md, "Delivery on the receiving machine"): ten machines, each at its own bound of
deliveries in flight, ask for 160 deliveries at once to one session. The gateway opens at most
``REMOTE_DELIVERIES_PER_SESSION`` connections to it, lets a few more wait for a slot, and refuses
the rest ``rate_limited`` — a refusal that says nothing reached the session. Every request is
answered; none ends on a connection the session's door (64) would have turned away.

The session is a scripted one that answers the hello and then holds the message unanswered, so
every delivery that got in stays open until the gateway's own delivery deadline."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import anyio

from pi_cross_session._internal.protocol.limits import (
    MAX_CONNECTIONS,
)
from pi_cross_session._internal.protocol.remote.envelope import request_subject
from pi_cross_session._internal.protocol.remote.settings import (
    REMOTE_DELIVERIES_PER_SESSION,
    REMOTE_DELIVERY_DEADLINE_S,
    REMOTE_IN_FLIGHT_PER_MACHINE,
)
from tests.support.fake_receiver import SILENT, FakeReceiver, ready, scripted_peer
from tests.support.remote import Fleet, RawMachine, reply_of

MACHINES = 10
#: Comfortably inside the gateway's delivery deadline, which is how long a held delivery holds
#: its slot.
HELD_S = REMOTE_DELIVERY_DEADLINE_S - 0.5


def test_deliveries_to_one_session_are_capped_and_the_rest_refused_at_once(
    fleet: Fleet, tmp_path: Path
) -> None:
    import nats

    assert REMOTE_DELIVERIES_PER_SESSION < MAX_CONNECTIONS
    assert MACHINES * REMOTE_IN_FLIGHT_PER_MACHINE > MAX_CONNECTIONS  # the door would overflow
    fleet.start_server()
    buildbox = fleet.machine("buildbox")
    machines = [RawMachine(f"m{index}", fleet=fleet) for index in range(MACHINES)]
    buildbox.trust(*machines)
    buildbox.start_gateway()
    replies: list[tuple[str, str] | None] = []
    accepted_at: list[float] = []

    async def run() -> None:
        async with scripted_peer(
            buildbox.locations, "held", lambda registration: [ready(registration), SILENT]
        ) as fake:

            def watch_open(fake: FakeReceiver = fake) -> bool:
                while len(accepted_at) < fake.connections:
                    accepted_at.append(time.monotonic())
                return False

            async def machine_asks(machine: RawMachine) -> None:
                nc = await machine.connect(fleet.url)
                try:
                    async with anyio.create_task_group() as group:
                        for index in range(REMOTE_IN_FLIGHT_PER_MACHINE):
                            group.start_soon(ask, nc, machine, index)
                finally:
                    await nc.close()

            async def ask(nc: nats.NATS, machine: RawMachine, index: int) -> None:
                payload, _ = machine.payload(
                    "buildbox",
                    fake.registration.instance_id,
                    f"from {machine.name}, number {index}",
                    message_id=f"{machine.name}-{index}",
                    sender_id=f"{index:032x}",
                )
                try:
                    msg = await nc.request(
                        request_subject("buildbox", machine.name), payload, timeout=10
                    )
                except nats.errors.TimeoutError:
                    replies.append(None)
                    return
                replies.append(reply_of(bytes(msg.data)))

            async with anyio.create_task_group() as watching:
                watching.start_soon(fake.wait_for, watch_open)
                async with anyio.create_task_group() as group:
                    for machine in machines:
                        group.start_soon(machine_asks, machine)
                watching.cancel_scope.cancel()
            delivered = fake.count("message")
            # Connections that carried a message (the gateway's own probes, which publish the
            # session, come through the door like any local prober's).
            carried = {item.connection for item in fake.received if item.kind == "message"}

        outcomes = Counter(reply[0] if reply else "no answer" for reply in replies)
        assert len(replies) == MACHINES * REMOTE_IN_FLIGHT_PER_MACHINE
        assert None not in replies, outcomes
        # No slot frees before a held delivery's deadline, so whatever the session accepted
        # within that time was open at once: never more than the bound (the fake may notice a
        # close late, so its count of open connections is not the measure).
        opened = [accepted_at[number - 1] for number in sorted(carried)]
        at_once = sum(1 for at in opened if at - opened[0] < HELD_S)
        assert 0 < at_once <= REMOTE_DELIVERIES_PER_SESSION, at_once
        # Every message that reached the session was held unanswered: unknown, never a refusal;
        # every other request was refused rate_limited, nothing sent.
        assert outcomes["unknown"] == delivered
        refused = [reply for reply in replies if reply and reply[0] == "refused"]
        assert refused
        assert all(reply[1] == "rate_limited" for reply in refused), refused
        assert len(refused) + delivered == len(replies)

    anyio.run(run)
