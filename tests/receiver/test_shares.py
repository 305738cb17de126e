"""SenderShares: which key of a bounded, shared table goes to make room (security/shares.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.security.shares import SenderShares
from tests.hypothesis_profiles import scaled


def filled(*holdings: tuple[str, int]) -> SenderShares[str]:
    """A table where each named sender holds keys ``<name>0``, ``<name>1`` … in that order."""
    shares: SenderShares[str] = SenderShares()
    for owner, count in holdings:
        for n in range(count):
            shares.add(owner, f"{owner}{n}")
    return shares


def test_an_empty_table_has_no_victim() -> None:
    shares: SenderShares[str] = SenderShares()
    assert shares.victim("a") is None
    assert len(shares) == 0
    assert shares.held_by("a") == 0


def test_a_sender_holding_keys_gives_up_its_own_oldest() -> None:
    shares = filled(("big", 9), ("a", 2))
    assert shares.victim("a") == "a0"


def test_a_sender_holding_none_takes_the_largest_holders_oldest() -> None:
    shares = filled(("a", 2), ("big", 9), ("b", 1))
    assert shares.victim("newcomer") == "big0"


def test_among_equal_holders_the_longest_unchanged_gives_its_oldest_and_they_take_turns() -> None:
    shares = filled(("a", 1), ("b", 2), ("c", 2))
    shares.add("a", "a1")  # a, b and c now hold 2 each; b reached 2 first, a last
    assert shares.victim("newcomer") == "b0"
    shares.add("b", "b0")  # b0 is b's newest again; b's count did not change
    assert shares.victim("newcomer") == "b1"
    shares.remove("b1")  # b drops to 1: c and a are the largest now, c first
    assert shares.victim("newcomer") == "c0"
    shares.remove("c0")
    assert shares.victim("newcomer") == "a0"
    shares.remove("a0")  # everyone holds 1: b went down first, so b gives next
    assert shares.victim("newcomer") == "b0"


def test_spared_keys_are_never_picked() -> None:
    shares = filled(("a", 1), ("big", 3))
    assert shares.victim("a", spare={"a0"}) == "big0"  # a holds nothing else it may give up
    assert shares.victim("newcomer", spare={"big0"}) == "big1"
    assert shares.victim("newcomer", spare={"big0", "big1", "big2"}) == "a0"
    assert shares.victim("a", spare={"a0", "big0", "big1", "big2"}) is None


def test_adding_a_held_key_makes_it_the_owners_newest() -> None:
    shares = filled(("a", 3))
    shares.add("a", "a0")
    assert shares.victim("a") == "a1"
    assert shares.held_by("a") == 3
    assert len(shares) == 3


def test_a_key_added_by_another_owner_changes_hands() -> None:
    shares = filled(("a", 2))
    shares.add("b", "a1")
    assert (shares.owner_of("a1"), shares.held_by("a"), shares.held_by("b")) == ("b", 1, 1)


def test_remove_forgets_and_ignores_what_is_not_held() -> None:
    shares = filled(("a", 1), ("b", 1))
    shares.remove("a0")
    shares.remove("a0")
    shares.remove("never")
    assert "a0" not in shares
    assert list(shares) == ["b0"]
    assert shares.held_by("a") == 0
    assert shares.victim("newcomer") == "b0"


def test_make_room_evicts_by_the_rule_down_to_the_bound() -> None:
    shares = filled(("big", 4), ("a", 1))
    shares.add("newcomer", "x")
    assert shares.make_room(4, "newcomer", spare={"x"}) == ["big0", "big1"]
    assert len(shares) == 4
    assert shares.make_room(0, "a", spare=set(shares)) == []  # only spared keys left


#: One operation: an owner (0..5) adds a new key, or re-adds one of its keys; then the table is
#: trimmed to its bound with the rule, as a table using it does.
OPS = st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=150)
BOUND = 10


@settings(max_examples=scaled(400))
@given(ops=OPS)
def test_the_rule_in_any_sequence(ops: list[tuple[int, bool]]) -> None:
    shares: SenderShares[str] = SenderShares()
    model: dict[str, list[str]] = {}  # each owner's keys, oldest first
    changed: dict[str, int] = {}  # when each owner's count last changed
    serial = 0
    for step, (who, again) in enumerate(ops):
        owner = f"o{who}"
        mine = model.setdefault(owner, [])
        if again and mine:
            key = mine[0]
        else:
            serial += 1
            key = f"{owner}-{serial}"
            changed[owner] = 2 * step
        held_other = [k for k in mine if k != key]
        counts = {o: len(keys) for o, keys in model.items() if keys}
        shares.add(owner, key)
        model[owner] = [*held_other, key]
        while len(shares) > BOUND:
            victim = shares.victim(owner, spare=(key,))
            assert victim is not None
            assert victim != key
            loser = shares.owner_of(victim)
            assert loser is not None
            if held_other:
                # A sender holding keys only ever gives up its own, oldest first.
                assert (loser, victim) == (owner, model[owner][0])
            else:
                # A newcomer takes the oldest key of a largest holder, the one whose count
                # changed least recently among equals.
                most = max(n for o, n in counts.items() if o != owner)
                largest = [o for o, n in counts.items() if o != owner and n == most]
                assert loser == min(largest, key=changed.__getitem__)
                assert victim == model[loser][0]
                # So a holder of ``most`` keys loses one only while every other holder has at
                # most as many: at least BOUND / most senders hold keys.
                holders = [o for o, n in counts.items() if o != owner]
                assert len(holders) * most >= BOUND
            shares.remove(victim)
            model[loser].remove(victim)
            changed[loser] = 2 * step + 1
        assert len(shares) <= BOUND
        assert key in shares
        for name, keys in model.items():
            assert shares.held_by(name) == len(keys)
