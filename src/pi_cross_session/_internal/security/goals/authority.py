"""Who may do what to a goal: the caller's authority and the authorization table
(goal-scoped-v1 §1.3).

The host adapter describes the caller as an :class:`Authority` (who started the turn, whether it
was cancelled, which goal it names); :meth:`Goals.classify
<pi_cross_session._internal.security.goals.machine.Goals.classify>` puts it in one of four
:class:`AuthorityClass` rows against the current goal; :data:`ALLOWED` says, as data, which rows may
take each :class:`Action`:

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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


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
    #: Anything we cannot vouch for (including mesh-continuation turns: not local,
    #: goal-scoped-v1 §1.3).
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

#: The authorization table of goal-scoped-v1 §1.3: which authority classes may take each action.
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


__all__ = [
    "ALLOWED",
    "LOCAL_COMMAND",
    "USER_TURN",
    "Action",
    "Authority",
    "AuthorityClass",
    "AuthorityKind",
    "is_allowed",
]
