"""The receiver's bounded policies (spec §5 step 11, spec §5.1):
rate, message ids, text dedup, budget.

Each bound is tested at limit - 1, limit and limit + 1, once with a small keyword override and once
with the real default from :mod:`pi_cross_session._internal.protocol.limits`. Time is an argument,
so nothing here waits.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol import limits
from pi_cross_session._internal.security.limits import (
    LifetimeBudget,
    MessageIdLedger,
    RateLimiter,
    TextDedup,
    text_digest,
)

T0 = 1_000.0


def drain(rate: RateLimiter, sender: str, count: int, now: float = T0) -> None:
    for _ in range(count):
        assert rate.allows(sender, now)
        rate.commit(sender, now)


# -- RateLimiter -----------------------------------------------------------------------------------


def test_the_real_defaults_are_the_contract_values() -> None:
    assert limits.RATE_CAPACITY == 30
    assert limits.RATE_REFILL_PER_S == 0.5
    assert limits.MAX_RATE_SENDERS == 256
    assert limits.MAX_CACHE_ENTRIES == 512
    assert limits.TEXT_DEDUP_WINDOW_S == 30.0
    assert limits.LIFETIME_BUDGET == 256
    assert limits.MAX_QUEUED == 50
    assert limits.QUEUE_TTL_S == 30.0  # tests that run a short TTL rely on this pin


def test_an_unknown_sender_starts_with_a_full_bucket() -> None:
    rate = RateLimiter()
    assert rate.tokens("a", T0) == 30
    assert rate.allows("a", T0)
    assert len(rate) == 0


@pytest.mark.parametrize(("commits", "allowed"), [(29, True), (30, False), (31, False)])
def test_default_bucket_holds_30_tokens(commits: int, allowed: bool) -> None:
    rate = RateLimiter()
    drain(rate, "a", min(commits, 30))
    if commits == 31:
        # A 31st commit is never offered: the pipeline asks first. The bucket says no.
        assert not rate.allows("a", T0)
    assert rate.allows("a", T0) is allowed


@pytest.mark.parametrize(("commits", "allowed"), [(2, True), (3, False)])
def test_small_capacity_override(commits: int, allowed: bool) -> None:
    rate = RateLimiter(capacity=3)
    drain(rate, "a", commits)
    assert rate.allows("a", T0) is allowed
    assert rate.tokens("a", T0) == 3 - commits


@pytest.mark.parametrize(("elapsed", "allowed"), [(1.5, False), (1.999, False), (2.0, True)])
def test_refill_half_a_token_per_second(elapsed: float, allowed: bool) -> None:
    rate = RateLimiter()
    drain(rate, "a", 30)
    assert rate.allows("a", T0 + elapsed) is allowed


def test_after_two_seconds_exactly_one_more_then_refused() -> None:
    rate = RateLimiter()
    drain(rate, "a", 30)
    drain(rate, "a", 1, now=T0 + 2.0)
    assert not rate.allows("a", T0 + 2.0)
    assert rate.tokens("a", T0 + 2.0) == 0


def test_small_refill_override() -> None:
    rate = RateLimiter(capacity=1, refill_per_s=10.0)
    drain(rate, "a", 1)
    assert not rate.allows("a", T0 + 0.09)
    assert rate.allows("a", T0 + 0.1)


@pytest.mark.parametrize("elapsed", [60.0, 3600.0, 1e9])
def test_never_above_capacity(elapsed: float) -> None:
    rate = RateLimiter()
    drain(rate, "a", 30)
    assert rate.tokens("a", T0 + elapsed) == 30
    # A long quiet spell buys a full burst, never more.
    drain(rate, "a", 30, now=T0 + elapsed)
    assert not rate.allows("a", T0 + elapsed)


def test_a_clock_stepping_back_adds_nothing_when_asked() -> None:
    rate = RateLimiter()
    drain(rate, "a", 30, now=T0)
    assert rate.tokens("a", T0 - 100.0) == 0
    assert not rate.allows("a", T0 - 100.0)


def test_a_commit_at_a_stepped_back_time_does_not_mint_tokens_later() -> None:
    rate = RateLimiter()
    drain(rate, "a", 29, now=T0)  # one token left, stamp T0
    drain(rate, "a", 1, now=T0 - 60.0)  # the clock stepped back 60 s: the last token goes
    # Back at T0 nothing has refilled: the bucket was empty at T0 and no time passed since.
    assert rate.tokens("a", T0) == 0


def test_asking_changes_nothing() -> None:
    rate = RateLimiter()
    for now in (T0, T0 + 5, T0 + 10):
        assert rate.allows("a", now)
        assert rate.tokens("a", now) == 30
    assert len(rate) == 0
    drain(rate, "a", 1)
    before = rate.tokens("a", T0 + 1)
    for _ in range(100):
        rate.allows("a", T0 + 1)
        rate.tokens("a", T0 + 1)
    assert rate.tokens("a", T0 + 1) == before
    assert len(rate) == 1


def test_senders_have_separate_buckets() -> None:
    rate = RateLimiter()
    drain(rate, "a", 30)
    assert not rate.allows("a", T0)
    assert rate.allows("b", T0)
    assert rate.tokens("b", T0) == 30


@pytest.mark.parametrize(("senders", "tracked"), [(1, 1), (2, 2), (3, 2)])
def test_max_senders_override(senders: int, tracked: int) -> None:
    rate = RateLimiter(max_senders=2)
    for index in range(senders):
        rate.commit(f"s{index}", T0)
    assert len(rate) == tracked


@pytest.mark.parametrize(("senders", "tracked"), [(255, 255), (256, 256), (257, 256)])
def test_default_tracks_256_senders(senders: int, tracked: int) -> None:
    rate = RateLimiter()
    for index in range(senders):
        rate.commit(f"s{index}", T0)
    assert len(rate) == tracked
    # The first sender is forgotten only past the bound: it comes back with a full bucket.
    assert (rate.tokens("s0", T0) == 30) is (senders > 256)


def test_the_least_recently_committed_sender_is_forgotten_first() -> None:
    # b is also the fuller bucket here (26 tokens to a's 25.5), which decides first: the whole
    # rule is in test_table_fairness.py.
    rate = RateLimiter(max_senders=2)
    drain(rate, "a", 5)
    drain(rate, "b", 5, now=T0 + 1)
    drain(rate, "a", 1, now=T0 + 2)  # a is now the most recently committed
    # Asking about b does not count as use.
    assert rate.allows("b", T0 + 3)
    drain(rate, "c", 1, now=T0 + 3)
    assert len(rate) == 2
    assert rate.tokens("b", T0 + 3) == 30  # forgotten: a full bucket again
    assert rate.tokens("a", T0 + 3) < 30  # remembered


def test_asking_does_not_refresh_recency() -> None:
    rate = RateLimiter(max_senders=2)
    drain(rate, "a", 5)
    drain(rate, "b", 5)
    for _ in range(3):
        rate.allows("a", T0)
        rate.tokens("a", T0)
    drain(rate, "c", 1)
    assert rate.tokens("a", T0) == 30  # a went first, although it was asked about last
    assert rate.tokens("b", T0) == 25


@given(
    steps=st.lists(
        st.tuples(st.floats(min_value=0, max_value=10, allow_nan=False), st.booleans()),
        max_size=200,
    )
)
def test_tokens_stay_between_0_and_capacity(steps: list[tuple[float, bool]]) -> None:
    rate = RateLimiter(capacity=5, refill_per_s=0.5)
    now = T0
    for delta, commit in steps:
        now += delta
        tokens = rate.tokens("a", now)
        assert 0 <= tokens <= 5
        if commit and rate.allows("a", now):
            rate.commit("a", now)
            assert 0 <= rate.tokens("a", now) <= 4


# -- MessageIdLedger -------------------------------------------------------------------------------


def test_an_admitted_id_is_seen_forever() -> None:
    ledger = MessageIdLedger()
    assert not ledger.seen("a", "m1")
    ledger.commit("a", "m1")
    assert ledger.seen("a", "m1")
    # There is no clock at all: no window can ever make the id reusable.
    for index in range(limits.MAX_CACHE_ENTRIES - 1):
        ledger.commit("b", f"x{index}")
    assert ledger.seen("a", "m1")


def test_ids_are_per_sender() -> None:
    ledger = MessageIdLedger()
    ledger.commit("a", "m1")
    assert not ledger.seen("b", "m1")
    assert not ledger.seen("a", "m2")


def test_seen_changes_nothing() -> None:
    ledger = MessageIdLedger()
    for _ in range(3):
        assert not ledger.seen("a", "m1")
    assert len(ledger) == 0


@pytest.mark.parametrize(("extra", "first_kept"), [(-1, True), (0, True), (1, False)])
def test_ledger_override_evicts_the_oldest_past_the_bound(extra: int, first_kept: bool) -> None:
    ledger = MessageIdLedger(max_entries=3)
    for index in range(3 + extra):
        ledger.commit("a", f"m{index}")
    assert len(ledger) == min(3, 3 + extra)
    assert ledger.seen("a", "m0") is first_kept
    assert ledger.seen("a", f"m{2 + extra}")


@pytest.mark.parametrize(("count", "first_kept"), [(511, True), (512, True), (513, False)])
def test_ledger_default_remembers_512(count: int, first_kept: bool) -> None:
    ledger = MessageIdLedger()
    for index in range(count):
        ledger.commit(f"s{index % 7}", f"m{index}")
    assert len(ledger) == min(count, 512)
    # The 513th id (index 512, from s1) takes the place of its own sender's oldest id, m1.
    assert ledger.seen("s1", "m1") is first_kept
    assert ledger.seen("s0", "m0")


# -- text_digest and TextDedup ---------------------------------------------------------------------


def test_text_digest_is_sha256_of_utf8() -> None:
    assert text_digest("") == hashlib.sha256(b"").hexdigest()
    assert (
        text_digest("héllo \U0001f600") == hashlib.sha256("héllo \U0001f600".encode()).hexdigest()
    )
    assert text_digest("a") != text_digest("a ")


def test_key_is_sender_goal_digest() -> None:
    assert TextDedup.key("a", "hi") == ("a", "", text_digest("hi"))
    assert TextDedup.key("a", "hi", "g1") == ("a", "g1", text_digest("hi"))
    assert TextDedup.key("a", "hi", None) == TextDedup.key("a", "hi", "")


@pytest.mark.parametrize(("elapsed", "duplicate"), [(0.0, True), (29.999, True), (30.0, False)])
def test_same_text_is_a_duplicate_for_30_seconds(elapsed: float, duplicate: bool) -> None:
    dedup = TextDedup()
    key = TextDedup.key("a", "hello")
    assert not dedup.is_duplicate(key, T0)
    dedup.commit(key, T0)
    assert dedup.is_duplicate(key, T0 + elapsed) is duplicate


@pytest.mark.parametrize(("elapsed", "duplicate"), [(1.5, True), (2.0, False), (2.5, False)])
def test_window_override(elapsed: float, duplicate: bool) -> None:
    dedup = TextDedup(window_s=2.0)
    key = TextDedup.key("a", "hello")
    dedup.commit(key, T0)
    assert dedup.is_duplicate(key, T0 + elapsed) is duplicate


def test_a_b_a_is_caught() -> None:
    dedup = TextDedup()
    a, b = TextDedup.key("s", "A"), TextDedup.key("s", "B")
    dedup.commit(a, T0)
    assert not dedup.is_duplicate(b, T0 + 1)
    dedup.commit(b, T0 + 1)
    assert dedup.is_duplicate(a, T0 + 2)


def test_another_senders_same_text_is_not_a_duplicate() -> None:
    dedup = TextDedup()
    dedup.commit(TextDedup.key("s1", "same"), T0)
    assert not dedup.is_duplicate(TextDedup.key("s2", "same"), T0)


def test_the_goal_id_separates_keys() -> None:
    dedup = TextDedup()
    dedup.commit(TextDedup.key("s", "same", "g1"), T0)
    assert not dedup.is_duplicate(TextDedup.key("s", "same", "g2"), T0)
    assert not dedup.is_duplicate(TextDedup.key("s", "same"), T0)
    assert dedup.is_duplicate(TextDedup.key("s", "same", "g1"), T0)


def test_a_readmission_restarts_the_window() -> None:
    dedup = TextDedup()
    key = TextDedup.key("s", "again")
    dedup.commit(key, T0)
    dedup.commit(key, T0 + 30)
    assert dedup.is_duplicate(key, T0 + 59)
    assert not dedup.is_duplicate(key, T0 + 60)


def test_asking_about_text_changes_nothing() -> None:
    dedup = TextDedup()
    key = TextDedup.key("s", "x")
    for _ in range(3):
        assert not dedup.is_duplicate(key, T0)
    assert len(dedup) == 0


def test_expired_entries_are_pruned_on_commit() -> None:
    dedup = TextDedup()
    dedup.commit(TextDedup.key("s", "old"), T0)
    dedup.commit(TextDedup.key("s", "fresh"), T0 + 29)
    assert len(dedup) == 2
    dedup.commit(TextDedup.key("s", "new"), T0 + 30)
    assert len(dedup) == 2  # "old" reached the window and went
    assert not dedup.is_duplicate(TextDedup.key("s", "old"), T0 + 30)


def test_pruning_follows_the_last_admission_order() -> None:
    dedup = TextDedup()
    k1, k2, k3 = (TextDedup.key("s", t) for t in ("1", "2", "3"))
    dedup.commit(k1, T0)
    dedup.commit(k2, T0 + 10)
    dedup.commit(k1, T0 + 35)  # readmitted: now the newest
    assert len(dedup) == 2
    dedup.commit(k3, T0 + 41)  # k2 (T0 + 10) is past the window; k1 (T0 + 35) is not
    assert len(dedup) == 2
    assert dedup.is_duplicate(k1, T0 + 41)
    assert not dedup.is_duplicate(k2, T0 + 41)


@pytest.mark.parametrize(("count", "size"), [(2, 2), (3, 3), (4, 3)])
def test_size_cap_override(count: int, size: int) -> None:
    dedup = TextDedup(max_entries=3)
    for index in range(count):
        dedup.commit(TextDedup.key("s", str(index)), T0)
    assert len(dedup) == size
    # At the cap the oldest goes even within the window.
    assert dedup.is_duplicate(TextDedup.key("s", "0"), T0) is (count <= 3)


@pytest.mark.parametrize(("count", "size"), [(511, 511), (512, 512), (513, 512)])
def test_default_size_cap_is_512(count: int, size: int) -> None:
    dedup = TextDedup()
    for index in range(count):
        dedup.commit(TextDedup.key("s", str(index)), T0)
    assert len(dedup) == size


@given(
    steps=st.lists(
        st.tuples(st.integers(0, 9), st.floats(min_value=0, max_value=20, allow_nan=False)),
        max_size=100,
    )
)
def test_pruning_keeps_the_bound_and_only_fresh_entries(steps: list[tuple[int, float]]) -> None:
    dedup = TextDedup(window_s=30.0, max_entries=4)
    now = T0
    last: dict[int, float] = {}
    for text, delta in steps:
        now += delta
        key = TextDedup.key("s", str(text))
        # The duplicate verdict is exactly "admitted less than 30 s ago", while remembered.
        if dedup.is_duplicate(key, now):
            assert now - last[text] < 30.0
        else:
            dedup.commit(key, now)
            last[text] = now
            # Pruning runs on commit: right after one, exactly the fresh entries remain, capped.
            fresh = sum(1 for stamp in last.values() if now - stamp < 30.0)
            assert len(dedup) == min(4, fresh)
        assert len(dedup) <= 4


# -- LifetimeBudget --------------------------------------------------------------------------------


def test_budget_starts_at_256() -> None:
    budget = LifetimeBudget()
    assert budget.remaining == budget.total == 256
    assert budget.can_spend()


@pytest.mark.parametrize(("spent", "can_spend"), [(255, True), (256, False)])
def test_budget_spends_down_to_zero(spent: int, can_spend: bool) -> None:
    budget = LifetimeBudget()
    for _ in range(spent):
        budget.spend()
    assert budget.remaining == 256 - spent
    assert budget.can_spend() is can_spend
    assert budget.total == 256


def test_spending_at_zero_raises_and_changes_nothing() -> None:
    budget = LifetimeBudget(units=1)
    budget.spend()
    with pytest.raises(RuntimeError):
        budget.spend()
    assert budget.remaining == 0
    assert not budget.can_spend()


def test_an_empty_budget_is_possible_and_never_refills() -> None:
    budget = LifetimeBudget(units=0)
    assert not budget.can_spend()
    with pytest.raises(RuntimeError):
        budget.spend()
    # No refill: the one way back is ``refund``, which a confirmed goal-scoped send uses to
    # give back the unit it spent, and it never lifts the budget above what it started with.
    public = {name for name in dir(budget) if not name.startswith("_")}
    assert public == {"can_spend", "refund", "remaining", "spend", "total"}
    budget.refund()
    assert budget.remaining == 0


def test_a_refund_returns_a_spent_unit_and_never_exceeds_the_total() -> None:
    budget = LifetimeBudget(units=2)
    budget.spend()
    budget.refund()
    assert budget.remaining == 2
    budget.refund()
    assert budget.remaining == 2
