"""Spec §10 items 6 and 7, replayed as exact bytes against a live receiver.

The receiver runs with the manifest's fixture identity, and the fixture sender's registration is
published, so the identity checks a frame model alone cannot decide (token, target, ``from``) are
decided here, by the real authenticator behind the real endpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from tests.support.raw_client import exchange_raw, line, message_body
from tests.support.socket_peers import (
    assert_still_serving,
    make_registration,
    published_sender,
    serving,
)

pytestmark = pytest.mark.anyio

MANIFEST = Path(__file__).resolve().parents[1] / "vectors" / "frames" / "manifest.json"
DATA: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
FIXTURE: dict[str, dict[str, str]] = DATA["fixture"]
CASES: list[dict[str, Any]] = DATA["cases"]
HELLOS = [case for case in CASES if case["kind"] == "hello"]
SECOND_FRAMES = [case for case in CASES if case["kind"] != "hello"]
(GENUINE_HELLO,) = [case for case in HELLOS if case["receiver"] == "ready"]


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [f"item{case['item']}-{case['name'].replace(' ', '-')}" for case in cases]


def fixture_registration(locations: Locations, role: str) -> Registration:
    ident = FIXTURE[role]
    return make_registration(
        locations,
        role,
        instance_id=ident["instanceId"],
        session_id=ident["id"],
        token=ident["token"],
    )


def publish_fixture_sender(locations: Locations) -> None:
    ident = FIXTURE["sender"]
    published_sender(
        locations,
        "sender",
        instance_id=ident["instanceId"],
        session_id=ident["id"],
        token=ident["token"],
    )


def wire(case: dict[str, Any]) -> bytes:
    return case["line"].encode("utf-8") + b"\n"


def test_the_manifest_covers_items_six_and_seven() -> None:
    refusals = [case for case in HELLOS if case["receiver"] != "ready"]
    assert len(refusals) >= 7
    assert {case["item"] for case in SECOND_FRAMES} == {7}


@pytest.mark.parametrize("case", HELLOS, ids=ids(HELLOS))
async def test_item6_hello_vector_against_a_live_receiver(
    locations: Locations, case: dict[str, Any]
) -> None:
    publish_fixture_sender(locations)
    receiver = fixture_registration(locations, "receiver")
    async with serving(locations, receiver) as (endpoint, inbox):
        if case["receiver"] == "ready":
            # The genuine hello: ready, then the connection waits; a message proves it is
            # authenticated (a probe-only connection would refuse it).
            ready, receipt = await exchange_raw(
                receiver.socket_path,
                wire(case),
                line(message_body(request_id="vec-m", message_id="vec-1")),
                replies=2,
            )
            assert (ready.ok, ready.status, ready.request_id) == (True, "ready", case["requestId"])
            assert receipt.status == "submitted"
            assert [e.sender_instance_id for e in inbox.entries] == [
                FIXTURE["sender"]["instanceId"]
            ]
        else:
            (reply,) = await exchange_raw(receiver.socket_path, wire(case))
            assert not reply.ok
            assert (reply.status, reply.request_id) == (case["receiver"], case["requestId"])
            assert inbox.entries == []
        await assert_still_serving(locations, receiver)
        assert endpoint.statistics().open_connections <= 1


@pytest.mark.parametrize("case", SECOND_FRAMES, ids=ids(SECOND_FRAMES))
async def test_item7_second_frame_vector_after_the_genuine_hello(
    locations: Locations, case: dict[str, Any]
) -> None:
    publish_fixture_sender(locations)
    receiver = fixture_registration(locations, "receiver")
    async with serving(locations, receiver) as (_endpoint, inbox):
        ready, reply = await exchange_raw(
            receiver.socket_path, wire(GENUINE_HELLO), wire(case), replies=2
        )
        assert ready.status == "ready"
        assert not reply.ok
        assert (reply.status, reply.request_id) == (case["receiver"], case["requestId"])
        assert inbox.entries == []
        await assert_still_serving(locations, receiver)


async def test_item6_sender_registration_missing_is_authentication_failed(
    locations: Locations,
) -> None:
    receiver = fixture_registration(locations, "receiver")
    async with serving(locations, receiver):
        (reply,) = await exchange_raw(receiver.socket_path, wire(GENUINE_HELLO))
        assert (reply.status, reply.request_id) == ("authentication_failed", "hello-req-1")
        await assert_still_serving(locations, receiver)
