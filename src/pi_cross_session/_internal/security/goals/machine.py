"""The goal of one host session: a pure state machine (goal-scoped-v1 §1).

The local user authorizes one *objective*; peers the user binds to it may then drive that goal's
task work, and the grant dies with the goal. :class:`Goals` is the state machine of one host
session's goal: no I/O, no clock, goal ids from an injected callable (UUID v4 by default). The
runtime asks it; admission asks :meth:`Goals.is_member`; the gate asks :meth:`Goals.owner_of`.
Who may take each action is the table of :mod:`.authority`; which goal owns each task is the
journal of :mod:`.evidence`, which this machine keeps and feeds.

State diagram (goal-scoped-v1 §1.6), as data in :data:`TRANSITIONS`::

            start (local user only)
    NONE ─────────────────────────────▶ ACTIVE{id, objective (immutable), owner, peers}
     ▲                                   │  ▲
     │                                   │  └── bind / unbind (members change, objective never)
     │  complete | cancel | revoke       │
     └───────────────────────────────────┘
         (the ended id joins ENDED: it is never active again; its task evidence stays,
          as revocation-only evidence, and a new ``start`` mints a new id)

Membership is the pair (runtime instance id, session id) seen at bind time (goal-scoped-v1 §1.5):
a restarted peer has a new instance id and a same-named session has another session id; neither
is a member.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.protocol.text import is_blank, is_well_formed, js_trim, utf16_length
from pi_cross_session._internal.security.goals.authority import (
    Action,
    Authority,
    AuthorityClass,
    AuthorityKind,
    is_allowed,
)
from pi_cross_session._internal.security.goals.bounds import (
    MAX_ENDED_GOALS,
    MAX_GOAL_EVIDENCE,
    MAX_GOAL_OBJECTIVE_UNITS,
    MAX_GOAL_PEERS,
)
from pi_cross_session._internal.security.goals.errors import REFUSAL_TEXT, GoalError, GoalErrorCode
from pi_cross_session._internal.security.goals.evidence import (
    EvidenceImport,
    TaskEvidence,
    TaskHandle,
    TaskOwnership,
    check_handle,
)
from pi_cross_session._internal.security.goals.ids import (
    valid_id,
    valid_instance_id,
    valid_session_id,
)


class RevokeReason(StrEnum):
    """Why a goal ended. Every one is final."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    #: The abort latch: an abort, an aborted message, a peer submission that never started a turn.
    LATCH = "latch"
    #: A turn settled without a clean stop (error, length, unknown provenance …).
    UNSAFE_END = "unsafe_end"
    #: ``session_start``: reload or session replacement.
    RELOAD = "reload"
    SHUTDOWN = "shutdown"
    #: The session's working directory changed: the goal's scope no longer holds.
    SCOPE_CHANGED = "scope_changed"


# -- values ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scope:
    """The session owning a goal: the triple the spec calls its scope."""

    session_id: str
    instance_id: str
    cwd: str


@dataclass(frozen=True, slots=True)
class Member:
    """A bound peer: the instance id and the session id seen when it was bound."""

    instance_id: str
    session_id: str


#: The ``taskOwnership`` text of a status view (our wording).
TASK_OWNERSHIP_NOTE: Final = (
    "Tasks started while this goal is active belong to it; bound peers may drive only those. "
    "Ownership is kept as evidence after the goal ends and never revives the grant."
)


@dataclass(frozen=True, slots=True)
class GoalStatus:
    """An immutable view of the goal, in the shape the tool returns (goal-scoped-v1 §1.1)."""

    goal_id: str | None
    objective: str | None = None
    owner: Scope | None = None
    peer_ids: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """``{goalId: null}`` without a goal, else the full view (JSON-ready)."""
        if self.goal_id is None or self.owner is None:
            return {"goalId": None}
        return {
            "goalId": self.goal_id,
            "objective": self.objective,
            "owner": {
                "sessionId": self.owner.session_id,
                "instanceId": self.owner.instance_id,
                "cwd": self.owner.cwd,
            },
            "peerIds": list(self.peer_ids),
            "taskOwnership": TASK_OWNERSHIP_NOTE,
        }


NO_GOAL: Final = GoalStatus(None)


@dataclass(frozen=True, slots=True)
class GoalEnd:
    """How a goal ended: its id and the reason."""

    goal_id: str
    reason: RevokeReason


# -- the state machine -----------------------------------------------------------------------------


class GoalState(StrEnum):
    """Whether the session has an active goal."""

    NONE = "none"
    ACTIVE = "active"


#: Transitions as data: (state, action) → next state. A pair missing here is refused with the
#: code in :data:`REFUSED_PAIRS` and changes nothing (errors never move the machine).
TRANSITIONS: Final[Mapping[tuple[GoalState, Action], GoalState]] = {
    (GoalState.NONE, Action.START): GoalState.ACTIVE,
    (GoalState.NONE, Action.STATUS): GoalState.NONE,
    (GoalState.ACTIVE, Action.BIND): GoalState.ACTIVE,
    (GoalState.ACTIVE, Action.UNBIND): GoalState.ACTIVE,
    (GoalState.ACTIVE, Action.COMPLETE): GoalState.NONE,
    (GoalState.ACTIVE, Action.CANCEL): GoalState.NONE,
    (GoalState.ACTIVE, Action.STATUS): GoalState.ACTIVE,
}
REFUSED_PAIRS: Final[Mapping[tuple[GoalState, Action], GoalErrorCode]] = {
    (GoalState.ACTIVE, Action.START): GoalErrorCode.ALREADY_ACTIVE,
    (GoalState.NONE, Action.BIND): GoalErrorCode.INVALID,
    (GoalState.NONE, Action.UNBIND): GoalErrorCode.INVALID,
    (GoalState.NONE, Action.COMPLETE): GoalErrorCode.INVALID,
    (GoalState.NONE, Action.CANCEL): GoalErrorCode.INVALID,
}


def _new_uuid4() -> str:
    return str(uuid.uuid4())


@dataclass(slots=True)
class _Goal:
    id: str
    objective: str
    owner: Scope
    peers: dict[str, str]  # instance id -> session id seen at bind time


class Goals:
    """The goal of one host session (see the module docstring for the diagram and the table).

    ``owner`` is the session's scope, fixed for this incarnation: a new incarnation (reload) gets a
    new instance id and therefore a new :class:`Goals`, after :meth:`revoke` ended the old goal.
    ``new_id`` mints goal ids; each bound is a keyword-only override so tests can use small values.
    """

    def __init__(
        self,
        owner: Scope,
        *,
        new_id: Callable[[], str] = _new_uuid4,
        max_objective_units: int = MAX_GOAL_OBJECTIVE_UNITS,
        max_peers: int = MAX_GOAL_PEERS,
        max_evidence: int = MAX_GOAL_EVIDENCE,
        max_ended: int = MAX_ENDED_GOALS,
        on_record: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self._owner = owner
        self._new_id = new_id
        self._max_objective_units = max_objective_units
        self._max_peers = max_peers
        self._max_ended = max_ended
        self._goal: _Goal | None = None
        # Ended (and imported) goal ids, oldest first: an id in here is never granted again.
        self._ended: OrderedDict[str, None] = OrderedDict()
        # ``on_record`` is told every new piece of evidence (a journal entry), never an import.
        self._evidence = TaskEvidence(
            active=lambda: self.active_id, max_evidence=max_evidence, on_record=on_record
        )
        self._last_end: GoalEnd | None = None

    # -- queries ----------------------------------------------------------------------------------

    @property
    def state(self) -> GoalState:
        """``ACTIVE`` while a goal is current, else ``NONE``."""
        return GoalState.NONE if self._goal is None else GoalState.ACTIVE

    @property
    def active_id(self) -> str | None:
        """The active goal's id, if any."""
        return None if self._goal is None else self._goal.id

    @property
    def objective(self) -> str | None:
        """The active goal's objective (immutable for the goal's life), if any."""
        return None if self._goal is None else self._goal.objective

    @property
    def members(self) -> tuple[Member, ...]:
        """The active goal's members, in bind order."""
        if self._goal is None:
            return ()
        return tuple(Member(i, s) for i, s in self._goal.peers.items())

    @property
    def evicted_evidence(self) -> int:
        """Ownership entries dropped to stay within the bound. Once this is non-zero a handle
        with no known owner may have belonged to an old goal: consumers should then treat an
        unowned handle named by a notification as scoped (restricted), not as unscoped."""
        return self._evidence.evicted

    @property
    def evidence_count(self) -> int:
        """Task handles with recorded ownership (at most the evidence bound)."""
        return len(self._evidence)

    @property
    def last_end(self) -> GoalEnd | None:
        """How the most recent goal of this session ended, if one did."""
        return self._last_end

    def status(self) -> GoalStatus:
        """The current view; anyone may ask, in any state."""
        goal = self._goal
        if goal is None:
            return NO_GOAL
        return GoalStatus(goal.id, goal.objective, goal.owner, tuple(goal.peers))

    def is_member(self, goal_id: str, instance_id: str, session_id: str) -> bool:
        """Admission's check: ``goal_id`` is the active goal and the exact pair is bound to it."""
        goal = self._goal
        return goal is not None and goal.id == goal_id and goal.peers.get(instance_id) == session_id

    def classify(self, authority: Authority) -> AuthorityClass:
        """Which row of the authorization table ``authority`` falls in, against the current goal."""
        if authority.cancelled:
            return AuthorityClass.OTHER
        kind = authority.kind
        if kind in (AuthorityKind.LOCAL_COMMAND, AuthorityKind.USER_TURN):
            return AuthorityClass.LOCAL_USER
        goal = self._goal
        if kind is AuthorityKind.NOTIFICATION:
            if not authority.notification_goals:
                return AuthorityClass.LOCAL_NOTIFICATION
            if goal is not None and authority.notification_goals == {goal.id}:
                return AuthorityClass.GOAL_SCOPED
            return AuthorityClass.OTHER
        if (
            kind is AuthorityKind.PEER_TURN
            and authority.goal_id is not None
            and authority.sender is not None
            and self.is_member(authority.goal_id, *authority.sender)
        ):
            return AuthorityClass.GOAL_SCOPED
        return AuthorityClass.OTHER

    # -- actions ----------------------------------------------------------------------------------

    def start(self, objective: str, *, authority: Authority) -> GoalStatus:
        """Start a goal for ``objective`` (stored trimmed). Only a local user turn may."""
        self._authorize(Action.START, authority)
        # The reference's schema bounds the raw parameter (a JS string: UTF-16 units) before its
        # code trims it, so the bound applies to what the caller passed.
        if (
            not isinstance(objective, str)
            or not is_well_formed(objective)
            or utf16_length(objective) > self._max_objective_units
            or is_blank(objective)
        ):
            raise GoalError(
                GoalErrorCode.INVALID,
                "start needs a non-blank objective of at most "
                f"{self._max_objective_units} UTF-16 units from the current local user turn",
            )
        self._transition(Action.START)
        goal_id = self._new_id()
        if not valid_id(goal_id) or goal_id in self._ended or self._evidence.mentions(goal_id):
            # An id that ever held a grant or owns evidence must never be minted again.
            raise GoalError(GoalErrorCode.INVALID, "the goal id source returned an unusable id")
        self._goal = _Goal(goal_id, js_trim(objective), self._owner, {})
        return self.status()

    def check_bind(self, goal_id: str, *, authority: Authority) -> None:
        """Raise what :meth:`bind` would for the caller and the goal id, changing nothing
        (so a caller can refuse before it lists live peers)."""
        self._authorize(Action.BIND, authority)
        self._require_goal(Action.BIND, goal_id)

    def bind(
        self,
        goal_id: str,
        peers: Sequence[Member] = (),
        *,
        tasks: Sequence[TaskHandle] = (),
        authority: Authority,
    ) -> GoalStatus:
        """Bind live peers (and existing task handles) to the active goal, all or nothing.

        The caller resolves ``peers`` against live registrations first and passes the session id
        each one had then; this method trusts that pairing and checks everything else. Tasks are
        checked before any peer is added, so a conflict leaves membership unchanged
        (goal-scoped-v1 §1.3).
        """
        self._authorize(Action.BIND, authority)
        goal = self._require_goal(Action.BIND, goal_id)
        if not peers and not tasks:
            raise GoalError(GoalErrorCode.INVALID, "bind needs at least one peer or task handle")
        self._check_list(peers, "peers")
        self._check_list(tasks, "task handles")
        for member in peers:
            if not isinstance(member, Member) or not (
                valid_instance_id(member.instance_id) and valid_session_id(member.session_id)
            ):
                raise GoalError(GoalErrorCode.INVALID, "a peer to bind is not a live runtime id")
        for handle in tasks:
            check_handle(handle)
        incoming = {m.instance_id: m.session_id for m in peers}
        if len(goal.peers.keys() | incoming.keys()) > self._max_peers:
            raise GoalError(
                GoalErrorCode.TOO_MANY_PEERS, f"a goal holds at most {self._max_peers} peers"
            )
        for handle in tasks:
            owner = self.owner_of(handle)
            if owner is not None and owner != goal.id:
                raise GoalError(GoalErrorCode.TASK_OWNED, "a task handle belongs to another goal")
        self._transition(Action.BIND)
        for handle in tasks:
            self._evidence.remember(TaskOwnership(handle, goal.id, confirmed=True))
        # A re-bind records the session id seen now: the caller just re-resolved it as live.
        goal.peers.update(incoming)
        return self.status()

    def unbind(
        self, goal_id: str, instance_ids: Sequence[str], *, authority: Authority
    ) -> GoalStatus:
        """Remove peers from the active goal; ids not bound are ignored. Task handles stay owned.

        Afterwards the caller re-checks queued scoped messages with :meth:`is_member`.
        """
        self._authorize(Action.UNBIND, authority)
        goal = self._require_goal(Action.UNBIND, goal_id)
        if not instance_ids:
            raise GoalError(GoalErrorCode.INVALID, "unbind needs at least one peer id")
        self._check_list(instance_ids, "peers")
        if not all(valid_instance_id(i) for i in instance_ids):
            raise GoalError(GoalErrorCode.INVALID, "a peer id is not a runtime id")
        self._transition(Action.UNBIND)
        for instance_id in instance_ids:
            goal.peers.pop(instance_id, None)
        return self.status()

    def complete(self, goal_id: str, *, authority: Authority) -> str:
        """End the goal as done: local authority, or a turn scoped to this very goal."""
        self._authorize(Action.COMPLETE, authority)
        self._require_goal(Action.COMPLETE, goal_id)
        return self._end(Action.COMPLETE, RevokeReason.COMPLETED)

    def cancel(self, goal_id: str, *, authority: Authority) -> str:
        """End the goal as abandoned: local authority only (a scoped turn cannot)."""
        self._authorize(Action.CANCEL, authority)
        self._require_goal(Action.CANCEL, goal_id)
        return self._end(Action.CANCEL, RevokeReason.CANCELLED)

    def revoke(self, reason: RevokeReason) -> str | None:
        """End the active goal for ``reason`` (latch, unsafe end, reload, shutdown …).

        Returns the revoked id, so admission can drop queued messages scoped to it as
        ``dropped_goal_revoked``; ``None`` when no goal was active. Final: nothing restores it.
        """
        if self._goal is None:
            return None
        # Every reason has the same effect; it is kept for the status display only.
        return self._end(Action.CANCEL, reason)

    # -- task ownership evidence ----------------------------------------------------------------

    def note_call(self, call_id: str) -> str | None:
        """Note, before a task-creating call runs, that what it creates belongs to the active
        goal. The handle is not known yet; :meth:`settle_call` attributes it from the result.

        Returns the goal noted, or ``None`` when no goal is active or the call id is unusable
        (nothing is noted then).
        """
        goal = self._goal
        if goal is None or not self._evidence.note(call_id, goal.id):
            return None
        return goal.id

    def noted_goal(self, call_id: str) -> str | None:
        """The goal a pending task-creating call was noted under, if any."""
        return self._evidence.noted_goal(call_id)

    def settle_call(self, call_id: str, handle: TaskHandle | None) -> str | None:
        """A noted call finished with ``handle`` (``None``: nothing created); see
        :meth:`TaskEvidence.settle`. Returns the handle's owner."""
        return self._evidence.settle(call_id, handle)

    def attribute(self, handle: TaskHandle, goal_id: str) -> str:
        """Record confirmed evidence that ``handle`` belongs to ``goal_id``; the first owner on
        record wins. Returns the owner."""
        return self._evidence.attribute(handle, goal_id)

    def owner_of(self, handle: TaskHandle) -> str | None:
        """The goal ``handle`` was created under (pending or confirmed), or ``None``."""
        return self._evidence.owner_of(handle)

    def ownership(self, handle: TaskHandle) -> TaskOwnership | None:
        """The full evidence for ``handle``, or ``None``."""
        return self._evidence.ownership(handle)

    def export_evidence(self) -> tuple[dict[str, object], ...]:
        """All evidence as journal entries (see :meth:`TaskEvidence.export`)."""
        return self._evidence.export()

    def import_evidence(self, data: Iterable[Mapping[str, object]]) -> EvidenceImport:
        """Restore evidence after a reload. Never restores a grant.

        Only allowed with no active goal (a reload starts with none). Every imported goal id is
        remembered as ended, so it can never be minted again. Malformed entries are skipped and
        counted; an entry for a handle already known keeps the earlier owner.
        """
        if self._goal is not None:
            raise GoalError(GoalErrorCode.INVALID, "evidence is imported only with no goal active")
        return self._evidence.restore(data, seen_goal=self._mark_ended)

    # -- internals ------------------------------------------------------------------------------

    def _authorize(self, action: Action, authority: Authority) -> None:
        if not is_allowed(action, self.classify(authority)):
            raise GoalError(
                GoalErrorCode.NOT_AUTHORIZED,
                f"{action.value} requires local authority from the user's own turn"
                if action is not Action.COMPLETE
                else "complete requires local authority or a turn scoped to this goal",
            )

    def _transition(self, action: Action) -> GoalState:
        key = (self.state, action)
        nxt = TRANSITIONS.get(key)
        if nxt is None:
            code = REFUSED_PAIRS.get(key, GoalErrorCode.INVALID)
            raise GoalError(code, REFUSAL_TEXT[code])
        return nxt

    def _require_goal(self, action: Action, goal_id: str) -> _Goal:
        self._transition(action)
        goal = self._goal
        if goal is None or goal_id != goal.id:
            raise GoalError(GoalErrorCode.INVALID, REFUSAL_TEXT[GoalErrorCode.INVALID])
        return goal

    def _check_list(self, items: Sequence[object], what: str) -> None:
        if len(items) > self._max_peers:
            raise GoalError(GoalErrorCode.INVALID, f"at most {self._max_peers} {what} per call")

    def _end(self, action: Action, reason: RevokeReason) -> str:
        goal = self._goal
        assert goal is not None  # callers checked the transition
        self._transition(action)
        self._goal = None
        goal.peers.clear()  # members die with the grant; only evidence outlives it
        self._mark_ended(goal.id)
        self._last_end = GoalEnd(goal.id, reason)
        return goal.id

    def _mark_ended(self, goal_id: str) -> None:
        self._ended[goal_id] = None
        self._ended.move_to_end(goal_id)
        while len(self._ended) > self._max_ended:
            self._ended.popitem(last=False)


__all__ = [
    "NO_GOAL",
    "REFUSED_PAIRS",
    "TASK_OWNERSHIP_NOTE",
    "TRANSITIONS",
    "GoalEnd",
    "GoalState",
    "GoalStatus",
    "Goals",
    "Member",
    "RevokeReason",
    "Scope",
]
