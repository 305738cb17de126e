"""The client side against a real endpoint: probe, send, status, and sender vetting (spec §2,
spec §3.7).

Vetting refusals are proven to happen *before* any connection: the injected connector counts
attempts, and the real endpoint's ``accepted`` counter must not move.
"""

from __future__ import annotations

import os
import socket

import anyio
import pytest

from pi_cross_session._internal.protocol.capabilities import ADVERTISED, CANCEL_SAFE_QUEUE
from pi_cross_session._internal.protocol.codes import SenderState
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.io.exchange import (
    ExchangeConfig,
    ExchangeError,
    Exchanger,
    Receipt,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from tests.support.exchange_seams import CountingConnect, RecordingVetting, StalledVetting
from tests.support.socket_peers import (
    PeerHandle,
    as_sender,
    assert_still_serving,
    make_message,
    make_registration,
    published_sender,
    settled_peer,
)

pytestmark = pytest.mark.anyio

#: Injected send deadline for tests that wait for a timeout.
SHORT_DEADLINE_S = 0.5


def exchanger(
    locations: Locations,
    *,
    connect: CountingConnect | None = None,
    vetting: object = fs,
    **config: float,
) -> Exchanger:
    kwargs = {"connect": connect} if connect is not None else {}
    return Exchanger(
        locations,
        vetting,  # type: ignore[arg-type]
        config=ExchangeConfig(**config),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


async def refused_before_connecting(
    locations: Locations, beta: PeerHandle, target: Registration, code: str
) -> ExchangeError:
    """Probe and send to ``target`` both fail with ``code`` and never reach any socket."""
    alpha = published_sender(locations)
    connect = CountingConnect()
    ex = exchanger(locations, connect=connect)
    accepted = beta.endpoint.statistics().accepted
    assert not await ex.is_live(target)
    with pytest.raises(ExchangeError) as probed:
        await ex.probe(target)
    with pytest.raises(ExchangeError) as sent:
        await ex.send(target, sender=as_sender(alpha), message=make_message("never sent"))
    for caught in (probed, sent):
        assert caught.value.code == code
        assert (caught.value.frames_written, caught.value.message_written) == (0, False)
        assert caught.value.verdict.state == SenderState.REFUSED
        assert not caught.value.verdict.retryable
    assert connect.attempts == []
    assert beta.endpoint.statistics().accepted == accepted
    assert beta.inbox.entries == []
    return sent.value


async def test_probe_send_and_status_against_a_real_endpoint(locations: Locations) -> None:
    async with (
        settled_peer(locations, "alpha") as alpha,
        settled_peer(locations, "beta") as beta,
    ):
        ex = alpha.exchanger()
        target = beta.registration

        probe = await ex.probe(target)
        assert (probe.status, probe.reply, probe.frames_written) == ("ready", None, 1)
        assert probe.peer_capabilities == ADVERTISED
        identity = probe.ready.peer_identity()
        assert identity is not None
        assert (identity.id, identity.instance_id, identity.pid) == (
            target.id,
            target.instance_id,
            os.getpid(),
        )
        assert await ex.is_live(target)

        message = make_message("bonjour — 日本語 😀\nsecond line")
        receipt = await ex.send(target, sender=alpha.sender, message=message)
        assert (receipt.status, receipt.frames_written) == ("submitted", 2)
        assert receipt.reply is not None
        assert receipt.reply.request_id == message.request_id
        (entry,) = beta.inbox.entries
        assert (entry.text, entry.message_id, entry.sender_instance_id) == (
            message.text,
            message.message_id,
            alpha.registration.instance_id,
        )

        status = await ex.query_status(target, sender=alpha.sender, message_id=message.message_id)
        assert (status.status, status.frames_written) == ("submitted", 2)
        unknown = await ex.query_status(target, sender=alpha.sender, message_id="never-sent")
        assert unknown.status == "unknown"

        # Status is source-qualified: another sender cannot see alpha's message.
        gamma = published_sender(locations, "gamma")
        theirs = await ex.query_status(
            target, sender=as_sender(gamma), message_id=message.message_id
        )
        assert theirs.status == "unknown"
        assert beta.endpoint.statistics().faults == 0


async def test_duplicate_is_a_final_refusal_with_the_receivers_text(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        ex = exchanger(locations)
        message = make_message("once")
        await ex.send(beta.registration, sender=as_sender(alpha), message=message)
        with pytest.raises(ExchangeError) as caught:
            await ex.send(beta.registration, sender=as_sender(alpha), message=message)
        error = caught.value
        assert error.code == "duplicate"
        assert (error.verdict.state, error.verdict.retryable) == (SenderState.REFUSED, False)
        assert (error.frames_written, error.message_written) == (2, True)
        assert error.remote_error
        assert len(beta.inbox.entries) == 1


async def test_blank_text_is_refused_as_invalid_message(locations: Locations) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        with pytest.raises(ExchangeError) as caught:
            await exchanger(locations).send(
                beta.registration,
                sender=as_sender(alpha),
                message=make_message(" \u3000 ", summary="blank"),
            )
        assert caught.value.code == "invalid_message"
        assert beta.inbox.entries == []


async def test_unauthenticated_sender_is_authentication_failed(locations: Locations) -> None:
    # Published nowhere: the receiver cannot find the claimed registration.
    ghost = make_registration(locations, "ghost")
    async with settled_peer(locations, "beta") as beta:
        with pytest.raises(ExchangeError) as caught:
            await exchanger(locations).send(
                beta.registration, sender=as_sender(ghost), message=make_message("hi")
            )
        assert caught.value.code == "authentication_failed"
        assert (caught.value.frames_written, caught.value.message_written) == (1, False)
        assert beta.inbox.entries == []


async def test_goal_scoped_message_to_a_receiver_without_goal_scope_is_unsupported(
    locations: Locations,
) -> None:
    alpha = published_sender(locations)
    older = EndpointConfig(capabilities=(CANCEL_SAFE_QUEUE,))  # a receiver without goal scope
    async with settled_peer(locations, "beta", config=older) as beta:
        with pytest.raises(ExchangeError) as caught:
            await exchanger(locations).send(
                beta.registration,
                sender=as_sender(alpha),
                message=make_message("scoped", goalId="goal-1"),
            )
        error = caught.value
        assert error.code == "unsupported"
        assert (error.frames_written, error.message_written) == (1, False)
        assert error.verdict.state == SenderState.REFUSED
        assert beta.inbox.entries == []
        await assert_still_serving(locations, beta.registration)


# -- vetting: spec §2 and spec §10 item 8 ----------------------------------------------------------


@pytest.mark.parametrize("mode", [0o666, 0o660, 0o606, 0o640, 0o604], ids=oct)
async def test_item8_socket_with_group_or_other_bits_is_unsafe_until_restored_to_0600(
    locations: Locations, mode: int
) -> None:
    async with settled_peer(locations, "beta") as beta:
        target = beta.registration
        os.chmod(target.socket_path, mode)
        await refused_before_connecting(locations, beta, target, "unsafe_endpoint")
        os.chmod(target.socket_path, 0o600)
        await assert_still_serving(locations, target)
        alpha = published_sender(locations, "alpha-2")
        receipt = await exchanger(locations).send(
            target, sender=as_sender(alpha), message=make_message("after the repair")
        )
        assert receipt.status == "submitted"


async def test_socket_path_that_is_a_symlink_to_a_good_socket_is_unsafe(
    locations: Locations,
) -> None:
    async with settled_peer(locations, "beta") as beta:
        real = beta.registration
        # An impostor incarnation whose computed socket path is a symlink to beta's socket, and
        # whose registration carries beta's token and session id: only the lstat can tell.
        impostor = make_registration(locations, "impostor", session_id=real.id, token=real.token)
        os.symlink(real.socket_path, impostor.socket_path)
        await refused_before_connecting(locations, beta, impostor, "unsafe_endpoint")


@pytest.mark.parametrize("how", ["other-live-socket", "unnormalised-spelling", "outside-runtime"])
async def test_registered_socket_path_other_than_the_computed_one_is_unsafe(
    locations: Locations, how: str
) -> None:
    async with settled_peer(locations, "beta") as beta:
        real = beta.registration
        stranger = make_registration(locations, "stranger")
        runtime = real.socket_path.rsplit("/", 1)[0]
        other_path = {
            # Points at a live, good socket: still refused, the path is not the computed one.
            "other-live-socket": real.socket_path,
            "unnormalised-spelling": f"{runtime}/./{stranger.instance_id}.sock",
            "outside-runtime": f"/tmp/{stranger.instance_id}.sock",
        }[how]
        if how == "unnormalised-spelling":
            # Make the unnormalised spelling name a real good socket: beta's, via a hard link.
            os.link(real.socket_path, stranger.socket_path)
        forged = stranger.model_copy(update={"socket_path": other_path})
        vetting = RecordingVetting()
        ex = Exchanger(locations, vetting)
        with pytest.raises(ExchangeError) as caught:
            await ex.probe(forged)
        assert caught.value.code == "unsafe_endpoint"
        assert vetting.calls == [], "the path check comes before any lstat"
        assert beta.endpoint.statistics().accepted == 0


async def test_malformed_instance_id_is_unsafe(locations: Locations) -> None:
    # A Registration cannot be parsed with such an id; model_copy skips validation, as any
    # caller-built object could.
    async with settled_peer(locations, "beta") as beta:
        forged = beta.registration.model_copy(update={"instance_id": "../" + "a" * 29})
        await refused_before_connecting(locations, beta, forged, "unsafe_endpoint")


@pytest.mark.parametrize("runtime_dir_exists", [True, False], ids=["dir-exists", "no-dir"])
async def test_missing_socket_is_its_errno_name(
    locations: Locations, runtime_dir_exists: bool
) -> None:
    if runtime_dir_exists:
        fs.ensure_private_dir(locations.runtime_dir)
    target = make_registration(locations, "absent")
    alpha = published_sender(locations)
    connect = CountingConnect()
    with pytest.raises(ExchangeError) as caught:
        await exchanger(locations, connect=connect).send(
            target, sender=as_sender(alpha), message=make_message("to nobody")
        )
    assert caught.value.code == "ENOENT"
    assert caught.value.verdict.state == SenderState.REFUSED
    assert (caught.value.frames_written, caught.value.message_written) == (0, False)
    assert connect.attempts == []


@pytest.mark.parametrize("kind", ["regular-file", "directory", "fifo"])
async def test_socket_path_that_is_not_a_socket_is_unsafe(locations: Locations, kind: str) -> None:
    fs.ensure_private_dir(locations.runtime_dir)
    target = make_registration(locations, "not-a-socket")
    if kind == "regular-file":
        fd = os.open(target.socket_path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    elif kind == "directory":
        os.mkdir(target.socket_path, 0o700)
    else:
        os.mkfifo(target.socket_path, 0o600)
    connect = CountingConnect()
    with pytest.raises(ExchangeError) as caught:
        await exchanger(locations, connect=connect).probe(target)
    assert caught.value.code == "unsafe_endpoint"
    assert connect.attempts == []


async def test_refused_connect_is_transport_error_and_receipt_unknown(
    locations: Locations,
) -> None:
    fs.ensure_private_dir(locations.runtime_dir)
    target = make_registration(locations, "gone")
    # A socket file that passes vetting, with nobody listening: bound, closed, never unlinked.
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(target.socket_path)
    finally:
        sock.close()
    os.chmod(target.socket_path, 0o600)
    assert fs.vet_socket(target.socket_path) is None
    alpha = published_sender(locations)
    connect = CountingConnect()
    with pytest.raises(ExchangeError) as caught:
        await exchanger(locations, connect=connect).send(
            target, sender=as_sender(alpha), message=make_message("refused")
        )
    error = caught.value
    assert error.code == "transport_error"
    assert "ECONNREFUSED" in str(error)
    assert (error.verdict.state, error.verdict.retryable) == (SenderState.RECEIPT_UNKNOWN, False)
    assert (error.frames_written, error.message_written) == (0, False)
    assert connect.attempts == [target.socket_path]


@pytest.mark.parametrize("cap", [1024, None], ids=["injected-cap", "real-1MiB-cap"])
async def test_oversized_message_fails_locally_without_connecting(
    locations: Locations, cap: int | None
) -> None:
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        connect = CountingConnect()
        config = {} if cap is None else {"max_frame_bytes": cap}
        # 1024 bytes: 2,000 ASCII characters are too many. 1 MiB: 350,000 CJK characters are
        # 1,050,000 bytes (within the 1,000,000 UTF-16 unit text limit).
        text = "a" * 2000 if cap else "字" * 350_000
        with pytest.raises(ExchangeError) as caught:
            await exchanger(locations, connect=connect, **config).send(
                beta.registration, sender=as_sender(alpha), message=make_message(text)
            )
        error = caught.value
        assert error.code == "message_too_large"
        assert (error.frames_written, error.message_written) == (0, False)
        assert error.verdict.state == SenderState.REFUSED
        assert connect.attempts == []
        assert beta.endpoint.statistics().accepted == 0
        assert beta.inbox.entries == []


@pytest.mark.parametrize("kind", ["send", "probe"])
async def test_item18_stalled_vetting_times_out_and_the_late_answer_never_connects(
    locations: Locations, kind: str
) -> None:
    """Spec §10 item 18 with an injected deadline: the deadline covers the vetting step."""
    alpha = published_sender(locations)
    async with settled_peer(locations, "beta") as beta:
        vetting = StalledVetting(max_stall_s=3.0)
        connect = CountingConnect()
        ex = exchanger(
            locations,
            connect=connect,
            vetting=vetting,
            send_deadline_s=SHORT_DEADLINE_S,
            probe_deadline_s=0.3,
        )

        async def attempt() -> Receipt:
            if kind == "send":
                message = make_message("late")
                return await ex.send(beta.registration, sender=as_sender(alpha), message=message)
            return await ex.probe(beta.registration)

        with pytest.raises(ExchangeError) as caught:
            await attempt()
        error = caught.value
        assert error.code == "timeout"
        assert error.verdict.state == SenderState.RECEIPT_UNKNOWN
        assert (error.frames_written, error.message_written) == (0, False)
        assert not vetting.returned.is_set(), "the exchange gave up while vetting still stalled"

        await vetting.finish()
        assert vetting.answers == [None], "the late answer says the socket is fine"
        # Give a (wrong) late connect every chance to happen, then prove it did not.
        await anyio.sleep(0.2)
        assert connect.attempts == []
        assert beta.endpoint.statistics().accepted == 0
        assert beta.inbox.entries == []
