"""Kernel-checked peers: the receiver holds every connection to what the kernel says about it.

Real sockets and real processes throughout: the "other process of the same user" is a separate
OS process (:mod:`tests.receiver.connect_client`), so the pid the receiver sees is genuinely not
ours. Only what cannot be done without root (a connection from another uid) and what this
platform does not do (no peer credentials) are played through the endpoint's credentials reader.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.plugin import commands
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.io.peercred import read_peer_credentials
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.auth import AUTH_FAILED_TEXT
from tests.receiver.other_process import other_process
from tests.support import platforms, raw_client
from tests.support.processes import run_cli
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

#: Tests that need the kernel to report the connecting pid (SO_PEERCRED).
linux_only = platforms.needs_peercred


def hello_and_message(
    target: Registration, sender: Registration | None, *, text: str = "from another process"
) -> list[dict[str, object]]:
    """The two frames of a delivery (or of a probe plus a message, when ``sender`` is None)."""
    return [
        raw_client.hello(target, sender=sender, request_id="h-1"),
        raw_client.message_body(text=text, request_id="m-1", message_id="msg-1"),
    ]


def foreign_uid(pid: int | None = None) -> Callable[[socket.socket], PeerCredentials]:
    """A credentials reader reporting a uid that is not ours (what only root could do for real)."""

    def read(sock: socket.socket) -> PeerCredentials:
        del sock
        return PeerCredentials(pid=pid or os.getpid(), uid=os.geteuid() + 1, gid=os.getegid())

    return read


async def settle(peer: PeerHandle) -> None:
    await wait_until_idle(peer.endpoint)


# -- another process of the same user --------------------------------------------------------------


@linux_only
async def test_a_sender_token_replayed_from_another_process_is_refused_and_diagnosed(
    locations: Locations,
) -> None:
    async with running_peer(locations, "beta") as beta:
        # The registration names this test process; the hello comes from another one.
        alpha = published_sender(locations, "alpha")
        assert alpha.pid == os.getpid()
        async with other_process() as thief:
            outcome = await thief.exchange(
                beta.registration.socket_path, hello_and_message(beta.registration, alpha)
            )
        (refusal,) = outcome.parsed()
        assert (refusal.ok, refusal.status, refusal.request_id) == (
            False,
            "authentication_failed",
            "h-1",
        )
        assert refusal.error == AUTH_FAILED_TEXT
        assert (outcome.end, outcome.complete_lines) == ("eof", True)
        assert beta.inbox.entries == []
        diagnostics = beta.authenticator.diagnostics()
        assert dict(diagnostics.refusals) == {"pid_mismatch": 1}
        assert diagnostics.recent == (
            f"hello from {alpha.instance_id} refused: connecting pid {thief.pid} "
            f"is not the registered pid {os.getpid()}",
        )
        await settle(beta)


@linux_only
async def test_the_pid_refusal_is_byte_identical_to_a_wrong_token_refusal(
    locations: Locations,
) -> None:
    # A caller must not learn which part of its claim failed.
    async with running_peer(locations, "beta") as beta:
        alpha = published_sender(locations, "alpha")
        async with other_process() as thief:
            stolen = await thief.exchange(
                beta.registration.socket_path, [raw_client.hello(beta.registration, sender=alpha)]
            )
        bad = make_registration(locations, "alpha", instance_id=alpha.instance_id)
        async with RawClient.connect(beta.registration.socket_path) as client:
            await client.send(raw_client.line(raw_client.hello(beta.registration, sender=bad)))
            wrong_token = await client.read_line()
            assert await client.read_to_eof() == b""
        assert wrong_token is not None
        assert stolen.replies == (wrong_token.decode("utf-8").rstrip("\n"),)
        assert dict(beta.authenticator.diagnostics().refusals) == {
            "pid_mismatch": 1,
            "sender_mismatch": 1,
        }
        await settle(beta)


async def test_the_registered_process_itself_is_accepted(locations: Locations) -> None:
    async with running_peer(locations, "beta") as beta:
        alpha = published_sender(locations, "alpha")
        async with RawClient.connect(beta.registration.socket_path) as client:
            hello, message = hello_and_message(beta.registration, alpha, text="from alpha itself")
            await client.send(raw_client.line(hello))
            assert (await client.read_reply()).status == "ready"
            await client.send(raw_client.line(message))
            assert (await client.read_reply()).status == "submitted"
            assert await client.read_to_eof() == b""
        assert [entry.text for entry in beta.inbox.entries] == ["from alpha itself"]
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await settle(beta)


@linux_only
async def test_a_sender_in_its_own_process_is_accepted_when_it_is_the_registered_pid(
    locations: Locations,
) -> None:
    async with running_peer(locations, "beta") as beta, other_process() as gamma_process:
        # The other process is the registered one here: the file names its pid.
        gamma = make_registration(locations, "gamma", pid=gamma_process.pid)
        publish(locations, gamma)
        outcome = await gamma_process.exchange(
            beta.registration.socket_path,
            hello_and_message(beta.registration, gamma, text="from gamma's own process"),
        )
        ready, receipt = outcome.parsed()
        assert (ready.status, receipt.status) == ("ready", "submitted")
        assert [entry.sender_instance_id for entry in beta.inbox.entries] == [gamma.instance_id]
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await settle(beta)


@linux_only
async def test_a_probe_from_another_process_is_ready_but_cannot_deliver(
    locations: Locations,
) -> None:
    # Probes are not pid-checked: the reference's listing probes from whatever process runs it.
    async with running_peer(locations, "beta") as beta, other_process() as lister:
        outcome = await lister.exchange(
            beta.registration.socket_path, hello_and_message(beta.registration, None)
        )
        ready, refusal = outcome.parsed()
        assert (ready.ok, ready.status) == (True, "ready")
        identity = ready.peer_identity()
        assert identity is not None
        assert (identity.instance_id, identity.pid) == (beta.registration.instance_id, os.getpid())
        # The message on the probe-only connection is refused as it always was.
        assert (refusal.ok, refusal.status) == (False, "authentication_failed")
        assert beta.inbox.entries == []
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await settle(beta)


# -- a real session runtime, as a user meets it ----------------------------------------------------


@linux_only
async def test_a_session_refuses_a_stolen_sender_identity_and_keeps_serving_the_real_one(
    locations: Locations,
) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        target = rx.registration
        frames_ = [
            raw_client.hello(target, sender=alpha.registration, request_id="h-1"),
            raw_client.message_body(
                text="smuggled", request_id="m-1", message_id="stolen-1", sent_at=rx.clock.wall_ms()
            ),
        ]
        async with other_process() as thief:
            outcome = await thief.exchange(target.socket_path, frames_)
        (refusal,) = outcome.parsed()
        assert (refusal.status, refusal.error) == ("authentication_failed", AUTH_FAILED_TEXT)
        assert rx.host.submitted == []
        assert rx.snapshot().rows == ()
        # The local user sees why in /cross-session-status (text and --json).
        data = commands.status_data(rx.runtime, commands.HostReport())
        checks = data["peerChecks"]
        assert checks["source"] == "SO_PEERCRED"
        assert checks["helloRefusals"] == {"pid_mismatch": 1}
        assert f"connecting pid {thief.pid} is not the registered pid" in checks["recent"][-1]
        text = commands.status(rx.runtime, "", commands.HostReport())
        assert "Peer checks: SO_PEERCRED; other uids closed 0; hellos refused: pid_mismatch 1" in (
            text
        )
        reply = await alpha.send("the real alpha")
        assert reply.status == "submitted"
        assert [delivery.text for delivery in rx.host.submitted] == ["the real alpha"]


@linux_only
async def test_the_command_line_sends_from_the_pid_it_registers(
    locations: Locations, private_agent_dir: Path
) -> None:
    # `pi-cross-session send` publishes a registration with its own pid and sends from the same
    # process, so kernel-checked peers accept it.
    async with running_peer(locations, "beta") as beta:
        sent = await anyio.to_thread.run_sync(
            partial(run_cli, private_agent_dir, "send", "beta", "from the command line", "--json")
        )
        assert sent.returncode == 0, sent
        assert sent.json()["status"] == "submitted"
        assert [entry.text for entry in beta.inbox.entries] == ["from the command line"]
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await settle(beta)


# -- another uid -----------------------------------------------------------------------------------


async def test_a_connection_from_another_uid_is_closed_before_a_byte(
    locations: Locations,
) -> None:
    async with running_peer(locations, "beta", peer_credentials=foreign_uid()) as beta:
        async with RawClient.connect(beta.registration.socket_path) as client:
            assert await client.read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.foreign_uid_closed, stats.accepted, stats.open_connections) == (1, 0, 0)
        # The handler never saw it: nothing was authenticated, refused or admitted.
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        assert beta.inbox.entries == []


async def test_another_uid_holding_every_secret_is_still_closed_without_a_reply(
    locations: Locations,
) -> None:
    async with running_peer(locations, "beta", peer_credentials=foreign_uid()) as beta:
        alpha = published_sender(locations, "alpha")
        hello, message = hello_and_message(beta.registration, alpha)
        async with RawClient.connect(beta.registration.socket_path) as client:
            # Whether the write lands before the close or after it, no reply byte may come back.
            try:
                await client.send(raw_client.line(hello) + raw_client.line(message))
                rest = await client.read_to_eof()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                rest = b""
            assert rest == b""
        assert beta.endpoint.statistics().foreign_uid_closed == 1
        assert beta.inbox.entries == []


async def test_another_uid_does_not_take_a_connection_slot(locations: Locations) -> None:
    uids = iter([os.geteuid() + 1, os.geteuid()])

    def one_foreign_then_ours(sock: socket.socket) -> PeerCredentials:
        del sock
        return PeerCredentials(pid=os.getpid(), uid=next(uids), gid=os.getegid())

    config = EndpointConfig(max_connections=1)
    async with running_peer(
        locations, "beta", config=config, peer_credentials=one_foreign_then_ours
    ) as beta:
        async with RawClient.connect(beta.registration.socket_path) as foreign:
            assert await foreign.read_to_eof() == b""
        alpha = published_sender(locations, "alpha")
        got = await raw_client.exchange_raw(
            beta.registration.socket_path,
            *map(raw_client.line, hello_and_message(beta.registration, alpha)),
            replies=2,
        )
        assert [reply.status for reply in got] == ["ready", "submitted"]
        stats = beta.endpoint.statistics()
        assert (stats.foreign_uid_closed, stats.accepted, stats.refused_over_capacity) == (1, 1, 0)
        await settle(beta)


# -- when the kernel tells us nothing --------------------------------------------------------------


def unavailable(sock: socket.socket) -> None:
    del sock


def uid_only(sock: socket.socket) -> PeerCredentials:
    """What a platform with a uid but no pid (macOS before 10.8) reports."""
    del sock
    return PeerCredentials(pid=None, uid=os.geteuid(), gid=None)


@pytest.mark.parametrize(("reader", "unverified"), [(unavailable, 1), (uid_only, 0)])
async def test_without_a_pid_from_the_kernel_the_pid_is_not_enforced(
    locations: Locations,
    reader: Callable[[socket.socket], PeerCredentials | None],
    unverified: int,
) -> None:
    async with running_peer(locations, "beta", peer_credentials=reader) as beta:
        # A registration naming some other process: with a pid from the kernel this would fail.
        alpha = make_registration(locations, "alpha", pid=os.getppid())
        publish(locations, alpha)
        async with other_process() as elsewhere:
            outcome = await elsewhere.exchange(
                beta.registration.socket_path, hello_and_message(beta.registration, alpha)
            )
        assert [reply.status for reply in outcome.parsed()] == ["ready", "submitted"]
        stats = beta.endpoint.statistics()
        assert (stats.accepted, stats.unverified, stats.foreign_uid_closed) == (1, unverified, 0)
        assert dict(beta.authenticator.diagnostics().refusals) == {}
        await settle(beta)


async def test_credentials_that_cannot_be_read_close_the_connection(
    locations: Locations,
) -> None:
    def failing(sock: socket.socket) -> PeerCredentials:
        del sock
        raise OSError("ENOTCONN")

    async with running_peer(locations, "beta", peer_credentials=failing) as beta:
        async with RawClient.connect(beta.registration.socket_path) as client:
            assert await client.read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.credentials_unreadable, stats.accepted) == (1, 0)


# -- what the kernel reports -----------------------------------------------------------------------


@linux_only
async def test_the_kernel_names_the_connecting_process(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(20.0)  # a hang guard: accept() in a worker thread cannot be cancelled
        async with other_process() as client, anyio.create_task_group() as tg:
            tg.start_soon(client.exchange, path, [])
            conn, _ = await anyio.to_thread.run_sync(listener.accept)
            with conn:
                peer = read_peer_credentials(conn)
                conn.shutdown(socket.SHUT_RDWR)
    assert peer == PeerCredentials(pid=client.pid, uid=os.geteuid(), gid=os.getegid())
