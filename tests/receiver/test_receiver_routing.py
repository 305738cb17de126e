"""SessionReceiver: which second frames reach admission; what a probe-only caller gets
(spec §3.3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.frames import Hello, Message, Response, StatusQuery
from pi_cross_session._internal.security.admission import Admission
from pi_cross_session._internal.security.auth import Authenticator, Caller
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.receiver import SessionReceiver
from tests.support.admission_kit import (
    FIXTURE_LOCATIONS,
    RECEIVER,
    Kit,
    caller,
    check_reply,
    probe_caller,
    status_query,
)


def fixture_authenticator() -> Authenticator:
    return Authenticator(RECEIVER, FIXTURE_LOCATIONS, files=PeersDirFiles(FIXTURE_LOCATIONS))


def receiver_for(kit: Kit) -> SessionReceiver:
    return SessionReceiver(
        fixture_authenticator(),
        kit.admission,
    )


def test_a_status_query_on_a_probe_is_invalid_frame_with_unknown_request_id() -> None:
    kit = Kit()
    reply = receiver_for(kit).on_request(probe_caller(), status_query("m1", request_id="q-7"))
    check_reply(reply, request_id="unknown")
    assert not reply.ok
    assert reply.status == Code.INVALID_FRAME
    assert kit.admission.snapshot().refusals == {}  # admission never saw it


def test_a_message_on_a_probe_is_authentication_failed_with_its_request_id() -> None:
    kit = Kit()
    msg = kit.message("hello", request_id="msg-req-3")
    reply = receiver_for(kit).on_request(probe_caller(), msg)
    check_reply(reply, request_id="msg-req-3")
    assert reply.status == Code.AUTHENTICATION_FAILED
    assert kit.host.attempts == 0
    assert kit.admission.snapshot().remaining_budget == 256


def test_an_authenticated_message_is_admitted() -> None:
    kit = Kit()
    msg = kit.message("hello", request_id="msg-req-4")
    reply = receiver_for(kit).on_request(caller("alice"), msg)
    check_reply(reply, request_id="msg-req-4")
    assert reply.status == Code.SUBMITTED
    assert [d.text for d in kit.host.submitted] == ["hello"]


def test_an_authenticated_status_query_is_answered_by_admission() -> None:
    kit = Kit()
    kit.turn_started(Provenance.USER)
    receiver = receiver_for(kit)
    receiver.on_request(caller("alice"), kit.message(message_id="queued-1"))
    mine = receiver.on_request(caller("alice"), status_query("queued-1", request_id="q-1"))
    theirs = receiver.on_request(caller("bob"), status_query("queued-1", request_id="q-2"))
    check_reply(mine, request_id="q-1")
    check_reply(theirs, request_id="q-2")
    assert (mine.status, theirs.status) == (Code.QUEUED, Code.UNKNOWN)


@dataclass
class SpyAdmission:
    """Records what the receiver delegates and answers with a fixed reply."""

    calls: list[tuple[str, Caller, object]] = field(default_factory=list)

    def admit(self, who: Caller, message: Message) -> Response:
        self.calls.append(("admit", who, message))
        return Response.build(request_id=message.request_id, ok=True, status=Code.QUEUED)

    def status(self, who: Caller, query: StatusQuery) -> Response:
        self.calls.append(("status", who, query))
        return Response.build(request_id=query.request_id, ok=True, status=Code.UNKNOWN)


@pytest.mark.parametrize("capable", [True, False])
def test_delegation_passes_the_caller_and_frame_unchanged(capable: bool) -> None:
    spy = SpyAdmission()
    receiver = SessionReceiver(
        fixture_authenticator(),
        spy,  # type: ignore[arg-type]
    )
    who = caller("alice", capable=capable)
    msg = Kit().message("x")
    query = status_query("x")
    assert receiver.on_request(who, msg).status == Code.QUEUED
    assert receiver.on_request(who, query).status == Code.UNKNOWN
    assert spy.calls == [("admit", who, msg), ("status", who, query)]


def test_a_probe_message_still_goes_to_admission() -> None:
    # Admission owns the authentication_failed refusal for messages (it counts it).
    spy = SpyAdmission()
    receiver = SessionReceiver(fixture_authenticator(), spy)  # type: ignore[arg-type]
    msg = Kit().message("x")
    receiver.on_request(probe_caller(), msg)
    assert [call[0] for call in spy.calls] == ["admit"]


def test_a_probe_status_query_never_reaches_admission() -> None:
    spy = SpyAdmission()
    receiver = SessionReceiver(fixture_authenticator(), spy)  # type: ignore[arg-type]
    receiver.on_request(probe_caller(), status_query("x"))
    assert spy.calls == []


class StubAuthenticator:
    def __init__(self, answer: tuple[Response, Caller | None]) -> None:
        self.answer = answer
        self.hellos: list[Hello] = []

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, Caller | None]:
        self.hellos.append(hello)
        return self.answer


@pytest.mark.anyio
async def test_hellos_go_to_the_authenticator() -> None:
    answer = (
        Response.build(request_id="h-1", ok=True, status=Code.READY, peer=RECEIVER.peer_identity()),
        probe_caller(),
    )
    stub = StubAuthenticator(answer)
    receiver = SessionReceiver(stub, Kit().admission)  # type: ignore[arg-type]
    hello = Hello.model_validate(
        {
            "v": 1,
            "type": "hello",
            "requestId": "h-1",
            "token": RECEIVER.token,
            "target": {"id": RECEIVER.session_id, "instanceId": RECEIVER.instance_id},
        }
    )
    assert await receiver.on_hello(hello) == answer
    assert stub.hellos == [hello]


def test_the_receiver_exposes_its_parts() -> None:
    kit = Kit()
    authenticator = Authenticator(
        RECEIVER, FIXTURE_LOCATIONS, files=PeersDirFiles(FIXTURE_LOCATIONS)
    )
    receiver = SessionReceiver(authenticator, kit.admission)
    assert receiver.authenticator is authenticator
    assert isinstance(receiver.admission, Admission)
