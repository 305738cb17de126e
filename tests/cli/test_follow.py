"""The rule that ends ``send --wait S``, with the time passed in (no sleeping)."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.cli.follow import Follow
from pi_cross_session._internal.cli.settings import QUEUE_FATE_MARGIN_S
from pi_cross_session._internal.protocol.limits import QUEUE_TTL_S

BOUND = QUEUE_TTL_S + QUEUE_FATE_MARGIN_S


def test_a_submitted_message_is_followed_for_s_seconds() -> None:
    follow = Follow("submitted", started=100.0, wait_s=5)
    follow.observe("submitted", confirmable=True)
    assert not follow.finished(104.9)
    assert follow.finished(105.0)
    assert follow.result(105.0).last_state == "submitted"


def test_delivered_ends_the_wait_at_once() -> None:
    follow = Follow("submitted", started=0.0, wait_s=30)
    assert follow.observe("delivered", confirmable=True)
    assert follow.finished(0.3)
    assert follow.result(0.3).states == ("submitted", "delivered")


def test_a_receiver_that_cannot_confirm_ends_the_wait_at_submitted() -> None:
    follow = Follow("queued", started=0.0, wait_s=30)
    follow.observe("queued", confirmable=False)
    assert not follow.finished(1.0)  # still queued: its fate is still to come
    follow.observe("submitted", confirmable=False)
    assert follow.finished(1.2)
    result = follow.result(1.2)
    assert (result.last_state, result.confirmable) == ("submitted", False)


def test_a_queued_message_is_followed_past_s_until_it_leaves_the_queue() -> None:
    follow = Follow("queued", started=0.0, wait_s=1)
    assert not follow.finished(1.0)
    assert not follow.finished(QUEUE_TTL_S)
    assert follow.remaining(2.0) == pytest.approx(BOUND - 2.0)
    assert follow.observe("expired", confirmable=True)
    assert follow.finished(QUEUE_TTL_S + 0.1)
    assert follow.result(QUEUE_TTL_S + 0.1).states == ("queued", "expired")


def test_a_message_leaving_the_queue_after_s_ends_the_wait_when_it_is_submitted() -> None:
    follow = Follow("queued", started=0.0, wait_s=2)
    follow.observe("submitted", confirmable=True)
    assert follow.finished(10.0)  # past S, and no longer waiting in the queue
    assert follow.result(10.0).last_state == "submitted"


def test_the_ttl_bound_ends_any_wait_even_without_answers() -> None:
    follow = Follow("queued", started=0.0, wait_s=1)
    for _ in range(3):
        follow.failed_query()
    assert not follow.finished(BOUND - 0.01)
    assert follow.finished(BOUND)
    result = follow.result(BOUND)
    assert (result.last_state, result.confirmable, result.failed_queries) == ("queued", None, 3)


@pytest.mark.parametrize(
    "final",
    ["expired", "dropped", "dropped_cancelled", "dropped_shutdown", "injection_failed", "unknown"],
)
def test_a_state_the_message_never_leaves_ends_the_wait(final: str) -> None:
    follow = Follow("queued", started=0.0, wait_s=30)
    follow.observe(final, confirmable=True)
    assert follow.finished(0.5)


def test_the_same_state_twice_is_one_change() -> None:
    follow = Follow("queued", started=0.0, wait_s=5)
    assert not follow.observe("queued", confirmable=True)
    assert follow.observe("submitted", confirmable=True)
    assert not follow.observe("submitted", confirmable=True)
    assert follow.result(1.0).states == ("queued", "submitted")
