"""Goal-scoped peer grants: one session's goal, its members, its task evidence (goal-scoped-v1.md).

The local user authorizes one *objective*; peers the user binds to it may then drive that goal's
task work, and the grant dies with the goal. :class:`Goals` is the pure state machine of one host
session's goal: no I/O, no clock, goal ids from an injected callable (UUID v4 by default). The
runtime asks it; admission will ask :meth:`Goals.is_member`; the gate will ask
:meth:`Goals.owner_of`. :class:`GoalConfirmations` is the sender-side half of the budget rules.

State diagram (spec §1.6)::

            start (local user only)
    NONE ─────────────────────────────▶ ACTIVE{id, objective (immutable), owner, peers}
     ▲                                   │  ▲
     │                                   │  └── bind / unbind (members change, objective never)
     │  complete | cancel | revoke       │
     └───────────────────────────────────┘
         (the ended id joins ENDED: it is never active again; its task evidence stays,
          as revocation-only evidence, and a new ``start`` mints a new id)

Who may do what (spec §1.3), as data (:data:`ALLOWED`), by the class of the caller's authority:

===========  ==========  ===================  ===========  =====
action       local user  unscoped notif.      goal-scoped  other
===========  ==========  ===================  ===========  =====
start        yes         no                   no           no
bind         yes         yes                  no           no
unbind       yes         yes                  no           no
complete     yes         yes                  yes          no
cancel       yes         yes                  no           no
status       yes         yes                  yes          yes
===========  ==========  ===================  ===========  =====

*Local user* is a genuine local user turn (or the user's own command), not cancelled. An
*unscoped notification* is a trusted in-process notification turn naming no goal-owned handle.
*Goal-scoped* is a turn driven by a member of the current goal carrying that goal's id, or a
notification turn whose handles all belong to the current goal. *Other* is everything else: an
unscoped or stale peer turn, a notification of an old goal, an unknown turn, any cancelled turn.

Membership is the pair (runtime instance id, session id) seen at bind time (spec §1.5): a restarted
peer has a new instance id and a same-named session has another session id; neither is a member.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pi_cross_session.protocol.codes import OK_RECEIPTS, Code
from pi_cross_session.protocol.frames import ID_RE, INSTANCE_ID_RE
from pi_cross_session.protocol.limits import (
    MAX_CALL_ID_CHARS,
    MAX_ENDED_GOALS,
    MAX_GOAL_CONFIRMATIONS,
    MAX_GOAL_EVIDENCE,
    MAX_GOAL_OBJECTIVE_UNITS,
    MAX_GOAL_PEERS,
    MAX_SESSION_ID_UNITS,
)
from pi_cross_session.protocol.text import is_blank, is_well_formed, js_trim, utf16_length
from pi_cross_session.security.shares import SenderShares

# -- errors ----------------------------------------------------------------------------------------


class GoalErrorCode(StrEnum):
    """Why a goal action failed. The first two are wire codes; the rest are local to this module."""

    #: The caller's turn may not take this action (spec: "requires local" authority).
    NOT_AUTHORIZED = Code.GOAL_NOT_AUTHORIZED.value
    #: Bad parameters, or a goal id that is not the active goal's.
    INVALID = Code.INVALID_GOAL.value
    #: ``start`` while a goal is active: one goal per session.
    ALREADY_ACTIVE = "goal_already_active"
    #: Binding would leave more than 64 peers on the goal.
    TOO_MANY_PEERS = "goal_too_many_peers"
    #: A task handle already belongs to another goal.
    TASK_OWNED = "goal_task_owned"


class GoalError(Exception):
    """The one error of this module: a :class:`GoalErrorCode` and a sentence for the caller."""

    def __init__(self, code: GoalErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


# -- authority -------------------------------------------------------------------------------------


class AuthorityKind(StrEnum):
    """Who is asking, as the host adapter tells it."""

    #: The local user's own command (a slash command typed by the user, not the model).
    LOCAL_COMMAND = "local_command"
    #: A turn the local user started (interactive input or SDK RPC, never peer transport).
    USER_TURN = "user_turn"
    #: A turn started by a trusted in-process notification of this very session.
    NOTIFICATION = "notification"
    #: A turn started by a message from another session.
    PEER_TURN = "peer_turn"
    #: Anything we cannot vouch for (including mesh-continuation turns: not local, spec §1.3).
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Authority:
    """The caller's authority for one action.

    ``cancelled`` is true when the turn was cancelled or its abort signal fired. For a peer turn,
    ``goal_id`` is the structured ``goalId`` of the message that started it and ``sender`` the
    authenticated (instance id, session id) pair. For a notification turn, ``notification_goals``
    are the goals owning the handles it names (empty: an unscoped notification); a handle with no
    known owner does not count.
    """

    kind: AuthorityKind
    cancelled: bool = False
    goal_id: str | None = None
    sender: tuple[str, str] | None = None
    notification_goals: frozenset[str] = frozenset()


#: The local user typing a command: full local authority.
LOCAL_COMMAND: Final = Authority(AuthorityKind.LOCAL_COMMAND)
#: A genuine local user turn.
USER_TURN: Final = Authority(AuthorityKind.USER_TURN)


class AuthorityClass(StrEnum):
    """The four classes the authorization table distinguishes."""

    LOCAL_USER = "local_user"
    LOCAL_NOTIFICATION = "local_notification"
    GOAL_SCOPED = "goal_scoped"
    OTHER = "other"


class Action(StrEnum):
    """The ``peer_goal`` actions."""

    START = "start"
    BIND = "bind"
    UNBIND = "unbind"
    COMPLETE = "complete"
    CANCEL = "cancel"
    STATUS = "status"


_LOCAL: Final = frozenset({AuthorityClass.LOCAL_USER, AuthorityClass.LOCAL_NOTIFICATION})

#: The authorization table of spec §1.3: which authority classes may take each action.
ALLOWED: Final[Mapping[Action, frozenset[AuthorityClass]]] = {
    Action.START: frozenset({AuthorityClass.LOCAL_USER}),
    Action.BIND: _LOCAL,
    Action.UNBIND: _LOCAL,
    Action.COMPLETE: _LOCAL | {AuthorityClass.GOAL_SCOPED},
    Action.CANCEL: _LOCAL,
    Action.STATUS: frozenset(AuthorityClass),
}


def is_allowed(action: Action, authority_class: AuthorityClass) -> bool:
    """True when ``authority_class`` may take ``action`` (a total function over both enums)."""
    return authority_class in ALLOWED[action]


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


class TaskKind(StrEnum):
    """Kinds of task handle a goal can own (a mesh run, a sub-agent)."""

    RUN = "run"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class TaskHandle:
    """A task created by a task-creating tool; ``id`` matches ``[A-Za-z0-9_-]{1,128}``."""

    kind: TaskKind
    id: str


@dataclass(frozen=True, slots=True)
class TaskOwnership:
    """Evidence that ``handle`` was created under ``goal_id``; ``confirmed`` once the tool ran."""

    handle: TaskHandle
    goal_id: str
    confirmed: bool


#: The ``taskOwnership`` text of a status view (our wording).
TASK_OWNERSHIP_NOTE: Final = (
    "Tasks started while this goal is active belong to it; bound peers may drive only those. "
    "Ownership is kept as evidence after the goal ends and never revives the grant."
)


@dataclass(frozen=True, slots=True)
class GoalStatus:
    """An immutable view of the goal, in the shape the tool returns (spec §1.1)."""

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


@dataclass(frozen=True, slots=True)
class EvidenceImport:
    """What :meth:`Goals.import_evidence` did: entries taken and entries skipped as malformed."""

    imported: int
    rejected: int


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


def _valid_instance_id(value: object) -> bool:
    return isinstance(value, str) and INSTANCE_ID_RE.fullmatch(value) is not None


def _valid_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


def _valid_session_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and is_well_formed(value)
        and utf16_length(value) <= MAX_SESSION_ID_UNITS
    )


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
        # Told every new piece of evidence (a journal entry), never what was imported.
        self._on_record = on_record
        self._new_id = new_id
        self._max_objective_units = max_objective_units
        self._max_peers = max_peers
        self._max_evidence = max_evidence
        self._max_ended = max_ended
        self._goal: _Goal | None = None
        # Ended (and imported) goal ids, oldest first: an id in here is never granted again.
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._evidence: OrderedDict[TaskHandle, TaskOwnership] = OrderedDict()
        self._evicted_evidence = 0
        # Task-creating calls noted before they ran: call id -> the goal active then.
        self._calls: OrderedDict[str, str] = OrderedDict()
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
        return self._evicted_evidence

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
        if (
            not _valid_id(goal_id)
            or goal_id in self._ended
            or self._owned_by(goal_id)
            or goal_id in self._calls.values()
        ):
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
        checked before any peer is added, so a conflict leaves membership unchanged (spec §1.3).
        """
        self._authorize(Action.BIND, authority)
        goal = self._require_goal(Action.BIND, goal_id)
        if not peers and not tasks:
            raise GoalError(GoalErrorCode.INVALID, "bind needs at least one peer or task handle")
        self._check_list(peers, "peers")
        self._check_list(tasks, "task handles")
        for member in peers:
            if not isinstance(member, Member) or not (
                _valid_instance_id(member.instance_id) and _valid_session_id(member.session_id)
            ):
                raise GoalError(GoalErrorCode.INVALID, "a peer to bind is not a live runtime id")
        for handle in tasks:
            self._check_handle(handle)
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
            self._remember(TaskOwnership(handle, goal.id, confirmed=True))
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
        if not all(_valid_instance_id(i) for i in instance_ids):
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

        Returns the goal noted, or ``None`` when no goal is active (nothing is noted then).
        """
        if (
            self._goal is None
            or not isinstance(call_id, str)
            or not 0 < len(call_id) <= MAX_CALL_ID_CHARS
        ):
            return None
        self._calls[call_id] = self._goal.id
        self._calls.move_to_end(call_id)
        self._trim_calls()
        self._tell(call_entry(call_id, self._goal.id))
        return self._goal.id

    def noted_goal(self, call_id: str) -> str | None:
        """The goal a pending task-creating call was noted under, if any."""
        return self._calls.get(call_id)

    def settle_call(self, call_id: str, handle: TaskHandle | None) -> str | None:
        """A noted call finished; ``handle`` is what it created (``None``: it failed or created
        nothing). The handle is attributed to the goal noted before the call ran, even when that
        goal has ended since (evidence, never a grant). Returns the handle's owner."""
        goal_id = self._calls.pop(call_id, None)
        if goal_id is None:
            return None
        owner = None if handle is None else self.attribute(handle, goal_id)
        # Journaled, so that a replay does not take the call for one still waiting for its result
        # (which would count as lost evidence for ever once there were more than the bound).
        self._tell(settled_entry(call_id, goal_id))
        return owner

    def attribute(self, handle: TaskHandle, goal_id: str) -> str:
        """Record confirmed evidence that ``handle`` belongs to ``goal_id``; the first owner on
        record wins. Returns the owner."""
        self._check_handle(handle)
        if not _valid_id(goal_id):
            raise GoalError(GoalErrorCode.INVALID, "a goal id is malformed")
        known = self._evidence.get(handle)
        if known is not None:
            if not known.confirmed and known.goal_id == goal_id:
                self._evidence[handle] = TaskOwnership(handle, goal_id, confirmed=True)
                self._tell(ownership_entry(self._evidence[handle]))
            return known.goal_id
        self._remember(TaskOwnership(handle, goal_id, confirmed=True))
        return goal_id

    def owner_of(self, handle: TaskHandle) -> str | None:
        """The goal ``handle`` was created under (pending or confirmed), or ``None``."""
        known = self._evidence.get(handle)
        return None if known is None else known.goal_id

    def ownership(self, handle: TaskHandle) -> TaskOwnership | None:
        """The full evidence for ``handle``, or ``None``."""
        return self._evidence.get(handle)

    def export_evidence(self) -> tuple[dict[str, object], ...]:
        """All evidence as plain data for the session journal, oldest first: ownership
        entries (:func:`ownership_entry`), then the notes of calls whose result is still due
        (:func:`call_entry`), so that a late result after a reload is still attributed."""
        lost = () if not self._evicted_evidence else ({"evictedEvidence": self._evicted_evidence},)
        return (
            *lost,
            *(ownership_entry(o) for o in self._evidence.values()),
            *(call_entry(call_id, goal_id) for call_id, goal_id in self._calls.items()),
        )

    def import_evidence(self, data: Iterable[Mapping[str, object]]) -> EvidenceImport:
        """Restore evidence after a reload. Never restores a grant.

        Only allowed with no active goal (a reload starts with none). Every imported goal id is
        remembered as ended, so it can never be minted again. Malformed entries are skipped and
        counted; an entry for a handle already known keeps the earlier owner.
        """
        if self._goal is not None:
            raise GoalError(GoalErrorCode.INVALID, "evidence is imported only with no goal active")
        imported = rejected = 0
        entries = list(data)
        settled = {note[0] for note in map(_parse_settled, entries) if note is not None}
        for entry in entries:
            done = _parse_settled(entry)
            if done is not None:
                self._mark_ended(done[1])
                imported += 1
                continue
            note = _parse_call_note(entry)
            if note is not None:
                call_id, goal_id = note
                self._mark_ended(goal_id)
                if call_id not in settled:
                    self._calls.setdefault(call_id, goal_id)
                    self._trim_calls()
                imported += 1
                continue
            lost = _parse_evicted(entry)
            if lost is not None:
                self._evicted_evidence += lost
                imported += 1
                continue
            parsed = _parse_evidence(entry)
            if parsed is None:
                rejected += 1
                continue
            self._mark_ended(parsed.goal_id)
            if parsed.handle not in self._evidence:
                self._remember(parsed, imported=True)
            imported += 1
        return EvidenceImport(imported, rejected)

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
            raise GoalError(code, _REFUSAL_TEXT[code])
        return nxt

    def _require_goal(self, action: Action, goal_id: str) -> _Goal:
        self._transition(action)
        goal = self._goal
        if goal is None or goal_id != goal.id:
            raise GoalError(GoalErrorCode.INVALID, _REFUSAL_TEXT[GoalErrorCode.INVALID])
        return goal

    def _check_list(self, items: Sequence[object], what: str) -> None:
        if len(items) > self._max_peers:
            raise GoalError(GoalErrorCode.INVALID, f"at most {self._max_peers} {what} per call")

    def _check_handle(self, handle: TaskHandle) -> None:
        if not isinstance(handle, TaskHandle) or not _valid_id(handle.id):
            raise GoalError(GoalErrorCode.INVALID, "a task handle id is malformed")

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

    def _owned_by(self, goal_id: str) -> bool:
        return any(o.goal_id == goal_id for o in self._evidence.values())

    def _remember(self, ownership: TaskOwnership, *, imported: bool = False) -> None:
        self._evidence[ownership.handle] = ownership
        while len(self._evidence) > self._max_evidence:
            self._evict_one()
        if not imported:
            self._tell(ownership_entry(ownership))

    def _trim_calls(self) -> None:
        # A forgotten call note is lost evidence like an evicted ownership entry: what its late
        # result creates will look unowned, so consumers must know to fail closed.
        while len(self._calls) > self._max_evidence:
            self._calls.popitem(last=False)
            self._evicted_evidence += 1

    def _tell(self, entry: dict[str, object]) -> None:
        if self._on_record is not None:
            self._on_record(entry)

    def _evict_one(self) -> None:
        # Evict evidence of ended goals first (oldest first): the active goal's records are what
        # lets its scoped turns drive their own tasks. Eviction is counted, see evicted_evidence.
        active = self.active_id
        victim = next((h for h, o in self._evidence.items() if o.goal_id != active), None)
        if victim is None:
            victim = next(iter(self._evidence))
        del self._evidence[victim]
        self._evicted_evidence += 1


_REFUSAL_TEXT: Final[Mapping[GoalErrorCode, str]] = {
    GoalErrorCode.NOT_AUTHORIZED: "this turn may not change the goal",
    GoalErrorCode.INVALID: "that is not the active goal's exact id (the objective never changes)",
    GoalErrorCode.ALREADY_ACTIVE: "a goal is already active in this session; end it first",
    GoalErrorCode.TOO_MANY_PEERS: "too many peers for one goal",
    GoalErrorCode.TASK_OWNED: "a task handle belongs to another goal",
}


def ownership_entry(ownership: TaskOwnership) -> dict[str, object]:
    """The journal entry recording that a task handle belongs to a goal."""
    return {
        "kind": ownership.handle.kind.value,
        "id": ownership.handle.id,
        "goalId": ownership.goal_id,
        "confirmed": ownership.confirmed,
    }


def call_entry(call_id: str, goal_id: str) -> dict[str, object]:
    """The journal entry written before a task-creating call runs: what it creates belongs to
    ``goal_id`` (the handle follows in an :func:`ownership_entry` once the result names it)."""
    return {"callId": call_id, "goalId": goal_id}


def _parse_evicted(entry: Mapping[str, object]) -> int | None:
    """The count of an ``{"evictedEvidence": n}`` marker (evidence an earlier copy lost)."""
    if not isinstance(entry, Mapping) or set(entry) != {"evictedEvidence"}:
        return None
    count = entry["evictedEvidence"]
    return count if type(count) is int and count > 0 else None


def settled_entry(call_id: str, goal_id: str) -> dict[str, object]:
    """The journal entry written when a noted call's result came (whatever it created)."""
    return {"callId": call_id, "goalId": goal_id, "settled": True}


def _parse_settled(entry: Mapping[str, object]) -> tuple[str, str] | None:
    if not isinstance(entry, Mapping) or entry.get("settled") is not True:
        return None
    return _parse_call_note({k: v for k, v in entry.items() if k != "settled"})


def _parse_call_note(entry: Mapping[str, object]) -> tuple[str, str] | None:
    if not isinstance(entry, Mapping) or "callId" not in entry or "settled" in entry:
        return None
    call_id, goal_id = entry.get("callId"), entry.get("goalId")
    if not (isinstance(call_id, str) and 0 < len(call_id) <= MAX_CALL_ID_CHARS):
        return None
    if not _valid_id(goal_id):
        return None
    assert isinstance(goal_id, str)
    return call_id, goal_id


def _parse_evidence(entry: Mapping[str, object]) -> TaskOwnership | None:
    if not isinstance(entry, Mapping):
        return None
    kind, handle_id, goal_id = entry.get("kind"), entry.get("id"), entry.get("goalId")
    confirmed = entry.get("confirmed", True)
    if not (isinstance(kind, str) and isinstance(handle_id, str) and isinstance(goal_id, str)):
        return None
    if (
        kind not in _TASK_KINDS
        or not _valid_id(handle_id)
        or not _valid_id(goal_id)
        or not isinstance(confirmed, bool)
    ):
        return None
    return TaskOwnership(TaskHandle(TaskKind(kind), handle_id), goal_id, confirmed)


_TASK_KINDS: Final = frozenset(k.value for k in TaskKind)


# -- sender-side confirmations (spec §2.4) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reservation:
    """One outbound attempt's claim on the budget.

    ``charged``: the caller spends one budget unit now. ``key`` is ``<receiver>:<goalId>`` for a
    scoped send. ``epoch`` ties it to the confirmation set it came from, so a settle after a
    reset (reload, shutdown) neither confirms nor refunds.
    """

    key: str | None
    charged: bool
    epoch: int


class GoalConfirmations:
    """Receiver/goal pairs whose last scoped send was taken (``submitted``/``queued``).

    At zero budget a confirmed pair may still send, uncharged, one attempt at a time: reserving
    removes the key for the flight, and only a good receipt puts it back. Any other outcome
    (refusal, unknown receipt) removes it, so a forged or ended goal cannot keep sending for free.
    At most ``max_keys`` are kept. Past the bound the confirming receiver gives up its own least
    recently confirmed key; a receiver holding no other takes that of the receiver holding the
    most (:class:`~pi_cross_session.security.shares.SenderShares`), so the receipts of one receiver
    (for as many goal ids as it makes us send to) never push out another receiver's pairs.
    """

    def __init__(self, *, max_keys: int = MAX_GOAL_CONFIRMATIONS) -> None:
        self._max_keys = max_keys
        self._keys: SenderShares[str] = SenderShares()
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def has_goal(self, goal_id: str) -> bool:
        """True when some receiver confirmed ``goal_id`` (so a send at zero budget may go on)."""
        return any(key.endswith(f":{goal_id}") for key in self._keys)

    @staticmethod
    def key(receiver_instance_id: str, goal_id: str) -> str:
        """The confirmation key of a receiver and a goal."""
        return f"{receiver_instance_id}:{goal_id}"

    def reserve(
        self, receiver_instance_id: str, goal_id: str | None, budget_left: int
    ) -> Reservation | Code:
        """Claim the right to attempt one send, or the refusal code (before any connection)."""
        if goal_id is not None and not _valid_id(goal_id):
            return Code.INVALID_GOAL
        if goal_id is not None and not _valid_instance_id(receiver_instance_id):
            return Code.INVALID_TARGET
        key = None if goal_id is None else self.key(receiver_instance_id, goal_id)
        if budget_left > 0:
            return Reservation(key, charged=True, epoch=self._epoch)
        if key is None or key not in self._keys:
            return Code.BUDGET_EXHAUSTED
        self._keys.remove(key)  # one free attempt in flight per pair: no concurrent fan-out
        return Reservation(key, charged=False, epoch=self._epoch)

    def settle(self, reservation: Reservation, outcome: str) -> bool:
        """Record how the attempt ended; returns True when the caller refunds the charged unit."""
        if reservation.key is None or reservation.epoch != self._epoch:
            return False
        if outcome in OK_RECEIPTS and outcome != Code.ACCEPTED:
            key = reservation.key
            receiver = key.partition(":")[0]  # see :meth:`key`; an instance id has no colon
            self._keys.add(receiver, key)
            self._keys.make_room(self._max_keys, receiver, spare=(key,))
            return reservation.charged
        # A refusal, an unknown receipt or an ``accepted`` a scoped send can never get.
        self._keys.remove(reservation.key)
        return False

    def clear(self) -> None:
        """Forget every confirmation (``session_start``, ``session_shutdown``)."""
        self._keys = SenderShares()
        self._epoch += 1


__all__ = [
    "ALLOWED",
    "LOCAL_COMMAND",
    "NO_GOAL",
    "REFUSED_PAIRS",
    "TASK_OWNERSHIP_NOTE",
    "TRANSITIONS",
    "USER_TURN",
    "Action",
    "Authority",
    "AuthorityClass",
    "AuthorityKind",
    "EvidenceImport",
    "GoalConfirmations",
    "GoalEnd",
    "GoalError",
    "GoalErrorCode",
    "GoalState",
    "GoalStatus",
    "Goals",
    "Member",
    "Reservation",
    "RevokeReason",
    "Scope",
    "TaskHandle",
    "TaskKind",
    "TaskOwnership",
    "call_entry",
    "is_allowed",
    "ownership_entry",
    "settled_entry",
]
