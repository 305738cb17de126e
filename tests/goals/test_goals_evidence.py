"""Goals' task evidence (goal-scoped-v1 §3 steps 6-7): call notes, attribution, the journal.

A task-creating call is noted under the goal active *before* it runs; its result is attributed to
that goal even after the goal ended (evidence, never a grant); the first owner on record wins.
Evidence and pending call notes round-trip through the journal (:meth:`Goals.export_evidence`,
:meth:`Goals.import_evidence`) without ever restoring a goal. ``on_record`` is told what is new,
never what was imported. Lost evidence (an evicted ownership entry or call note) is counted, and
the count survives a reload as an ``{"evictedEvidence": n}`` entry, so a notification naming a
handle whose owner was forgotten keeps failing closed. The record/confirm/bind paths and the
ownership bound are in ``test_goals.py``; this file adds the call notes, the callbacks, the
call-note bound and lost evidence.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

import pytest

from pi_cross_session._internal.security.goal_turns import UNKNOWN_GOAL, authority_of
from pi_cross_session._internal.security.goals import (
    USER_TURN,
    Authority,
    AuthorityClass,
    AuthorityKind,
    EvidenceImport,
    GoalEnd,
    GoalError,
    GoalErrorCode,
    Goals,
    Member,
    RevokeReason,
    Scope,
    TaskHandle,
    TaskKind,
    TaskOwnership,
    bounds,
    call_entry,
    ownership_entry,
)
from pi_cross_session._internal.security.provenance import Provenance, TurnFacts

OWNER = Scope(session_id="session-owner", instance_id="f" * 32, cwd="/home/dev/project")
ALICE = Member("a" * 32, "session-alice")
RUN = TaskHandle(TaskKind.RUN, "run-1")
AGENT = TaskHandle(TaskKind.AGENT, "agent-1")
MAX_CALL = "c" * bounds.MAX_CALL_ID_CHARS

Journal = list[dict[str, object]]


def counter_ids(*ids: str) -> Callable[[], str]:
    """Mint ``ids`` first, then ``goal-1``, ``goal-2`` …"""
    numbers = itertools.count(1)
    given = iter(ids)
    return lambda: next(given, None) or f"goal-{next(numbers)}"


def make(*ids: str, journal: Journal | None = None, **bounds: int) -> Goals:
    record = None if journal is None else journal.append
    return Goals(OWNER, new_id=counter_ids(*ids), on_record=record, **bounds)


def start(goals: Goals, objective: str = "ship the parser") -> str:
    goal_id = goals.start(objective, authority=USER_TURN).goal_id
    assert goal_id is not None
    return goal_id


def raises(code: GoalErrorCode) -> pytest.RaisesExc[GoalError]:
    return pytest.raises(GoalError, match=f"^{re.escape(code.value)}: ")


def notification(*handles: TaskHandle) -> TurnFacts:
    return TurnFacts(Provenance.NOTIFICATION, False, frozenset(), frozenset(handles))


def runs(count: int, prefix: str = "run") -> Iterator[TaskHandle]:
    return (TaskHandle(TaskKind.RUN, f"{prefix}-{i}") for i in range(count))


# -- note_call / settle_call -----------------------------------------------------------------------


def test_a_noted_call_is_attributed_to_the_goal_noted_before_it_ran() -> None:
    goals = make()
    goal_id = start(goals)
    assert goals.note_call("call-1") == goal_id
    assert goals.noted_goal("call-1") == goal_id
    assert goals.owner_of(RUN) is None  # nothing is known of the handle before the result
    assert goals.settle_call("call-1", RUN) == goal_id
    ownership = goals.ownership(RUN)
    assert ownership is not None
    assert (ownership.goal_id, ownership.confirmed) == (goal_id, True)
    assert goals.noted_goal("call-1") is None


@pytest.mark.parametrize(
    "end",
    [
        lambda goals, gid: goals.complete(gid, authority=USER_TURN),
        lambda goals, gid: goals.cancel(gid, authority=USER_TURN),
        *(lambda goals, gid, r=reason: goals.revoke(r) for reason in RevokeReason),
    ],
)
def test_a_late_result_is_attributed_to_the_ended_goal(end: Callable[[Goals, str], object]) -> None:
    goals = make()
    old = start(goals)
    goals.note_call("call-1")
    end(goals, old)
    assert goals.settle_call("call-1", RUN) == old
    assert goals.owner_of(RUN) == old
    # Evidence, never a grant: the old goal's notification is not scoped, and a new goal's
    # turn is not scoped by it either.
    new = start(goals, "next")
    assert new != old
    authority = authority_of(notification(RUN), goals)
    assert authority.notification_goals == {old}
    assert goals.classify(authority) is AuthorityClass.OTHER


def test_a_call_noted_under_one_goal_stays_with_it_when_the_next_goal_is_active() -> None:
    goals = make()
    first = start(goals)
    goals.note_call("call-1")
    goals.complete(first, authority=USER_TURN)
    second = start(goals, "next")
    goals.note_call("call-2")
    assert goals.settle_call("call-2", AGENT) == second
    assert goals.settle_call("call-1", RUN) == first


def test_no_goal_no_note() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    assert goals.note_call("call-1") is None
    assert goals.noted_goal("call-1") is None
    assert goals.settle_call("call-1", RUN) is None
    assert goals.owner_of(RUN) is None
    assert journal == []


@pytest.mark.parametrize("call_id", ["", MAX_CALL + "c", 7, None])
def test_a_malformed_call_id_is_not_noted(call_id: object) -> None:
    goals = make()
    start(goals)
    assert goals.note_call(call_id) is None  # type: ignore[arg-type]
    assert goals.export_evidence() == ()


def test_the_longest_call_id_is_noted() -> None:
    goals = make()
    goal_id = start(goals)
    assert goals.note_call(MAX_CALL) == goal_id


def test_a_failed_call_attributes_nothing_and_clears_its_note() -> None:
    goals = make()
    start(goals)
    goals.note_call("call-1")
    assert goals.settle_call("call-1", None) is None
    assert goals.noted_goal("call-1") is None
    assert goals.evidence_count == 0
    assert goals.settle_call("call-1", RUN) is None  # settled once only
    assert goals.owner_of(RUN) is None


def test_an_unnoted_call_attributes_nothing() -> None:
    goals = make()
    start(goals)
    assert goals.settle_call("never-noted", RUN) is None
    assert goals.owner_of(RUN) is None


def test_a_renoted_call_keeps_the_latest_goal() -> None:
    goals = make()
    first = start(goals)
    goals.note_call("call-1")
    goals.complete(first, authority=USER_TURN)
    second = start(goals, "next")
    assert goals.note_call("call-1") == second
    assert goals.settle_call("call-1", RUN) == second


# -- attribute: the first owner wins ---------------------------------------------------------------


def test_the_first_owner_wins_over_a_later_call() -> None:
    goals = make()
    old = start(goals)
    goals.note_call("old-call")
    goals.settle_call("old-call", RUN)
    goals.complete(old, authority=USER_TURN)
    start(goals, "next")
    goals.note_call("new-call")
    assert goals.settle_call("new-call", RUN) == old
    assert goals.owner_of(RUN) == old


def test_the_first_owner_wins_over_a_bind_owner() -> None:
    goals = make()
    goal_id = start(goals)
    goals.bind(goal_id, tasks=[RUN], authority=USER_TURN)
    assert goals.attribute(RUN, "goal-other") == goal_id
    assert goals.owner_of(RUN) == goal_id


def test_attribute_confirms_a_pending_record_of_the_same_goal() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    # A pending (unconfirmed) record comes only from the journal.
    goals.import_evidence([{"kind": "run", "id": "run-1", "goalId": "goal-1", "confirmed": False}])
    goal_id = "goal-1"
    assert goals.attribute(RUN, goal_id) == goal_id
    ownership = goals.ownership(RUN)
    assert ownership is not None
    assert ownership.confirmed
    assert journal == [{"kind": "run", "id": "run-1", "goalId": goal_id, "confirmed": True}]
    # Attributing again changes nothing and tells nothing.
    assert goals.attribute(RUN, goal_id) == goal_id
    assert len(journal) == 1


def test_attribute_leaves_another_goals_pending_record_alone() -> None:
    goals = make()
    goal_id = "goal-1"
    goals.import_evidence([{"kind": "run", "id": "run-1", "goalId": goal_id, "confirmed": False}])
    assert goals.attribute(RUN, "goal-other") == goal_id
    ownership = goals.ownership(RUN)
    assert ownership is not None
    assert not ownership.confirmed


def test_attribute_works_with_no_goal_active() -> None:
    goals = make()
    assert goals.attribute(RUN, "goal-old") == "goal-old"
    assert goals.active_id is None


@pytest.mark.parametrize("goal_id", ["", "bad id", "x" * 129])
def test_attribute_refuses_a_malformed_goal_id(goal_id: str) -> None:
    goals = make()
    with raises(GoalErrorCode.INVALID):
        goals.attribute(RUN, goal_id)
    assert goals.evidence_count == 0


def test_attribute_and_settle_refuse_a_malformed_handle() -> None:
    goals = make()
    start(goals)
    goals.note_call("call-1")
    bad = TaskHandle(TaskKind.RUN, "bad id")
    with raises(GoalErrorCode.INVALID):
        goals.attribute(bad, "goal-1")
    with raises(GoalErrorCode.INVALID):
        goals.settle_call("call-1", bad)


# -- on_record -------------------------------------------------------------------------------------


def test_on_record_is_told_each_new_piece_of_evidence_in_order() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    goal_id = start(goals)
    goals.note_call("call-1")
    goals.settle_call("call-1", RUN)
    goals.bind(goal_id, [ALICE], tasks=[AGENT], authority=USER_TURN)
    goals.attribute(TaskHandle(TaskKind.RUN, "run-2"), goal_id)
    assert journal == [
        {"callId": "call-1", "goalId": goal_id},
        {"kind": "run", "id": "run-1", "goalId": goal_id, "confirmed": True},
        {"callId": "call-1", "goalId": goal_id, "settled": True},
        {"kind": "agent", "id": "agent-1", "goalId": goal_id, "confirmed": True},
        {"kind": "run", "id": "run-2", "goalId": goal_id, "confirmed": True},
    ]


def test_on_record_is_not_told_what_changes_nothing() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    goal_id = start(goals)
    goals.attribute(RUN, goal_id)
    journal.clear()
    goals.attribute(RUN, goal_id)
    goals.attribute(RUN, "goal-other")
    goals.note_call("call-1")
    goals.settle_call("call-1", None)  # settled, having created nothing: one marker
    journal.clear()
    goals.settle_call("call-1", AGENT)  # already settled: nothing
    goals.complete(goal_id, authority=USER_TURN)
    goals.revoke(RevokeReason.RELOAD)
    assert journal == []


def test_a_replayed_journal_does_not_take_settled_calls_for_pending_ones() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    start(goals)
    goals.note_call("call-1")
    goals.settle_call("call-1", RUN)
    goals.note_call("call-2")
    goals.settle_call("call-2", None)
    goals.note_call("call-3")  # its result never came
    fresh = make()
    fresh.import_evidence(journal)
    assert [e for e in fresh.export_evidence() if "callId" in e] == [
        {"callId": "call-3", "goalId": goals.noted_goal("call-3")}
    ]
    assert fresh.owner_of(RUN) == goals.owner_of(RUN)


def test_on_record_is_never_told_imports() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    result = goals.import_evidence(
        [
            {"callId": "call-1", "goalId": "goal-old"},
            {"kind": "run", "id": "run-1", "goalId": "goal-old", "confirmed": False},
        ]
    )
    assert (result.imported, result.rejected) == (2, 0)
    assert journal == []


def test_the_journal_replays_into_the_same_evidence() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    goal_id = start(goals)
    goals.note_call("call-1")
    goals.settle_call("call-1", RUN)
    goals.note_call("call-2")  # still pending
    goals.attribute(AGENT, goal_id)
    goals.revoke(RevokeReason.SHUTDOWN)
    restarted = make()
    restarted.import_evidence(journal)
    assert restarted.owner_of(RUN) == restarted.owner_of(AGENT) == goal_id
    assert restarted.noted_goal("call-2") == goal_id


# -- export / import -------------------------------------------------------------------------------


def test_call_notes_and_ownership_round_trip() -> None:
    goals = make()
    goal_id = start(goals)
    goals.note_call("call-done")
    goals.settle_call("call-done", RUN)
    goals.note_call("call-pending")
    goals.attribute(AGENT, goal_id)
    data = goals.export_evidence()
    # Ownership first, then the notes of calls whose result is still due (settled ones are gone).
    assert data == (
        ownership_entry(goals.ownership(RUN)),  # type: ignore[arg-type]
        ownership_entry(goals.ownership(AGENT)),  # type: ignore[arg-type]
        call_entry("call-pending", goal_id),
    )
    assert data[-1] == {"callId": "call-pending", "goalId": goal_id}
    goals.revoke(RevokeReason.RELOAD)

    reloaded = make()
    result = reloaded.import_evidence(data)
    assert (result.imported, result.rejected) == (3, 0)
    assert reloaded.export_evidence() == data
    assert reloaded.noted_goal("call-pending") == goal_id
    assert reloaded.noted_goal("call-done") is None


def test_a_late_result_after_a_reload_is_attributed_to_the_old_goal() -> None:
    goals = make()
    old = start(goals)
    goals.note_call("call-1")
    goals.revoke(RevokeReason.RELOAD)
    reloaded = make("goal-new")
    reloaded.import_evidence(goals.export_evidence())
    new = start(reloaded, "next")
    assert new != old
    assert reloaded.settle_call("call-1", RUN) == old
    assert reloaded.owner_of(RUN) == old


@pytest.mark.parametrize(
    "entry",
    [
        {"callId": "call-1", "goalId": "goal-1"},
        {"kind": "run", "id": "run-1", "goalId": "goal-1"},
        {"kind": "agent", "id": "agent-1", "goalId": "goal-1", "confirmed": False},
    ],
)
def test_import_never_restores_a_goal_and_marks_its_id_ended(entry: dict[str, object]) -> None:
    goals = make("goal-1", "goal-2")  # an id source that first repeats the imported id
    goals.import_evidence([entry])
    assert goals.active_id is None
    assert goals.last_end is None
    with raises(GoalErrorCode.INVALID):
        start(goals)
    assert goals.active_id is None
    assert start(goals) == "goal-2"


def test_an_imported_goal_id_is_never_reused_by_the_next_start() -> None:
    goals = make("goal-old", "goal-new")
    goals.import_evidence([{"callId": "call-1", "goalId": "goal-old"}])
    with raises(GoalErrorCode.INVALID):
        start(goals)
    assert start(goals) == "goal-new"
    # A member of the new goal can never act for the old one.
    goals.bind("goal-new", [ALICE], authority=USER_TURN)
    stale = Authority(
        AuthorityKind.PEER_TURN,
        goal_id="goal-old",
        sender=(ALICE.instance_id, ALICE.session_id),
    )
    assert goals.classify(stale) is AuthorityClass.OTHER


def test_import_keeps_an_existing_call_note() -> None:
    goals = make()
    goals.import_evidence([{"callId": "call-1", "goalId": "goal-a"}])
    goals.import_evidence([{"callId": "call-1", "goalId": "goal-b"}])
    assert goals.noted_goal("call-1") == "goal-a"


@pytest.mark.parametrize(
    "entry",
    [
        {"callId": "", "goalId": "goal-1"},
        {"callId": MAX_CALL + "c", "goalId": "goal-1"},
        {"callId": 7, "goalId": "goal-1"},
        {"callId": None, "goalId": "goal-1"},
        {"callId": "call-1"},
        {"callId": "call-1", "goalId": ""},
        {"callId": "call-1", "goalId": "bad id"},
        {"callId": "call-1", "goalId": 7},
    ],
)
def test_malformed_call_notes_are_rejected(entry: dict[str, object]) -> None:
    goals = make()
    result = goals.import_evidence([entry])
    assert (result.imported, result.rejected) == (0, 1)
    assert goals.export_evidence() == ()


def test_the_longest_call_id_is_imported() -> None:
    goals = make()
    assert goals.import_evidence([{"callId": MAX_CALL, "goalId": "goal-1"}]).imported == 1
    assert goals.noted_goal(MAX_CALL) == "goal-1"


def test_import_with_a_goal_active_is_refused_even_for_call_notes() -> None:
    goals = make()
    start(goals)
    with raises(GoalErrorCode.INVALID):
        goals.import_evidence([{"callId": "call-1", "goalId": "goal-old"}])
    assert goals.noted_goal("call-1") is None


# -- last_end, evidence_count, check_bind ---------------------------------------------------------


def test_last_end_reports_the_most_recent_end() -> None:
    goals = make()
    assert goals.last_end is None
    first = start(goals)
    assert goals.last_end is None
    goals.complete(first, authority=USER_TURN)
    assert goals.last_end == GoalEnd(first, RevokeReason.COMPLETED)
    second = start(goals, "next")
    assert goals.last_end == GoalEnd(first, RevokeReason.COMPLETED)  # kept while a goal runs
    goals.cancel(second, authority=USER_TURN)
    assert goals.last_end == GoalEnd(second, RevokeReason.CANCELLED)
    third = start(goals, "third")
    goals.revoke(RevokeReason.SCOPE_CHANGED)
    assert goals.last_end == GoalEnd(third, RevokeReason.SCOPE_CHANGED)
    assert goals.revoke(RevokeReason.LATCH) is None
    assert goals.last_end == GoalEnd(third, RevokeReason.SCOPE_CHANGED)


def test_evidence_count_counts_handles_not_call_notes() -> None:
    goals = make()
    goal_id = start(goals)
    goals.note_call("call-1")
    assert goals.evidence_count == 0
    goals.settle_call("call-1", RUN)
    goals.attribute(RUN, goal_id)
    assert goals.evidence_count == 1
    goals.attribute(AGENT, goal_id)
    assert goals.evidence_count == 2


def test_check_bind_accepts_without_changing_anything() -> None:
    journal: Journal = []
    goals = make(journal=journal)
    goal_id = start(goals)
    before = goals.status()
    goals.check_bind(goal_id, authority=USER_TURN)
    goals.check_bind(goal_id, authority=Authority(AuthorityKind.NOTIFICATION))
    assert goals.status() == before
    assert journal == []


@pytest.mark.parametrize(
    "authority",
    [
        Authority(AuthorityKind.PEER_TURN, goal_id="goal-1", sender=("a" * 32, "session-alice")),
        Authority(AuthorityKind.NOTIFICATION, notification_goals=frozenset({"goal-1"})),
        Authority(AuthorityKind.USER_TURN, cancelled=True),
        Authority(AuthorityKind.UNKNOWN),
    ],
)
def test_check_bind_refuses_other_authorities(authority: Authority) -> None:
    goals = make()
    goal_id = start(goals)
    goals.bind(goal_id, [ALICE], authority=USER_TURN)
    with raises(GoalErrorCode.NOT_AUTHORIZED):
        goals.check_bind(goal_id, authority=authority)


def test_check_bind_refuses_a_wrong_or_missing_goal() -> None:
    goals = make()
    with raises(GoalErrorCode.INVALID):
        goals.check_bind("goal-1", authority=USER_TURN)
    start(goals)
    with raises(GoalErrorCode.INVALID):
        goals.check_bind("goal-999", authority=USER_TURN)


# -- bounds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "kept"),
    [
        (bounds.MAX_GOAL_EVIDENCE - 1, bounds.MAX_GOAL_EVIDENCE - 1),
        (bounds.MAX_GOAL_EVIDENCE, bounds.MAX_GOAL_EVIDENCE),
        (bounds.MAX_GOAL_EVIDENCE + 1, bounds.MAX_GOAL_EVIDENCE),
    ],
)
def test_pending_call_notes_are_bounded_oldest_first(count: int, kept: int) -> None:
    assert bounds.MAX_GOAL_EVIDENCE == 512
    goals = make()
    goal_id = start(goals)
    for i in range(count):
        goals.note_call(f"call-{i}")
    notes = [entry for entry in goals.export_evidence() if "callId" in entry]
    assert len(notes) == kept
    assert (goals.noted_goal("call-0") is None) is (count > kept)
    assert goals.noted_goal(f"call-{count - 1}") == goal_id
    # A forgotten note is lost evidence: what its late result creates will look unowned.
    assert goals.evicted_evidence == count - kept
    assert goals.evidence_count == 0


def test_an_ended_goals_call_notes_go_before_the_active_goals() -> None:
    """Notes are taken only for the goal active at the call, one goal at a time, so an ended
    goal's notes are always older than the active goal's: oldest-first eviction takes them first
    (docs/security.md, bounded tables), and the active goal loses a note only to its own."""
    goals = make(max_evidence=4)
    old = start(goals)
    goals.note_call("old-1")
    goals.note_call("old-2")
    goals.cancel(old, authority=USER_TURN)
    new = start(goals, "the next objective")
    for i in range(4):
        goals.note_call(f"new-{i}")
    assert (goals.noted_goal("old-1"), goals.noted_goal("old-2")) == (None, None)
    assert [goals.noted_goal(f"new-{i}") for i in range(4)] == [new] * 4
    goals.note_call("new-4")
    assert goals.noted_goal("new-0") is None
    assert goals.noted_goal("new-4") == new
    assert goals.evicted_evidence == 3


@pytest.mark.parametrize(
    ("count", "kept"),
    [
        (bounds.MAX_GOAL_EVIDENCE - 1, bounds.MAX_GOAL_EVIDENCE - 1),
        (bounds.MAX_GOAL_EVIDENCE, bounds.MAX_GOAL_EVIDENCE),
        (bounds.MAX_GOAL_EVIDENCE + 1, bounds.MAX_GOAL_EVIDENCE),
    ],
)
def test_imported_call_notes_are_bounded(count: int, kept: int) -> None:
    goals = make()
    goals.import_evidence({"callId": f"call-{i}", "goalId": "goal-old"} for i in range(count))
    notes = [entry for entry in goals.export_evidence() if "callId" in entry]
    assert len(notes) == kept
    assert (goals.noted_goal("call-0") is None) is (count > kept)
    assert goals.evicted_evidence == count - kept


@pytest.mark.parametrize(
    ("count", "evicted"),
    [
        (bounds.MAX_GOAL_EVIDENCE - 1, 0),
        (bounds.MAX_GOAL_EVIDENCE, 0),
        (bounds.MAX_GOAL_EVIDENCE + 1, 1),
    ],
)
def test_settled_evidence_is_bounded_and_eviction_counted(count: int, evicted: int) -> None:
    goals = make()
    start(goals)
    for i, handle in enumerate(runs(count)):
        goals.note_call(f"call-{i}")
        goals.settle_call(f"call-{i}", handle)
    assert goals.evidence_count == min(count, bounds.MAX_GOAL_EVIDENCE)
    assert goals.evicted_evidence == evicted


@pytest.mark.parametrize(
    ("count", "evicted"),
    [
        (bounds.MAX_GOAL_EVIDENCE - 1, 0),
        (bounds.MAX_GOAL_EVIDENCE, 0),
        (bounds.MAX_GOAL_EVIDENCE + 1, 1),
    ],
)
def test_imported_evidence_is_bounded_and_eviction_counted(count: int, evicted: int) -> None:
    goals = make()
    result = goals.import_evidence(
        ownership_entry(TaskOwnership(handle, "goal-old", confirmed=True)) for handle in runs(count)
    )
    assert result.imported == count
    assert goals.evidence_count == min(count, bounds.MAX_GOAL_EVIDENCE)
    assert goals.evicted_evidence == evicted


def test_eviction_keeps_counting() -> None:
    goals = make(max_evidence=2)
    start(goals)
    for handle in runs(5):
        goals.attribute(handle, "goal-old")
    assert goals.evidence_count == 2
    assert goals.evicted_evidence == 3


# -- lost evidence keeps failing closed, across reloads too ---------------------------------------


def test_a_reload_keeps_failing_closed_on_evicted_evidence() -> None:
    goals = make(max_evidence=2)
    old = start(goals)
    for handle in runs(3):
        goals.attribute(handle, old)
    evicted = TaskHandle(TaskKind.RUN, "run-0")
    assert goals.classify(authority_of(notification(evicted), goals)) is AuthorityClass.OTHER
    goals.revoke(RevokeReason.RELOAD)
    data = goals.export_evidence()
    assert data[0] == {"evictedEvidence": 1}
    reloaded = make("goal-new", max_evidence=2)
    assert reloaded.import_evidence(data) == EvidenceImport(3, 0)
    assert reloaded.evicted_evidence == 1
    after = authority_of(notification(evicted), reloaded)
    assert after.notification_goals == {UNKNOWN_GOAL}
    assert reloaded.classify(after) is AuthorityClass.OTHER
    # A second reload carries the count on, plus what this incarnation lost.
    reloaded.attribute(TaskHandle(TaskKind.RUN, "run-9"), old)
    assert reloaded.evicted_evidence == 2
    again = make("goal-new", max_evidence=2)
    again.import_evidence(reloaded.export_evidence())
    assert again.evicted_evidence == 2


def test_no_marker_while_nothing_was_lost() -> None:
    goals = make()
    goal_id = start(goals)
    goals.attribute(RUN, goal_id)
    assert all("evictedEvidence" not in entry for entry in goals.export_evidence())


def test_the_loss_marker_is_never_journaled() -> None:
    journal: Journal = []
    goals = make(journal=journal, max_evidence=1)
    goal_id = start(goals)
    goals.attribute(RUN, goal_id)
    goals.attribute(AGENT, goal_id)
    assert goals.evicted_evidence == 1
    assert all("evictedEvidence" not in entry for entry in journal)
    # Replaying the journal loses the same evidence again, so it fails closed the same way.
    replayed = make(max_evidence=1)
    replayed.import_evidence(journal)
    assert replayed.evicted_evidence >= 1


@pytest.mark.parametrize(
    "entry",
    [
        {"evictedEvidence": 0},
        {"evictedEvidence": -1},
        {"evictedEvidence": True},
        {"evictedEvidence": "2"},
        {"evictedEvidence": 2.0},
        {"evictedEvidence": 2, "goalId": "goal-1"},
    ],
)
def test_a_malformed_loss_marker_is_rejected(entry: dict[str, object]) -> None:
    goals = make()
    assert goals.import_evidence([entry]) == EvidenceImport(0, 1)
    assert goals.evicted_evidence == 0


def test_an_evicted_call_note_counts_as_lost_evidence() -> None:
    goals = make(max_evidence=2)
    start(goals)
    for call_id in ("call-0", "call-1", "call-2"):
        goals.note_call(call_id)
    assert goals.noted_goal("call-0") is None
    assert goals.evicted_evidence == 1
    assert goals.settle_call("call-0", RUN) is None
    authority = authority_of(notification(RUN), goals)
    assert authority.notification_goals == {UNKNOWN_GOAL}
    assert goals.classify(authority) is AuthorityClass.OTHER


def test_an_id_held_by_a_pending_call_note_is_never_minted_again() -> None:
    goals = make("goal-new", "goal-old", "goal-fresh", max_ended=1)
    goals.import_evidence([{"callId": "call-old", "goalId": "goal-old"}])
    goals.complete(start(goals), authority=USER_TURN)  # pushes goal-old out of the ended list
    assert goals.noted_goal("call-old") == "goal-old"
    with raises(GoalErrorCode.INVALID):
        start(goals)
    assert start(goals) == "goal-fresh"
    assert goals.settle_call("call-old", RUN) == "goal-old"  # evidence only, never the new grant
