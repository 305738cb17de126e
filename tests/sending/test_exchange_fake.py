"""The client side against scripted receivers (spec §3.7, spec §4.3, spec §10 items 15–17).

Each fake listens at the target's real socket path (so vetting passes) and records every line it
receives; "no message was written" is checked on the receiving socket, not only on the client's
own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import SenderState
from pi_cross_session._internal.protocol.frames import Message
from pi_cross_session._internal.protocol.io.exchange import (
    ExchangeConfig,
    ExchangeError,
    Exchanger,
    Receipt,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from tests.support.exchange_seams import StalledVetting
from tests.support.fake_receiver import (
    ABSENT,
    CLOSE,
    GOAL_SCOPED,
    SAFE_QUEUE,
    SILENT,
    FakeReceiver,
    Reply,
    Step,
    fake_receiver,
    raw_reply,
    ready,
    receipt,
    respond,
)
from tests.support.socket_peers import as_sender, make_message, make_registration

pytestmark = pytest.mark.anyio

#: Injected send deadline for tests that wait for a timeout.
SHORT_DEADLINE_S = 0.3
#: The hello's requestId, fixed so a fake can answer with it out of turn.
HELLO_ID = "the-hello-request"


def exchanger(locations: Locations, **config: Any) -> Exchanger:
    ids = iter([HELLO_ID, "second-request"])
    return Exchanger(
        locations,
        fs,
        config=ExchangeConfig(**config),
        new_request_id=lambda: next(ids),
    )


async def send_to(
    locations: Locations,
    fake: FakeReceiver,
    message: Message | None = None,
    **config: Any,
) -> Receipt:
    sender = as_sender(make_registration(locations, "sender"))
    return await exchanger(locations, **config).send(
        fake.registration, sender=sender, message=message or make_message("to the fake")
    )


async def failed_send(
    locations: Locations,
    script: Sequence[Step],
    *,
    target: Registration,
    message: Message | None = None,
    **config: Any,
) -> tuple[ExchangeError, FakeReceiver]:
    """Send through a fake at ``target``'s socket playing ``script``; the send must fail.

    Returns the error and the fake, once the fake has seen the connection end (so its counts are
    final)."""
    async with fake_receiver(locations, script, registration=target) as fake:
        with pytest.raises(ExchangeError) as caught:
            await send_to(locations, fake, message, **config)
        await fake.settled()
    return caught.value, fake


def assert_receipt_unknown(error: ExchangeError) -> None:
    assert error.verdict.state == SenderState.RECEIPT_UNKNOWN
    assert not error.verdict.retryable


# -- capability negotiation: spec §10 item 15 ----------------------------------------------------


@pytest.mark.parametrize(
    "capabilities",
    [(), (GOAL_SCOPED,), ("cancel-safe-queue-v2",), ABSENT],
    ids=["empty", "goal-only", "other-version", "absent"],
)
async def test_item15_ready_without_safe_queue_is_unsupported_and_no_message_frame_is_sent(
    locations: Locations, capabilities: Any
) -> None:
    target = make_registration(locations, "old-receiver")
    error, fake = await failed_send(
        locations, [ready(target, capabilities=capabilities)], target=target
    )
    assert error.code == "unsupported"
    assert error.verdict.state == SenderState.REFUSED
    assert (error.frames_written, error.message_written) == (1, False)
    assert fake.count("hello") == 1
    assert fake.count("message") == 0
    assert len(fake.received) == 1


async def test_probe_of_a_receiver_without_safe_queue_is_fine(locations: Locations) -> None:
    target = make_registration(locations, "old-receiver")
    async with fake_receiver(locations, [ready(target, capabilities=())], registration=target):
        result = await exchanger(locations).probe(target)
    assert (result.status, result.peer_capabilities) == ("ready", ())


async def test_goal_scoped_message_without_goal_capability_is_unsupported_unwritten(
    locations: Locations,
) -> None:
    target = make_registration(locations, "base-receiver")
    error, fake = await failed_send(
        locations,
        [ready(target), receipt(target)],
        target=target,
        message=make_message("scoped", goalId="goal-1"),
    )
    assert error.code == "unsupported"
    assert (error.frames_written, error.message_written) == (1, False)
    assert fake.count("message") == 0


async def test_goal_scoped_message_to_a_goal_capable_receiver_is_sent_with_its_goal(
    locations: Locations,
) -> None:
    target = make_registration(locations, "goal-receiver")
    script = [ready(target, capabilities=(SAFE_QUEUE, GOAL_SCOPED)), receipt(target, "queued")]
    async with fake_receiver(locations, script, registration=target) as fake:
        result = await send_to(locations, fake, make_message("scoped", goalId="goal-1"))
        await fake.settled()
    assert result.status == "queued"
    (sent,) = [item for item in fake.received if item.kind == "message"]
    assert sent.body["goalId"] == "goal-1"


# -- receipt loss: spec §10 item 16 ------------------------------------------------------------


async def test_silent_receiver_after_the_hello_is_timeout_before_any_message(
    locations: Locations,
) -> None:
    target = make_registration(locations, "mute")
    error, fake = await failed_send(
        locations, [SILENT], target=target, send_deadline_s=SHORT_DEADLINE_S
    )
    assert error.code == "timeout"
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (1, False)
    assert fake.count("message") == 0


async def test_item16_silent_receiver_after_the_message_is_timeout_with_one_message_frame(
    locations: Locations,
) -> None:
    target = make_registration(locations, "mute")
    error, fake = await failed_send(
        locations, [ready(target), SILENT], target=target, send_deadline_s=SHORT_DEADLINE_S
    )
    assert error.code == "timeout"
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (2, True)
    assert fake.count("message") == 1
    assert fake.connections == 1


async def test_item16_receiver_closing_after_the_message_is_connection_closed(
    locations: Locations,
) -> None:
    target = make_registration(locations, "closer")
    error, fake = await failed_send(locations, [ready(target), CLOSE], target=target)
    assert error.code == "connection_closed"
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (2, True)
    assert fake.count("message") == 1
    assert fake.connections == 1


async def test_receiver_closing_after_the_hello_is_connection_closed_before_any_message(
    locations: Locations,
) -> None:
    target = make_registration(locations, "closer")
    error, fake = await failed_send(locations, [CLOSE], target=target)
    assert error.code == "connection_closed"
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (1, False)
    assert fake.count("message") == 0


async def test_receiver_closing_right_after_ready_never_receives_the_message(
    locations: Locations,
) -> None:
    target = make_registration(locations, "closer")
    error, fake = await failed_send(locations, [ready(target, close=True)], target=target)
    # Either the write of the message fails or the read finds the close: unknown either way.
    assert error.code in {"connection_closed", "transport_error"}
    assert_receipt_unknown(error)
    assert fake.count("message") == 0


async def test_silent_receiver_after_a_status_query_is_timeout_and_no_message_was_written(
    locations: Locations,
) -> None:
    target = make_registration(locations, "mute")
    sender = as_sender(make_registration(locations, "sender"))
    async with fake_receiver(locations, [ready(target), SILENT], registration=target) as fake:
        with pytest.raises(ExchangeError) as caught:
            await exchanger(locations, send_deadline_s=SHORT_DEADLINE_S).query_status(
                target, sender=sender, message_id="m-1"
            )
        await fake.settled()
    error = caught.value
    assert error.code == "timeout"
    assert (error.frames_written, error.message_written) == (2, False)
    assert fake.count("status") == 1
    assert fake.count("message") == 0


async def test_item16_cancellation_from_outside_propagates_after_one_message_frame(
    locations: Locations,
) -> None:
    target = make_registration(locations, "mute")
    finished: list[object] = []
    async with fake_receiver(locations, [ready(target), SILENT], registration=target) as fake:
        scope = anyio.CancelScope()

        async def sending() -> None:
            with scope:
                # A deadline far away: only the outside cancellation can end this send.
                finished.append(await send_to(locations, fake, send_deadline_s=30.0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sending)
            await fake.wait_for(lambda: fake.count("message") == 1)
            scope.cancel()
        await fake.settled()
    assert scope.cancelled_caught
    assert finished == []
    assert fake.count("message") == 1
    assert fake.connections == 1


async def test_cancellation_while_vetting_stalls_never_connects(locations: Locations) -> None:
    target = make_registration(locations, "never-reached")
    vetting = StalledVetting(max_stall_s=3.0)
    script = [ready(target), receipt(target)]
    async with fake_receiver(locations, script, registration=target) as fake:
        ex = Exchanger(locations, vetting)
        sender = as_sender(make_registration(locations, "sender"))
        with anyio.move_on_after(0.2) as scope:
            await ex.send(target, sender=sender, message=make_message("never"))
        assert scope.cancelled_caught
        await vetting.finish()
        await anyio.sleep(0.2)  # proving a negative: no late connection
        assert fake.connections == 0


# -- replies that cannot be attributed: spec §10 item 17 ----------------------------------------


ITEM17 = [
    pytest.param(
        {"ok": False, "status": "busy", "request_id": "someone-elses-request"},
        "invalid_receipt",
        id="busy-with-wrong-request-id",
    ),
    pytest.param(
        {"ok": False, "status": "busy", "request_id": HELLO_ID},
        "invalid_receipt",
        id="busy-with-the-old-hello-id",
    ),
    pytest.param(
        {"ok": False, "status": "refused", "request_id": "unknown"},
        "invalid_receipt",
        id="refused-with-unknown-id",
    ),
    pytest.param(
        {"ok": False, "status": "invalid_frame", "request_id": "unknown"},
        "invalid_receipt",
        id="fault-reply-with-unknown-id",
    ),
    pytest.param(
        {"ok": False, "status": "busy", "next": {"retry": True}},
        "invalid_response",
        id="busy-with-next-as-object",
    ),
    pytest.param(
        {"ok": False, "status": "busy", "retryable": "yes"},
        "invalid_response",
        id="busy-with-retryable-as-string",
    ),
    pytest.param(
        {"ok": False, "status": "busy", "v": 2},
        "invalid_response",
        id="busy-with-version-2",
    ),
    pytest.param(
        {"ok": False, "status": "busy", "error": None},
        "invalid_response",
        id="busy-with-null-error",
    ),
    pytest.param(
        {"ok": False, "status": "b" * 65},
        "invalid_response",
        id="status-over-64-units",
    ),
]


@pytest.mark.parametrize(("reply", "code"), ITEM17)
async def test_item17_negative_receipt_that_cannot_be_attributed_is_receipt_unknown(
    locations: Locations, reply: dict[str, Any], code: str
) -> None:
    target = make_registration(locations, "liar")
    error, fake = await failed_send(locations, [ready(target), respond(**reply)], target=target)
    assert fake.received[0].body["requestId"] == HELLO_ID
    assert error.code == code
    assert error.code not in {"busy", "refused"}
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (2, True)
    assert fake.count("message") == 1
    assert fake.connections == 1


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": False, "status": "busy", "request_id": "unknown"},
        {"ok": False, "status": "authentication_failed", "request_id": "another-hello"},
    ],
    ids=["busy-unknown-id", "auth-failed-other-id"],
)
async def test_negative_reply_to_the_hello_with_another_id_is_invalid_receipt(
    locations: Locations, reply: dict[str, Any]
) -> None:
    target = make_registration(locations, "liar")
    error, fake = await failed_send(locations, [respond(**reply)], target=target)
    assert error.code == "invalid_receipt"
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (1, False)
    assert fake.count("message") == 0


# -- refusals the sender trusts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        ("busy", True),
        ("queue_full", True),
        ("rate_limited", True),
        ("refused", False),
        ("stopped", False),
        ("expired", False),
        ("budget_exhausted", False),
    ],
)
async def test_refusal_of_the_message_is_classified_from_its_status(
    locations: Locations, status: str, retryable: bool
) -> None:
    target = make_registration(locations, "refuser")
    error, fake = await failed_send(
        locations, [ready(target), respond(ok=False, status=status)], target=target
    )
    assert error.code == status
    assert (error.verdict.state, error.verdict.retryable) == (SenderState.REFUSED, retryable)
    assert error.remote_error == f"scripted {status}"
    assert (error.frames_written, error.message_written) == (2, True)
    assert fake.count("message") == 1


async def test_the_receivers_own_code_state_and_retryable_are_never_trusted(
    locations: Locations,
) -> None:
    target = make_registration(locations, "liar")
    lying = respond(
        ok=False, status="refused", code="busy", state="busy", retryable=True, next="retry now!"
    )
    error, _ = await failed_send(locations, [ready(target), lying], target=target)
    assert error.code == "refused"
    assert (error.verdict.state, error.verdict.retryable) == (SenderState.REFUSED, False)


async def test_refusal_of_the_hello_is_its_status_and_no_message_is_written(
    locations: Locations,
) -> None:
    target = make_registration(locations, "strict")
    error, fake = await failed_send(
        locations, [respond(ok=False, status="authentication_failed")], target=target
    )
    assert error.code == "authentication_failed"
    assert error.verdict.state == SenderState.REFUSED
    assert (error.frames_written, error.message_written) == (1, False)
    assert fake.count("message") == 0


# -- ready and receipt identity ---------------------------------------------------------------


WRONG_READY = [
    pytest.param({"peer": {"id": "someone-else", "instanceId": "0" * 32, "pid": 1}}, id="other"),
    pytest.param({"peer": {"id": "SAME", "instanceId": "f" * 32, "pid": 1}}, id="other-instance"),
    pytest.param({"peer": {"id": "SAME", "instanceId": "SAME", "pid": "1"}}, id="pid-string"),
    pytest.param({"peer": ABSENT}, id="no-peer"),
    pytest.param({"peer": "SAME"}, id="peer-string"),
    pytest.param({"status": "submitted"}, id="not-ready"),
]


def same_peer(target: Registration, overrides: dict[str, Any]) -> dict[str, Any]:
    """Replace the SAME placeholders with the target's identity."""
    peer = overrides.get("peer")
    if isinstance(peer, dict):
        peer = {
            "id": target.id if peer["id"] == "SAME" else peer["id"],
            "instanceId": target.instance_id
            if peer["instanceId"] == "SAME"
            else peer["instanceId"],
            "pid": peer["pid"],
        }
        return {**overrides, "peer": peer}
    if peer == "SAME":
        return {**overrides, "peer": target.id}
    return overrides


@pytest.mark.parametrize("overrides", WRONG_READY)
@pytest.mark.parametrize("kind", ["probe", "send"])
async def test_ready_from_another_peer_is_wrong_endpoint(
    locations: Locations, overrides: dict[str, Any], kind: str
) -> None:
    target = make_registration(locations, "expected")
    script = [ready(target, **same_peer(target, overrides)), receipt(target)]
    async with fake_receiver(locations, script, registration=target) as fake:

        async def attempt() -> Receipt:
            if kind == "probe":
                return await exchanger(locations).probe(target)
            return await send_to(locations, fake)

        with pytest.raises(ExchangeError) as caught:
            await attempt()
        await fake.settled()
    assert caught.value.code == "wrong_endpoint"
    assert caught.value.verdict.state == SenderState.REFUSED
    assert (caught.value.frames_written, caught.value.message_written) == (1, False)
    assert fake.count("message") == 0


BAD_RECEIPTS = [
    pytest.param({"status": "unknown"}, id="ok-unknown"),
    pytest.param({"status": "ready"}, id="ok-ready"),
    pytest.param({"status": "dropped"}, id="ok-dropped"),
    pytest.param({"peer": {"id": "someone-else", "instanceId": "0" * 32, "pid": 1}}, id="other"),
    pytest.param({"peer": {"id": "SAME", "instanceId": "e" * 32, "pid": 1}}, id="other-instance"),
    pytest.param({"peer": ABSENT}, id="no-peer"),
]


@pytest.mark.parametrize("overrides", BAD_RECEIPTS)
async def test_receipt_that_is_not_a_delivery_from_this_peer_is_invalid_receipt(
    locations: Locations, overrides: dict[str, Any]
) -> None:
    target = make_registration(locations, "expected")
    script = [ready(target), receipt(target, **same_peer(target, overrides))]
    error, fake = await failed_send(locations, script, target=target)
    assert error.code == "invalid_receipt"
    assert_receipt_unknown(error)
    assert (error.frames_written, error.message_written) == (2, True)
    assert fake.count("message") == 1


@pytest.mark.parametrize("status", ["submitted", "queued", "accepted"])
async def test_every_delivery_receipt_is_accepted(locations: Locations, status: str) -> None:
    target = make_registration(locations, "good")
    async with fake_receiver(
        locations, [ready(target), receipt(target, status)], registration=target
    ) as fake:
        result = await send_to(locations, fake)
        await fake.settled()
    assert (result.status, result.frames_written) == (status, 2)
    assert fake.count("message") == 1


# -- malformed replies -----------------------------------------------------------------------------


MALFORMED = [
    pytest.param(b"\xff\n", id="invalid-utf8"),
    pytest.param(b"\xc3\n", id="truncated-utf8"),
    pytest.param(b"not json\n", id="not-json"),
    pytest.param(b"\n", id="empty-line"),
    pytest.param(b"[]\n", id="array"),
    pytest.param(b'{"v":1,"type":"hello"}\n', id="not-a-response"),
    pytest.param(b"x" * 2000 + b"\n", id="over-the-client-cap"),
]


@pytest.mark.parametrize("data", MALFORMED)
@pytest.mark.parametrize("phase", ["hello", "message"])
async def test_malformed_reply_is_invalid_response(
    locations: Locations, data: bytes, phase: str
) -> None:
    target = make_registration(locations, "garbler")
    script: list[Step] = [raw_reply(data)] if phase == "hello" else [ready(target), raw_reply(data)]
    # A small client cap, so "over the cap" is cheap; the frames we send still fit.
    error, fake = await failed_send(locations, script, target=target, max_frame_bytes=1024)
    assert error.code == "invalid_response"
    assert_receipt_unknown(error)
    written = phase == "message"
    assert (error.frames_written, error.message_written) == (1 + written, written)
    assert fake.count("message") == int(written)


async def test_a_second_ready_is_not_a_receipt(locations: Locations) -> None:
    """Three reply lines at once: the second is judged (and refused) before the third is read.

    The "more than two replies" rule of spec §3.7 can never be what ends an exchange: the first
    reply either fails or leads to the message, and the second either fails or settles it.
    """
    target = make_registration(locations, "chatty")
    ready_line = ready(target).make({"requestId": HELLO_ID})
    script = [raw_reply(ready_line * 3)]
    error, fake = await failed_send(locations, script, target=target)
    assert error.code == "invalid_receipt"
    assert_receipt_unknown(error)
    assert fake.count("message") == 1


async def test_lines_after_the_receipt_are_ignored(locations: Locations) -> None:
    target = make_registration(locations, "chatty")

    def receipt_then_noise(frame: Any) -> bytes:
        return receipt(target).make(frame) + b"\xff\nmore noise\n"

    script = [ready(target), Reply(receipt_then_noise)]
    async with fake_receiver(locations, script, registration=target) as fake:
        result = await send_to(locations, fake)
        await fake.settled()
    assert result.status == "submitted"
