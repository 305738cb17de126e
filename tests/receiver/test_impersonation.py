"""Same-user impersonation: a process that rewrites a live session's registration with its own pid.

The kernel pid check compares the connecting pid with the pid the sender's registration names, so
a same-user process that can write the peers dir can rewrite a live session's registration (atomic
rename, 0600, the session's own token) with its own pid and pass it. The receiver now pins each
sender session to the pid it first authenticated with; a later hello whose registration names
another pid is refused and shown as a possible impersonation. A send-only identity (no socket, like
the command line's) still moves between processes.

Real processes and sockets throughout: the impostor is a separate OS process
(:mod:`tests.receiver.connect_client`).
"""

from __future__ import annotations

import os

import pytest

from pi_cross_session._internal.plugin import commands
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.frames import Hello
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.auth import (
    AUTH_FAILED_TEXT,
    Authenticator,
    LocalIdentity,
    SenderPins,
)
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from tests.receiver.other_process import other_process
from tests.support import platforms, raw_client
from tests.support.raw_client import RawClient
from tests.support.socket_peers import (
    PeerHandle,
    make_registration,
    publish,
    published_sender,
    running_peer,
)
from tests.support.waiting import wait_until_idle
from tests.support.wire_session import running_receiver

pytestmark = pytest.mark.anyio

linux_only = platforms.needs_peercred


def delivery(target: Registration, sender: Registration, text: str) -> list[dict[str, object]]:
    return [
        raw_client.hello(target, sender=sender, request_id="h-1"),
        raw_client.message_body(text=text, request_id="m-1", message_id=f"msg-{abs(hash(text))}"),
    ]


def rewritten(registration: Registration, pid: int) -> Registration:
    """The same incarnation's registration (id, instance id, token) naming another pid."""
    forged = registration.model_copy(update={"pid": pid})
    assert forged.token == registration.token
    return forged


async def deliver_from_here(beta: PeerHandle, sender: Registration, text: str) -> str:
    async with RawClient.connect(beta.registration.socket_path) as client:
        hello, message = delivery(beta.registration, sender, text)
        await client.send(raw_client.line(hello))
        ready = await client.read_reply()
        if ready.status != "ready":
            return ready.status
        await client.send(raw_client.line(message))
        return (await client.read_reply()).status


@linux_only
async def test_a_rewritten_registration_does_not_let_another_process_pose_as_a_live_session(
    locations: Locations,
) -> None:
    async with running_peer(locations, "beta") as beta, running_peer(locations, "alpha") as alpha:
        # alpha (a real session with a socket, in this process) talks to beta first.
        assert await deliver_from_here(beta, alpha.registration, "from the real alpha") == (
            "submitted"
        )
        async with other_process() as impostor:
            # Same user: it rewrites alpha's registration with its own pid, then says hello as
            # alpha. The kernel check alone passes it (the pids agree).
            publish(locations, rewritten(alpha.registration, impostor.pid))
            outcome = await impostor.exchange(
                beta.registration.socket_path,
                delivery(beta.registration, alpha.registration, "posing as alpha"),
            )
        (refusal,) = outcome.parsed()
        assert (refusal.ok, refusal.status, refusal.error) == (
            False,
            "authentication_failed",
            AUTH_FAILED_TEXT,
        )
        assert [entry.text for entry in beta.inbox.entries] == ["from the real alpha"]
        diagnostics = beta.authenticator.diagnostics()
        assert dict(diagnostics.refusals) == {"pid_changed": 1}
        assert diagnostics.recent[-1] == (
            f"hello from {alpha.registration.instance_id} refused: possible impersonation: it "
            f"first authenticated with pid {os.getpid()}, and its registration now names pid "
            f"{impostor.pid}"
        )
        await wait_until_idle(beta.endpoint)


@linux_only
async def test_the_impersonation_is_shown_in_the_status(locations: Locations) -> None:
    async with running_receiver(locations) as rx, running_peer(locations, "alpha") as alpha:
        target = rx.registration
        sent = await alpha.send(target, "first, from alpha itself", sentAt=rx.clock.wall_ms())
        assert getattr(sent, "status", None) == "submitted"
        async with other_process() as impostor:
            publish(locations, rewritten(alpha.registration, impostor.pid))
            outcome = await impostor.exchange(
                target.socket_path, delivery(target, alpha.registration, "posing as alpha")
            )
        assert [reply.status for reply in outcome.parsed()] == ["authentication_failed"]
        text = commands.status(rx.runtime, "", commands.HostReport())
        assert "hellos refused: pid_changed 1" in text
        assert "Possible impersonation: 1 hello(s) named a session whose registration" in text
        data = commands.status_data(rx.runtime, commands.HostReport())
        assert data["peerChecks"]["helloRefusals"] == {"pid_changed": 1}
        assert [d.text for d in rx.host.submitted] == ["first, from alpha itself"]


@linux_only
async def test_a_send_only_identity_still_moves_between_processes(locations: Locations) -> None:
    """The command line keeps one identity across invocations, each its own process, and has no
    socket: its registration naming a new pid is a new invocation, not an impostor."""
    async with running_peer(locations, "beta") as beta:
        cli_like = published_sender(locations, "pi-cross-session-cli")  # no socket, this pid
        assert await deliver_from_here(beta, cli_like, "from the first invocation") == "submitted"
        async with other_process() as second:
            moved = rewritten(cli_like, second.pid)
            publish(locations, moved)
            outcome = await second.exchange(
                beta.registration.socket_path,
                delivery(beta.registration, moved, "from the second invocation"),
            )
        assert [reply.status for reply in outcome.parsed()] == ["ready", "submitted"]
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await wait_until_idle(beta.endpoint)


@linux_only
async def test_the_first_hello_pins_and_the_real_session_then_sees_the_refusal(
    locations: Locations,
) -> None:
    """An impostor that is heard first is pinned; the real session is then refused until the
    impostor's pin is forgotten. Both orders are flagged: the user sees the conflict."""
    async with running_peer(locations, "beta") as beta, running_peer(locations, "alpha") as alpha:
        async with other_process() as impostor:
            publish(locations, rewritten(alpha.registration, impostor.pid))
            first = await impostor.exchange(
                beta.registration.socket_path,
                delivery(beta.registration, alpha.registration, "the impostor, first"),
            )
            assert [reply.status for reply in first.parsed()] == ["ready", "submitted"]
            publish(locations, alpha.registration)  # the real session's next heartbeat
            status = await deliver_from_here(beta, alpha.registration, "the real alpha")
        assert status == "authentication_failed"
        assert dict(beta.authenticator.diagnostics().refusals) == {"pid_changed": 1}
        await wait_until_idle(beta.endpoint)


async def test_a_session_keeps_authenticating_from_its_own_pid(locations: Locations) -> None:
    async with running_peer(locations, "beta") as beta, running_peer(locations, "alpha") as alpha:
        for n in range(3):
            publish(locations, alpha.registration)  # heartbeats rewrite it, same pid
            assert await deliver_from_here(beta, alpha.registration, f"note {n}") == "submitted"
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await wait_until_idle(beta.endpoint)


# -- the pin table -------------------------------------------------------------------------------


def test_pins_are_bounded_and_forget_the_least_recently_used() -> None:
    pins = SenderPins(capacity=2)
    pins.pin("a" * 32, 10)
    pins.pin("b" * 32, 20)
    pins.pin("a" * 32, 10)  # used again: now the newest
    pins.pin("c" * 32, 30)
    assert len(pins) == 2
    assert (pins.pinned("a" * 32), pins.pinned("b" * 32), pins.pinned("c" * 32)) == (10, None, 30)


def test_a_pin_table_needs_room() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SenderPins(capacity=0)


async def test_a_forgotten_pin_is_pinned_afresh(locations: Locations) -> None:
    me = make_registration(locations, "beta")
    identity = LocalIdentity(me.id, me.instance_id, me.token, me.pid)
    auth = Authenticator(identity, locations, files=PeersDirFiles(locations), pinned_senders=1)
    alpha = published_sender(locations, "alpha")
    gamma = published_sender(locations, "gamma")
    here = PeerCredentials(pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())

    async def hello(sender: Registration) -> str:
        frame = Hello.model_validate(raw_client.hello(me, sender=sender, request_id="h"))
        reply, _ = await auth.on_hello(frame, peer=here)
        return reply.status

    assert await hello(alpha) == "ready"
    assert await hello(gamma) == "ready"  # alpha's pin is forgotten
    assert await hello(alpha) == "ready"
    assert dict(auth.diagnostics().refusals) == {}
