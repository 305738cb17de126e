"""Why a goal action failed: :class:`GoalError` and its codes.

A goal refusal is a deliberate error like any other of this package, so :class:`GoalError` is a
:class:`~pi_cross_session._internal.protocol.errors.CrossSessionError` whose ``code`` is a
:class:`GoalErrorCode`. The first two codes are wire codes (a peer hears them); the rest are local
to the ``peer_goal`` tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError


class GoalErrorCode(StrEnum):
    """Why a goal action failed. The first two are wire codes; the rest are local to the tool."""

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


class GoalError(CrossSessionError):
    """A goal action was refused: a :class:`GoalErrorCode` and a sentence for the caller."""

    code: GoalErrorCode = GoalErrorCode.INVALID

    def __init__(self, code: GoalErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}", code=code)
        self.code = code
        self.message = message


#: The sentence each refusal of the state machine says (its own wording, not a peer's).
REFUSAL_TEXT: Final[Mapping[GoalErrorCode, str]] = {
    GoalErrorCode.NOT_AUTHORIZED: "this turn may not change the goal",
    GoalErrorCode.INVALID: "that is not the active goal's exact id (the objective never changes)",
    GoalErrorCode.ALREADY_ACTIVE: "a goal is already active in this session; end it first",
    GoalErrorCode.TOO_MANY_PEERS: "too many peers for one goal",
    GoalErrorCode.TASK_OWNED: "a task handle belongs to another goal",
}


__all__ = ["REFUSAL_TEXT", "GoalError", "GoalErrorCode"]
