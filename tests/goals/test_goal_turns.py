"""security/goal_turns.py: from what opened a turn to its goal authority and its grant.

Facts are built through a real turn tracker (driven by :class:`TurnDriver`) where the opening
matters, and directly as :class:`TurnFacts` otherwise. Each test checks one branch of
:func:`authority_of`, :func:`names_goal` or :func:`grant_for`, and what :meth:`Goals.classify`
makes of the result.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import pytest

from pi_cross_session._internal.security.goal_turns import (
    UNKNOWN_GOAL,
    authority_of,
    grant_for,
    names_goal,
)
from pi_cross_session._internal.security.goals import (
    USER_TURN,
    Authority,
    AuthorityClass,
    AuthorityKind,
    GoalError,
    Goals,
    Member,
    RevokeReason,
    Scope,
    TaskHandle,
    TaskKind,
)
from pi_cross_session._internal.security.provenance import PeerClaim, Provenance, TurnFacts
from tests.support.turn_driver import TurnDriver

OWNER = Scope(session_id="session-owner", instance_id="f" * 32, cwd="/home/dev/project")
ALICE = Member("a" * 32, "session-alice")
BOB = Member("b" * 32, "session-bob")
STRANGER = Member("c" * 32, "session-stranger")
RUN = TaskHandle(TaskKind.RUN, "run-1")
AGENT = TaskHandle(TaskKind.AGENT, "agent-1")
UNOWNED = TaskHandle(TaskKind.RUN, "run-unowned")


def counter_ids() -> Callable[[], str]:
    numbers = itertools.count(1)
    return lambda: f"goal-{next(numbers)}"


def bound_goal(*, max_evidence: int = 512) -> tuple[Goals, str]:
    """A goal with Alice bound and ``RUN`` owned."""
    goals = Goals(OWNER, new_id=counter_ids(), max_evidence=max_evidence)
    goal_id = goals.start("ship the parser", authority=USER_TURN).goal_id
    assert goal_id is not None
    goals.bind(goal_id, [ALICE], tasks=[RUN], authority=USER_TURN)
    return goals, goal_id


def claim(goal_id: str | None, member: Member = ALICE) -> PeerClaim:
    return PeerClaim(goal_id, (member.instance_id, member.session_id))


def facts(
    provenance: Provenance,
    *,
    cancelled: bool = False,
    claims: Iterable[PeerClaim] = (),
    handles: Iterable[TaskHandle] = (),
) -> TurnFacts:
    return TurnFacts(provenance, cancelled, frozenset(claims), frozenset(handles))


def peer_facts(*claims: PeerClaim, cancelled: bool = False) -> TurnFacts:
    """The facts of a turn opened by these peer messages, through the ledger."""
    ledger = TurnDriver()
    ledger.start(peer=True)
    for one in claims:
        ledger.observe(Provenance.PEER, claim=one)
    ledger.close_opening()
    if cancelled:
        ledger.cancel()
    found = ledger.facts
    assert found is not None
    return found


def notification_facts(*handles: TaskHandle) -> TurnFacts:
    ledger = TurnDriver()
    ledger.start()
    ledger.observe(Provenance.NOTIFICATION, handles=handles)
    ledger.close_opening()
    found = ledger.facts
    assert found is not None
    return found


# -- authority_of: outside a turn, user, unknown ---------------------------------------------------


@pytest.mark.parametrize("aborted", [False, True])
def test_no_turn_is_unknown(aborted: bool) -> None:
    goals, _ = bound_goal()
    assert authority_of(None, goals, aborted=aborted) == Authority(
        AuthorityKind.UNKNOWN, cancelled=aborted
    )


def test_a_user_turn() -> None:
    goals, _ = bound_goal()
    authority = authority_of(facts(Provenance.USER), goals)
    assert authority == USER_TURN
    assert goals.classify(authority) is AuthorityClass.LOCAL_USER


@pytest.mark.parametrize(("cancelled", "aborted"), [(True, False), (False, True), (True, True)])
def test_a_cancelled_or_aborted_user_turn(cancelled: bool, aborted: bool) -> None:
    goals, _ = bound_goal()
    authority = authority_of(facts(Provenance.USER, cancelled=cancelled), goals, aborted=aborted)
    assert authority == Authority(AuthorityKind.USER_TURN, cancelled=True)
    assert goals.classify(authority) is AuthorityClass.OTHER


def test_a_user_turn_ignores_handles_and_claims_of_its_opening() -> None:
    goals, goal_id = bound_goal()
    found = facts(Provenance.USER, claims=[claim(goal_id)], handles=[RUN])
    assert authority_of(found, goals) == USER_TURN


@pytest.mark.parametrize("cancelled", [False, True])
def test_an_unknown_turn(cancelled: bool) -> None:
    goals, goal_id = bound_goal()
    found = facts(Provenance.UNKNOWN, cancelled=cancelled, claims=[claim(goal_id)], handles=[RUN])
    authority = authority_of(found, goals)
    assert authority == Authority(AuthorityKind.UNKNOWN, cancelled=cancelled)
    assert goals.classify(authority) is AuthorityClass.OTHER


# -- authority_of: notifications -------------------------------------------------------------------


def test_a_notification_naming_nothing_is_unscoped() -> None:
    goals, _ = bound_goal()
    authority = authority_of(notification_facts(), goals)
    assert authority == Authority(AuthorityKind.NOTIFICATION)
    assert goals.classify(authority) is AuthorityClass.LOCAL_NOTIFICATION


def test_a_notification_naming_an_owned_handle_is_scoped_to_its_goal() -> None:
    goals, goal_id = bound_goal()
    authority = authority_of(notification_facts(RUN), goals)
    assert authority.notification_goals == {goal_id}
    assert goals.classify(authority) is AuthorityClass.GOAL_SCOPED


def test_an_unowned_handle_does_not_count() -> None:
    goals, goal_id = bound_goal()
    assert authority_of(notification_facts(UNOWNED), goals).notification_goals == frozenset()
    mixed = authority_of(notification_facts(UNOWNED, RUN), goals)
    assert mixed.notification_goals == {goal_id}
    assert goals.classify(mixed) is AuthorityClass.GOAL_SCOPED


def test_handles_of_two_goals_name_both_and_scope_to_neither() -> None:
    goals, old = bound_goal()
    goals.complete(old, authority=USER_TURN)
    new = goals.start("next", authority=USER_TURN).goal_id
    assert new is not None
    goals.bind(new, tasks=[AGENT], authority=USER_TURN)
    authority = authority_of(notification_facts(RUN, AGENT), goals)
    assert authority.notification_goals == {old, new}
    assert goals.classify(authority) is AuthorityClass.OTHER


def test_a_notification_of_an_ended_goal_stays_restricted() -> None:
    goals, goal_id = bound_goal()
    goals.revoke(RevokeReason.LATCH)
    authority = authority_of(notification_facts(RUN), goals)
    assert authority.notification_goals == {goal_id}
    assert goals.classify(authority) is AuthorityClass.OTHER


def test_after_eviction_an_unowned_handle_names_an_unknown_goal() -> None:
    goals, goal_id = bound_goal(max_evidence=1)
    goals.attribute(AGENT, goal_id)  # evicts RUN's evidence
    assert goals.evicted_evidence == 1
    assert goals.owner_of(RUN) is None
    authority = authority_of(notification_facts(RUN), goals)
    assert authority.notification_goals == {UNKNOWN_GOAL}
    assert goals.classify(authority) is AuthorityClass.OTHER
    # A handle still on record keeps its owner beside the unknown one: scoped to neither.
    both = authority_of(notification_facts(RUN, AGENT), goals)
    assert both.notification_goals == {UNKNOWN_GOAL, goal_id}
    assert goals.classify(both) is AuthorityClass.OTHER
    # A notification naming no handle at all is still unscoped.
    assert goals.classify(authority_of(notification_facts(), goals)) is (
        AuthorityClass.LOCAL_NOTIFICATION
    )


def test_without_goals_a_notification_names_no_goal() -> None:
    assert authority_of(notification_facts(RUN), None) == Authority(AuthorityKind.NOTIFICATION)


def test_a_cancelled_notification() -> None:
    goals, goal_id = bound_goal()
    found = facts(Provenance.NOTIFICATION, cancelled=True, handles=[RUN])
    authority = authority_of(found, goals)
    assert authority.cancelled
    assert authority.notification_goals == {goal_id}
    assert goals.classify(authority) is AuthorityClass.OTHER


# -- authority_of: peers ---------------------------------------------------------------------------


def test_one_scoped_claim_from_a_member() -> None:
    goals, goal_id = bound_goal()
    authority = authority_of(peer_facts(claim(goal_id)), goals)
    assert authority == Authority(
        AuthorityKind.PEER_TURN, goal_id=goal_id, sender=(ALICE.instance_id, ALICE.session_id)
    )
    assert goals.classify(authority) is AuthorityClass.GOAL_SCOPED


@pytest.mark.parametrize(
    "one",
    [claim(None), claim("goal-999"), claim("goal-1", STRANGER), claim("goal-1", BOB)],
    ids=["unscoped", "wrong goal", "stranger", "unbound peer"],
)
def test_one_claim_that_is_not_a_members_scoped_message(one: PeerClaim) -> None:
    goals, _ = bound_goal()
    authority = authority_of(peer_facts(one), goals)
    assert authority.kind is AuthorityKind.PEER_TURN
    assert (authority.goal_id, authority.sender) == (one.goal_id, one.sender)
    assert goals.classify(authority) is AuthorityClass.OTHER


def test_a_cancelled_scoped_peer_turn() -> None:
    goals, goal_id = bound_goal()
    authority = authority_of(peer_facts(claim(goal_id), cancelled=True), goals)
    assert authority.cancelled
    assert goals.classify(authority) is AuthorityClass.OTHER
    aborted = authority_of(peer_facts(claim(goal_id)), goals, aborted=True)
    assert aborted.cancelled
    assert goals.classify(aborted) is AuthorityClass.OTHER


def test_several_unscoped_claims_name_no_goal() -> None:
    goals, _ = bound_goal()
    authority = authority_of(peer_facts(claim(None), claim(None, BOB)), goals)
    assert authority == Authority(AuthorityKind.PEER_TURN)
    assert not names_goal(authority)


@pytest.mark.parametrize("other", [claim(None, BOB), claim("goal-1", BOB)])
def test_several_claims_with_one_scoped_name_an_unknown_goal(other: PeerClaim) -> None:
    goals, goal_id = bound_goal()
    goals.bind(goal_id, [BOB], authority=USER_TURN)
    authority = authority_of(peer_facts(claim(goal_id), other), goals)
    assert authority == Authority(AuthorityKind.PEER_TURN, goal_id=UNKNOWN_GOAL)
    assert names_goal(authority)
    assert goals.classify(authority) is AuthorityClass.OTHER
    assert grant_for(authority, goals) is None


def test_a_peer_turn_without_a_claim_names_no_goal() -> None:
    goals, _ = bound_goal()
    authority = authority_of(facts(Provenance.PEER), goals)
    assert authority == Authority(AuthorityKind.PEER_TURN)


def test_the_unknown_goal_is_never_a_goal_id() -> None:
    goals = Goals(OWNER, new_id=lambda: UNKNOWN_GOAL)
    with pytest.raises(GoalError, match="unusable id"):
        goals.start("x", authority=USER_TURN)


# -- names_goal ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authority", "named"),
    [
        (USER_TURN, False),
        (Authority(AuthorityKind.NOTIFICATION), False),
        (Authority(AuthorityKind.PEER_TURN), False),
        (Authority(AuthorityKind.UNKNOWN), False),
        (Authority(AuthorityKind.PEER_TURN, goal_id="goal-1"), True),
        (Authority(AuthorityKind.PEER_TURN, goal_id=UNKNOWN_GOAL), True),
        (Authority(AuthorityKind.NOTIFICATION, notification_goals=frozenset({"goal-1"})), True),
        (Authority(AuthorityKind.NOTIFICATION, notification_goals=frozenset({UNKNOWN_GOAL})), True),
        (Authority(AuthorityKind.PEER_TURN, cancelled=True, goal_id="goal-9"), True),
    ],
)
def test_names_goal(authority: Authority, named: bool) -> None:
    assert names_goal(authority) is named


# -- grant_for -------------------------------------------------------------------------------------


def test_a_scoped_peer_turn_gets_the_current_goals_grant() -> None:
    goals, goal_id = bound_goal()
    grant = grant_for(authority_of(peer_facts(claim(goal_id)), goals), goals)
    assert grant is not None
    assert grant.goal_id == goal_id
    assert grant.owner_of(RUN) == goal_id
    assert grant.owner_of(UNOWNED) is None


def test_a_scoped_notification_turn_gets_the_current_goals_grant() -> None:
    goals, goal_id = bound_goal()
    grant = grant_for(authority_of(notification_facts(RUN), goals), goals)
    assert grant is not None
    assert grant.goal_id == goal_id


def test_the_grants_ownership_is_live() -> None:
    goals, goal_id = bound_goal()
    grant = grant_for(authority_of(peer_facts(claim(goal_id)), goals), goals)
    assert grant is not None
    assert grant.owner_of(AGENT) is None
    goals.attribute(AGENT, goal_id)
    assert grant.owner_of(AGENT) == goal_id


@pytest.mark.parametrize(
    "make",
    [
        lambda gid: facts(Provenance.USER),
        lambda gid: notification_facts(),
        lambda gid: notification_facts(UNOWNED),
        lambda gid: peer_facts(claim(None)),
        lambda gid: peer_facts(claim("goal-999")),
        lambda gid: peer_facts(claim(gid, STRANGER)),
        lambda gid: peer_facts(claim(gid), cancelled=True),
        lambda gid: facts(Provenance.NOTIFICATION, cancelled=True, handles=[RUN]),
        lambda gid: facts(Provenance.UNKNOWN, claims=[claim(gid)], handles=[RUN]),
    ],
    ids=[
        "user",
        "unscoped notification",
        "notification of an unowned handle",
        "unscoped peer",
        "peer of another goal",
        "stranger",
        "cancelled scoped peer",
        "cancelled scoped notification",
        "unknown",
    ],
)
def test_only_a_turn_scoped_to_the_current_goal_gets_a_grant(
    make: Callable[[str], TurnFacts],
) -> None:
    goals, goal_id = bound_goal()
    assert grant_for(authority_of(make(goal_id), goals), goals) is None


def test_no_grant_without_goals_or_without_an_active_goal() -> None:
    goals, goal_id = bound_goal()
    authority = authority_of(peer_facts(claim(goal_id)), goals)
    assert grant_for(authority, None) is None
    goals.complete(goal_id, authority=authority)
    assert grant_for(authority, goals) is None


def test_the_same_turn_loses_its_grant_when_the_goal_ends_mid_turn() -> None:
    goals, goal_id = bound_goal()
    turn = notification_facts(RUN)
    assert grant_for(authority_of(turn, goals), goals) is not None
    goals.revoke(RevokeReason.UNSAFE_END)
    assert grant_for(authority_of(turn, goals), goals) is None
    # A new goal does not adopt the old goal's notification either.
    new = goals.start("next", authority=USER_TURN).goal_id
    assert new is not None
    assert new != goal_id
    assert grant_for(authority_of(turn, goals), goals) is None


def test_an_unbound_member_loses_the_grant() -> None:
    goals, goal_id = bound_goal()
    turn = peer_facts(claim(goal_id))
    goals.unbind(goal_id, [ALICE.instance_id], authority=USER_TURN)
    assert grant_for(authority_of(turn, goals), goals) is None
