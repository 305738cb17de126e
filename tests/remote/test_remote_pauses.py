"""When a gateway stops listening to a trusted machine's requests (security/remote/pauses.py)."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.security.remote.pauses import MachinePauses, counts_towards_a_pause
from pi_cross_session._internal.security.remote.trust import Cause


def pauses() -> MachinePauses:
    return MachinePauses(after=3, within_s=10.0, first_s=30.0, longest_s=100.0)


def test_a_burst_of_failures_pauses_the_machine_and_a_slow_trickle_does_not() -> None:
    book = pauses()
    # One failure every 6 s: never three within 10 s.
    assert [book.failed("laptop", t * 6.0) for t in range(10)] == [None] * 10
    assert book.paused_until("laptop", 60.0) is None
    assert book.failed("laptop", 70.0) is None
    assert book.failed("laptop", 71.0) is None
    assert book.failed("laptop", 72.0) == 30.0
    assert book.paused_until("laptop", 80.0) == 102.0
    # Failures while paused (already queued when it began) start nothing more.
    assert [book.failed("laptop", 73.0 + t) for t in range(5)] == [None] * 5
    # Each machine on its own.
    assert book.paused_until("desk", 80.0) is None
    assert book.paused_until("laptop", 102.0) is None


def test_each_pause_without_a_good_request_between_is_twice_as_long_up_to_the_bound() -> None:
    book = pauses()
    lengths = []
    now = 0.0
    for _ in range(4):
        for _ in range(3):
            now += 1.0
            pause = book.failed("laptop", now)
        assert pause is not None
        lengths.append(pause)
        now += pause
        book.ended("laptop")
    assert lengths == [30.0, 60.0, 100.0, 100.0]
    # A good request: the next pause is the first again.
    book.heard("laptop")
    for _ in range(3):
        now += 1.0
        pause = book.failed("laptop", now)
    assert pause == 30.0


def test_a_good_request_during_a_pause_changes_nothing_and_forget_starts_afresh() -> None:
    book = pauses()
    for t in range(3):
        book.failed("laptop", float(t))
    book.heard("laptop")  # queued before the pause began
    assert book.paused_until("laptop", 5.0) == 32.0
    book.forget("laptop")  # no longer trusted, or a new key
    assert book.paused_until("laptop", 5.0) is None
    for t in range(3):
        last = book.failed("laptop", 10.0 + t)
    assert last == 30.0


def test_good_requests_between_junk_do_not_let_the_junk_go_on() -> None:
    book = pauses()
    book.failed("laptop", 1.0)
    book.heard("laptop")
    book.failed("laptop", 2.0)
    book.heard("laptop")
    assert book.failed("laptop", 3.0) == 30.0


@pytest.mark.parametrize("cause", list(Cause))
@pytest.mark.parametrize("vouched", [True, False, None])
def test_only_false_payloads_the_deployment_vouches_for_count(
    cause: Cause, vouched: bool | None
) -> None:
    false = cause in {Cause.BAD_SIGNATURE, Cause.MALFORMED, Cause.TOO_LARGE}
    assert counts_towards_a_pause(cause, vouched=vouched) is (false and vouched is True)
