"""The endpoint's two fairness policies, as tables: who gives way to a newcomer, and how many bytes
each process may have read. Time is an argument; nothing here waits or opens a socket."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol import limits
from pi_cross_session._internal.protocol.fairness import ReadBudget, SheddingPolicy, Slot

T0 = 100.0
AFTER = limits.SHED_AFTER_S


def slots(*rows: tuple[int | None, float] | tuple[int | None, float, bool]) -> list[Slot]:
    """Open connections, oldest first: ``(pid, age in seconds[, answering])`` at ``T0``."""
    made = []
    for key, row in enumerate(rows):
        pid, age, *answering = row
        made.append(Slot(key, pid, T0 - age, bool(answering and answering[0])))
    return made


# Each case: the open connections (oldest first), how many the newcomer's process holds, and the
# key of the connection that gives way (None: the newcomer is refused, as the contract says).
CASES = [
    pytest.param([], 0, None, id="nothing-open"),
    pytest.param([(1, 0.1), (1, 0.1), (2, 0.1)], 0, 0, id="heaviest-process-oldest-first"),
    pytest.param([(2, 0.1), (1, 0.1), (1, 0.1)], 0, 1, id="heaviest-not-the-oldest-overall"),
    pytest.param([(1, 0.1), (2, 0.1)], 0, None, id="one-each-young-nobody"),
    pytest.param([(1, 0.1), (1, 0.1)], 1, None, id="newcomer-would-hold-as-many"),
    pytest.param([(1, 0.1), (1, 0.1), (1, 0.1)], 1, 0, id="holds-more-than-newcomer-would"),
    pytest.param([(1, 0.1), (1, 0.1), (1, 0.1)], 3, None, id="newcomer-is-the-heaviest"),
    pytest.param([(1, AFTER), (2, 0.1)], 0, 0, id="by-age-at-the-bound"),
    pytest.param([(1, AFTER - 0.01), (2, 0.1)], 0, None, id="by-age-just-below"),
    pytest.param([(1, AFTER + 1, True), (2, AFTER)], 0, 1, id="answering-never-by-age"),
    pytest.param([(1, 0.1, True), (1, 0.1, True), (2, 0.1)], 0, None, id="answering-never-fair"),
    pytest.param(
        [(1, 0.1, True), (1, 0.1), (1, 0.1, True), (2, 0.1)], 0, 1, id="heaviest-gives-what-it-can"
    ),
    pytest.param([(1, 0.1, True), (1, 0.1, True)], 0, None, id="all-answering"),
    pytest.param([(None, 0.1), (None, 0.1), (3, 0.1)], 0, 0, id="unknown-pids-count-as-one"),
    pytest.param([(None, 0.1), (None, 0.1)], 2, None, id="no-pids-newcomer-unknown-too"),
    pytest.param([(1, 0.1), (2, 0.1), (2, 0.1), (1, 0.1)], 0, 0, id="tie-goes-to-the-oldest"),
]


@pytest.mark.parametrize(("rows", "holds", "expected"), CASES)
def test_who_gives_way(
    rows: list[tuple[int | None, float]], holds: int, expected: int | None
) -> None:
    chosen = SheddingPolicy().victim(slots(*rows), newcomer_holds=holds, now=T0)
    assert (None if chosen is None else chosen.key) == expected


def test_the_age_bound_is_a_keyword_override() -> None:
    open_ = slots((1, 0.3), (2, 0.1))
    assert SheddingPolicy(shed_after_s=0.2).victim(open_, newcomer_holds=0, now=T0) == open_[0]
    assert SheddingPolicy(shed_after_s=0.4).victim(open_, newcomer_holds=0, now=T0) is None


ROW = st.tuples(st.sampled_from([1, 2, 3, None]), st.floats(0, 20), st.booleans())


@given(rows=st.lists(ROW, max_size=12), holds=st.integers(0, 12))
def test_never_an_answering_connection_and_never_the_newcomers_lighter_rival(
    rows: list[tuple[int | None, float, bool]], holds: int
) -> None:
    """Whatever is open, the one chosen is never being answered; and when it is chosen for
    fairness (young), its process holds more than the newcomer's would."""
    open_ = slots(*rows)
    chosen = SheddingPolicy().victim(open_, newcomer_holds=holds, now=T0)
    if chosen is None:
        return
    assert not chosen.answering
    if T0 - chosen.opened_at < AFTER:
        assert sum(1 for slot in open_ if slot.pid == chosen.pid) > holds + 1


# -- ReadBudget ------------------------------------------------------------------------------------


def test_the_defaults_fit_an_honest_burst_and_more_than_admission_takes() -> None:
    budget = ReadBudget()
    assert budget.burst == limits.PEER_READ_BURST_BYTES >= 2 * limits.MAX_FRAME_BYTES
    assert budget.per_s == limits.PEER_READ_BYTES_PER_S
    # Admission takes at most RATE_REFILL_PER_S messages a second from a sender in the long run.
    assert budget.per_s >= 2 * limits.RATE_REFILL_PER_S * limits.MAX_FRAME_BYTES
    # A hello and two full frames back to back: never a wait.
    for _ in range(2):
        budget.charge(7, limits.MAX_FRAME_BYTES, T0)
    budget.charge(7, 60_000, T0)
    assert budget.delay(7, T0) == 0.0


@pytest.mark.parametrize(("read", "delay"), [(99, 0.0), (100, 0.0), (101, 0.1), (150, 5.0)])
def test_a_process_in_debt_waits_until_it_has_paid(read: int, delay: float) -> None:
    budget = ReadBudget(burst=100, per_s=10)
    budget.charge(1, read, T0)
    assert budget.delay(1, T0) == pytest.approx(delay)
    assert budget.delay(2, T0) == 0.0  # another process is read at once
    assert budget.delay(1, T0 + delay + 1e-9) == 0.0


def test_refill_is_capped_at_the_burst() -> None:
    budget = ReadBudget(burst=100, per_s=10)
    budget.charge(1, 100, T0)
    assert budget.tokens(1, T0 + 5) == 50
    assert budget.tokens(1, T0 + 60) == 100
    budget.charge(1, 120, T0 + 60)
    assert budget.delay(1, T0 + 60) == pytest.approx(2.0)


def test_connections_without_a_pid_share_one_budget() -> None:
    budget = ReadBudget(burst=100, per_s=10)
    budget.charge(None, 80, T0)
    budget.charge(None, 40, T0)
    assert budget.delay(None, T0) == pytest.approx(2.0)


def test_a_full_bucket_is_forgotten_and_the_table_is_bounded() -> None:
    budget = ReadBudget(burst=100, per_s=10, max_peers=3)
    budget.charge(1, 0, T0)
    assert len(budget) == 0  # nothing spent: nothing to remember
    for pid in (1, 2, 3):
        budget.charge(pid, 50 + pid, T0)
    assert len(budget) == 3
    budget.charge(4, 90, T0)
    assert len(budget) == 3
    # The fullest (pid 1, 49 left) was forgotten; the deepest debts are kept.
    assert budget.tokens(1, T0) == 100
    assert budget.tokens(4, T0) == 10
    # Refilled entries make room before anyone in debt is forgotten.
    budget.charge(5, 10, T0 + 100)
    assert budget.tokens(4, T0 + 100) == 100
    assert len(budget) <= 3


@given(reads=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500), st.floats(0, 2))))
def test_a_process_never_gets_more_than_its_burst_plus_its_rate(
    reads: list[tuple[int, int, float]],
) -> None:
    """Reading only when allowed, no process is read more than ``burst + per_s * t`` plus one
    read past the line (reads are charged after they happen)."""
    budget = ReadBudget(burst=1_000, per_s=100, max_peers=64)
    now = T0
    taken: dict[int, int] = {}
    for pid, nbytes, step in reads:
        now += step
        if budget.delay(pid, now) > 0:
            continue
        budget.charge(pid, nbytes, now)
        taken[pid] = taken.get(pid, 0) + nbytes
        assert taken[pid] <= 1_000 + 100 * (now - T0) + 500


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ReadBudget(burst=0)
    with pytest.raises(ValueError, match="positive"):
        ReadBudget(per_s=0)
