"""The goal grant under random sessions: no peer action widens a goal or escapes the grant.

One host session, modelled as the host adapter wires it: a :class:`Goals`, a turn tracker
and the default :class:`GatePolicy`. The local user starts, binds, completes and cancels goals by
command; turns begin with random openings (the user, peers with member or stranger claims naming
the right, an old or a forged goal, notifications naming random task handles, nothing at all),
may be cancelled, and end safely or not; within a turn the model makes random tool calls that
:func:`decide` judges with the grant of :func:`goal_turns.grant_for`. Allowed ``peer_goal`` calls
are executed against the goals with :func:`goal_turns.authority_of`; allowed task calls are
noted before they run and settled later with random results; latches, unsafe ends, reloads
(export, new incarnation, import) and revocations strike at random, and the goal id source
sometimes repeats an id this incarnation knows has ended.

The machine keeps its own model (the active goal and its objective, the exact member pairs, every
ended id, every handle's first owner, the running turn's opening) and predicts every verdict and
every goal action from it, independently of the code. Invariants, after every step:

1. the objective of an active goal never changes while it is active;
2. membership only ever grows through actions taken with local authority (the user's command or
   turn, or an unscoped notification);
3. an ended goal id never becomes active again;
4. every call allowed in a turn that is neither the user's nor an unscoped notification is
   either not gated at all or permitted by ``grant_allows`` for the goal active at that moment,
   with the turn scoped to it;
5. ``peer_goal`` ``start``/``bind`` never succeed from a peer, unknown, cancelled or goal-scoped
   turn, and ``cancel`` never from a goal-scoped one.

The evidence bounds are left at their defaults (no run gets near 512 handles): eviction and its
fail-closed reading are covered by the unit tests. ``PI_XS_STATEFUL_EXAMPLES`` sets the number of
examples (default: 100 in ``make test``, ten times that under the ``long`` hypothesis profile).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pi_cross_session._internal.security import goal_turns
from pi_cross_session._internal.security.gate import GatePolicy, decide
from pi_cross_session._internal.security.goals import (
    LOCAL_COMMAND,
    Authority,
    AuthorityClass,
    GoalError,
    GoalErrorCode,
    Goals,
    Member,
    RevokeReason,
    Scope,
    TaskHandle,
    TaskKind,
    TaskOwnership,
    ownership_entry,
)
from pi_cross_session._internal.security.provenance import (
    PeerClaim,
    Provenance,
    TurnAuthority,
    TurnFacts,
)
from pi_cross_session._internal.security.task_rules import (
    created_handle,
    notification_handles,
    rule_for,
)
from tests.hypothesis_profiles import scaled
from tests.support.turn_driver import TurnDriver

EXAMPLES = int(os.environ.get("PI_XS_STATEFUL_EXAMPLES", scaled(100)))

OWNER = Scope("owner-session", "f" * 32, "/w")
#: Live peers: runtime instance id -> session id.
LIVE = {f"{i:032x}": f"session-{i}" for i in range(1, 5)}
INSTANCES = sorted(LIVE)
IDS = ("t1", "t2", "t3", "t4")
HANDLES = tuple(TaskHandle(kind, i) for kind in TaskKind for i in IDS)
#: What a handle argument may hold: real ids, a malformed one, and "names nothing".
TARGETS = (*IDS, "bad id", 7, "", None)
SCHEDULES = (None, False, "", "daily", True)
OBJECTIVES = ("ship the parser", "  padded objective  ", "ship the parser", " ", "")
FORGED_GOAL = "g-forged"
#: The goal of an earlier incarnation, known only from the journal.
OLD_GOAL = "g-old"
MESH_DRIVE = (
    "resume",
    "retry_failed",
    "steer",
    "cancel",
    "pause",
    "message_send",
    "message_broadcast",
    "growth_decide",
)
MESH_READ_ONLY = ("status", "list", "list_agents")
MESH_ACTIONS = ("run", *MESH_DRIVE, "continue", "recover", "bridge_send", *MESH_READ_ONLY, None)
GOAL_ACTIONS = ("start", "bind", "unbind", "complete", "cancel", "status", "inspect")
NEVER_GRANTED = (
    "agent",
    "subagent",
    "set_config",
    "set_active_tools",
    "send_user_message",
    "goal_update",
    "goal_complete",
)
CALL_KINDS = (
    "workflow",
    "Agent",
    "steer_subagent",
    "send_subagent",
    "never",
    "mesh",
    "mesh_control",
    "peer_goal",
    "peer_goal",
    "ungated",
    "edit",
)
#: What happens within a turn played by one rule: calls most often, rarely an end of the goal.
TURN_STEPS = ("call",) * 14 + ("result",) * 2 + ("late", "cancel", "goal ends")
#: The local user's commands, and what happens to the session between turns.
USER_ACTIONS = (
    "start",
    "start and bind",
    "start and bind",
    "start and bind",
    "bind",
    "bind tasks",
    "bind tasks",
    "unbind",
    "complete",
    "cancel",
    "revoke",
    "result",
    "id repeats",
)
REVOCATIONS = (
    RevokeReason.LATCH,
    RevokeReason.RELOAD,
    RevokeReason.SCOPE_CHANGED,
    RevokeReason.SHUTDOWN,
)
#: One tool call's random choices, drawn at once (a draw per call keeps the machine fast): the
#: tool, a handle argument and whether it is given, a schedule and whether it is given, a mesh
#: action, a goal action, which goal id (an index into the machine's choices), an objective,
#: peer ids, and which name among a kind's.
CALL_SHAPES = st.tuples(
    st.sampled_from(CALL_KINDS),
    st.sampled_from(TARGETS),
    st.booleans(),
    st.sampled_from(SCHEDULES),
    st.booleans(),
    st.sampled_from(MESH_ACTIONS),
    st.sampled_from(GOAL_ACTIONS),
    st.integers(0, 7),
    st.sampled_from((None, *OBJECTIVES)),
    st.none() | st.lists(st.sampled_from(INSTANCES), max_size=2),
    st.integers(0, 6),
)
POLICY = GatePolicy()
LOCAL = frozenset({AuthorityClass.LOCAL_USER, AuthorityClass.LOCAL_NOTIFICATION})

Arguments = dict[str, object]


@dataclass
class ModelTurn:
    """What the model knows of the running turn's opening."""

    provenance: Provenance
    cancelled: bool = False
    claims: set[PeerClaim] = field(default_factory=set)
    handles: set[TaskHandle] = field(default_factory=set)


@dataclass(frozen=True)
class Call:
    """A tool call and what the model expects the gate to make of it."""

    name: str
    arguments: Arguments
    #: The default policy gates it at all.
    gated: bool
    #: A turn scoped to the active goal may make it.
    granted: bool
    #: A blocked ``peer_goal`` call is executed anyway (the gate bypassed or failed open).
    bypass: bool = False


def _given(value: object) -> bool:
    return value is not None and value is not False and value != ""


class GoalGrantMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.minted = 0
        self.repeat: str | None = None
        #: What the goals told ``on_record`` (the session journal), after the imported history.
        self.journal: list[dict[str, object]] = []
        self.goals = self.incarnation()
        self.ledger = TurnDriver()
        self.calls = 0
        # -- the model --
        self.active: str | None = None
        self.objective: str | None = None
        self.members: dict[str, str] = {}
        self.ended_ever: set[str] = set()
        #: Ended ids the current incarnation can know (ended here, or named by its evidence).
        self.known_ended: set[str] = set()
        self.owner: dict[TaskHandle, str] = {}
        #: Noted calls whose result is due: call id -> (tool, arguments, goal noted).
        self.pending: dict[str, tuple[str, Arguments, str]] = {}
        self.turn: ModelTurn | None = None

    # -- plumbing ---------------------------------------------------------------------------------

    def incarnation(self) -> Goals:
        return Goals(OWNER, new_id=self.mint, on_record=self.journal.append)

    def mint(self) -> str:
        if self.repeat is not None:
            goal_id, self.repeat = self.repeat, None
            return goal_id
        self.minted += 1
        return f"g{self.minted}"

    def end_goal(self) -> None:
        assert self.active is not None
        self.ended_ever.add(self.active)
        self.known_ended.add(self.active)
        self.active = None
        self.objective = None
        self.members = {}

    def goal_id_choices(self) -> list[str | None]:
        """The active goal's id (most often), an ended one, a forged one, none."""
        choices: list[str | None] = [FORGED_GOAL, None, *sorted(self.ended_ever)[-2:]]
        if self.active is not None:
            choices += [self.active] * 4
        return choices

    def owned_by_active(self, kind: TaskKind, value: object) -> bool:
        return (
            self.active is not None
            and isinstance(value, str)
            and value in IDS
            and self.owner.get(TaskHandle(kind, value)) == self.active
        )

    def handle_granted(self, kind: TaskKind, value: object, *, creates: bool) -> bool:
        if not _given(value):
            return creates
        return self.owned_by_active(kind, value)

    # -- the model's view of the running turn -----------------------------------------------------

    def is_local(self) -> bool:
        """The user's turn, or a notification naming no handle any goal ever owned."""
        turn = self.turn
        if turn is None or turn.cancelled:
            return False
        if turn.provenance is Provenance.USER:
            return True
        if turn.provenance is Provenance.NOTIFICATION:
            return not any(handle in self.owner for handle in turn.handles)
        return False

    def is_scoped(self) -> bool:
        """A turn scoped to the goal active now: its member's message, or its tasks' notices."""
        turn, active = self.turn, self.active
        if turn is None or turn.cancelled or active is None:
            return False
        if turn.provenance is Provenance.NOTIFICATION:
            owners = {self.owner[h] for h in turn.handles if h in self.owner}
            return owners == {active}
        if turn.provenance is Provenance.PEER and len(turn.claims) == 1:
            (claim,) = turn.claims
            instance_id, session_id = claim.sender
            return claim.goal_id == active and self.members.get(instance_id) == session_id
        return False

    def model_class(self, *, aborted: bool) -> AuthorityClass:
        turn = self.turn
        if turn is None or aborted or turn.cancelled:
            return AuthorityClass.OTHER
        if self.is_local():
            if turn.provenance is Provenance.USER:
                return AuthorityClass.LOCAL_USER
            return AuthorityClass.LOCAL_NOTIFICATION
        if self.is_scoped():
            return AuthorityClass.GOAL_SCOPED
        return AuthorityClass.OTHER

    # -- goal actions (the tool's execute, or the user's command) ---------------------------------

    def predict(
        self,
        action: str,
        cls: AuthorityClass,
        goal_id: str,
        objective: str,
        peer_ids: list[str],
    ) -> GoalErrorCode | None:
        if action == "start":
            if cls is not AuthorityClass.LOCAL_USER:
                return GoalErrorCode.NOT_AUTHORIZED
            if not objective.strip():
                return GoalErrorCode.INVALID
            if self.active is not None:
                return GoalErrorCode.ALREADY_ACTIVE
            if self.repeat is not None:
                return GoalErrorCode.INVALID  # a repeated, ended id is never minted again
            return None
        allowed = LOCAL | {AuthorityClass.GOAL_SCOPED} if action == "complete" else LOCAL
        if cls not in allowed:
            return GoalErrorCode.NOT_AUTHORIZED
        if self.active is None or goal_id != self.active:
            return GoalErrorCode.INVALID
        if action in ("bind", "unbind") and not peer_ids:
            return GoalErrorCode.INVALID
        return None

    def act(
        self,
        action: str,
        authority: Authority,
        cls: AuthorityClass,
        goal_id: str | None,
        objective: str | None,
        peer_ids: list[str] | None,
    ) -> None:
        """Run one goal action and check it against the model's prediction."""
        assert self.goals.classify(authority) is cls
        gid, text, ids = goal_id or "", objective or "", list(peer_ids or ())
        expected = self.predict(action, cls, gid, text, ids)
        repeated = self.repeat
        outcome: GoalErrorCode | None = None
        try:
            if action == "start":
                started = self.goals.start(text, authority=authority).goal_id
            elif action == "bind":
                peers = [Member(i, LIVE[i]) for i in ids]
                self.goals.bind(gid, peers, authority=authority)
            elif action == "unbind":
                self.goals.unbind(gid, ids, authority=authority)
            elif action == "complete":
                assert self.goals.complete(gid, authority=authority) == self.active
            else:
                assert action == "cancel"
                assert self.goals.cancel(gid, authority=authority) == self.active
        except GoalError as error:
            outcome = error.code
        assert outcome == expected, (action, cls, outcome, expected)
        event(f"{action} by {cls.value}: {'ok' if outcome is None else outcome.value}")
        if outcome is not None:
            return
        # (5) who may succeed at all.
        if action == "start":
            assert cls is AuthorityClass.LOCAL_USER
            assert repeated is None
            assert started == f"g{self.minted}"
            assert started not in self.ended_ever
            self.active, self.objective = started, text.strip()
        elif action == "bind":
            assert cls in LOCAL  # (2) membership grows with local authority only
            self.members.update({i: LIVE[i] for i in ids})
        elif action == "unbind":
            assert cls in LOCAL
            for instance_id in ids:
                self.members.pop(instance_id, None)
        else:
            if action == "cancel":
                assert cls is not AuthorityClass.GOAL_SCOPED
                assert cls in LOCAL
            self.end_goal()

    # -- the local user's commands ----------------------------------------------------------------

    @initialize(
        history=st.lists(st.sampled_from(HANDLES), max_size=3, unique=True),
        setup=st.sampled_from(["none", "goal", "members", "members", "members"]),
        ids=st.lists(st.sampled_from(INSTANCES), min_size=1, max_size=2),
        tasks=st.lists(st.sampled_from(HANDLES), max_size=2),
    )
    def setting_up(
        self, history: list[TaskHandle], setup: str, ids: list[str], tasks: list[TaskHandle]
    ) -> None:
        """The journal of an earlier incarnation may hold an old goal's tasks; most sessions
        then begin with a goal, often with members and tasks bound by the user."""
        if history:
            data = [ownership_entry(TaskOwnership(h, OLD_GOAL, confirmed=True)) for h in history]
            assert self.goals.import_evidence(data).imported == len(history)
            assert self.journal == []  # an import is never journaled again
            self.journal.extend(data)
            self.owner.update(dict.fromkeys(history, OLD_GOAL))
            self.ended_ever.add(OLD_GOAL)
            self.known_ended.add(OLD_GOAL)
        if setup == "none":
            return
        self.act("start", LOCAL_COMMAND, AuthorityClass.LOCAL_USER, None, OBJECTIVES[0], None)
        if setup == "members":
            self.act("bind", LOCAL_COMMAND, AuthorityClass.LOCAL_USER, self.active, None, ids)
            if tasks:
                self.bind_tasks(self.active, tasks)

    @rule(data=st.data(), action=st.sampled_from(USER_ACTIONS))
    def user_command(self, data: st.DataObject, action: str) -> None:
        """The local user's own command (full local authority, any goal id), or a revocation."""
        goal_id = data.draw(st.sampled_from(self.goal_id_choices()))
        if action == "revoke":
            self.revocation(data.draw(st.sampled_from(REVOCATIONS)))
        elif action == "result":
            if self.pending:
                self.result_arrives(data)
        elif action == "id repeats":
            if self.known_ended:
                self.id_source_repeats(data)
        elif action == "start":
            objective = data.draw(st.sampled_from(OBJECTIVES))
            self.act("start", LOCAL_COMMAND, AuthorityClass.LOCAL_USER, None, objective, None)
        elif action == "start and bind":
            if self.active is None:
                self.act("start", LOCAL_COMMAND, AuthorityClass.LOCAL_USER, None, "go", None)
            ids = data.draw(st.lists(st.sampled_from(INSTANCES), min_size=1, max_size=2))
            self.act("bind", LOCAL_COMMAND, AuthorityClass.LOCAL_USER, self.active, None, ids)
        elif action == "bind tasks":
            tasks = data.draw(st.lists(st.sampled_from(HANDLES), min_size=1, max_size=2))
            self.bind_tasks(goal_id, tasks)
        else:
            size = 0 if action == "bind" else 1
            ids = data.draw(st.lists(st.sampled_from(INSTANCES), min_size=size, max_size=2))
            self.act(action, LOCAL_COMMAND, AuthorityClass.LOCAL_USER, goal_id, None, ids)

    def bind_tasks(self, goal_id: str | None, tasks: list[TaskHandle]) -> None:
        goal_id = goal_id or ""
        if self.active is None or goal_id != self.active:
            expected: GoalErrorCode | None = GoalErrorCode.INVALID
        elif any(self.owner.get(handle, self.active) != self.active for handle in tasks):
            expected = GoalErrorCode.TASK_OWNED
        else:
            expected = None
        outcome: GoalErrorCode | None = None
        try:
            self.goals.bind(goal_id, tasks=tasks, authority=LOCAL_COMMAND)
        except GoalError as error:
            outcome = error.code
        assert outcome == expected
        event(f"bind tasks: {'ok' if outcome is None else outcome.value}")
        if outcome is None:
            for handle in tasks:
                self.owner.setdefault(handle, goal_id)

    # -- turns ------------------------------------------------------------------------------------

    @rule(
        data=st.data(),
        steps=st.lists(st.sampled_from(TURN_STEPS), min_size=1, max_size=5),
        end=st.sampled_from(["safe", "safe", "safe", "unsafe", "open", "open"]),
    )
    def play_turn(self, data: st.DataObject, steps: list[str], end: str) -> None:
        """Part of a turn (beginning one if none runs): calls, results, late messages, a
        cancellation, the goal ended by the user or a latch mid-turn; then left open, or ended
        (safely, or unsafely: that revokes the goal)."""
        if self.turn is None:
            self.begin_turn(data)
        for step in steps:
            if step == "call":
                self.tool_call(data)
            elif step == "result" and self.pending:
                self.result_arrives(data)
            elif step == "late":
                self.message_after_the_opening(data)
            elif step == "cancel":
                self.cancel_turn()
            elif step == "goal ends":
                how = data.draw(st.sampled_from(["complete", "cancel", "latch"]))
                if how == "latch":
                    self.revocation(RevokeReason.LATCH)
                else:
                    self.user_command(data, how)
        if end != "open":
            self.end_turn(safe=end == "safe")

    def draw_claim(self, data: st.DataObject) -> PeerClaim | None:
        shape = data.draw(st.sampled_from(["member", "member", "member", "any", "none"]))
        if shape == "none":
            return None  # admission has no record of the message: no claim
        if shape == "member" and self.members:
            # Most often a member, naming the active goal (or an old or forged one).
            instance_id = data.draw(st.sampled_from(sorted(self.members)))
            choices = self.goal_id_choices()
            if self.active is not None:
                choices += [self.active] * len(choices)
            goal_id = data.draw(st.sampled_from(choices))
            return PeerClaim(goal_id, (instance_id, self.members[instance_id]))
        goal_id = data.draw(st.sampled_from(self.goal_id_choices()))
        instance_id = data.draw(st.sampled_from(INSTANCES))
        session_id = data.draw(st.sampled_from([LIVE[instance_id], "session-impostor"]))
        return PeerClaim(goal_id, (instance_id, session_id))

    def draw_notification(self, data: st.DataObject) -> tuple[dict[str, object], set[TaskHandle]]:
        """Details naming some handles, in the forms the hosts use, with junk ids beside them."""
        # Most often the handles some goal owns (the tasks that report back), else any.
        owned = bool(self.owner) and data.draw(st.sampled_from([True, True, False]))
        pool = sorted(self.owner, key=str) if owned else HANDLES
        handles = data.draw(st.lists(st.sampled_from(pool), min_size=int(owned), max_size=3))
        handles = list(dict.fromkeys(handles))
        details: dict[str, object] = {}
        ids: list[object] = []
        for handle in handles:
            form = data.draw(st.sampled_from(["key", "ids"]))
            key = "runId" if handle.kind is TaskKind.RUN else "agentId"
            if form == "key" and key not in details:
                details[key] = handle.id
            elif handle.kind is TaskKind.RUN:
                ids.append(f"mesh:{handle.id}:1:1")
            else:
                ids.append(handle.id)
        ids += data.draw(st.lists(st.sampled_from(["bad id", "mesh:", 7, ""]), max_size=2))
        if ids:
            details["ids"] = ids
        return details, set(handles)

    def begin_turn(self, data: st.DataObject) -> None:
        if self.active is None and data.draw(st.booleans()):
            self.user_command(data, "start and bind")  # the user sets a goal up between turns
        race = data.draw(st.sampled_from([False, False, False, True]))
        size = data.draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
        kinds = st.sampled_from(["user", "peer", "peer", "notification", "notification"])
        opening = data.draw(st.lists(kinds, min_size=size, max_size=size))
        self.ledger.start(peer=race)
        turn = ModelTurn(Provenance.PEER if race else Provenance.UNKNOWN)
        for kind in opening:
            if kind == "user":
                self.ledger.observe(Provenance.USER)
            elif kind == "peer":
                claim = self.draw_claim(data)
                self.ledger.observe(Provenance.PEER, claim=claim)
                if claim is not None:
                    turn.claims.add(claim)
            else:
                details, handles = self.draw_notification(data)
                named = notification_handles(details)
                assert set(named) == handles
                self.ledger.observe(Provenance.NOTIFICATION, handles=named)
                turn.handles |= handles
        if len({self.owner.get(h) for h in turn.handles} - {None}) > 1:
            event("notification names several goals")
        if race or "peer" in opening:
            turn.provenance = Provenance.PEER
        elif "user" in opening:
            turn.provenance = Provenance.USER
        elif "notification" in opening:
            turn.provenance = Provenance.NOTIFICATION
        self.ledger.close_opening()
        self.turn = turn

    def message_after_the_opening(self, data: st.DataObject) -> None:
        """A message steered in mid-turn never changes what the turn is for."""
        before = self.ledger.facts
        kind = data.draw(st.sampled_from(["user", "peer", "notification"]))
        if kind == "peer":
            changed = self.ledger.observe(Provenance.PEER, claim=self.draw_claim(data))
        elif kind == "notification":
            _, handles = self.draw_notification(data)
            changed = self.ledger.observe(Provenance.NOTIFICATION, handles=handles)
        else:
            changed = self.ledger.observe(Provenance.USER)
        assert not changed
        assert self.ledger.facts == before

    def cancel_turn(self) -> None:
        assert self.turn is not None
        self.ledger.cancel()
        self.turn.cancelled = True

    def end_turn(self, *, safe: bool) -> None:
        self.ledger.end()
        self.turn = None
        if not safe:
            self.revoke(RevokeReason.UNSAFE_END)

    # -- tool calls -------------------------------------------------------------------------------

    def draw_call(self, data: st.DataObject) -> Call:
        (kind, target, with_target, schedule, with_schedule, mesh_action, goal_action, pick,
         objective, peer_ids, which) = data.draw(CALL_SHAPES)  # fmt: skip
        if kind == "workflow":
            arguments: Arguments = {"script": "fan out"}
            if with_target:
                arguments["resume_from_run_id"] = target
            granted = self.handle_granted(
                TaskKind.RUN, arguments.get("resume_from_run_id"), creates=True
            )
            return Call(kind, arguments, True, granted)
        if kind == "Agent":
            arguments = {"prompt": "do it"}
            if with_target:
                arguments["resume"] = target
            if with_schedule:
                arguments["schedule"] = schedule
            granted = not _given(arguments.get("schedule")) and self.handle_granted(
                TaskKind.AGENT, arguments.get("resume"), creates=True
            )
            return Call(kind, arguments, True, granted)
        if kind in ("steer_subagent", "send_subagent"):
            granted = self.handle_granted(TaskKind.AGENT, target, creates=False)
            return Call(kind, {"agent_id": target, "message": "m"}, True, granted)
        if kind == "never":
            name = NEVER_GRANTED[which % len(NEVER_GRANTED)]
            return Call(name, {"value": "v"}, True, False)
        if kind == "mesh":
            if mesh_action == "run":
                granted = True
            elif mesh_action in MESH_DRIVE:
                granted = self.handle_granted(TaskKind.RUN, target, creates=False)
            else:
                granted = False
            gated = mesh_action not in MESH_READ_ONLY
            return Call(kind, {"action": mesh_action, "runId": target}, gated, granted)
        if kind == "mesh_control":
            action = ("grow", "list")[which % 2]
            return Call(kind, {"action": action}, action == "grow", False)
        if kind == "peer_goal":
            arguments = {"action": goal_action}
            choices = self.goal_id_choices()
            goal_id = choices[pick % len(choices)]
            if goal_id is not None:
                arguments["goalId"] = goal_id
            if objective is not None:
                arguments["objective"] = objective
            if peer_ids is not None:
                arguments["peerIds"] = peer_ids
            granted = (
                goal_action == "complete" and self.active is not None and goal_id == self.active
            )
            return Call(kind, arguments, goal_action != "status", granted, which % 3 == 0)
        if kind == "edit":
            path = ("src/a.py", "AGENTS.md", ".pi/settings.json")[which % 3]
            return Call(kind, {"path": path, "text": "x"}, path != "src/a.py", False)
        name = ("read", "grep", "send_pi_message")[which % 3]
        return Call(name, {"command": "anything"}, False, False)

    def tool_call(self, data: st.DataObject) -> None:
        call = self.draw_call(data)
        name, arguments = call.name, call.arguments
        # The host adapter's wiring: the goal view is computed afresh for every call.
        facts = self.ledger.facts
        goal_authority = goal_turns.authority_of(facts, self.goals)
        grant = goal_turns.grant_for(goal_authority, self.goals)
        turn: TurnAuthority = self.ledger.authority_for_call(own_loop=True)
        if goal_turns.names_goal(goal_authority):
            turn = replace(turn, goal_bound=True)
        verdict = decide(turn, name, arguments, policy=POLICY, grant=grant)

        local, scoped = self.is_local(), self.is_scoped()
        assert turn.restricted is not local
        assert (grant is not None) is scoped
        assert (POLICY.classify(name, arguments) is not None) is call.gated, call
        assert verdict.allowed is (local or not call.gated or (scoped and call.granted)), call
        if verdict.allowed and not local and POLICY.classify(name, arguments) is not None:
            # (4) outside the user's and unscoped notification turns: ungated, or the grant of
            # the goal active right now, held by a turn scoped to it.
            assert grant is not None
            assert grant.goal_id == self.goals.active_id == self.active
            assert self.goals.classify(goal_authority) is AuthorityClass.GOAL_SCOPED
            assert POLICY.grant_allows(grant, name, arguments)
        event(f"turn: {'local' if local else 'scoped' if scoped else 'other'}")
        if not verdict.allowed:
            assert verdict.reason is not None
            event("call blocked" + (" (scoped turn)" if scoped else ""))
            if call.bypass:
                # The tool checks authority again when it runs (goal-scoped-v1 §3 step 5): even
                # past a failed gate, no peer, unknown, cancelled or scoped turn gets further.
                event("gate bypassed")
                self.execute_goal_call(data, arguments)
            return
        if not local and call.gated:
            event("call granted")

        if rule_for(POLICY.task_rules, name, arguments) is not None and self.active is not None:
            self.calls += 1
            call_id = f"call-{self.calls}"
            assert self.goals.note_call(call_id) == self.active
            self.pending[call_id] = (name, arguments, self.active)

        if name == "peer_goal":
            self.execute_goal_call(data, arguments)

    def execute_goal_call(self, data: st.DataObject, arguments: Arguments) -> None:
        """The ``peer_goal`` tool runs: judged by the turn's goal authority and its signal."""
        action = arguments["action"]
        if action not in GOAL_ACTIONS[:5]:
            return  # status changes nothing; an unknown action is refused by the schema
        aborted = data.draw(st.sampled_from([False, False, False, True]))
        authority = goal_turns.authority_of(self.ledger.facts, self.goals, aborted=aborted)
        goal_id, objective = arguments.get("goalId"), arguments.get("objective")
        peer_ids = arguments.get("peerIds")
        assert goal_id is None or isinstance(goal_id, str)
        assert objective is None or isinstance(objective, str)
        assert peer_ids is None or isinstance(peer_ids, list)
        cls = self.model_class(aborted=aborted)
        self.act(str(action), authority, cls, goal_id, objective, peer_ids)

    def result_arrives(self, data: st.DataObject) -> None:
        """A noted call's result: it names a handle in its details or text, or nothing."""
        outcome = data.draw(st.sampled_from(["details", "details", "text", "nothing", "error"]))
        result_id = data.draw(st.sampled_from((*IDS, "bad id")))
        call_id = data.draw(st.sampled_from(sorted(self.pending)))
        name, arguments, noted = self.pending.pop(call_id)
        assert self.goals.noted_goal(call_id) == noted
        tool_rule = rule_for(POLICY.task_rules, name, arguments)
        assert tool_rule is not None
        handle: TaskHandle | None = None
        if outcome != "error":
            details = (
                {"runId": result_id, "agentId": result_id, "run": {"id": result_id}}
                if outcome == "details"
                else {}
            )
            text = f"Started.\nrun_id: {result_id}" if outcome == "text" else "done"
            handle = created_handle(tool_rule, details, text)
        if noted != self.active:
            event("result after its goal ended" + (" (another active)" if self.active else ""))
        expected = None if handle is None else self.owner.get(handle, noted)
        assert self.goals.settle_call(call_id, handle) == expected
        if handle is not None:
            self.owner.setdefault(handle, noted)  # the first owner wins

    # -- revocations ------------------------------------------------------------------------------

    def revoke(self, reason: RevokeReason) -> None:
        assert self.goals.revoke(reason) == self.active
        if self.active is not None:
            self.end_goal()

    def revocation(self, reason: RevokeReason) -> None:
        """A latch (which also cancels the running turn), a reload (a new incarnation that
        imports the old one's evidence), a scope change or a shutdown."""
        self.revoke(reason)
        if reason is RevokeReason.LATCH:
            self.ledger.cancel()
            if self.turn is not None:
                self.turn.cancelled = True
        if reason is RevokeReason.RELOAD:
            self.reload()

    def reload(self) -> None:
        data = self.goals.export_evidence()
        owned = {
            TaskHandle(TaskKind(str(e["kind"])), str(e["id"])): e["goalId"]
            for e in data
            if "kind" in e
        }
        notes = {e["callId"]: e["goalId"] for e in data if "callId" in e}
        assert owned == self.owner
        assert notes == {call_id: noted for call_id, (_, _, noted) in self.pending.items()}
        # The journal (history, then every entry on_record was told) tells the same ownership:
        # a restarted process that replays it attributes every handle to the same goal.
        replayed = Goals(OWNER)
        assert replayed.import_evidence(self.journal).rejected == 0
        assert {h: replayed.owner_of(h) for h in self.owner} == self.owner
        for call_id, (_, _, noted) in self.pending.items():
            assert replayed.noted_goal(call_id) == noted
        self.goals = self.incarnation()
        journal_before = len(self.journal)
        result = self.goals.import_evidence(data)
        assert (result.imported, result.rejected) == (len(data), 0)
        assert len(self.journal) == journal_before  # imports are never journaled again
        self.known_ended = {str(entry["goalId"]) for entry in data if "goalId" in entry}
        if self.repeat not in self.known_ended:
            self.repeat = None

    def id_source_repeats(self, data: st.DataObject) -> None:
        """The next goal id minted repeats one this incarnation knows has ended."""
        self.repeat = data.draw(st.sampled_from(sorted(self.known_ended)))

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def the_active_goal_and_its_objective(self) -> None:  # (1)
        assert self.goals.active_id == self.active
        assert self.goals.objective == self.objective

    @invariant()
    def membership_is_exactly_what_local_authority_bound(self) -> None:  # (2)
        assert {m.instance_id: m.session_id for m in self.goals.members} == self.members

    @invariant()
    def ended_goals_never_return(self) -> None:  # (3)
        assert self.active not in self.ended_ever
        for goal_id in self.ended_ever:
            for instance_id, session_id in LIVE.items():
                assert not self.goals.is_member(goal_id, instance_id, session_id)

    @invariant()
    def ownership_is_the_first_owner(self) -> None:
        for handle in HANDLES:
            assert self.goals.owner_of(handle) == self.owner.get(handle)

    @invariant()
    def the_ledger_keeps_the_opening(self) -> None:
        facts = self.ledger.facts
        if self.turn is None:
            assert facts is None
            return
        assert facts == TurnFacts(
            self.turn.provenance,
            self.turn.cancelled,
            frozenset(self.turn.claims),
            frozenset(self.turn.handles),
        )


GoalGrantMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=25)
TestGoalGrantMachine = GoalGrantMachine.TestCase
