"""Goal-scoped grants (goal-scoped-v1 §1, goal-scoped-v1 §2.4, goal-scoped-v1 §3 steps 6-7),
one rule per test.

The authorization matrix is written out here row by row from the spec's table, independently of
:data:`goals.ALLOWED`, so a wrong table in the code cannot agree with itself.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.security.goals import (
    ALLOWED,
    LOCAL_COMMAND,
    NO_GOAL,
    REFUSED_PAIRS,
    TASK_OWNERSHIP_NOTE,
    TRANSITIONS,
    USER_TURN,
    Action,
    Authority,
    AuthorityClass,
    AuthorityKind,
    GoalConfirmations,
    GoalError,
    GoalErrorCode,
    Goals,
    GoalState,
    GoalStatus,
    Member,
    Reservation,
    RevokeReason,
    Scope,
    TaskHandle,
    TaskKind,
    bounds,
    is_allowed,
)

OWNER = Scope(session_id="session-owner", instance_id="f" * 32, cwd="/home/dev/project")
ALICE = Member("a" * 32, "session-alice")
BOB = Member("b" * 32, "session-bob")
#: Alice's session after a restart: same session id, new runtime id.
ALICE_RESTARTED = Member("c" * 32, "session-alice")
#: Another session reusing Alice's runtime id (impossible in practice, but the pair is the key).
ALICE_IMPOSTOR = Member("a" * 32, "session-other")
RUN = TaskHandle(TaskKind.RUN, "run-1")
AGENT = TaskHandle(TaskKind.AGENT, "agent_1")


def counter_ids() -> Callable[[], str]:
    numbers = itertools.count(1)
    return lambda: f"goal-{next(numbers)}"


def make(**overrides: int) -> Goals:
    return Goals(OWNER, new_id=counter_ids(), **overrides)


def started(objective: str = "ship the parser", **overrides: int) -> tuple[Goals, str]:
    goals = make(**overrides)
    status = goals.start(objective, authority=USER_TURN)
    assert status.goal_id is not None
    return goals, status.goal_id


def peer_turn(goal_id: str | None, member: Member = ALICE, *, cancelled: bool = False) -> Authority:
    return Authority(
        AuthorityKind.PEER_TURN,
        cancelled=cancelled,
        goal_id=goal_id,
        sender=(member.instance_id, member.session_id),
    )


def notification(*goal_ids: str, cancelled: bool = False) -> Authority:
    return Authority(
        AuthorityKind.NOTIFICATION, cancelled=cancelled, notification_goals=frozenset(goal_ids)
    )


def raises(code: GoalErrorCode) -> pytest.RaisesExc[GoalError]:
    return pytest.raises(GoalError, match=f"^{re.escape(code.value)}: ")


# -- authorities, by name: each builds the authority against a goal with id ``gid`` ---------------

AUTHORITIES: dict[str, Callable[[str], Authority]] = {
    "local command": lambda gid: LOCAL_COMMAND,
    "user turn": lambda gid: USER_TURN,
    "unscoped notification": lambda gid: notification(),
    "scoped notification": lambda gid: notification(gid),
    "bound peer, this goal": lambda gid: peer_turn(gid),
    "bound peer, no goal id": lambda gid: peer_turn(None),
    "bound peer, other goal id": lambda gid: peer_turn("goal-999"),
    "restarted peer": lambda gid: peer_turn(gid, ALICE_RESTARTED),
    "impostor session": lambda gid: peer_turn(gid, ALICE_IMPOSTOR),
    "notification of an old goal": lambda gid: notification("goal-999"),
    "notification of two goals": lambda gid: notification(gid, "goal-999"),
    "unknown turn": lambda gid: Authority(AuthorityKind.UNKNOWN),
    "cancelled user turn": lambda gid: Authority(AuthorityKind.USER_TURN, cancelled=True),
    "cancelled unscoped notification": lambda gid: notification(cancelled=True),
    "cancelled bound peer": lambda gid: peer_turn(gid, cancelled=True),
    "cancelled scoped notification": lambda gid: notification(gid, cancelled=True),
}
LOCAL_USER = {"local command", "user turn"}
LOCAL = LOCAL_USER | {"unscoped notification"}
SCOPED = {"scoped notification", "bound peer, this goal"}


def bound_goal() -> tuple[Goals, str]:
    goals, gid = started()
    goals.bind(gid, [ALICE], authority=USER_TURN)
    return goals, gid


def check_row(
    name: str, allowed: set[str], attempt: Callable[[Goals, str, Authority], object]
) -> None:
    goals, gid = bound_goal()
    authority = AUTHORITIES[name](gid)
    if name in allowed:
        attempt(goals, gid, authority)
    else:
        before = goals.status()
        with raises(GoalErrorCode.NOT_AUTHORIZED):
            attempt(goals, gid, authority)
        assert goals.status() == before


# -- goal-scoped-v1 §1.3, one test per row of the "who may call each action" table -----------------


@pytest.mark.parametrize("name", sorted(AUTHORITIES))
def test_start_only_a_genuine_local_user_turn(name: str) -> None:
    goals = make()
    authority = AUTHORITIES[name]("goal-1")
    if name in LOCAL_USER:
        assert goals.start("objective", authority=authority).goal_id == "goal-1"
    else:
        with raises(GoalErrorCode.NOT_AUTHORIZED):
            goals.start("objective", authority=authority)
        assert goals.state is GoalState.NONE


@pytest.mark.parametrize("name", sorted(AUTHORITIES))
def test_bind_local_user_or_unscoped_notification(name: str) -> None:
    check_row(name, LOCAL, lambda g, gid, a: g.bind(gid, [BOB], authority=a))


@pytest.mark.parametrize("name", sorted(AUTHORITIES))
def test_unbind_local_authority(name: str) -> None:
    check_row(name, LOCAL, lambda g, gid, a: g.unbind(gid, [BOB.instance_id], authority=a))


@pytest.mark.parametrize("name", sorted(AUTHORITIES))
def test_complete_local_or_scoped_to_this_goal(name: str) -> None:
    check_row(name, LOCAL | SCOPED, lambda g, gid, a: g.complete(gid, authority=a))


@pytest.mark.parametrize("name", sorted(AUTHORITIES))
def test_cancel_local_only(name: str) -> None:
    check_row(name, LOCAL, lambda g, gid, a: g.cancel(gid, authority=a))


@pytest.mark.parametrize("name", sorted(AUTHORITIES))
def test_status_anyone_any_state(name: str) -> None:
    goals, gid = bound_goal()
    assert goals.status().goal_id == gid  # no authority taken at all
    assert goals.classify(AUTHORITIES[name](gid)) in set(AuthorityClass)
    assert is_allowed(Action.STATUS, goals.classify(AUTHORITIES[name](gid)))


def test_allowed_table_matches_spec() -> None:
    assert ALLOWED[Action.START] == {AuthorityClass.LOCAL_USER}
    local = {AuthorityClass.LOCAL_USER, AuthorityClass.LOCAL_NOTIFICATION}
    assert ALLOWED[Action.BIND] == local
    assert ALLOWED[Action.UNBIND] == local
    assert ALLOWED[Action.CANCEL] == local
    assert ALLOWED[Action.COMPLETE] == local | {AuthorityClass.GOAL_SCOPED}
    assert ALLOWED[Action.STATUS] == set(AuthorityClass)


@given(st.sampled_from(Action), st.sampled_from(AuthorityClass))
def test_authorization_is_a_total_function(action: Action, cls: AuthorityClass) -> None:
    assert is_allowed(action, cls) in (True, False)
    if cls is AuthorityClass.OTHER:
        assert is_allowed(action, cls) is (action is Action.STATUS)


@given(st.sampled_from(GoalState), st.sampled_from(Action))
def test_transition_table_is_total(state: GoalState, action: Action) -> None:
    # Every pair either moves the machine or is refused with a named code; never both, never none.
    assert ((state, action) in TRANSITIONS) != ((state, action) in REFUSED_PAIRS)


# -- start ------------------------------------------------------------------------------------


def test_start_stores_the_objective_js_trimmed() -> None:
    goals, _ = started("\ufeff\u3000 ship it \n")
    assert goals.objective == "ship it"


@pytest.mark.parametrize("objective", ["", " ", "\ufeff\u2028\t", "ok\ud800"])
def test_start_refuses_blank_or_ill_formed_objectives(objective: str) -> None:
    goals = make()
    with raises(GoalErrorCode.INVALID):
        goals.start(objective, authority=USER_TURN)
    assert goals.state is GoalState.NONE


@pytest.mark.parametrize(
    ("objective", "ok"),
    [
        ("x" * (bounds.MAX_GOAL_OBJECTIVE_UNITS - 1), True),
        ("x" * bounds.MAX_GOAL_OBJECTIVE_UNITS, True),
        ("x" * (bounds.MAX_GOAL_OBJECTIVE_UNITS + 1), False),
        # UTF-16 units: an astral character counts two.
        ("\U0001f600" * (bounds.MAX_GOAL_OBJECTIVE_UNITS // 2), True),
        ("\U0001f600" * (bounds.MAX_GOAL_OBJECTIVE_UNITS // 2) + "x", False),
        # The raw parameter is bounded (the reference's schema runs before its trim).
        (" " + "x" * bounds.MAX_GOAL_OBJECTIVE_UNITS, False),
    ],
)
def test_objective_bound_in_utf16_units(objective: str, ok: bool) -> None:
    goals = make()
    if ok:
        goals.start(objective, authority=USER_TURN)
        assert goals.objective == objective
    else:
        with raises(GoalErrorCode.INVALID):
            goals.start(objective, authority=USER_TURN)


def test_objective_bound_is_overridable() -> None:
    goals = make(max_objective_units=3)
    with raises(GoalErrorCode.INVALID):
        goals.start("abcd", authority=USER_TURN)
    goals.start("abc", authority=USER_TURN)


def test_only_one_active_goal() -> None:
    goals, gid = started()
    with raises(GoalErrorCode.ALREADY_ACTIVE):
        goals.start("another", authority=USER_TURN)
    assert goals.active_id == gid
    assert goals.objective == "ship the parser"


def test_default_goal_ids_are_uuid4() -> None:
    goals = Goals(OWNER)
    gid = goals.start("objective", authority=USER_TURN).goal_id
    assert gid is not None
    parsed = uuid.UUID(gid)
    assert parsed.version == 4
    assert str(parsed) == gid  # 36 lowercase characters


def test_a_new_goal_after_the_end_gets_a_new_id() -> None:
    goals, first = started()
    goals.complete(first, authority=USER_TURN)
    second = goals.start("next", authority=USER_TURN).goal_id
    assert second not in (None, first)


def test_an_ended_id_is_never_minted_again() -> None:
    goals = Goals(OWNER, new_id=lambda: "goal-same")
    goals.start("one", authority=USER_TURN)
    goals.cancel("goal-same", authority=USER_TURN)
    with raises(GoalErrorCode.INVALID):
        goals.start("two", authority=USER_TURN)
    assert goals.state is GoalState.NONE


def test_a_malformed_minted_id_is_refused() -> None:
    goals = Goals(OWNER, new_id=lambda: "not a valid id")
    with raises(GoalErrorCode.INVALID):
        goals.start("one", authority=USER_TURN)
    assert goals.state is GoalState.NONE


# -- bind / unbind and membership (goal-scoped-v1 §1.3 steps, goal-scoped-v1 §1.5) -------------


def test_bind_records_the_exact_pair() -> None:
    goals, gid = bound_goal()
    assert goals.is_member(gid, ALICE.instance_id, ALICE.session_id)
    assert goals.members == (ALICE,)
    assert goals.status().peer_ids == (ALICE.instance_id,)


def test_restarted_peer_is_not_a_member() -> None:
    goals, gid = bound_goal()
    assert not goals.is_member(gid, ALICE_RESTARTED.instance_id, ALICE_RESTARTED.session_id)


def test_other_session_with_a_bound_instance_id_is_not_a_member() -> None:
    goals, gid = bound_goal()
    assert not goals.is_member(gid, ALICE_IMPOSTOR.instance_id, ALICE_IMPOSTOR.session_id)


def test_wrong_goal_id_is_not_membership() -> None:
    goals, _ = bound_goal()
    assert not goals.is_member("goal-999", ALICE.instance_id, ALICE.session_id)


def test_bind_requires_the_exact_active_goal_id() -> None:
    goals, _ = started()
    with raises(GoalErrorCode.INVALID):
        goals.bind("goal-999", [ALICE], authority=USER_TURN)
    assert goals.members == ()


@pytest.mark.parametrize("action", ["bind", "unbind", "complete", "cancel"])
def test_actions_without_a_goal_are_invalid(action: str) -> None:
    goals = make()
    with raises(GoalErrorCode.INVALID):
        if action == "bind":
            goals.bind("goal-1", [ALICE], authority=USER_TURN)
        elif action == "unbind":
            goals.unbind("goal-1", [ALICE.instance_id], authority=USER_TURN)
        elif action == "complete":
            goals.complete("goal-1", authority=USER_TURN)
        else:
            goals.cancel("goal-1", authority=USER_TURN)


def test_bind_needs_something_to_bind() -> None:
    goals, gid = started()
    with raises(GoalErrorCode.INVALID):
        goals.bind(gid, [], authority=USER_TURN)


@pytest.mark.parametrize(
    "member",
    [
        Member("A" * 32, "s"),
        Member("a" * 31, "s"),
        Member("a" * 32, ""),
        Member("a" * 32, "\udc00"),
    ],
)
def test_bind_refuses_malformed_peers_atomically(member: Member) -> None:
    goals, gid = started()
    with raises(GoalErrorCode.INVALID):
        goals.bind(gid, [ALICE, member], authority=USER_TURN)
    assert goals.members == ()


def test_rebinding_records_the_session_seen_now() -> None:
    goals, gid = bound_goal()
    goals.bind(gid, [ALICE_IMPOSTOR], authority=USER_TURN)
    assert goals.is_member(gid, ALICE_IMPOSTOR.instance_id, ALICE_IMPOSTOR.session_id)
    assert not goals.is_member(gid, ALICE.instance_id, ALICE.session_id)
    assert len(goals.members) == 1


def peers(count: int, start: int = 0) -> list[Member]:
    return [Member(f"{i:032x}", f"session-{i}") for i in range(start, start + count)]


@pytest.mark.parametrize(
    ("count", "ok"),
    [(bounds.MAX_GOAL_PEERS - 1, True), (bounds.MAX_GOAL_PEERS, True)],
)
def test_peer_bound_in_one_call(count: int, ok: bool) -> None:
    goals, gid = started()
    goals.bind(gid, peers(count), authority=USER_TURN)
    assert len(goals.members) == count


def test_one_call_with_65_peers_is_invalid() -> None:
    goals, gid = started()
    with raises(GoalErrorCode.INVALID):
        goals.bind(gid, peers(bounds.MAX_GOAL_PEERS + 1), authority=USER_TURN)
    assert goals.members == ()


@pytest.mark.parametrize(
    ("extra", "ok"),
    [(3, True), (4, True), (5, False)],
)
def test_peer_bound_over_the_union(extra: int, ok: bool) -> None:
    goals, gid = started()
    goals.bind(gid, peers(bounds.MAX_GOAL_PEERS - 4), authority=USER_TURN)
    # Re-binding a present peer does not count twice.
    batch = [*peers(1), *peers(extra, start=1000)]
    if ok:
        goals.bind(gid, batch, authority=USER_TURN)
        assert len(goals.members) == bounds.MAX_GOAL_PEERS - 4 + extra
    else:
        with raises(GoalErrorCode.TOO_MANY_PEERS):
            goals.bind(gid, batch, authority=USER_TURN)
        assert len(goals.members) == bounds.MAX_GOAL_PEERS - 4


def test_unbind_removes_and_ignores_unknown_ids() -> None:
    goals, gid = bound_goal()
    goals.bind(gid, [BOB], authority=USER_TURN)
    goals.unbind(gid, [ALICE.instance_id, "d" * 32], authority=USER_TURN)
    assert goals.members == (BOB,)
    assert not goals.is_member(gid, ALICE.instance_id, ALICE.session_id)


@pytest.mark.parametrize("ids", [[], ["not-hex"], ["a" * 32] * (bounds.MAX_GOAL_PEERS + 1)])
def test_unbind_refuses_bad_lists(ids: list[str]) -> None:
    goals, gid = bound_goal()
    with raises(GoalErrorCode.INVALID):
        goals.unbind(gid, ids, authority=USER_TURN)
    assert goals.members == (ALICE,)


def test_unbind_keeps_task_ownership() -> None:
    goals, gid = bound_goal()
    goals.bind(gid, tasks=[RUN], authority=USER_TURN)
    goals.unbind(gid, [ALICE.instance_id], authority=USER_TURN)
    assert goals.owner_of(RUN) == gid


# -- ending a goal (goal-scoped-v1 §1.6) -----------------------------------------------------------


def test_bound_peer_can_complete_and_then_loses_everything() -> None:
    goals, gid = bound_goal()
    assert goals.complete(gid, authority=peer_turn(gid)) == gid
    assert goals.status() == NO_GOAL
    assert not goals.is_member(gid, ALICE.instance_id, ALICE.session_id)
    assert goals.classify(peer_turn(gid)) is AuthorityClass.OTHER
    with raises(GoalErrorCode.INVALID):
        goals.complete(gid, authority=USER_TURN)


def test_complete_requires_the_exact_goal_id() -> None:
    goals, gid = bound_goal()
    with raises(GoalErrorCode.INVALID):
        goals.complete(gid + "x", authority=USER_TURN)
    assert goals.active_id == gid


def test_scoped_peer_cannot_cancel() -> None:
    goals, gid = bound_goal()
    with raises(GoalErrorCode.NOT_AUTHORIZED):
        goals.cancel(gid, authority=peer_turn(gid))
    assert goals.active_id == gid


@pytest.mark.parametrize("reason", list(RevokeReason))
def test_revoke_is_final_and_reports_the_id(reason: RevokeReason) -> None:
    goals, gid = bound_goal()
    assert goals.revoke(reason) == gid
    assert goals.revoke(reason) is None
    assert goals.status().as_dict() == {"goalId": None}
    assert goals.members == ()


def test_objective_is_immutable() -> None:
    goals, gid = started("first")
    goals.bind(gid, [ALICE], authority=USER_TURN)
    goals.unbind(gid, [ALICE.instance_id], authority=USER_TURN)
    assert goals.objective == "first"
    assert not hasattr(Goals, "set_objective")


def test_ended_ids_are_remembered_within_a_bound() -> None:
    # The id source mints goal-1, goal-2, goal-3, then repeats each: only the two ids still
    # remembered as ended are refused.
    minted = iter(["goal-1", "goal-2", "goal-3", "goal-2", "goal-3", "goal-1"])
    goals = Goals(OWNER, new_id=lambda: next(minted), max_ended=2)
    for _ in range(3):
        gid = goals.start("x", authority=USER_TURN).goal_id
        assert gid is not None
        goals.cancel(gid, authority=USER_TURN)
    with raises(GoalErrorCode.INVALID):
        goals.start("again", authority=USER_TURN)
    with raises(GoalErrorCode.INVALID):
        goals.start("again", authority=USER_TURN)
    assert goals.start("again", authority=USER_TURN).goal_id == "goal-1"


# -- status (goal-scoped-v1 §1.1) ------------------------------------------------------------------


def test_status_shape_with_a_goal() -> None:
    goals, gid = bound_goal()
    view = goals.status()
    assert isinstance(view, GoalStatus)
    assert view.as_dict() == {
        "goalId": gid,
        "objective": "ship the parser",
        "owner": {"sessionId": OWNER.session_id, "instanceId": OWNER.instance_id, "cwd": OWNER.cwd},
        "peerIds": [ALICE.instance_id],
        "taskOwnership": TASK_OWNERSHIP_NOTE,
    }


def test_status_snapshot_is_immutable_and_detached() -> None:
    goals, gid = bound_goal()
    view = goals.status()
    goals.bind(gid, [BOB], authority=USER_TURN)
    assert view.peer_ids == (ALICE.instance_id,)
    with pytest.raises(AttributeError):
        view.goal_id = "x"  # type: ignore[misc]


# -- task ownership evidence (goal-scoped-v1 §3 steps 6-7) -----------------------------------------


def test_no_goal_no_note() -> None:
    goals = make()
    assert goals.note_call("call-1") is None
    assert goals.settle_call("call-1", RUN) is None
    assert goals.owner_of(RUN) is None


def test_late_result_after_revoke_is_still_attributed() -> None:
    goals, gid = started()
    goals.note_call("call-1")
    goals.revoke(RevokeReason.LATCH)
    assert goals.settle_call("call-1", AGENT) == gid
    # A new goal cannot claim it, and its notifications are not scoped to the new goal.
    new = goals.start("new", authority=USER_TURN).goal_id
    assert new is not None
    assert goals.attribute(AGENT, new) == gid
    with raises(GoalErrorCode.TASK_OWNED):
        goals.bind(new, [ALICE], tasks=[AGENT], authority=USER_TURN)
    assert goals.members == ()  # tasks are checked first: no peer was added
    assert goals.classify(notification(gid)) is AuthorityClass.OTHER


def test_bind_an_unowned_task() -> None:
    goals, gid = started()
    goals.bind(gid, tasks=[RUN, AGENT], authority=USER_TURN)
    assert goals.owner_of(RUN) == goals.owner_of(AGENT) == gid


def test_malformed_task_handle() -> None:
    goals, gid = started()
    with raises(GoalErrorCode.INVALID):
        goals.attribute(TaskHandle(TaskKind.RUN, "bad id"), gid)


def test_export_import_round_trip_never_grants() -> None:
    goals, gid = started()
    goals.attribute(RUN, gid)
    goals.attribute(AGENT, gid)
    data = goals.export_evidence()
    assert data == (
        {"kind": "run", "id": "run-1", "goalId": gid, "confirmed": True},
        {"kind": "agent", "id": "agent_1", "goalId": gid, "confirmed": True},
    )
    goals.revoke(RevokeReason.RELOAD)

    reloaded = Goals(OWNER, new_id=lambda: gid)  # even an id source repeating the old id
    result = reloaded.import_evidence(data)
    assert (result.imported, result.rejected) == (2, 0)
    assert reloaded.export_evidence() == data
    assert reloaded.status() == NO_GOAL
    assert reloaded.owner_of(RUN) == gid
    assert reloaded.classify(notification(gid)) is AuthorityClass.OTHER
    with raises(GoalErrorCode.INVALID):
        reloaded.start("resume the old goal", authority=USER_TURN)


def test_import_skips_malformed_entries() -> None:
    goals = make()
    result = goals.import_evidence(
        [
            {"kind": "run", "id": "ok", "goalId": "g"},
            {"kind": "task", "id": "ok2", "goalId": "g"},
            {"kind": "run", "id": "bad id", "goalId": "g"},
            {"kind": "run", "id": "ok3", "goalId": 7},
            {"kind": "run", "id": "ok4", "goalId": "g", "confirmed": "yes"},
        ]
    )
    assert (result.imported, result.rejected) == (1, 4)


def test_import_keeps_the_first_owner() -> None:
    goals = make()
    goals.import_evidence([{"kind": "run", "id": "r", "goalId": "g1"}])
    goals.import_evidence([{"kind": "run", "id": "r", "goalId": "g2"}])
    assert goals.owner_of(TaskHandle(TaskKind.RUN, "r")) == "g1"


def test_import_with_an_active_goal_is_refused() -> None:
    goals, _ = started()
    with raises(GoalErrorCode.INVALID):
        goals.import_evidence([])


def handles(count: int) -> Iterator[TaskHandle]:
    return (TaskHandle(TaskKind.RUN, f"run-{i}") for i in range(count))


@pytest.mark.parametrize(
    ("count", "evicted"),
    [
        (bounds.MAX_GOAL_EVIDENCE - 1, 0),
        (bounds.MAX_GOAL_EVIDENCE, 0),
        (bounds.MAX_GOAL_EVIDENCE + 1, 1),
    ],
)
def test_evidence_bound(count: int, evicted: int) -> None:
    goals, gid = started()
    for handle in handles(count):
        goals.attribute(handle, gid)
    exported = goals.export_evidence()
    # What was lost travels with the evidence, as a marker entry first.
    marker = [{"evictedEvidence": evicted}] if evicted else []
    assert list(exported[: len(marker)]) == marker
    assert len(exported) - len(marker) == min(count, bounds.MAX_GOAL_EVIDENCE)
    assert goals.evidence_count == min(count, bounds.MAX_GOAL_EVIDENCE)
    assert goals.evicted_evidence == evicted


def test_eviction_prefers_ended_goals() -> None:
    goals, old = started(max_evidence=2)
    goals.attribute(RUN, old)
    goals.cancel(old, authority=USER_TURN)
    new = goals.start("new", authority=USER_TURN).goal_id
    assert new is not None
    goals.attribute(TaskHandle(TaskKind.RUN, "n1"), new)
    goals.attribute(TaskHandle(TaskKind.RUN, "n2"), new)
    assert goals.owner_of(RUN) is None
    assert goals.evicted_evidence == 1
    exported = goals.export_evidence()
    assert exported[0] == {"evictedEvidence": 1}
    assert {entry["goalId"] for entry in exported[1:]} == {new}


# -- sender-side confirmations (goal-scoped-v1 §2.4, goal-scoped-v1 §5 items 13-14) ------------

RECEIVER = "e" * 32


def test_positive_budget_always_charges() -> None:
    confirmations = GoalConfirmations()
    scoped = confirmations.reserve(RECEIVER, "g", 1)
    unscoped = confirmations.reserve(RECEIVER, None, 1)
    assert isinstance(scoped, Reservation)
    assert isinstance(unscoped, Reservation)
    assert scoped.charged
    assert unscoped.charged
    assert unscoped.key is None


def test_good_scoped_receipt_confirms_and_refunds() -> None:
    confirmations = GoalConfirmations()
    for status in (Code.SUBMITTED, Code.QUEUED):
        reservation = confirmations.reserve(RECEIVER, "g", 5)
        assert isinstance(reservation, Reservation)
        assert confirmations.settle(reservation, status) is True
        assert GoalConfirmations.key(RECEIVER, "g") in confirmations


def test_unscoped_sends_are_never_refunded() -> None:
    confirmations = GoalConfirmations()
    reservation = confirmations.reserve(RECEIVER, None, 5)
    assert isinstance(reservation, Reservation)
    assert confirmations.settle(reservation, Code.SUBMITTED) is False
    assert len(confirmations) == 0


def confirm(confirmations: GoalConfirmations, goal_id: str = "g", receiver: str = RECEIVER) -> None:
    reservation = confirmations.reserve(receiver, goal_id, 1)
    assert isinstance(reservation, Reservation)
    confirmations.settle(reservation, Code.SUBMITTED)


def test_zero_budget_one_free_flight_per_confirmed_pair() -> None:
    confirmations = GoalConfirmations()
    confirm(confirmations)
    free = confirmations.reserve(RECEIVER, "g", 0)
    assert isinstance(free, Reservation)
    assert not free.charged
    # The key is out while the attempt flies: no concurrent fan-out.
    assert confirmations.reserve(RECEIVER, "g", 0) is Code.BUDGET_EXHAUSTED
    assert confirmations.settle(free, Code.QUEUED) is False  # nothing was charged
    assert isinstance(confirmations.reserve(RECEIVER, "g", 0), Reservation)


def test_zero_budget_unconfirmed_or_unscoped_is_exhausted() -> None:
    confirmations = GoalConfirmations()
    confirm(confirmations)
    assert confirmations.reserve(RECEIVER, None, 0) is Code.BUDGET_EXHAUSTED
    assert confirmations.reserve(RECEIVER, "other", 0) is Code.BUDGET_EXHAUSTED
    assert confirmations.reserve("d" * 32, "g", 0) is Code.BUDGET_EXHAUSTED


@pytest.mark.parametrize(
    "outcome",
    [Code.GOAL_NOT_AUTHORIZED, Code.TIMEOUT, Code.INVALID_RECEIPT, Code.ACCEPTED, "ENOENT"],
)
def test_any_other_outcome_removes_the_key(outcome: str) -> None:
    # Edge case 14: a confirmed goal that ended gets goal_not_authorized once, then the budget.
    confirmations = GoalConfirmations()
    confirm(confirmations)
    free = confirmations.reserve(RECEIVER, "g", 0)
    assert isinstance(free, Reservation)
    assert confirmations.settle(free, outcome) is False
    assert confirmations.reserve(RECEIVER, "g", 0) is Code.BUDGET_EXHAUSTED


def test_invalid_goal_id_is_refused_locally() -> None:
    confirmations = GoalConfirmations()
    assert confirmations.reserve(RECEIVER, "bad id", 5) is Code.INVALID_GOAL
    assert confirmations.reserve("nothex", "g", 5) is Code.INVALID_TARGET


def test_clear_drops_keys_and_voids_old_reservations() -> None:
    confirmations = GoalConfirmations()
    reservation = confirmations.reserve(RECEIVER, "g", 5)
    assert isinstance(reservation, Reservation)
    confirmations.clear()
    assert confirmations.settle(reservation, Code.SUBMITTED) is False
    assert len(confirmations) == 0


@pytest.mark.parametrize(
    ("count", "kept"),
    [
        (bounds.MAX_GOAL_CONFIRMATIONS - 1, bounds.MAX_GOAL_CONFIRMATIONS - 1),
        (bounds.MAX_GOAL_CONFIRMATIONS, bounds.MAX_GOAL_CONFIRMATIONS),
        (bounds.MAX_GOAL_CONFIRMATIONS + 1, bounds.MAX_GOAL_CONFIRMATIONS),
    ],
)
def test_confirmation_bound(count: int, kept: int) -> None:
    confirmations = GoalConfirmations()
    for i in range(count):
        confirm(confirmations, goal_id=f"g{i}")
    assert len(confirmations) == kept
    assert (GoalConfirmations.key(RECEIVER, "g0") in confirmations) is (count <= kept)


def test_confirmations_evict_least_recently_confirmed() -> None:
    confirmations = GoalConfirmations(max_keys=2)
    confirm(confirmations, "g1")
    confirm(confirmations, "g2")
    confirm(confirmations, "g1")  # refreshed
    confirm(confirmations, "g3")
    assert GoalConfirmations.key(RECEIVER, "g1") in confirmations
    assert GoalConfirmations.key(RECEIVER, "g2") not in confirmations
