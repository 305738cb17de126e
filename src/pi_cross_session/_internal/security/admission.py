"""The receiver's decisions: what enters a session, in what order it is checked, where it ends.

:class:`Admission` is a pure state machine (no sockets, no tasks, no sleeping): the endpoint calls
:meth:`Admission.admit` and :meth:`Admission.status` for wire frames, the runtime calls
:meth:`flush_one` after a safe settle and :meth:`tick` when :meth:`next_deadline` comes, and the
local user calls :meth:`resume`. What the host's turns are doing it reads from the session's
:class:`~pi_cross_session._internal.security.turns.TurnTracker`, which tells it (as its
:class:`~pi_cross_session._internal.security.turns.TurnObserver`) when our message entered the
conversation, when a turn was aborted and how a turn settled. Time comes from an injected
:class:`Clock`, so every rule is testable without waiting.

A message frame is checked in the contract's order (spec §5), and the first failing check answers:

====  ============================================  =========================
step  check                                         refusal
====  ============================================  =========================
1     frame shape (done by the endpoint)            ``invalid_frame``
2     the hello named an authenticated sender       ``authentication_failed``
3     text not blank                                ``invalid_message``
4     inbound policy is ``accept``                  ``refused``
5     the abort latch is open                       ``stopped``
6     ``sentAt`` within 30 s back, 5 s ahead        ``expired``
7     not a bridge envelope                         ``invalid_bridge`` / ``unsupported``
7a    with goals: no ``goalId`` on a bridge         ``invalid_goal``
7b    with goals: the sender is a goal member       ``goal_not_authorized``
8     submittable now, or queueable for this sender ``busy``
9     fewer than 50 queued                          ``queue_full``
10    lifetime budget left (not for members)        ``budget_exhausted``
11    new message id, new text, a rate token        ``duplicate`` / ``rate_limited``
====  ============================================  =========================

**Goal scope** (goal-scoped-v1 §2.3-2.4) is off unless a :class:`Goals` is given; without one a
``goalId`` only separates the text-dedup key. With one, an invalid envelope still answers
``invalid_bridge`` first (goal-scoped-v1 §2.3 step 8); a valid envelope carrying a ``goalId``
answers ``invalid_goal`` (step 10) before our own ``unsupported`` for bridges. Then membership
(step 11, before ``busy``): a ``goalId`` that is not the active goal bound to this exact sender
(instance id and session id) goes through step 11 of the table above; if it passes, the id, the
text and one rate token are committed, no budget is spent, no row is made, and the answer is
``goal_not_authorized``. A member's scoped message is neither blocked by nor charged to the
lifetime budget; every other bound applies. :meth:`Admission.revoke_goal` ends the queued messages
of a revoked goal as ``dropped_goal_revoked``; the latch, an unsafe end and :meth:`shutdown` revoke
the goal themselves (:meth:`Admission.end_goal`), and a queued scoped message is checked for
membership again right before it is submitted.

Then the admission is **committed** (id and text remembered, one token and one budget unit spent,
a row ``accepted`` created) before anything else can happen, and resolved: submitted into the host
when safely idle, queued when busy with a known turn. From that point every message ends in exactly
one final state (see :data:`FINAL_STATES`), which :meth:`snapshot` shows. Nothing is ever refunded.

**Safely idle** means: the turn tracker has nothing on record (no turn, none announced, no
submission of ours still waiting to start) and the host agrees. **Queueable** means: a turn is
running, it was not cancelled, we know who started it, and the sender understands ``queued``.
Everything else is ``busy``: we never guess.

**The abort latch.** An abort, an aborted or otherwise unsafe end of a turn, a failed submission, or
a submission that does not start a turn within 5 s closes the inbox: every queued message ends as
``dropped_cancelled`` and new ones are refused ``stopped`` until the local user resumes. Resuming
drops what is left (``dropped_user_reset``), never replays, and does not refill the budget.

Why it closed is kept as a :class:`Latch`: the trigger, how the host said the turn ended (its stop
reason and error text, given through :meth:`Admission.note_turn_outcome` before the turn event),
and the peer message whose turn it was, if one was. The local user is shown all of it; a refused
sender is told only the trigger and the stop reason (:meth:`Latch.wire_text`): never another
sender's message, nor the host's own error text.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final, Protocol

from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.bridge import BridgeKind, classify_bridge
from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.frames import (
    Message,
    ReplyTemplates,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.protocol.limits import (
    MAX_CACHE_ENTRIES,
    MAX_QUEUED,
    MAX_STATUS_UNITS,
    MESSAGE_MAX_AGE_S,
    MESSAGE_MAX_FUTURE_SKEW_S,
    QUEUE_TTL_S,
    TURN_START_GRACE_S,
)
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.auth import Caller, LocalIdentity
from pi_cross_session._internal.security.goals import Goals, RevokeReason
from pi_cross_session._internal.security.limits import (
    LifetimeBudget,
    MessageIdLedger,
    RateLimiter,
    TextDedup,
)
from pi_cross_session._internal.security.provenance import PeerClaim
from pi_cross_session._internal.security.rows import FINAL_STATES, Row, RowKey, RowState, RowTable
from pi_cross_session._internal.security.turns import Phase, Settle, TurnState, TurnTracker

logger = logging.getLogger(__name__)

#: Diagnostics of a ``submitted`` row: whether the host showed the message entering its
#: conversation (spec §4.1 asks the row to record it).
NOT_YET_CONFIRMED: Final = "Submitted; the host has not yet confirmed it"
CONFIRMED: Final = "The host confirmed the message entered the conversation"
UNCONFIRMED: Final = "The host did not confirm it within 5 s; the inbox was closed"


class LatchReason(StrEnum):
    """Why the inbox closed."""

    ABORT = "the running turn was aborted"
    UNSAFE_END = "a turn ended without a clean stop"
    SUBMIT_FAILED = "the host refused a message submission"
    NO_TURN_START = "a submitted message did not start a turn within 5 s"


#: How much of the host's own error text a latch keeps (it is shown cut shorter still; a host may
#: put a whole provider response in it).
HOST_WORDS_KEPT: Final = 1000


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How the host said a turn ended, as the host adapter read it: the stop reason word of its
    last assistant message (``None`` when it gave none) and its error text, if any. Local words,
    never a peer's; still shown escaped, as anything a host wrote."""

    stop_reason: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Latch:
    """Why the inbox is closed: the trigger, when, how the host said the turn ended, and the
    peer message whose turn it was (its id and sender), when one was."""

    reason: LatchReason
    at_ms: int
    outcome: TurnOutcome | None = None
    message_id: str | None = None
    sender_name: str | None = None
    sender_instance_id: str | None = None

    def wire_text(self) -> str:
        """The ``error`` of a ``stopped`` refusal while latched (spec §3.4 leaves its words to
        us): the trigger and the stop reason the host reported, nothing of another sender's."""
        text = f"{refusal_text(Code.STOPPED)}: {self.reason.value}"
        outcome = self.outcome
        if outcome is not None and outcome.stop_reason is not None:
            text += f" (stop reason: {sanitize.line(outcome.stop_reason, MAX_STATUS_UNITS)})"
        return text


class AdmissionJournal(Protocol):
    """Where a receiver's message events are recorded (the event journal), if anywhere.

    Told every move of every row (with the message text when the row is born, for a journal that
    keeps text) and every refusal of an authenticated sender's message, after the decision: a
    journal records what happened and never changes it. It must not raise (admission logs and
    goes on if it does) and must not block.
    """

    def moved(self, row: Row, text: str | None) -> None:
        """``row`` was stored (born ``accepted`` with ``text``, or moved to a new state)."""

    def refused(self, sender: Registration, message: Message, code: str) -> None:
        """``message`` from ``sender`` was refused with ``code`` (no row was made)."""


@dataclass(frozen=True, slots=True)
class Clock:
    """Wall time in epoch milliseconds (compared with ``sentAt``) and monotonic seconds."""

    wall_ms: Callable[[], int]
    monotonic: Callable[[], float]


@dataclass(frozen=True, slots=True)
class Delivery:
    """An admitted message on its way into the host's conversation."""

    message_id: str
    sender: Registration
    text: str
    summary: str
    sent_at: int
    goal_id: str | None


@dataclass(slots=True)
class _Queued:
    delivery: Delivery
    expires_at: float  # monotonic


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the receiver for status displays."""

    phase: Phase
    stopped: bool
    latch_reason: str | None
    shut_down: bool
    remaining_budget: int
    total_budget: int
    queued: int
    max_queued: int
    rows: tuple[Row, ...]
    evicted_rows: int
    refusals: dict[str, int]
    admitted: int
    #: Why the inbox is closed, while it is.
    latch: Latch | None = None


@dataclass(frozen=True, slots=True)
class ResumeOutcome:
    """What ``/cross-session-resume`` did: reopened (reset) or not, and how many messages it
    dropped; ``was_open`` when the inbox was not closed in the first place."""

    reopened: bool
    dropped: int
    reason: str | None = None
    was_open: bool = False


@dataclass(slots=True)
class _Counters:
    admitted: int = 0
    refusals: dict[str, int] = field(default_factory=dict)


class Admission:
    """One receiver incarnation's admission state. Create a new one for a new incarnation."""

    def __init__(
        self,
        identity: LocalIdentity,
        *,
        clock: Clock,
        turns: TurnTracker,
        submit: Callable[[Delivery], None],
        budget: LifetimeBudget,
        inbound: Callable[[], str] = lambda: "accept",
        host_idle: Callable[[], bool] = lambda: True,
        rate: RateLimiter | None = None,
        message_ids: MessageIdLedger | None = None,
        texts: TextDedup | None = None,
        max_queued: int = MAX_QUEUED,
        queue_ttl_s: float = QUEUE_TTL_S,
        max_age_s: float = MESSAGE_MAX_AGE_S,
        future_skew_s: float = MESSAGE_MAX_FUTURE_SKEW_S,
        turn_start_grace_s: float = TURN_START_GRACE_S,
        max_rows: int = MAX_CACHE_ENTRIES,
        on_latch: Callable[[str], None] | None = None,
        on_row: Callable[[Row], None] | None = None,
        goals: Goals | None = None,
        journal: AdmissionJournal | None = None,
    ) -> None:
        self._identity = identity
        # Receipts and refusals differ only in their ids: validated once each.
        self._replies = ReplyTemplates()
        self._clock = clock
        self._turns = turns
        self._submit = submit
        self._budget = budget
        self._inbound = inbound
        self._host_idle = host_idle
        # ``is None``, not ``or``: the policies define __len__, so an empty one is falsy.
        self._rate = RateLimiter() if rate is None else rate
        self._ids = MessageIdLedger() if message_ids is None else message_ids
        self._texts = TextDedup() if texts is None else texts
        self._max_queued = max_queued
        self._queue_ttl = queue_ttl_s
        self._max_age_ms = int(max_age_s * 1000)
        self._future_skew_ms = int(future_skew_s * 1000)
        self._grace = turn_start_grace_s
        self._on_latch = on_latch
        self._on_row = on_row
        self._goals = goals
        self._journal = journal

        # The message whose submission is in progress, and whether the host confirmed it
        # meanwhile (a host may start the turn and show the message inside its submit call).
        self._submitting: Delivery | None = None
        self._confirmed_while_submitting = False
        # A safe settle owes the queue one submission; it stays owed until the host is idle.
        self._flush_owed = False
        self._queue: deque[_Queued] = deque()
        # Final rows beyond ``max_rows`` are evicted so that no sender pushes out another's
        # (security/rows.py); pending rows never are.
        self._rows = RowTable(max_final=max_rows)
        self._stopped = False
        self._closed: Latch | None = None
        # How the host said the turn now ending ended (told just before the turn event), and the
        # first message of ours that entered the conversation since the last turn settled.
        self._outcome: TurnOutcome | None = None
        self._turn_message: RowKey | None = None
        self._shut_down = False
        self._counters = _Counters()

    # -- wire ------------------------------------------------------------------------------------

    def admit(self, caller: Caller, message: Message) -> Response:
        """Decide one message frame; commits before it resolves, never awaits."""
        response = self._admit(caller, message)
        journal = self._journal
        if (
            journal is not None
            and not response.ok
            and caller.sender is not None
            and response.status != Code.INJECTION_FAILED  # admitted: its row says so
        ):
            try:
                journal.refused(caller.sender, message, response.status)
            except Exception:  # the journal records; it never disturbs admission
                logger.exception("the event journal failed")
        return response

    def _admit(self, caller: Caller, message: Message) -> Response:
        sender = caller.sender
        if sender is None:
            return self._refuse(message.request_id, Code.AUTHENTICATION_FAILED)
        if message.text_is_blank:
            return self._refuse(message.request_id, Code.INVALID_MESSAGE)
        if self._inbound() != "accept":
            return self._refuse(message.request_id, Code.REFUSED)
        if self._stopped or self._shut_down:
            latch = self._closed if self._stopped else None
            error = None if latch is None else latch.wire_text()
            return self._refuse(message.request_id, Code.STOPPED, error=error)
        now_ms = self._clock.wall_ms()
        age = now_ms - message.sent_at
        if age > self._max_age_ms or -age > self._future_skew_ms:
            return self._refuse(message.request_id, Code.EXPIRED)
        bridge = classify_bridge(message.text, now_ms=now_ms)
        if bridge is BridgeKind.INVALID:
            return self._refuse(message.request_id, Code.INVALID_BRIDGE)
        goals = self._goals
        goal_id = message.goal_id if goals is not None else None
        if bridge is BridgeKind.VALID:
            if goal_id is not None:  # goal-scoped-v1 §2.3 step 10
                return self._refuse(message.request_id, Code.INVALID_GOAL)
            # We run no in-process bridge listener: such text is never given to a model.
            return self._refuse(message.request_id, Code.UNSUPPORTED)
        now = self._clock.monotonic()
        sender_id = sender.instance_id
        text_key = TextDedup.key(sender_id, message.text, message.goal_id)
        if (
            goals is not None
            and goal_id is not None
            and not goals.is_member(goal_id, sender_id, sender.id)
        ):
            # goal-scoped-v1 §2.3 step 11: a forged or stale goal id still costs the sender its
            # dedup entries and a rate token (committed), but never the budget, and it makes no row.
            stale = self._stale(sender_id, message.message_id, text_key, now)
            if stale is not None:
                return self._refuse(message.request_id, stale)
            self._commit_fresh(sender_id, message.message_id, text_key, now)
            return self._refuse(message.request_id, Code.GOAL_NOT_AUTHORIZED)
        # A member's scoped message neither needs nor spends the lifetime budget
        # (goal-scoped-v1 §2.4).
        charged = goal_id is None
        self._expire(now)  # a full queue of stale entries must not refuse a fresh message
        # While older messages wait for their flush, a new one never jumps ahead of them.
        can_submit = self.can_submit() and not self._queue
        if not can_submit and not (caller.can_queue and self.can_queue()):
            return self._refuse(message.request_id, Code.BUSY)
        if len(self._queue) >= self._max_queued:
            return self._refuse(message.request_id, Code.QUEUE_FULL)
        if charged and not self._budget.can_spend():
            return self._refuse(message.request_id, Code.BUDGET_EXHAUSTED)
        stale = self._stale(sender_id, message.message_id, text_key, now)
        if stale is not None:
            return self._refuse(message.request_id, stale)

        # Commit: from here on the message is ours to account for, whatever happens next.
        self._commit_fresh(sender_id, message.message_id, text_key, now)
        if charged:
            self._budget.spend()
        self._counters.admitted += 1
        delivery = Delivery(
            message_id=message.message_id,
            sender=sender,
            text=message.text,
            summary=message.summary,
            sent_at=message.sent_at,
            goal_id=message.goal_id,
        )
        self._put_row(
            Row(
                sender_instance_id=sender_id,
                sender_name=sender.name,
                message_id=message.message_id,
                summary=message.summary,
                state=RowState.ACCEPTED,
                admitted_at_ms=now_ms,
                updated_at_ms=now_ms,
                goal_id=message.goal_id,
                sender_session_id=sender.id,
            ),
            text=message.text,
        )
        if can_submit:
            state = self._deliver(delivery)
            if state is RowState.SUBMITTED:
                return self._ok(message.request_id, Code.SUBMITTED)
            # Admitted and accounted for (its row says injection_failed), so not counted as a
            # refusal; the wire still says the host could not take it.
            return self._response(message.request_id, Code.INJECTION_FAILED)
        ttl_left = min(
            self._queue_ttl, max(0.0, (message.sent_at - now_ms) / 1000 + self._queue_ttl)
        )
        self._queue.append(_Queued(delivery, expires_at=now + ttl_left))
        self._set_state(delivery, RowState.QUEUED)
        return self._ok(message.request_id, Code.QUEUED)

    def status(self, caller: Caller, query: StatusQuery) -> Response:
        """Answer a status query from the same authenticated sender; costs nothing."""
        sender = caller.sender
        if sender is None:  # the endpoint's handler never routes this here; be safe anyway
            return self._refuse("unknown", Code.INVALID_FRAME)
        row = self._rows.get((sender.instance_id, query.message_id))
        if row is None:
            return self._ok(query.request_id, Code.UNKNOWN)
        if row.delivered and caller.wants_delivery:
            return self._ok(query.request_id, Code.DELIVERED, error=row.diagnostic)
        return self._ok(query.request_id, row.state, error=row.diagnostic)

    # -- gates -----------------------------------------------------------------------------------

    def can_submit(self) -> bool:
        """Safely idle: the turn tracker has nothing on record (no turn, none announced, nothing
        of ours waiting to start) and the host agrees."""
        return self._turns.submittable and self._host_idle()

    def can_queue(self) -> bool:
        """Busy with a turn that was not cancelled and whose source we know."""
        return self._turns.queueable

    # -- what the turn tracker tells (TurnObserver) ----------------------------------------------

    def message_entered(self, message_id: str, sender_instance_id: str) -> PeerClaim | None:
        """The host showed a message we submitted entering its conversation: its row records it.
        Returns what admission submitted as that message (its goal id and authenticated
        sender), or ``None`` when this incarnation submitted no such message."""
        key = (sender_instance_id, message_id)
        submitting = self._submitting
        if submitting is not None and _key(submitting) == key:
            self._confirmed_while_submitting = True
            self._turn_message = self._turn_message or key
            return _claim(submitting.goal_id, submitting.sender.instance_id, submitting.sender.id)
        row = self._rows.get(key)
        if row is None or row.state is not RowState.SUBMITTED:
            return None
        confirmed = replace(
            row, diagnostic=CONFIRMED, delivered=True, updated_at_ms=self._clock.wall_ms()
        )
        self._store(confirmed)
        self._observe(confirmed)
        self._turn_message = self._turn_message or key
        return _claim(row.goal_id, row.sender_instance_id, row.sender_session_id)

    def note_turn_outcome(self, outcome: TurnOutcome) -> None:
        """How the host says the turn now ending ended; told just before the abort or end event
        it explains, and kept as part of the latch's reason if that event closes the inbox."""
        error = outcome.error
        if error is not None and len(error) > HOST_WORDS_KEPT:
            outcome = replace(outcome, error=error[:HOST_WORDS_KEPT])
        self._outcome = outcome

    def turn_aborted(self) -> None:
        """The running turn was aborted (or its signal fired): latch."""
        self._latch(LatchReason.ABORT, self._turn_message)

    def turn_settled(self, settle: Settle) -> None:
        """A turn ended: an unsafe end latches; a safe one owes the queue one submission
        (see :attr:`flush_owed`), made by :meth:`flush_one` once the host has settled."""
        if settle is Settle.UNSAFE:
            self._latch(LatchReason.UNSAFE_END, self._turn_message)
        elif settle is Settle.SAFE:
            self._flush_owed = bool(self._queue) and not self._stopped
        # The next turn is a new one: what this one said and carried is forgotten.
        self._outcome = None
        self._turn_message = None

    @property
    def flush_owed(self) -> bool:
        """A safe settle has not yet been followed by its one submission from the queue."""
        return self._flush_owed

    def flush_one(self) -> Row | None:
        """Submit the oldest live queued message, if the session is still safely idle.

        Expired entries met on the way are marked ``expired``. Returns the row submitted, if any.
        When the host is not idle yet, the submission stays owed (see :attr:`flush_owed`) and a
        later call makes it, so a queue is never stranded behind a missed moment.
        """
        if self._stopped or self._shut_down or not self.can_submit():
            return None
        self._expire(self._clock.monotonic())
        if not self._queue:
            self._flush_owed = False
            return None
        self._flush_owed = False
        while self._queue:
            entry = self._queue.popleft()
            if not self._still_member(entry.delivery):
                # Re-checked before it runs (goal-scoped-v1 §2.3): a goal that ended or a peer
                # unbound since it was queued never reaches the model. The owed submission goes
                # to the next live message instead.
                self._drop_revoked(entry.delivery)
                continue
            self._deliver(entry.delivery)
            return self._rows.get(_key(entry.delivery))
        return None

    # -- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The monotonic time at which :meth:`tick` has something to do, if any."""
        deadlines = [entry.expires_at for entry in self._queue]
        if self._turns.deadline is not None:
            deadlines.append(self._turns.deadline)
        return min(deadlines, default=None)

    def tick(self) -> None:
        """Expire queued messages past their TTL; latch if a submission never started a turn."""
        now = self._clock.monotonic()
        self._expire(now)
        key = self._turns.expire(now)
        if key is not None:
            row = self._rows.get(key)
            if row is not None and row.state is RowState.SUBMITTED:
                self._store(
                    replace(row, diagnostic=UNCONFIRMED, updated_at_ms=self._clock.wall_ms())
                )
            self._latch(LatchReason.NO_TURN_START, key)

    # -- local user ------------------------------------------------------------------------------

    def resume(self) -> ResumeOutcome:
        """``/cross-session-resume``: reopen the inbox, only when nothing is running.

        On an inbox that is not closed it resets all the same (spec §5.6: what is still pending
        ends ``dropped_user_reset``), and says it was open (``was_open``)."""
        if self._shut_down:
            return ResumeOutcome(False, 0, "this incarnation has shut down")
        was_open = not self._stopped
        if self._turns.state not in _RESUMABLE or not self._host_idle():
            return ResumeOutcome(
                False, 0, "a turn is still running; wait until it has settled", was_open=was_open
            )
        dropped = self._drop_all(RowState.DROPPED_USER_RESET, "Dropped when the user resumed")
        self._turns.reset()
        self._stopped = False
        self._closed = None
        self._outcome = None
        self._turn_message = None
        return ResumeOutcome(True, dropped, was_open=was_open)

    def revoke_goal(self, goal_id: str) -> int:
        """A goal ended (see :meth:`Goals.revoke`): its queued messages end
        ``dropped_goal_revoked``; other queued messages stay. Returns how many were dropped."""
        return self._drop_queued(lambda delivery: delivery.goal_id == goal_id)

    def drop_unbound(self) -> int:
        """Peers were unbound: queued scoped messages whose sender is no longer a member of
        their goal end ``dropped_goal_revoked``. Returns how many were dropped."""
        return self._drop_queued(lambda delivery: not self._still_member(delivery))

    def end_goal(self, reason: RevokeReason) -> str | None:
        """End the active goal, if any, and drop its queued messages; returns its id."""
        goals = self._goals
        if goals is None:
            return None
        goal_id = goals.revoke(reason)
        if goal_id is not None:
            self.revoke_goal(goal_id)
        return goal_id

    def shutdown(self, reason: RevokeReason = RevokeReason.SHUTDOWN) -> int:
        """The incarnation ends (``reason``: shutdown or reload): the goal is revoked, its queued
        messages end ``dropped_goal_revoked`` and every other pending one ``dropped_shutdown``."""
        self._shut_down = True
        self._turns.withdraw()
        self.end_goal(reason)
        return self._drop_all(RowState.DROPPED_SHUTDOWN, "Dropped because the session shut down")

    # -- inspection ------------------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        """The current phase."""
        return self._turns.phase

    @property
    def stopped(self) -> bool:
        """True while the abort latch is closed."""
        return self._stopped

    @property
    def latch(self) -> Latch | None:
        """Why the inbox is closed, while it is."""
        return self._closed if self._stopped else None

    def row(self, sender_instance_id: str, message_id: str) -> Row | None:
        """The row of one message, if the receiver still has it."""
        return self._rows.get((sender_instance_id, message_id))

    @property
    def queue_depth(self) -> int:
        """Messages waiting in the queue now (expired ones included until the next tick)."""
        return len(self._queue)

    def snapshot(self, *, recent: int | None = None) -> Snapshot:
        """Everything a status display shows; ``recent`` limits the rows to the newest ones."""
        rows = self._rows.values()
        if recent is not None:
            rows = rows[-recent:] if recent > 0 else ()
        return Snapshot(
            phase=self._turns.phase,
            stopped=self._stopped,
            latch_reason=None if self._closed is None else self._closed.reason.value,
            shut_down=self._shut_down,
            remaining_budget=self._budget.remaining,
            total_budget=self._budget.total,
            queued=len(self._queue),
            max_queued=self._max_queued,
            rows=rows,
            evicted_rows=self._rows.evicted,
            refusals=dict(self._counters.refusals),
            admitted=self._counters.admitted,
            latch=self.latch,
        )

    # -- internals -------------------------------------------------------------------------------

    def _deliver(self, delivery: Delivery) -> RowState:
        """Hand a message to the host; a synchronous failure latches the inbox.

        The turn we expect is registered *before* the host is called, because a host may start
        that turn (and show the message) before its submit call returns.
        """
        key = _key(delivery)
        self._turns.submitting(key, deadline=self._clock.monotonic() + self._grace)
        self._submitting = delivery
        self._confirmed_while_submitting = False
        try:
            self._submit(delivery)
        except Exception as exc:  # the host's error is reported as a state, never raised
            logger.warning(
                "submission of %s failed: %s", delivery.message_id, sanitize.line(str(exc))
            )
            self._turns.submit_failed(key)
            self._set_state(
                delivery, RowState.INJECTION_FAILED, f"The host refused it: {exc}"[:400]
            )
            self._outcome = TurnOutcome(error=(str(exc) or type(exc).__name__)[:HOST_WORDS_KEPT])
            self._latch(LatchReason.SUBMIT_FAILED, key)
            return RowState.INJECTION_FAILED
        finally:
            self._submitting = None
        confirmed = self._confirmed_while_submitting
        diagnostic = CONFIRMED if confirmed else NOT_YET_CONFIRMED
        self._set_state(delivery, RowState.SUBMITTED, diagnostic, delivered=confirmed)
        return RowState.SUBMITTED

    def _stale(
        self, sender_id: str, message_id: str, text_key: tuple[str, str, str], now: float
    ) -> Code | None:
        """Step 11's refusal (a seen id or text, or no rate token), or None when it passes."""
        seen_id = self._ids.seen(sender_id, message_id) or (sender_id, message_id) in self._rows
        if seen_id or self._texts.is_duplicate(text_key, now):
            return Code.DUPLICATE
        if not self._rate.allows(sender_id, now):
            return Code.RATE_LIMITED
        return None

    def _commit_fresh(
        self, sender_id: str, message_id: str, text_key: tuple[str, str, str], now: float
    ) -> None:
        self._ids.commit(sender_id, message_id)
        self._texts.commit(text_key, now)
        self._rate.commit(sender_id, now)

    def _latch(self, reason: LatchReason, key: RowKey | None = None) -> None:
        self._flush_owed = False
        # The latch ends the goal too (goal-scoped-v1 §1.6): its queued messages are dropped as
        # revoked first, then every other pending message as cancelled.
        self.end_goal(
            RevokeReason.UNSAFE_END if reason is LatchReason.UNSAFE_END else RevokeReason.LATCH
        )
        if not self._stopped:
            self._stopped = True
            self._closed = self._describe_latch(reason, key)
            if self._on_latch is not None:
                self._on_latch(reason.value)
        self._drop_all(RowState.DROPPED_CANCELLED, f"Dropped: {reason.value}")

    def _describe_latch(self, reason: LatchReason, key: RowKey | None) -> Latch:
        row = None if key is None else self._rows.get(key)
        return Latch(
            reason=reason,
            at_ms=self._clock.wall_ms(),
            outcome=self._outcome,
            message_id=None if key is None else key[1],
            sender_name=None if row is None else row.sender_name,
            sender_instance_id=None if key is None else key[0],
        )

    def _still_member(self, delivery: Delivery) -> bool:
        goals = self._goals
        if goals is None or delivery.goal_id is None:
            return True
        sender = delivery.sender
        return goals.is_member(delivery.goal_id, sender.instance_id, sender.id)

    def _drop_revoked(self, delivery: Delivery) -> None:
        self._set_state(
            delivery, RowState.DROPPED_GOAL_REVOKED, "Dropped because its goal grant was revoked"
        )

    def _drop_queued(self, doomed: Callable[[Delivery], bool]) -> int:
        kept: deque[_Queued] = deque()
        dropped = 0
        for entry in self._queue:
            if doomed(entry.delivery):
                self._drop_revoked(entry.delivery)
                dropped += 1
            else:
                kept.append(entry)
        self._queue = kept
        if not kept:
            self._flush_owed = False
        return dropped

    def _drop_all(self, state: RowState, diagnostic: str) -> int:
        dropped = 0
        while self._queue:
            entry = self._queue.popleft()
            self._set_state(entry.delivery, state, diagnostic)
            dropped += 1
        return dropped

    def _expire(self, now: float) -> None:
        if not self._queue:
            return
        live: deque[_Queued] = deque()
        for entry in self._queue:
            if entry.expires_at <= now:
                self._set_state(entry.delivery, RowState.EXPIRED, "Expired in the queue after 30 s")
            else:
                live.append(entry)
        self._queue = live

    def _set_state(
        self,
        delivery: Delivery,
        state: RowState,
        diagnostic: str | None = None,
        *,
        delivered: bool = False,
    ) -> None:
        key = _key(delivery)
        row = self._rows.get(key)
        if row is None:
            return  # evicted long ago; only final rows are ever evicted
        updated = replace(
            row,
            state=state,
            diagnostic=diagnostic,
            delivered=delivered,
            updated_at_ms=self._clock.wall_ms(),
        )
        self._store(updated)
        self._observe(updated)

    def _observe(self, row: Row, text: str | None = None) -> None:
        if self._on_row is not None:
            try:
                self._on_row(row)
            except Exception:  # an observer must never disturb admission
                logger.exception("message state observer failed")
        if self._journal is not None:
            try:
                self._journal.moved(row, text)
            except Exception:
                logger.exception("the event journal failed")

    def _put_row(self, row: Row, *, text: str | None = None) -> None:
        self._store(row)
        self._observe(row, text)

    def _store(self, row: Row) -> None:
        # The submitted row whose turn is still due stays whatever else ends meanwhile: its
        # confirmation (or the lack of one) is recorded on it.
        due: RowKey | None = self._turns.awaiting
        self._rows.put(row, keep=due)

    def _ok(self, request_id: str, status: str, *, error: str | None = None) -> Response:
        return self._replies.build(
            request_id=request_id,
            ok=True,
            status=status,
            error=error,
            peer=self._identity.peer_identity(),
        )

    def _refuse(self, request_id: str, code: Code, *, error: str | None = None) -> Response:
        refusals = self._counters.refusals
        refusals[code] = refusals.get(code, 0) + 1
        return self._response(request_id, code, error=error)

    def _response(self, request_id: str, code: Code, *, error: str | None = None) -> Response:
        return self._replies.build(
            request_id=request_id,
            ok=False,
            status=code,
            error=refusal_text(code) if error is None else error,
        )


#: Tracker states in which ``/cross-session-resume`` may reopen: no turn on record, nothing of
#: ours waiting to start (the host must agree it is idle, too).
_RESUMABLE: Final = frozenset({TurnState.IDLE, TurnState.PREPARING, TurnState.OFF_RECORD})


def _key(delivery: Delivery) -> RowKey:
    return (delivery.sender.instance_id, delivery.message_id)


def _claim(goal_id: str | None, instance_id: str, session_id: str) -> PeerClaim:
    return PeerClaim(goal_id, (instance_id, session_id))


__all__ = [
    "CONFIRMED",
    "FINAL_STATES",
    "HOST_WORDS_KEPT",
    "NOT_YET_CONFIRMED",
    "UNCONFIRMED",
    "Admission",
    "AdmissionJournal",
    "Clock",
    "Delivery",
    "Latch",
    "LatchReason",
    "Phase",
    "ResumeOutcome",
    "Row",
    "Snapshot",
    "TurnOutcome",
]
