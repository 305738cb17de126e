"""What a machine's NATS user may do (security/remote/permissions.py), read as the server reads
its permissions: which of our subjects each allowed pattern covers."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import KV_STREAM
from pi_cross_session._internal.security.remote.permissions import (
    BUCKET_INFO_SUBJECT,
    BUCKET_READ_SUBJECT,
    machine_permissions,
)
from tests.support.nats_subjects import subject_matches

IID = "a" * 32
LAPTOP = machine_permissions("laptop")


def may_publish(subject: str) -> bool:
    return any(subject_matches(pattern, subject) for pattern in LAPTOP.publish)


def may_subscribe(subject: str) -> bool:
    return any(subject_matches(pattern, subject) for pattern in LAPTOP.subscribe)


def test_subjects_match_as_the_server_matches_them() -> None:
    assert subject_matches("a.*.c", "a.b.c")
    assert not subject_matches("a.*.c", "a.b.b.c")
    assert subject_matches("a.>", "a.b.c")
    assert not subject_matches("a.>", "a")
    assert not subject_matches("a.b", "a.b.c")
    assert not subject_matches("a.b.c", "a.b")


@pytest.mark.parametrize(
    "subject",
    [
        env.request_subject("buildbox", "laptop"),
        env.request_subject("desk", "laptop"),
        env.record_subject("laptop", IID),
        BUCKET_INFO_SUBJECT,
        BUCKET_READ_SUBJECT,
    ],
)
def test_a_machine_may_publish_as_itself(subject: str) -> None:
    assert may_publish(subject)


@pytest.mark.parametrize(
    "subject",
    [
        env.request_subject("buildbox", "desk"),
        env.request_subject("laptop", "desk"),
        env.earlier_request_subject("buildbox"),
        env.record_subject("desk", IID),
        f"{env.inbox_prefix('desk')}.reply",
        f"{env.inbox_prefix('laptop')}.reply",
        f"$JS.API.STREAM.DELETE.{KV_STREAM}",
        f"$JS.API.STREAM.PURGE.{KV_STREAM}",
        f"$JS.API.STREAM.UPDATE.{KV_STREAM}",
        f"$JS.API.STREAM.MSG.DELETE.{KV_STREAM}",
        f"$JS.API.CONSUMER.CREATE.{KV_STREAM}",
        f"$JS.API.DIRECT.GET.{KV_STREAM}.$KV.pi-xs-peers.desk.{IID}",
    ],
)
def test_a_machine_may_not_publish_as_another_or_change_the_bucket(subject: str) -> None:
    assert not may_publish(subject)


@pytest.mark.parametrize(
    "subject",
    [
        env.request_subject("laptop", "buildbox"),
        env.request_subject("laptop", "desk"),
        f"{env.inbox_prefix('laptop')}.reply",
        env.record_subject("desk", IID),
        env.record_subject("laptop", IID),
    ],
)
def test_a_machine_hears_what_is_addressed_to_it_and_every_record(subject: str) -> None:
    assert may_subscribe(subject)


@pytest.mark.parametrize(
    "subject",
    [
        env.request_subject("desk", "buildbox"),
        env.request_subject("desk", "laptop"),
        env.earlier_request_subject("laptop"),
        f"{env.inbox_prefix('desk')}.reply",
        env.OPEN_PROBE_SUBJECT,
    ],
)
def test_a_machine_hears_nothing_meant_for_another(subject: str) -> None:
    assert not may_subscribe(subject)


def test_a_machine_answers_each_request_once() -> None:
    assert LAPTOP.responses == 1
    assert LAPTOP.claims()["resp"]["max"] == 1
