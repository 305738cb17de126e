"""The turn tracker (security/turns.py): its table as a total function, and the rules it encodes.

Every (state, event) pair is reached through the tracker's public API and checked against
:data:`turns.TRANSITIONS` and against what each state means, written out here independently (which
states hold a turn on record, which wait for our submission, what admission's phase is). Then the
rules of spec §5.4-5.6 and spec §7.3, one per test, and a random walk that keeps every invariant.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.security.goals import TaskHandle, TaskKind
from pi_cross_session._internal.security.provenance import (
    NO_TURN,
    PeerClaim,
    Provenance,
    TurnAuthority,
)
from pi_cross_session._internal.security.turns import (
    TRANSITIONS,
    EventKind,
    ModelReplied,
    OurMessageStarted,
    Phase,
    Settle,
    TurnAbandoned,
    TurnAborted,
    TurnEnded,
    TurnEnding,
    TurnEventError,
    TurnOpened,
    TurnPreparing,
    TurnStarted,
    TurnState,
    TurnTracker,
)
from tests.hypothesis_profiles import scaled

S = TurnState
K = EventKind
KEY = ("a" * 32, "m-1")
DEADLINE = 105.0
CLAIM = PeerClaim("goal-1", ("a" * 32, "session-a"))
RUN = TaskHandle(TaskKind.RUN, "run-1")

#: What each state means, written out independently of the module.
ON_RECORD = {S.OPENING, S.RUNNING}
AWAITING = {S.AWAITING, S.AWAITING_PREPARING}
HOST_ACTIVE = {S.PREPARING, S.AWAITING_PREPARING, S.OPENING, S.RUNNING, S.OFF_RECORD}
PHASE = {
    S.IDLE: Phase.IDLE,
    S.PREPARING: Phase.PREFLIGHT,
    S.AWAITING: Phase.PREFLIGHT,
    S.AWAITING_PREPARING: Phase.PREFLIGHT,
    S.OPENING: Phase.BUSY,
    S.RUNNING: Phase.BUSY,
    S.OFF_RECORD: Phase.IDLE,
}
HOST_EVENTS = (
    K.PREPARING,
    K.ABANDONED,
    K.STARTED,
    K.OPENED,
    K.OURS,
    K.REPLIED,
    K.ABORTED,
    K.ENDED,
)


class Book:
    """The observer: what admission would be told, and the claim it answers with."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, str]] = []
        self.aborts = 0
        self.settles: list[Settle] = []

    def message_entered(self, message_id: str, sender_instance_id: str) -> PeerClaim | None:
        self.entered.append((sender_instance_id, message_id))
        return CLAIM if (sender_instance_id, message_id) == KEY else None

    def turn_aborted(self) -> None:
        self.aborts += 1

    def turn_settled(self, settle: Settle) -> None:
        self.settles.append(settle)


def fire(tracker: TurnTracker, kind: EventKind) -> None:
    """Report one event of ``kind`` through the public API (a representative payload)."""
    actions: dict[EventKind, Callable[[], object]] = {
        K.PREPARING: lambda: tracker.handle(TurnPreparing()),
        K.ABANDONED: lambda: tracker.handle(TurnAbandoned()),
        K.STARTED: lambda: tracker.handle(TurnStarted()),
        K.OPENED: lambda: tracker.handle(TurnOpened(Provenance.USER)),
        K.OURS: lambda: tracker.handle(OurMessageStarted(KEY[1], KEY[0])),
        K.REPLIED: lambda: tracker.handle(ModelReplied()),
        K.ABORTED: lambda: tracker.handle(TurnAborted()),
        K.ENDED: lambda: tracker.handle(TurnEnded(TurnEnding.STOP)),
        K.SUBMITTING: lambda: tracker.submitting(KEY, deadline=DEADLINE),
        K.SUBMIT_FAILED: lambda: tracker.submit_failed(KEY),
        K.NO_START: lambda: tracker.expire(DEADLINE),
        K.WITHDRAWN: tracker.withdraw,
        K.RESET: tracker.reset,
        K.REBASE: tracker.rebase,
    }
    actions[kind]()


#: A way into each state from a fresh tracker.
PATHS: dict[TurnState, tuple[EventKind, ...]] = {
    S.IDLE: (),
    S.PREPARING: (K.PREPARING,),
    S.AWAITING: (K.SUBMITTING,),
    S.AWAITING_PREPARING: (K.SUBMITTING, K.PREPARING),
    S.OPENING: (K.STARTED,),
    S.RUNNING: (K.STARTED, K.REPLIED),
    S.OFF_RECORD: (K.STARTED, K.REBASE),
}


def tracker_in(state: TurnState) -> tuple[TurnTracker, Book]:
    tracker = TurnTracker()
    book = Book()
    tracker.observe(book)
    for kind in PATHS[state]:
        fire(tracker, kind)
    assert tracker.state is state
    return tracker, book


def check_invariants(tracker: TurnTracker) -> None:
    state = tracker.state
    assert tracker.on_record is (state in ON_RECORD)
    assert (tracker.awaiting is not None) is (state in AWAITING)
    assert (tracker.deadline is not None) is (state in AWAITING)
    assert tracker.host_active is (state in HOST_ACTIVE)
    assert tracker.phase is PHASE[state]
    assert (tracker.facts is None) is (state not in ON_RECORD)
    if state not in ON_RECORD:
        assert tracker.authority == NO_TURN
        assert not tracker.queueable


# -- the table as a total function -----------------------------------------------------------------


def test_the_table_is_total() -> None:
    assert set(TRANSITIONS) == set(itertools.product(TurnState, EventKind))
    assert set(PATHS) == set(TurnState)


def test_only_admissions_own_events_can_be_refused() -> None:
    # A host adapter needs no state of its own: every host event is taken in every state.
    refused = {pair for pair, step in TRANSITIONS.items() if step is None}
    assert all(kind in (K.SUBMITTING, K.NO_START, K.RESET) for _, kind in refused)
    # Admission submits only when nothing is on record; resume, with no turn or wait of ours.
    assert {s for s, k in refused if k is K.SUBMITTING} == set(TurnState) - {
        S.IDLE,
        S.OFF_RECORD,
    }
    assert {s for s, k in refused if k is K.RESET} == AWAITING | ON_RECORD


@pytest.mark.parametrize(("state", "kind"), list(itertools.product(TurnState, EventKind)))
def test_every_event_in_every_state_does_what_the_table_says(
    state: TurnState, kind: EventKind
) -> None:
    tracker, book = tracker_in(state)
    step = TRANSITIONS[(state, kind)]
    if step is None:
        if kind is K.NO_START:  # expire() applies it only once a deadline has passed
            assert tracker.expire(DEADLINE) is None
        else:
            with pytest.raises(TurnEventError) as raised:
                fire(tracker, kind)
            assert isinstance(raised.value, LocalProtocolError)
        assert tracker.state is state  # a refusal changes nothing
        check_invariants(tracker)
        return
    aborts, settles = book.aborts, len(book.settles)
    fire(tracker, kind)
    assert tracker.state is step.to
    check_invariants(tracker)
    # Every abort reaches admission (the latch), and every end is told exactly once.
    assert book.aborts == aborts + (kind is K.ABORTED)
    assert len(book.settles) == settles + (kind is K.ENDED)


@pytest.mark.parametrize("state", list(TurnState))
def test_an_end_always_leaves_no_turn_on_record(state: TurnState) -> None:
    tracker, _ = tracker_in(state)
    tracker.handle(TurnEnded(TurnEnding.ERROR))
    assert tracker.state in (S.IDLE, S.AWAITING)
    assert not tracker.on_record


# -- the rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", list(Provenance))
def test_a_turn_that_starts_while_our_message_lands_is_a_peer_turn(by: Provenance) -> None:
    tracker, _ = tracker_in(S.AWAITING)
    tracker.handle(TurnStarted(by))
    tracker.handle(TurnOpened(Provenance.USER))  # the user's prompt that won the race
    assert tracker.authority == TurnAuthority(Provenance.PEER)
    assert tracker.queueable
    assert tracker.awaiting is None


def test_our_message_still_lands_after_its_grace_ended() -> None:
    # The host has it: the next turn is ours even though admission stopped waiting (and latched).
    tracker, _ = tracker_in(S.AWAITING)
    assert tracker.expire(DEADLINE - 0.001) is None
    assert tracker.expire(DEADLINE) == KEY
    assert tracker.state is S.IDLE
    tracker.handle(TurnStarted())
    assert tracker.authority.provenance is Provenance.PEER


def test_a_refused_submission_lands_nowhere() -> None:
    tracker, _ = tracker_in(S.AWAITING)
    tracker.submit_failed(KEY)
    tracker.handle(TurnStarted())
    assert tracker.authority.provenance is Provenance.UNKNOWN


def test_a_withdrawn_submission_may_still_land() -> None:
    tracker, _ = tracker_in(S.AWAITING_PREPARING)
    tracker.withdraw()
    assert tracker.state is S.PREPARING
    tracker.handle(TurnStarted())
    assert tracker.authority.provenance is Provenance.PEER


def test_provenance_is_ranked_and_never_lowered_and_fixed_after_the_opening() -> None:
    tracker, _ = tracker_in(S.OPENING)
    tracker.handle(TurnOpened(Provenance.NOTIFICATION, (RUN,)))
    assert tracker.authority.provenance is Provenance.NOTIFICATION
    tracker.handle(TurnOpened(Provenance.USER))
    tracker.handle(TurnOpened(Provenance.UNKNOWN))
    assert tracker.authority.provenance is Provenance.USER
    tracker.handle(OurMessageStarted(KEY[1], KEY[0]))
    assert tracker.authority.provenance is Provenance.PEER
    tracker.handle(ModelReplied())
    before = tracker.facts
    tracker.handle(TurnOpened(Provenance.NOTIFICATION, (TaskHandle(TaskKind.AGENT, "a-1"),)))
    tracker.handle(TurnStarted(Provenance.USER))  # a host retry inside the turn
    assert tracker.facts == before
    assert before is not None
    assert (before.claims, before.handles) == (frozenset({CLAIM}), frozenset({RUN}))


def test_our_message_is_confirmed_whenever_it_enters_but_claims_only_in_the_opening() -> None:
    tracker, book = tracker_in(S.RUNNING)
    tracker.handle(OurMessageStarted(KEY[1], KEY[0]))
    assert book.entered == [KEY]
    facts = tracker.facts
    assert facts is not None
    assert facts.claims == frozenset()
    assert facts.provenance is Provenance.UNKNOWN


@pytest.mark.parametrize(
    ("opened_by", "cancel", "ending", "expected"),
    [
        (Provenance.USER, False, TurnEnding.STOP, Settle.SAFE),
        (Provenance.NOTIFICATION, False, TurnEnding.STOP, Settle.SAFE),
        (Provenance.PEER, False, TurnEnding.STOP, Settle.SAFE),
        (Provenance.UNKNOWN, False, TurnEnding.STOP, Settle.UNSAFE),
        (Provenance.USER, True, TurnEnding.STOP, Settle.UNSAFE),
        *(
            (Provenance.USER, False, e, Settle.UNSAFE)
            for e in TurnEnding
            if e is not TurnEnding.STOP
        ),
    ],
)
def test_how_a_turn_on_record_settles(
    opened_by: Provenance, cancel: bool, ending: TurnEnding, expected: Settle
) -> None:
    tracker, book = tracker_in(S.OPENING)
    tracker.handle(TurnOpened(opened_by))
    if cancel:
        tracker.handle(TurnAborted())
    tracker.handle(TurnEnded(ending))
    assert book.settles == [expected]


@pytest.mark.parametrize("state", [S.IDLE, S.PREPARING, S.AWAITING, S.OFF_RECORD])
@pytest.mark.parametrize("ending", list(TurnEnding))
def test_an_end_with_no_turn_on_record_is_quiet_only_when_clean(
    state: TurnState, ending: TurnEnding
) -> None:
    tracker, book = tracker_in(state)
    tracker.handle(TurnEnded(ending))
    assert book.settles == [Settle.QUIET if ending is TurnEnding.STOP else Settle.UNSAFE]


def test_a_cancelled_turn_stays_cancelled_and_is_not_queueable() -> None:
    tracker, _ = tracker_in(S.OPENING)
    tracker.handle(TurnOpened(Provenance.USER))
    assert tracker.queueable
    tracker.handle(TurnAborted())
    tracker.handle(ModelReplied())
    tracker.handle(TurnStarted(Provenance.USER))
    assert tracker.authority == TurnAuthority(Provenance.USER, cancelled=True)
    assert not tracker.queueable


def test_calls_between_turns_are_judged_by_the_last_turn_until_a_rebase() -> None:
    tracker, _ = tracker_in(S.OPENING)
    tracker.handle(TurnOpened(Provenance.USER))
    tracker.handle(TurnAborted())
    tracker.handle(TurnEnded(TurnEnding.ABORTED))
    assert tracker.authority_for_call(own_loop=False) == TurnAuthority(Provenance.USER)
    assert tracker.authority_for_call(own_loop=True) == NO_TURN
    tracker.rebase()
    assert tracker.authority_for_call(own_loop=False) == NO_TURN


def test_a_rebase_forgets_the_running_turn_but_not_that_the_host_is_busy() -> None:
    tracker, book = tracker_in(S.RUNNING)
    tracker.handle(TurnOpened(Provenance.USER))
    tracker.rebase()
    assert tracker.state is S.OFF_RECORD
    assert tracker.turn_running
    assert tracker.host_active
    assert tracker.authority == NO_TURN
    tracker.handle(TurnEnded(TurnEnding.STOP))  # the old turn ends in the new incarnation
    assert book.settles == [Settle.QUIET]


def test_without_an_observer_nothing_is_told_and_nothing_is_claimed() -> None:
    tracker = TurnTracker()
    tracker.handle(TurnStarted())
    tracker.handle(OurMessageStarted(KEY[1], KEY[0]))
    tracker.handle(TurnAborted())
    tracker.handle(TurnEnded(TurnEnding.STOP))
    assert tracker.authority_for_call(own_loop=False) == TurnAuthority(Provenance.PEER)


# -- a random walk ---------------------------------------------------------------------------------


@settings(max_examples=scaled(300))
@given(st.lists(st.sampled_from(list(EventKind)), max_size=40))
def test_any_sequence_of_events_keeps_the_invariants(kinds: list[EventKind]) -> None:
    tracker = TurnTracker()
    book = Book()
    tracker.observe(book)
    for kind in kinds:
        state = tracker.state
        step = TRANSITIONS[(state, kind)]
        if step is None:
            if kind is not K.NO_START:
                with pytest.raises(TurnEventError):
                    fire(tracker, kind)
            assert tracker.state is state
        else:
            fire(tracker, kind)
            assert tracker.state is step.to
        check_invariants(tracker)
    assert book.aborts == kinds.count(K.ABORTED)
    assert len(book.settles) == kinds.count(K.ENDED)
