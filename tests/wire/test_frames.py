"""Frame models: every field rule of spec §3.3–3.6, at and around each bound, in its unit."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_cross_session._internal.protocol import frames as wire
from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import FrameError, FrameValidationError
from pi_cross_session._internal.protocol.limits import (
    MAX_SAFE_INTEGER,
    MAX_SESSION_ID_UNITS,
    MAX_TEXT_UNITS,
)

SESSION = "01a22679-d160-738f-81de-3c5ba9cff5c6"
INSTANCE = "2d06c66b2c0fbee2d957b41c6c78cad0"
OTHER_INSTANCE = "6a34df5d6865727857a1b9944d0d97fd"
TOKEN = "ab" * 32


def hello(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "type": "hello",
        "capabilities": ["cancel-safe-queue-v1"],
        "requestId": "req-1",
        "token": TOKEN,
        "target": {"id": SESSION, "instanceId": INSTANCE},
        "from": {"id": "sender-session", "instanceId": OTHER_INSTANCE, "token": TOKEN},
    }
    body.update(changes)
    return body


def message(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "type": "message",
        "requestId": "req-2",
        "messageId": "msg-1",
        "text": "hello there",
        "summary": "hello",
        "sentAt": 1_795_941_860_117,
    }
    body.update(changes)
    return body


def response(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "type": "response",
        "requestId": "req-1",
        "ok": True,
        "status": "ready",
        "capabilities": ["cancel-safe-queue-v1"],
        "code": "ready",
        "state": "ready",
        "retryable": False,
        "next": "later",
        "peer": {"id": SESSION, "instanceId": INSTANCE, "pid": 42},
    }
    body.update(changes)
    return body


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


def refuses_hello(body: object) -> None:
    with pytest.raises(FrameValidationError) as caught:
        wire.parse_hello(body)
    assert caught.value.code == Code.AUTHENTICATION_FAILED


def refuses_request(body: object) -> None:
    with pytest.raises(FrameValidationError) as caught:
        wire.parse_request(body)
    assert caught.value.code == Code.INVALID_FRAME


def refuses_response(body: object) -> None:
    with pytest.raises(FrameValidationError) as caught:
        wire.parse_response(body)
    assert caught.value.code == Code.INVALID_RESPONSE


# -- hello ---------------------------------------------------------------------------------------


def test_a_full_hello_parses_with_python_names() -> None:
    parsed = wire.parse_hello(hello())
    assert parsed.request_id == "req-1"
    assert parsed.target.instance_id == INSTANCE
    assert parsed.sender is not None
    assert parsed.sender.instance_id == OTHER_INSTANCE
    assert parsed.capabilities == ("cancel-safe-queue-v1",)


def test_a_probe_hello_has_no_sender_and_may_omit_capabilities() -> None:
    parsed = wire.parse_hello(without(without(hello(), "from"), "capabilities"))
    assert parsed.sender is None
    assert parsed.capabilities is None


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(hello(requestId=""), id="empty requestId"),
        pytest.param(hello(requestId="a" * 129), id="requestId of 129"),
        pytest.param(hello(requestId="has space"), id="requestId with space"),
        pytest.param(hello(requestId="x\n"), id="requestId with trailing LF"),
        pytest.param(hello(target={"id": "", "instanceId": INSTANCE}), id="empty target id"),
        pytest.param(hello(target={"id": SESSION, "instanceId": INSTANCE.upper()}), id="upper hex"),
        pytest.param(hello(target={"id": SESSION}), id="target without instance"),
        pytest.param(hello(target=[SESSION, INSTANCE]), id="target as a list"),
        pytest.param(hello(**{"from": None}), id="from null"),
        pytest.param(hello(**{"from": "me"}), id="from a string"),
        pytest.param(hello(**{"from": {"id": "s", "instanceId": OTHER_INSTANCE}}), id="no token"),
        pytest.param(hello(capabilities="cancel-safe-queue-v1"), id="capabilities a string"),
        pytest.param(hello(capabilities=None), id="capabilities null"),
        pytest.param(hello(capabilities=["c"] * 9), id="nine capabilities"),
        pytest.param(hello(capabilities=["x" * 65]), id="capability of 65 units"),
        pytest.param(hello(capabilities=["😀" * 33]), id="capability of 66 units in 33 chars"),
        pytest.param(hello(capabilities=[1]), id="capability not a string"),
        pytest.param(hello(token=None), id="token null"),
        pytest.param(hello(token=5), id="token a number"),
        pytest.param(hello(v=2), id="version 2"),
        pytest.param(hello(v=True), id="version true"),
        pytest.param(hello(v=1.0), id="version 1.0"),
        pytest.param(hello(v="1"), id="version string"),
        pytest.param(hello(type="message"), id="wrong type"),
        pytest.param(without(hello(), "token"), id="no token at all"),
        pytest.param(without(hello(), "target"), id="no target"),
        pytest.param([], id="a list"),
        pytest.param("hello", id="a string"),
        pytest.param(None, id="null"),
    ],
)
def test_hello_shape_faults_are_authentication_failures(body: object) -> None:
    refuses_hello(body)


def test_hello_bounds_in_utf16_units() -> None:
    longest = "😀" * (MAX_SESSION_ID_UNITS // 2)  # 512 units in 256 code points
    assert wire.parse_hello(hello(target={"id": longest, "instanceId": INSTANCE}))
    refuses_hello(hello(target={"id": longest + "a", "instanceId": INSTANCE}))
    assert wire.parse_hello(hello(requestId="a" * 128))
    assert wire.parse_hello(hello(capabilities=["c"] * 8))
    assert wire.parse_hello(hello(capabilities=["x" * 64]))
    assert wire.parse_hello(hello(capabilities=[]))


def test_a_malformed_token_is_left_to_authentication() -> None:
    # An uppercase or short token is a bad credential, not a bad frame: the reply must echo the
    # hello's requestId, which only happens if the frame parses.
    assert wire.parse_hello(hello(token="AB" * 32)).token == "AB" * 32
    assert wire.parse_hello(hello(token="")).token == ""


def test_unknown_fields_are_ignored() -> None:
    parsed = wire.parse_hello(hello(extra={"nested": [1, 2]}, goalId="g"))
    assert "extra" not in parsed.to_wire()


# -- message -------------------------------------------------------------------------------------


def test_a_message_parses() -> None:
    parsed = wire.parse_request(message())
    assert isinstance(parsed, wire.Message)
    assert parsed.message_id == "msg-1"
    assert parsed.sent_at == 1_795_941_860_117
    assert parsed.goal_id is None


def test_a_goal_id_is_kept() -> None:
    parsed = wire.parse_request(message(goalId="3f1c2a9e-0000-4000-8000-000000000000"))
    assert isinstance(parsed, wire.Message)
    assert parsed.goal_id == "3f1c2a9e-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(message(messageId=""), id="empty messageId"),
        pytest.param(message(requestId=""), id="empty requestId"),
        pytest.param(message(text=None), id="null text"),
        pytest.param(message(text=5), id="numeric text"),
        pytest.param(message(summary="s" * 201), id="201 code point summary"),
        pytest.param(message(summary="   "), id="blank summary"),
        pytest.param(message(summary="\ufeff"), id="BOM-only summary"),
        pytest.param(without(message(), "summary"), id="no summary"),
        pytest.param(message(summary=None), id="null summary"),
        pytest.param(message(text="a\ud800b"), id="lone high surrogate in text"),
        pytest.param(message(text="\udc00"), id="lone low surrogate in text"),
        pytest.param(message(summary="s\ud800"), id="lone surrogate in summary"),
        pytest.param(message(sentAt=1.7e12), id="float sentAt"),
        pytest.param(message(sentAt=1_795_941_860_117.5), id="fractional sentAt"),
        pytest.param(message(sentAt=MAX_SAFE_INTEGER + 1), id="unsafe sentAt"),
        pytest.param(message(sentAt=True), id="boolean sentAt"),
        pytest.param(message(sentAt="1795941860117"), id="string sentAt"),
        pytest.param(message(goalId={}), id="goalId object"),
        pytest.param(message(goalId=None), id="goalId null"),
        pytest.param(message(goalId=""), id="empty goalId"),
        pytest.param(message(goalId="g" * 129), id="goalId of 129"),
        pytest.param(message(type="note"), id="unknown type"),
        pytest.param(message(v=0), id="version 0"),
        pytest.param({"type": "message"}, id="bare type"),
        pytest.param({}, id="empty object"),
        pytest.param([message()], id="wrapped in a list"),
    ],
)
def test_message_shape_faults_are_invalid_frames(body: object) -> None:
    refuses_request(body)


def test_text_limit_is_in_utf16_units() -> None:
    astral = "😀" * (MAX_TEXT_UNITS // 2)  # exactly 1,000,000 units in 500,000 code points
    assert wire.parse_request(message(text=astral))
    refuses_request(message(text=astral + "a"))
    assert wire.parse_request(message(text="a" * MAX_TEXT_UNITS))
    refuses_request(message(text="a" * (MAX_TEXT_UNITS + 1)))


def test_summary_limit_is_in_code_points() -> None:
    assert wire.parse_request(message(summary="😀" * 200))
    refuses_request(message(summary="😀" * 201))


def test_blank_text_parses_so_that_admission_can_answer_invalid_message() -> None:
    parsed = wire.parse_request(message(text=" \t\u3000\ufeff\n"))
    assert isinstance(parsed, wire.Message)
    assert parsed.text_is_blank
    assert not wire.Message.model_validate(message(text="\u0085")).text_is_blank  # not JS space


def test_safe_integer_bounds() -> None:
    assert wire.parse_request(message(sentAt=MAX_SAFE_INTEGER))
    assert wire.parse_request(message(sentAt=-MAX_SAFE_INTEGER))
    assert wire.parse_request(message(sentAt=0))
    refuses_request(message(sentAt=-MAX_SAFE_INTEGER - 1))


def test_a_lone_surrogate_escape_in_json_is_refused() -> None:
    text = json.dumps(message(), ensure_ascii=False).replace("hello there", "bad \\ud800 escape")
    refuses_request(wire.loads_frame(text))
    paired = text.replace("\\ud800", "\\ud83d\\ude00")
    parsed = wire.parse_request(wire.loads_frame(paired))
    assert isinstance(parsed, wire.Message)
    assert parsed.text == "bad 😀 escape"


# -- status query --------------------------------------------------------------------------------


def test_a_status_query_parses() -> None:
    parsed = wire.parse_request({"v": 1, "type": "status", "requestId": "r", "messageId": "m"})
    assert isinstance(parsed, wire.StatusQuery)
    assert parsed.message_id == "m"


@pytest.mark.parametrize(
    "body",
    [
        {"v": 1, "type": "status", "requestId": "r"},
        {"v": 1, "type": "status", "requestId": "r", "messageId": "bad id"},
        {"v": 1, "type": "status", "requestId": "", "messageId": "m"},
        {"v": 2, "type": "status", "requestId": "r", "messageId": "m"},
    ],
)
def test_status_query_shape_faults(body: object) -> None:
    refuses_request(body)


# -- response ------------------------------------------------------------------------------------


def test_a_ready_response_parses_and_exposes_the_peer() -> None:
    parsed = wire.parse_response(response())
    identity = parsed.peer_identity()
    assert identity is not None
    assert (identity.id, identity.instance_id, identity.pid) == (SESSION, INSTANCE, 42)


def test_a_malformed_peer_is_not_a_schema_fault() -> None:
    for peer in ("someone", {"id": SESSION}, {"id": 1, "instanceId": INSTANCE, "pid": 1}, []):
        assert wire.parse_response(response(peer=peer)).peer_identity() is None
    assert wire.parse_response(without(response(), "peer")).peer_identity() is None


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(response(next={"text": "retry"}), id="next an object (pinned)"),
        pytest.param(response(next="n" * 2049), id="next of 2049"),
        pytest.param(response(error="e" * 4097), id="error of 4097"),
        pytest.param(response(status="s" * 65), id="status of 65"),
        pytest.param(response(code="c" * 65), id="code of 65"),
        pytest.param(response(state=5), id="state a number"),
        pytest.param(response(ok="true"), id="ok a string"),
        pytest.param(response(ok=1), id="ok a number"),
        pytest.param(response(retryable="no"), id="retryable a string"),
        pytest.param(response(retryable=None), id="retryable null"),
        pytest.param(response(requestId="bad id"), id="bad requestId"),
        pytest.param(response(capabilities="cancel-safe-queue-v1"), id="capabilities a string"),
        pytest.param(without(response(), "status"), id="no status"),
        pytest.param(without(response(), "ok"), id="no ok"),
        pytest.param(response(type="hello"), id="wrong type"),
    ],
)
def test_response_shape_faults_are_invalid_responses(body: object) -> None:
    refuses_response(body)


def test_response_bounds() -> None:
    assert wire.parse_response(response(next="n" * 2048, error="e" * 4096, status="s" * 64))
    assert wire.parse_response(response(requestId="unknown"))
    minimal = {"v": 1, "type": "response", "requestId": "r", "ok": False, "status": "busy"}
    assert wire.parse_response(minimal).capabilities is None


def test_built_responses_follow_the_wire_rules() -> None:
    peer = wire.PeerIdentity(id=SESSION, instance_id=INSTANCE, pid=7)
    busy = wire.Response.build(
        request_id="r1", ok=False, status=Code.BUSY, error="later", peer=peer
    )
    body = busy.to_wire()
    assert list(body) == [
        "v",
        "type",
        "requestId",
        "ok",
        "status",
        "capabilities",
        "code",
        "state",
        "retryable",
        "next",
        "error",
    ]
    assert body["code"] == body["state"] == body["status"] == "busy"
    assert body["retryable"] is True
    assert "peer" not in body  # a refusal never states the receiver's identity

    ready = wire.Response.build(request_id="r2", ok=True, status=Code.READY, peer=peer).to_wire()
    assert ready["retryable"] is False
    assert "error" not in ready
    assert ready["peer"] == {"id": SESSION, "instanceId": INSTANCE, "pid": 7}
    assert ready["capabilities"] == list(ADVERTISED)

    refused = wire.Response.build(request_id="r3", ok=False, status=Code.DUPLICATE).to_wire()
    assert refused["retryable"] is False
    assert refused["next"] != ready["next"] != busy.to_wire()["next"]


# -- encoding ------------------------------------------------------------------------------------


def test_encoding_is_compact_utf8_with_reference_key_order() -> None:
    parsed = wire.parse_request(message(text='中文 😀 \u2028 \x01 "q" \\', summary="é"))
    text = wire.dumps_frame(parsed)
    assert text == (
        '{"v":1,"type":"message","requestId":"req-2","messageId":"msg-1",'
        '"text":"中文 😀 \u2028 \\u0001 \\"q\\" \\\\","summary":"é","sentAt":1795941860117}'
    )


def test_hello_encoding_order_with_and_without_optionals() -> None:
    full = json.loads(wire.dumps_frame(wire.parse_hello(hello())))
    assert list(full) == ["v", "type", "capabilities", "requestId", "token", "target", "from"]
    probe = wire.parse_hello(without(without(hello(), "from"), "capabilities"))
    assert list(json.loads(wire.dumps_frame(probe))) == [
        "v",
        "type",
        "requestId",
        "token",
        "target",
    ]


def test_goal_id_is_written_last_and_only_when_set() -> None:
    scoped = json.loads(wire.dumps_frame(wire.Message.model_validate(message(goalId="g-1"))))
    assert list(scoped)[-1] == "goalId"
    plain = json.loads(wire.dumps_frame(wire.Message.model_validate(message())))
    assert "goalId" not in plain


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        pytest.param(wire.parse_hello, hello(), id="hello"),
        pytest.param(wire.parse_request, message(goalId="g-1"), id="message"),
        pytest.param(
            wire.parse_request,
            {"v": 1, "type": "status", "requestId": "r", "messageId": "m"},
            id="status",
        ),
        pytest.param(wire.parse_response, response(error="why"), id="response"),
    ],
)
def test_the_wire_shape_is_the_field_declarations(parse: Any, body: dict[str, Any]) -> None:
    """Every field set: the keys written are the declared fields' wire names, in declaration
    order, so the model is the one statement of a frame's shape."""
    frame = parse(dict(reversed(body.items())))  # the order read in is not the order written
    declared = [field.alias or name for name, field in type(frame).model_fields.items()]
    written = frame.to_wire()
    assert list(written) == declared
    assert written == body


def test_nested_frames_and_capabilities_are_written_as_json_values() -> None:
    written = wire.parse_hello(hello()).to_wire()
    assert written["capabilities"] == ["cancel-safe-queue-v1"]
    assert type(written["capabilities"]) is list
    assert written["target"] == {"id": SESSION, "instanceId": INSTANCE}
    assert list(written["from"]) == ["id", "instanceId", "token"]


@pytest.mark.parametrize("peer", [False, 0, "", [], {}, {"b": None, "a": [1, {"c": None}]}])
def test_a_reply_peer_is_written_as_it_came(peer: object) -> None:
    """Only an absent peer is left out; any JSON value is written back unchanged (the receiver
    judges it, not the writer), a falsy one or one holding nulls included."""
    written = wire.parse_response(response(peer=peer)).to_wire()
    assert written["peer"] == peer
    assert json.dumps(written["peer"]) == json.dumps(peer)
    assert "peer" not in wire.parse_response(without(response(), "peer")).to_wire()


def test_non_json_and_non_standard_json_fail_as_frame_errors() -> None:
    for text in ("", "this is not json", "NaN", "[Infinity]", '{"a":-Infinity}', "[" * 50_000):
        with pytest.raises(FrameError) as caught:
            wire.loads_frame(text)
        assert caught.value.code == Code.INVALID_FRAME
    assert wire.loads_frame(' {"a":1}\r') == {"a": 1}  # JSON whitespace, CRLF framing
    with pytest.raises(FrameError):
        wire.loads_frame('\ufeff{"a":1}')  # a BOM inside a later frame is not whitespace


def test_wire_input_is_read_by_wire_names_only() -> None:
    # Python attribute names are for our own code; a peer writing them has sent a broken frame.
    refuses_hello({**without(hello(), "requestId"), "request_id": "req-1"})
    refuses_hello(hello(target={"id": SESSION, "instance_id": INSTANCE}))
    sender_as_python_name = {**without(hello(), "from"), "sender": hello()["from"]}
    assert wire.parse_hello(sender_as_python_name).sender is None  # an unknown field, ignored
    refuses_request({**without(message(), "sentAt"), "sent_at": 1_795_941_860_117})
    refuses_request({**without(message(), "messageId"), "message_id": "m"})
    refuses_response({**without(response(), "requestId"), "request_id": "req-1"})
    snake_peer = {"id": SESSION, "instance_id": INSTANCE, "pid": 1}
    assert wire.parse_response(response(peer=snake_peer)).peer_identity() is None
