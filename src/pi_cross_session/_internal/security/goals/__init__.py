"""Goal-scoped peer grants (docs/spec/goal-grants.md), in four rooms, all pure:

* :mod:`.authority` — who is asking, and the table of who may take each action;
* :mod:`.machine` — :class:`Goals`, the state machine of one session's goal and its members;
* :mod:`.evidence` — which goal owns each task, kept as a bounded journal;
* :mod:`.confirmations` — the sender's half of the budget rules (confirmed receiver/goal pairs);

plus :mod:`.errors` (:class:`GoalError`), :mod:`.ids` (what a valid id looks like) and
:mod:`.bounds` (how much of each the rooms keep). The names
below are what the rest of the package uses; each is defined in one of those modules.
"""

from pi_cross_session._internal.security.goals.authority import (
    ALLOWED,
    LOCAL_COMMAND,
    USER_TURN,
    Action,
    Authority,
    AuthorityClass,
    AuthorityKind,
    is_allowed,
)
from pi_cross_session._internal.security.goals.confirmations import GoalConfirmations, Reservation
from pi_cross_session._internal.security.goals.errors import GoalError, GoalErrorCode
from pi_cross_session._internal.security.goals.evidence import (
    EvidenceImport,
    TaskEvidence,
    TaskHandle,
    TaskKind,
    TaskOwnership,
    call_entry,
    ownership_entry,
    settled_entry,
)
from pi_cross_session._internal.security.goals.machine import (
    NO_GOAL,
    REFUSED_PAIRS,
    TASK_OWNERSHIP_NOTE,
    TRANSITIONS,
    GoalEnd,
    Goals,
    GoalState,
    GoalStatus,
    Member,
    RevokeReason,
    Scope,
)

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
    "TaskEvidence",
    "TaskHandle",
    "TaskKind",
    "TaskOwnership",
    "call_entry",
    "is_allowed",
    "ownership_entry",
    "settled_entry",
]
