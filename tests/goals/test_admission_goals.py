"""Goal-scoped admission on the receiver (goal-scoped-v1 §2.3-2.4, protocol-v1 Appendix).

Goal scope is off unless :class:`Admission` is given a :class:`Goals`; every rule here is checked
with one, and the last tests check that without one a ``goalId`` changes nothing but the text key.
"""

from __future__ import annotations

import dataclasses

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.security.admission import Delivery
from pi_cross_session._internal.security.goals import LOCAL_COMMAND, RevokeReason
from pi_cross_session._internal.security.limits import RateLimiter
from pi_cross_session._internal.security.provenance import PeerClaim, Provenance
from pi_cross_session._internal.security.turns import TurnEnding
from tests.support.admission_kit import Kit, bridge_text, caller, goals_with, registration

GOAL = "goal-1"
ALICE = caller("alice")  # bound to GOAL in every kit below
MALLORY = caller("mallory")  # never bound
_ALICE_ID = registration("alice").instance_id
_MALLORY_ID = registration("mallory").instance_id


def goal_kit(*, budget: int = 256, **options: object) -> Kit:
    return Kit(budget=budget, goals=goals_with("alice", goal_id=GOAL), **options)  # type: ignore[arg-type]


# -- members: scoped messages bypass the budget, nothing else --------------------------------------


def test_a_members_scoped_message_is_submitted_without_spending_budget() -> None:
    kit = goal_kit()
    reply = kit.send(ALICE, "scoped", message_id="s1", goal_id=GOAL)
    assert reply.status == Code.SUBMITTED
    assert kit.budget.remaining == 256
    assert kit.host.submitted[0].goal_id == GOAL
    row = kit.row("alice", "s1")
    assert row is not None
    assert row.goal_id == GOAL
    assert kit.admission.snapshot().admitted == 1


def test_a_members_scoped_message_is_queued_without_spending_budget() -> None:
    kit = goal_kit()
    kit.turn_started(Provenance.USER)
    reply = kit.send(ALICE, message_id="q1", goal_id=GOAL)
    assert reply.status == Code.QUEUED
    assert kit.budget.remaining == 256
    assert kit.state("alice", "q1") == Code.QUEUED


def test_an_unscoped_message_from_a_member_still_spends_budget() -> None:
    kit = goal_kit()
    assert kit.send(ALICE, "plain").status == Code.SUBMITTED
    assert kit.budget.remaining == 255


def test_budget_zero_still_admits_a_members_scoped_message() -> None:
    kit = goal_kit(budget=0)
    assert kit.send(ALICE, "plain").status == Code.BUDGET_EXHAUSTED
    assert kit.send(ALICE, "scoped", goal_id=GOAL).status == Code.SUBMITTED
    assert kit.budget.remaining == 0


def test_other_bounds_still_apply_to_a_members_scoped_message() -> None:
    kit = goal_kit(rate=RateLimiter(capacity=1, refill_per_s=0.0))
    assert kit.send(ALICE, "one", message_id="a", goal_id=GOAL).status == Code.SUBMITTED
    kit.turn_started(Provenance.UNKNOWN)
    kit.turn_ended(TurnEnding.STOP)
    assert kit.send(ALICE, "one", message_id="a", goal_id=GOAL).status == Code.DUPLICATE
    assert kit.send(ALICE, "two", goal_id=GOAL).status == Code.RATE_LIMITED


def test_a_members_scoped_message_respects_queue_full_and_ttl() -> None:
    kit = goal_kit(max_queued=1)
    kit.turn_started(Provenance.USER)
    assert kit.send(ALICE, message_id="q1", goal_id=GOAL).status == Code.QUEUED
    assert kit.send(ALICE, goal_id=GOAL).status == Code.QUEUE_FULL
    kit.clock.advance(31)
    kit.admission.tick()
    assert kit.state("alice", "q1") == Code.EXPIRED


# -- non-members: goal_not_authorized, after spending dedup entries and a rate token -------------


def test_a_non_member_is_not_authorized_and_spends_a_rate_token_but_no_budget() -> None:
    kit = goal_kit()
    before = kit.rate.tokens(_MALLORY_ID, kit.clock.monotonic())
    reply = kit.send(MALLORY, "forged", message_id="f1", goal_id=GOAL)
    assert reply.status == Code.GOAL_NOT_AUTHORIZED
    assert not reply.ok
    assert kit.rate.tokens(_MALLORY_ID, kit.clock.monotonic()) == before - 1
    assert kit.budget.remaining == 256
    assert kit.row("mallory", "f1") is None
    assert kit.host.attempts == 0
    snap = kit.admission.snapshot()
    assert snap.admitted == 0
    assert snap.refusals == {Code.GOAL_NOT_AUTHORIZED: 1}


def test_an_unknown_goal_id_from_a_member_is_not_authorized() -> None:
    kit = goal_kit()
    assert kit.send(ALICE, goal_id="goal-other").status == Code.GOAL_NOT_AUTHORIZED
    assert kit.budget.remaining == 256


def test_a_member_with_another_session_id_is_not_authorized() -> None:
    kit = goal_kit()
    other_session = registration("alice").model_copy(update={"id": "session-other"})
    impostor = dataclasses.replace(ALICE, sender=other_session)
    assert kit.send(impostor, goal_id=GOAL).status == Code.GOAL_NOT_AUTHORIZED


def test_a_repeated_non_member_message_id_is_a_duplicate() -> None:
    kit = goal_kit()
    assert kit.send(MALLORY, "a", message_id="f1", goal_id=GOAL).status == Code.GOAL_NOT_AUTHORIZED
    assert kit.send(MALLORY, "b", message_id="f1", goal_id=GOAL).status == Code.DUPLICATE
    # the same text under the same goal is a duplicate too (the text key includes the goal id)
    assert kit.send(MALLORY, "a", goal_id=GOAL).status == Code.DUPLICATE


def test_forged_goal_ids_drain_the_rate_bucket_then_rate_limited() -> None:
    kit = goal_kit()
    for _ in range(30):
        assert kit.send(MALLORY, goal_id=GOAL).status == Code.GOAL_NOT_AUTHORIZED
    assert kit.send(MALLORY, goal_id=GOAL).status == Code.RATE_LIMITED
    assert kit.send(MALLORY, "plain").status == Code.RATE_LIMITED
    assert kit.budget.remaining == 256


def test_membership_is_checked_before_busy_and_budget() -> None:
    kit = goal_kit(budget=0)
    kit.turn_started(Provenance.UNKNOWN)  # not queueable: busy for anyone
    assert kit.send(MALLORY, goal_id=GOAL).status == Code.GOAL_NOT_AUTHORIZED
    assert kit.send(ALICE, goal_id=GOAL).status == Code.BUSY


# -- bridges ---------------------------------------------------------------------------------------


def test_a_bridge_envelope_with_a_goal_id_is_invalid_goal() -> None:
    kit = goal_kit()
    text = bridge_text(kit.clock.wall_ms())
    assert kit.send(ALICE, text, goal_id=GOAL).status == Code.INVALID_GOAL
    assert kit.send(MALLORY, text, goal_id=GOAL).status == Code.INVALID_GOAL
    assert kit.send(ALICE, text).status == Code.UNSUPPORTED
    assert kit.rate.tokens(_ALICE_ID, kit.clock.monotonic()) == 30  # refused before step 11


def test_an_invalid_bridge_envelope_with_a_goal_id_is_still_invalid_bridge() -> None:
    kit = goal_kit()
    text = bridge_text(kit.clock.wall_ms(), version=2)
    assert kit.send(ALICE, text, goal_id=GOAL).status == Code.INVALID_BRIDGE


# -- revocation ------------------------------------------------------------------------------------


def test_revoking_a_goal_drops_only_its_queued_messages() -> None:
    goals = goals_with("alice", goal_id=GOAL)
    kit = Kit(goals=goals)
    kit.turn_started(Provenance.USER)
    assert kit.send(ALICE, message_id="scoped", goal_id=GOAL).status == Code.QUEUED
    assert kit.send(ALICE, message_id="plain").status == Code.QUEUED
    assert kit.send("bob", message_id="bobs").status == Code.QUEUED
    assert kit.admission.revoke_goal("goal-2") == 0  # another goal's id touches nothing

    revoked = goals.revoke(RevokeReason.LATCH)
    assert revoked == GOAL
    assert kit.admission.revoke_goal(revoked) == 1

    scoped = kit.row("alice", "scoped")
    assert scoped is not None
    assert scoped.state == Code.DROPPED_GOAL_REVOKED
    assert scoped.final
    assert scoped.diagnostic
    assert kit.state("alice", "plain") == Code.QUEUED
    assert kit.state("bob", "bobs") == Code.QUEUED
    assert kit.admission.snapshot().queued == 2
    assert kit.admission.revoke_goal(GOAL) == 0


def test_after_revocation_the_goal_id_is_not_authorized() -> None:
    goals = goals_with("alice", goal_id=GOAL)
    kit = Kit(goals=goals)
    goals.cancel(GOAL, authority=LOCAL_COMMAND)
    assert kit.send(ALICE, goal_id=GOAL).status == Code.GOAL_NOT_AUTHORIZED


def test_revoking_the_last_queued_message_owes_no_flush() -> None:
    kit = goal_kit()
    kit.turn_started(Provenance.USER)
    kit.send(ALICE, message_id="q1", goal_id=GOAL)
    assert kit.turn_ended(TurnEnding.STOP) is True
    kit.admission.revoke_goal(GOAL)
    assert kit.admission.flush_owed is False
    assert kit.admission.flush_one() is None
    assert kit.host.attempts == 0


# -- off by default --------------------------------------------------------------------------------


def test_without_goals_a_goal_id_is_ignored() -> None:
    kit = Kit(budget=2)
    reply = kit.send(MALLORY, "scoped", message_id="g1", goal_id=GOAL)
    assert reply.status == Code.SUBMITTED
    assert kit.budget.remaining == 1  # charged like any message
    kit.turn_started(Provenance.UNKNOWN)
    kit.turn_ended(TurnEnding.STOP)
    assert kit.send(MALLORY, "scoped", goal_id=GOAL).status == Code.DUPLICATE
    assert kit.send(MALLORY, "scoped", goal_id="goal-2").status == Code.SUBMITTED
    assert kit.budget.remaining == 0
    kit.turn_started(Provenance.UNKNOWN)
    kit.turn_ended(TurnEnding.STOP)
    assert kit.send(MALLORY, "scoped", goal_id="goal-3").status == Code.BUDGET_EXHAUSTED


def test_without_goals_a_bridge_with_a_goal_id_is_unsupported() -> None:
    kit = Kit()
    text = bridge_text(kit.clock.wall_ms())
    assert kit.send(MALLORY, text, goal_id=GOAL).status == Code.UNSUPPORTED


# -- what the turn a scoped message opens is for ---------------------------------------------------


def _opening_claims(kit: Kit) -> frozenset[PeerClaim]:
    facts = kit.turns.facts
    assert facts is not None
    return facts.claims


def test_the_turn_a_scoped_message_opens_carries_admissions_record_of_it() -> None:
    kit = goal_kit()
    assert kit.send(ALICE, "scoped", message_id="s1", goal_id=GOAL).status == Code.SUBMITTED
    kit.turn_started()
    kit.message_started("s1", _ALICE_ID)
    alice = registration("alice")
    assert _opening_claims(kit) == {PeerClaim(GOAL, (alice.instance_id, alice.id))}
    assert kit.turns.authority.provenance is Provenance.PEER


def test_a_message_shown_inside_submit_still_carries_admissions_record() -> None:
    # A host may start the turn and show the message before its submit call returns; the row is
    # not yet "submitted" then, but admission knows what it is handing over.
    kit = goal_kit()

    def shown_at_once(delivery: Delivery) -> None:
        kit.turn_started()
        kit.message_started(delivery.message_id, delivery.sender.instance_id)

    kit.host.during_submit = shown_at_once
    assert kit.send(ALICE, "scoped", message_id="s1", goal_id=GOAL).status == Code.SUBMITTED
    alice = registration("alice")
    assert _opening_claims(kit) == {PeerClaim(GOAL, (alice.instance_id, alice.id))}


def test_a_message_admission_never_submitted_carries_no_claim() -> None:
    kit = goal_kit()
    kit.turn_started()
    kit.message_started("forged", _ALICE_ID)
    assert _opening_claims(kit) == frozenset()
    assert kit.turns.authority.provenance is Provenance.PEER  # still a peer turn: restricted
