"""The row states and their moves (security/rows.py): a table, checked as a total function.

The expected moves are written out here from spec §5 (resolution, queue, latch, resume, shutdown)
and goal-scoped-v1 §2.3 (revocation), independently of :data:`rows.TRANSITIONS`, so a wrong table
in the code cannot agree with itself.
"""

from __future__ import annotations

import itertools

import pytest

from pi_cross_session._internal.protocol.codes import (
    FINAL_ROW_STATES,
    PENDING_ROW_STATES,
    ROW_STATES,
)
from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.security.rows import (
    FINAL_STATES,
    PENDING_STATES,
    TRANSITIONS,
    Row,
    RowState,
    RowTable,
    RowTransitionError,
    may_move,
)

S = RowState

#: (from, to) pairs the contract allows; every other pair of distinct states is refused.
ALLOWED_MOVES = {
    # resolution at admission
    (S.ACCEPTED, S.SUBMITTED),
    (S.ACCEPTED, S.INJECTION_FAILED),
    (S.ACCEPTED, S.QUEUED),
    # the one flush after a safe settle
    (S.QUEUED, S.SUBMITTED),
    (S.QUEUED, S.INJECTION_FAILED),
    # what can end a queued message instead
    (S.QUEUED, S.EXPIRED),
    (S.QUEUED, S.DROPPED_CANCELLED),
    (S.QUEUED, S.DROPPED_USER_RESET),
    (S.QUEUED, S.DROPPED_SHUTDOWN),
    (S.QUEUED, S.DROPPED_GOAL_REVOKED),
}


def row(state: RowState, *, sender: str = "a" * 32, message_id: str = "m-1") -> Row:
    return Row(
        sender_instance_id=sender,
        sender_name="alice",
        message_id=message_id,
        summary="a summary",
        state=state,
        admitted_at_ms=1,
        updated_at_ms=1,
    )


def test_the_states_are_the_wire_vocabulary() -> None:
    assert set(RowState) == ROW_STATES
    assert PENDING_STATES == PENDING_ROW_STATES
    assert FINAL_STATES == FINAL_ROW_STATES
    assert all(isinstance(state, str) for state in RowState)


def test_the_table_is_total() -> None:
    assert set(TRANSITIONS) == set(RowState)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(RowState, RowState)))
def test_every_move_is_allowed_exactly_when_the_contract_allows_it(
    old: RowState, new: RowState
) -> None:
    expected = old == new or (old, new) in ALLOWED_MOVES
    assert may_move(old, new) is expected


def test_final_states_have_no_way_out_and_dropped_has_no_way_in() -> None:
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
    # The reference's unclaimed bridge: we refuse bridges before the commit.
    assert all(S.DROPPED not in moves for moves in TRANSITIONS.values())


@pytest.mark.parametrize("state", [s for s in RowState if s is not S.ACCEPTED])
def test_a_new_row_is_born_accepted(state: RowState) -> None:
    table = RowTable()
    with pytest.raises(RowTransitionError):
        table.put(row(state))
    assert len(table) == 0


#: Forbidden moves from every state a row can reach (``dropped`` it never reaches).
FORBIDDEN = [
    (old, new)
    for old, new in itertools.product(RowState, RowState)
    if old != new and (old, new) not in ALLOWED_MOVES and old is not S.DROPPED
]


@pytest.mark.parametrize(("old", "new"), FORBIDDEN)
def test_the_table_refuses_a_forbidden_move_and_keeps_the_row(old: RowState, new: RowState) -> None:
    table = RowTable()
    table.put(row(S.ACCEPTED))
    for step in _path_to(old):
        table.put(row(step))
    before = table.get(("a" * 32, "m-1"))
    with pytest.raises(RowTransitionError) as raised:
        table.put(row(new))
    assert isinstance(raised.value, LocalProtocolError)
    assert table.get(("a" * 32, "m-1")) == before


def test_a_final_row_may_change_its_diagnostic_not_its_state() -> None:
    table = RowTable()
    table.put(row(S.ACCEPTED))
    table.put(row(S.SUBMITTED))
    confirmed = Row(**{**_fields(row(S.SUBMITTED)), "diagnostic": "confirmed", "delivered": True})
    table.put(confirmed)
    assert table.get(confirmed.key) == confirmed


def _path_to(state: RowState) -> list[RowState]:
    """The moves from ``accepted`` to ``state`` (empty for ``accepted`` itself)."""
    if state is S.ACCEPTED:
        return []
    if (S.ACCEPTED, state) in ALLOWED_MOVES:
        return [state]
    return [S.QUEUED, state]


def _fields(value: Row) -> dict[str, object]:
    return {name: getattr(value, name) for name in Row.__dataclass_fields__}
