"""Fair shares of a gateway's proxy slots (security/remote/proxy_shares.py): who gets a proxy
when the cap is reached, and whose proxy closes for it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.security.remote.proxy_shares import Decision, ProxyShares, Verdict
from tests.hypothesis_profiles import scaled


def test_a_machine_gets_a_proxy_while_the_cap_is_not_reached() -> None:
    shares = ProxyShares(cap=4, machines=2)
    # Below the cap anyone may take a free slot, even far beyond its share.
    assert shares.decide("a", {"a": 3}) == Decision(Verdict.OPEN)
    assert shares.decide("b", {}) == Decision(Verdict.OPEN)


@pytest.mark.parametrize("held_by_b", [2, 3])
def test_a_machine_at_or_above_its_share_gets_none_when_full(held_by_b: int) -> None:
    shares = ProxyShares(cap=5, machines=2)
    assert shares.share == 2
    assert shares.decide("b", {"a": 5 - held_by_b, "b": held_by_b}) == Decision(Verdict.FULL)


def test_a_machine_below_its_share_takes_a_slot_from_the_one_furthest_above() -> None:
    shares = ProxyShares(cap=9, machines=3)
    held = {"a": 4, "b": 5, "c": 0}
    assert shares.decide("c", held) == Decision(Verdict.EVICT, "b")
    # Level ones: the choice is still one of them, and the same every time.
    level = {"a": 4, "b": 4, "c": 1}
    first = shares.decide("c", level)
    assert first.verdict is Verdict.EVICT
    assert first.victim in ("a", "b")
    assert shares.decide("c", dict(reversed(level.items()))) == first


def test_a_machine_at_its_share_is_never_the_victim() -> None:
    shares = ProxyShares(cap=6, machines=3)
    decision = shares.decide("c", {"a": 2, "b": 3, "c": 1})
    assert decision == Decision(Verdict.EVICT, "b")


def test_no_machine_at_its_share_is_the_victim_even_when_the_count_of_machines_is_off() -> None:
    """Should proxies of more machines be held than the shares were cut for, the newcomer goes
    without rather than push a machine below its guaranteed share."""
    shares = ProxyShares(cap=4, machines=2)
    assert shares.decide("b", {"a": 2, "b": 1, "c": 1}) == Decision(Verdict.FULL)


def test_a_new_machine_not_yet_holding_anything_is_below_its_share() -> None:
    shares = ProxyShares(cap=2, machines=2)
    assert shares.decide("b", {"a": 2}) == Decision(Verdict.EVICT, "a")


def test_the_share_is_the_cap_split_evenly() -> None:
    assert ProxyShares(cap=128, machines=3).share == 42
    assert ProxyShares(cap=128, machines=0).share == 128
    assert ProxyShares(cap=2, machines=5).share == 0
    # A share of nothing: a full cap gives nobody a proxy by eviction.
    assert ProxyShares(cap=2, machines=5).decide("e", {"a": 2}) == Decision(Verdict.FULL)
    assert ProxyShares(cap=0, machines=1).decide("a", {}) == Decision(Verdict.FULL)


def test_the_cap_is_never_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        ProxyShares(cap=-1, machines=1)


@settings(max_examples=scaled(300))
@given(
    cap=st.integers(0, 24),
    machines=st.integers(1, 5),
    data=st.data(),
)
def test_arrivals_never_exceed_the_cap_and_every_machine_keeps_its_share(
    cap: int, machines: int, data: st.DataObject
) -> None:
    names = [f"m{n}" for n in range(machines)]
    arrivals = data.draw(st.lists(st.sampled_from(names), max_size=4 * cap + 8))
    shares = ProxyShares(cap=cap, machines=machines)
    held: Counter[str] = Counter()
    for machine in arrivals:
        decision = shares.decide(machine, dict(held))
        if decision.verdict is Verdict.OPEN:
            assert decision.victim is None
            held[machine] += 1
        elif decision.verdict is Verdict.EVICT:
            victim = decision.victim
            assert victim is not None
            assert victim != machine
            assert held[victim] > shares.share
            assert held[machine] < shares.share
            held[victim] -= 1
            held[machine] += 1
        else:
            assert decision.victim is None
            assert held[machine] >= shares.share
            assert held.total() == cap
        assert held.total() <= cap
    wanted = Counter(arrivals)
    for machine in names:
        assert held[machine] >= min(wanted[machine], shares.share)
        if wanted[machine] <= shares.share:
            assert held[machine] == wanted[machine]
