"""Goals and confirmations under random interleavings of actions, authorities and revocations.

The machine keeps its own model (the active goal, its exact member pairs, every ended id, the
imported evidence, the confirmation keys) and checks the code against it after every step. Small
bounds (4 peers, 4 confirmations, 6 evidence entries) make the machine reach every limit.

``PI_XS_STATEFUL_EXAMPLES`` sets the number of examples (default: 100 in ``make test``, ten times
that under the ``long`` hypothesis profile).
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.security.goals import (
    LOCAL_COMMAND,
    USER_TURN,
    Authority,
    AuthorityClass,
    AuthorityKind,
    GoalConfirmations,
    GoalError,
    GoalErrorCode,
    Goals,
    GoalState,
    Member,
    Reservation,
    RevokeReason,
    Scope,
    TaskHandle,
    TaskKind,
)
from tests.hypothesis_profiles import scaled

EXAMPLES = int(os.environ.get("PI_XS_STATEFUL_EXAMPLES", scaled(100)))
MAX_PEERS = 4
MAX_KEYS = 4
MAX_EVIDENCE = 6

OWNER = Scope("owner-session", "f" * 32, "/w")
INSTANCES = [f"{i:032x}" for i in range(6)]
SESSIONS = ["s-a", "s-b", "s-c"]
MEMBERS = st.builds(Member, st.sampled_from(INSTANCES), st.sampled_from(SESSIONS))
HANDLES = st.builds(TaskHandle, st.sampled_from(TaskKind), st.sampled_from(["t1", "t2", "t3"]))
RECEIVERS = st.sampled_from(INSTANCES[:3])
OUTCOMES = st.sampled_from(
    [Code.SUBMITTED, Code.QUEUED, Code.GOAL_NOT_AUTHORIZED, Code.TIMEOUT, Code.ACCEPTED]
)


class GoalsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.minted = 0
        self.calls = 0
        self.goals = Goals(
            OWNER,
            new_id=self.mint,
            max_peers=MAX_PEERS,
            max_evidence=MAX_EVIDENCE,
        )
        self.active: str | None = None
        self.members: dict[str, str] = {}
        self.ended: set[str] = set()
        self.imported: set[str] = set()
        self.confirmations = GoalConfirmations(max_keys=MAX_KEYS)
        self.flights: list[Reservation] = []

    # -- helpers ----------------------------------------------------------------------------------

    def mint(self) -> str:
        self.minted += 1
        return f"g{self.minted}"

    def goal_ids(self) -> st.SearchStrategy[str]:
        return st.sampled_from(["g1", "g2", "g3", "g999"])

    def authority(self, data: st.DataObject) -> Authority:
        kind = data.draw(st.sampled_from(AuthorityKind))
        goal = data.draw(st.one_of(st.none(), self.goal_ids()))
        member = data.draw(MEMBERS)
        cancelled = data.draw(st.booleans())
        notes = data.draw(st.frozensets(self.goal_ids(), max_size=2))
        return Authority(
            kind,
            cancelled=cancelled,
            goal_id=goal,
            sender=(member.instance_id, member.session_id),
            notification_goals=notes if kind is AuthorityKind.NOTIFICATION else frozenset(),
        )

    def expected_class(self, authority: Authority) -> AuthorityClass:
        if authority.cancelled:
            return AuthorityClass.OTHER
        if authority.kind in (AuthorityKind.LOCAL_COMMAND, AuthorityKind.USER_TURN):
            return AuthorityClass.LOCAL_USER
        if authority.kind is AuthorityKind.NOTIFICATION:
            if not authority.notification_goals:
                return AuthorityClass.LOCAL_NOTIFICATION
            if self.active is not None and authority.notification_goals == {self.active}:
                return AuthorityClass.GOAL_SCOPED
            return AuthorityClass.OTHER
        if (
            authority.kind is AuthorityKind.PEER_TURN
            and self.active is not None
            and authority.goal_id == self.active
            and authority.sender is not None
            and self.members.get(authority.sender[0]) == authority.sender[1]
        ):
            return AuthorityClass.GOAL_SCOPED
        return AuthorityClass.OTHER

    def end(self) -> None:
        assert self.active is not None
        self.ended.add(self.active)
        self.active = None
        self.members = {}

    # -- rules ------------------------------------------------------------------------------------

    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        authority = self.authority(data)
        cls = self.expected_class(authority)
        code: GoalErrorCode | None = None
        try:
            status = self.goals.start("objective", authority=authority)
        except GoalError as error:
            code = error.code
        if cls is not AuthorityClass.LOCAL_USER:
            assert code is GoalErrorCode.NOT_AUTHORIZED
        elif self.active is not None:
            assert code is GoalErrorCode.ALREADY_ACTIVE
        elif f"g{self.minted}" in self.ended:
            # The id source repeated an id that ended or came from evidence: never granted again.
            assert code is GoalErrorCode.INVALID
        else:
            assert code is None
            assert status.goal_id == f"g{self.minted}"
            self.active = status.goal_id

    @rule(data=st.data(), peers=st.lists(MEMBERS, min_size=1, max_size=3))
    def bind(self, data: st.DataObject, peers: list[Member]) -> None:
        goal_id = data.draw(self.goal_ids())
        authority = (
            data.draw(st.sampled_from([USER_TURN, LOCAL_COMMAND]))
            if data.draw(st.booleans())
            else self.authority(data)
        )
        before = dict(self.members)
        try:
            self.goals.bind(goal_id, peers, authority=authority)
        except GoalError:
            assert self.members == before
            return
        assert self.expected_class(authority) in (
            AuthorityClass.LOCAL_USER,
            AuthorityClass.LOCAL_NOTIFICATION,
        )
        assert goal_id == self.active
        self.members.update({m.instance_id: m.session_id for m in peers})
        assert len(self.members) <= MAX_PEERS

    @rule(data=st.data(), ids=st.lists(st.sampled_from(INSTANCES), min_size=1, max_size=3))
    def unbind(self, data: st.DataObject, ids: list[str]) -> None:
        goal_id = data.draw(self.goal_ids())
        code: GoalErrorCode | None = None
        try:
            self.goals.unbind(goal_id, ids, authority=USER_TURN)
        except GoalError as error:
            code = error.code
        if code is not None:
            assert goal_id != self.active
            assert code is GoalErrorCode.INVALID
            return
        for instance_id in ids:
            self.members.pop(instance_id, None)

    @rule(data=st.data(), cancel=st.booleans())
    def finish(self, data: st.DataObject, cancel: bool) -> None:
        goal_id = data.draw(st.one_of(self.goal_ids(), st.just(self.active or "g1")))
        authority = self.authority(data)
        cls = self.expected_class(authority)
        allowed = {AuthorityClass.LOCAL_USER, AuthorityClass.LOCAL_NOTIFICATION}
        if not cancel:
            allowed.add(AuthorityClass.GOAL_SCOPED)
        code: GoalErrorCode | None = None
        ended: str | None = None
        try:
            if cancel:
                ended = self.goals.cancel(goal_id, authority=authority)
            else:
                ended = self.goals.complete(goal_id, authority=authority)
        except GoalError as error:
            code = error.code
        if cls not in allowed:
            assert code is GoalErrorCode.NOT_AUTHORIZED
            return
        if goal_id != self.active:
            assert code is GoalErrorCode.INVALID
            return
        assert cls in allowed
        assert ended == self.active
        self.end()

    @rule(reason=st.sampled_from(RevokeReason))
    def revoke(self, reason: RevokeReason) -> None:
        revoked = self.goals.revoke(reason)
        assert revoked == self.active
        if revoked is not None:
            self.end()

    @rule(handle=HANDLES)
    def task(self, handle: TaskHandle) -> None:
        """A task-creating call: noted before it runs, attributed from its result."""
        before = self.goals.owner_of(handle)
        self.calls += 1
        call_id = f"call-{self.calls}"
        noted = self.goals.note_call(call_id)
        assert noted == self.active
        owner = self.goals.settle_call(call_id, handle)
        if noted is None:
            assert owner is None  # no goal, nothing noted: nothing attributed
        elif before is not None:
            assert owner == before  # the first record wins
        else:
            assert owner == self.active

    @precondition(lambda self: self.active is None)
    @rule(handle=HANDLES, goal_id=st.sampled_from(["old1", "old2", "g1", "g2"]))
    def import_evidence(self, handle: TaskHandle, goal_id: str) -> None:
        self.goals.import_evidence(
            [{"kind": handle.kind.value, "id": handle.id, "goalId": goal_id}]
        )
        self.imported.add(goal_id)
        self.ended.add(goal_id)

    @rule(receiver=RECEIVERS, goal=st.sampled_from(["g1", "g2", "g3"]), budget=st.integers(0, 1))
    def reserve(self, receiver: str, goal: str, budget: int) -> None:
        key = GoalConfirmations.key(receiver, goal)
        confirmed = key in self.confirmations
        result = self.confirmations.reserve(receiver, goal, budget)
        if budget > 0:
            assert isinstance(result, Reservation)
            assert result.charged
        elif confirmed:
            assert isinstance(result, Reservation)
            assert not result.charged
            assert key not in self.confirmations
        else:
            assert result is Code.BUDGET_EXHAUSTED
        if isinstance(result, Reservation):
            self.flights.append(result)

    @precondition(lambda self: self.flights)
    @rule(data=st.data(), outcome=OUTCOMES)
    def settle(self, data: st.DataObject, outcome: Code) -> None:
        reservation = self.flights.pop(data.draw(st.integers(0, len(self.flights) - 1)))
        refund = self.confirmations.settle(reservation, outcome)
        good = outcome in (Code.SUBMITTED, Code.QUEUED)
        assert refund is (good and reservation.charged)
        assert (reservation.key in self.confirmations) is good

    @rule()
    def clear_confirmations(self) -> None:
        self.confirmations.clear()
        self.flights.clear()

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def at_most_one_active_goal(self) -> None:
        assert self.goals.active_id == self.active
        assert (self.goals.state is GoalState.ACTIVE) is (self.active is not None)
        assert self.goals.status().goal_id == self.active

    @invariant()
    def ended_goals_never_come_back(self) -> None:
        assert self.active not in self.ended

    @invariant()
    def bound_peers_within_limit(self) -> None:
        assert len(self.goals.members) <= MAX_PEERS
        assert len(self.goals.status().peer_ids) <= MAX_PEERS

    @invariant()
    def members_are_exact_pairs(self) -> None:
        assert {m.instance_id: m.session_id for m in self.goals.members} == self.members
        for goal_id in {self.active or "g1", "g1", "g2"}:
            for instance_id in INSTANCES:
                for session_id in SESSIONS:
                    expected = (
                        goal_id == self.active and self.members.get(instance_id) == session_id
                    )
                    assert self.goals.is_member(goal_id, instance_id, session_id) is expected

    @invariant()
    def evidence_never_grants(self) -> None:
        assert self.active not in self.imported
        for goal_id in self.imported | self.ended:
            notice = Authority(AuthorityKind.NOTIFICATION, notification_goals=frozenset({goal_id}))
            assert self.goals.classify(notice) is AuthorityClass.OTHER
        assert len(self.goals.export_evidence()) <= MAX_EVIDENCE

    @invariant()
    def confirmations_within_limit(self) -> None:
        assert len(self.confirmations) <= MAX_KEYS


GoalsMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40)
TestGoalsMachine = GoalsMachine.TestCase
