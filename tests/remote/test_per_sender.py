"""Every limit of the receiver applies per remote sender (docs/remote.md, "Delivery on the
receiving machine"): its rate, its deduplication and the one lifetime budget it shares with local
senders; a remote sender is never more trusted than a local one (no goal scope crosses); and the
first messages of a new remote sender, arriving together, all authenticate.

One NATS server and one receiving gateway serve the whole module; each test has its own sessions
and its own trusted machines, which the test plays itself (:class:`RawMachine`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.protocol.codes import OK_RECEIPTS
from pi_cross_session._internal.protocol.limits import LIFETIME_BUDGET, RATE_CAPACITY
from pi_cross_session._internal.protocol.remote.envelope import request_subject
from pi_cross_session._internal.security.remote.pairing import MAC_BYTES
from tests.support.processes import InboxProcess
from tests.support.remote import Fleet, Machine, RawMachine, fleet_at, raw_request, reply_of

MACHINES = ("alpha", "beta", "gamma", "delta")


@dataclass
class Plane:
    fleet: Fleet
    buildbox: Machine
    machines: dict[str, RawMachine]

    def inbox(self, name: str) -> tuple[InboxProcess, str]:
        """A new session on buildbox that turns straight back to idle, and its instance id."""
        inbox = self.buildbox.inbox(name, "--busy", "0")
        target = next(r for r in self.buildbox.registrations() if r["name"] == name)
        return inbox, target["instanceId"]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with fleet_at(Path(tmp_path_factory.mktemp("plane")) / "fleet") as fleet:
        fleet.start_server()
        buildbox = fleet.machine("buildbox")
        machines = {name: RawMachine(name, fleet=fleet) for name in MACHINES}
        buildbox.trust(*machines.values())
        buildbox.start_gateway()
        yield Plane(fleet, buildbox, machines)


def _send(
    plane: Plane,
    machine: str,
    target: str,
    sends: Sequence[tuple[str, str, str]],
    width: int = 1,
    *,
    again_if_busy: bool = True,
) -> list[tuple[str, str] | None]:
    """Each ``(sender instance id, message id, text)`` as a signed request from ``machine``, at
    most ``width`` at once over one connection; the ``(outcome, status)`` of each, in order.
    A session between turns answers ``busy`` (which admits nothing and spends nothing): such a
    send is signed again and repeated, unless ``again_if_busy`` is false."""
    raw = plane.machines[machine]
    subject = request_subject("buildbox", machine)
    replies: list[tuple[str, str] | None] = [None] * len(sends)

    async def run() -> None:
        nc = await raw.connect(plane.fleet.url)
        limiter = anyio.Semaphore(width)
        try:

            async def one(index: int, sender: str, message_id: str, text: str) -> None:
                async with limiter:
                    while True:
                        payload, _ = raw.payload(
                            "buildbox", target, text, message_id=message_id, sender_id=sender
                        )
                        msg = await nc.request(subject, payload, timeout=10)
                        replies[index] = reply_of(bytes(msg.data))
                        if not again_if_busy or replies[index] != ("refused", "busy"):
                            return
                        await anyio.sleep(0.05)

            async with anyio.create_task_group() as group:
                for index, (sender, message_id, text) in enumerate(sends):
                    if width == 1:
                        await one(index, sender, message_id, text)
                    else:
                        group.start_soon(one, index, sender, message_id, text)
        finally:
            await nc.close()

    anyio.run(run)
    return replies


def _taken(reply: tuple[str, str] | None) -> bool:
    """The session admitted it (submitted, queued, or accepted)."""
    return reply is not None and reply[1] in OK_RECEIPTS


def _messages(inbox: InboxProcess) -> list[dict[str, object]]:
    return [e for e in inbox.events() if e.get("event") == "message"]


def test_rate_and_deduplication_are_per_remote_sender(plane: Plane) -> None:
    bob, target = plane.inbox("bob")
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    # One remote sender: its burst, then the receiver's own rate_limited (the machine's bounds
    # are far above this).
    burst = [(a, f"a-{i}", f"from a, number {i}") for i in range(RATE_CAPACITY + 1)]
    replies = _send(plane, "alpha", target, burst)
    assert all(_taken(r) for r in replies[:-1]), replies
    assert replies[-1] == ("refused", "rate_limited")
    # Another sender of the same machine has its own bucket and its own dedup tables.
    replies = _send(
        plane,
        "alpha",
        target,
        [
            (b, "b-1", "from b"),
            (b, "b-1", "from b, the same id again"),  # id dedup
            (b, "b-2", "from b"),  # text dedup
            (c, "b-1", "from b"),  # the same id and text, from someone else
        ],
    )
    assert [_taken(r) or r for r in replies] == [
        True,
        ("refused", "duplicate"),
        ("refused", "duplicate"),
        True,
    ], replies
    # The same sender instance id on another machine is another sender: a machine speaks only
    # for its own sessions.
    (reply,) = _send(plane, "beta", target, [(a, "a-beta", "from beta's a")])
    assert _taken(reply), reply
    bob.wait_event("message", messageId="a-beta")
    received = [e["messageId"] for e in _messages(bob)]
    assert sorted(received) == sorted(
        [f"a-{i}" for i in range(RATE_CAPACITY)] + ["b-1", "b-1", "a-beta"]
    ), received


def test_remote_senders_share_the_receivers_one_budget_with_local_ones(plane: Plane) -> None:
    carol, target = plane.inbox("carol")
    senders = [f"{i:032x}" for i in range(1, LIFETIME_BUDGET // (RATE_CAPACITY - 4) + 2)]
    sends = [
        (sender, f"{sender[-4:]}-{n}", f"budget {sender[-4:]} {n}")
        for sender in senders
        for n in range(RATE_CAPACITY - 4)
    ]
    assert len(sends) > LIFETIME_BUDGET
    replies = _send(plane, "gamma", target, sends[: LIFETIME_BUDGET + 1])
    assert all(_taken(r) for r in replies[:LIFETIME_BUDGET]), replies
    assert replies[-1] == ("refused", "budget_exhausted")
    carol.wait_event("message", messageId=sends[LIFETIME_BUDGET - 1][1])
    # A local sender finds the same budget spent.
    local = plane.buildbox.cli("send", "carol", "a local word", "--json")
    assert local.returncode == exits.EXIT_REFUSED, local
    assert local.json()["status"] == "budget_exhausted"
    assert len(_messages(carol)) == LIFETIME_BUDGET


def test_no_goal_scope_crosses_machines(plane: Plane) -> None:
    dora, target = plane.inbox("dora")
    payload, _ = plane.machines["beta"].payload(
        "buildbox", target, "for the objective", message_id="g-1", sender_id="d" * 32
    )
    # A goal id, and the goal capability claimed, in what is signed: both ignored. The session
    # sees a plain message from a plain sender.
    forged = payload.replace(b'"sentAt":', b'"goalId":"goal-1","sentAt":', 1).replace(
        b'"capabilities":["cancel-safe-queue-v1"]',
        b'"capabilities":["cancel-safe-queue-v1","goal-scoped-peer-v1"]',
        1,
    )
    assert forged.count(b"goal") == 3
    resealed = plane.machines["beta"].sealed_for("buildbox", forged[MAC_BYTES:])
    beta = plane.machines["beta"]
    asked = anyio.run(
        partial(raw_request, who=beta),
        plane.fleet.url,
        request_subject("buildbox", "beta"),
        resealed,
        10.0,
    )
    reply = reply_of(asked)
    assert _taken(reply), reply
    dora.wait_event("message", messageId="g-1")
    (message,) = _messages(dora)
    assert message.get("goalId") is None, message
    assert "goal" not in str(message.get("sender")), message


def test_first_messages_of_a_new_remote_sender_arriving_together_all_authenticate(
    plane: Plane,
) -> None:
    erin, target = plane.inbox("erin")
    senders = [f"e{i:031x}" for i in range(6)]
    # Each new sender's first four messages at once: the gateway makes its local identity once,
    # and every delivery authenticates with it (the session may answer busy to a crowd).
    together = [(s, f"{s[-2:]}-{n}", f"together {s[-2:]} {n}") for s in senders for n in range(4)]
    replies = _send(plane, "delta", target, together, width=12, again_if_busy=False)
    statuses = [r[1] for r in replies if r is not None]
    assert len(statuses) == len(together), replies
    assert set(statuses) <= OK_RECEIPTS | {"busy"}, replies
    # And each sender goes on working afterwards.
    later = [(s, f"{s[-2:]}-later", f"later {s[-2:]}") for s in senders]
    replies = _send(plane, "delta", target, later)
    assert all(_taken(r) for r in replies), replies
    for _, message_id, _ in later:
        erin.wait_event("message", messageId=message_id)
    admitted = {e["messageId"] for e in _messages(erin)}
    assert {m for _, m, _ in later} <= admitted
