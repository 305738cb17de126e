"""One model of "the current turn": fed by normalised host events, read by admission and the gate.

A host adapter's only job about turns is to translate its host's events into the small vocabulary
below and hand each to :meth:`SessionRuntime.on_turn
<pi_cross_session._internal.plugin.runtime.SessionRuntime.on_turn>` (which gives it to
:meth:`TurnTracker. handle`). Everything else — whether the session is safely idle, whether a
message may queue, when the inbox latches, who started the turn, what the gate allows — is read from
this one tracker: admission reads :attr:`~TurnTracker.phase`, :attr:`~TurnTracker.state` and
:attr:`~TurnTracker.queueable` and is told the latch triggers; the gate reads
:meth:`~TurnTracker.authority_for_call` and :attr:`~TurnTracker.facts`.

**The event vocabulary** (for adapter authors; every field is the adapter's translation, never a
peer's text):

=====================  ===================================================================
event                  report it when
=====================  ===================================================================
TurnPreparing()        the host is about to start a turn (a prompt arrived, a turn barrier)
TurnAbandoned()        a turn reported as preparing will not run after all (a slash command)
TurnStarted(by)        a turn started; ``by`` if the host knows who started it, else unknown
TurnOpened(by, ...)    a message that opens the turn, before the model's first reply: the
                       user's (``USER``), another in-process extension's (``NOTIFICATION``,
                       with the task handles it names), or one you cannot place (``UNKNOWN``)
OurMessageStarted(..)  a message this extension submitted entered the conversation (its
                       ``messageId`` and sender instance id, from the message's details)
ModelReplied()         the model's first reply began: the opening is over
TurnAborted()          the running turn was aborted (its abort signal, an aborted message)
TurnEnded(ending)      the turn ended; ``ending`` from its last assistant message (only
                       ``STOP`` is a clean end; report ``UNKNOWN`` rather than guess)
=====================  ===================================================================

Report what the host said, in its order, and nothing you inferred: the tracker never guesses
upward (unknown stays unknown; a peer message in the opening makes a peer turn; after the opening
nothing relabels a turn; a second ``TurnStarted`` inside a turn is a host retry and changes
nothing). An event that does not apply in the current state is ignored, so an adapter need not
track state of its own to decide whether to report one. Admission adds its own events through
methods (:meth:`~TurnTracker.submitting`, :meth:`~TurnTracker.submit_failed`,
:meth:`~TurnTracker.expire`, :meth:`~TurnTracker.withdraw`, :meth:`~TurnTracker.reset`), and the
runtime one for a new incarnation (:meth:`~TurnTracker.rebase`).

**States** (:class:`TurnState`) and what admission sees in each (:class:`Phase`):

==================  ==================================================================  =========
state               meaning                                                             phase
==================  ==================================================================  =========
IDLE                no turn, none announced, no submission of ours waiting              idle
PREPARING           the host announced a turn that has not started                      preflight
AWAITING            a message we submitted waits for the turn it starts (5 s at most)   preflight
AWAITING_PREPARING  both                                                                preflight
OPENING             a turn runs; its opening messages may still say who started it      busy
RUNNING             a turn runs; the model replied, so its provenance is settled        busy
OFF_RECORD          a turn began before this incarnation (a reload): the host's word    idle
==================  ==================================================================  =========

The transitions are :data:`TRANSITIONS`, a total table over (state, event kind): each entry names
the next state and what the tracker does (:class:`Do`), or is ``None`` for an event that cannot
come in that state without a bug of ours (:class:`TurnEventError`). Its rules, from spec §5.4-5.6
and spec §7.3:

* a turn that starts while a message we submitted has not yet landed is a **peer** turn, whatever
  the host says (our message lands in it; user input does not claim it);
* the latch triggers are an abort (:class:`TurnAborted`) and an **unsafe end**: a turn on record
  that was cancelled, of unknown provenance, or ended any way but ``STOP``; with no turn on
  record, any ending but ``STOP``. A clean end with no turn on record is *quiet*: nothing to vouch
  for, nothing to latch (:class:`Settle`);
* a turn's provenance is learned from its opening only, ranked (unknown < notification < user <
  peer) and never lowered; its cancellation sticks until it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Protocol, TypeAlias

from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.security.goals import TaskHandle
from pi_cross_session._internal.security.provenance import (
    NO_TURN,
    RANK,
    PeerClaim,
    Provenance,
    TurnAuthority,
    TurnFacts,
)
from pi_cross_session._internal.security.rows import RowKey

# -- values ----------------------------------------------------------------------------------------


class TurnEnding(StrEnum):
    """How a turn ended, from the host's last assistant message. Only ``stop`` is safe."""

    STOP = "stop"
    ABORTED = "aborted"
    ERROR = "error"
    OTHER = "other"
    UNKNOWN = "unknown"


class Phase(StrEnum):
    """Where the host session is in its turn cycle, as admission sees it."""

    IDLE = "idle"
    PREFLIGHT = "preflight"
    BUSY = "busy"


class Settle(StrEnum):
    """How a turn's end leaves the inbox (told to the observer)."""

    #: A known, uncancelled turn stopped cleanly: one queued message may go next.
    SAFE = "safe"
    #: A clean stop with no turn on record: nothing to vouch for, nothing to latch.
    QUIET = "quiet"
    #: Anything else: the inbox latches.
    UNSAFE = "unsafe"


class TurnState(StrEnum):
    """The tracker's states (see the module docstring)."""

    IDLE = "idle"
    PREPARING = "preparing"
    AWAITING = "awaiting"
    AWAITING_PREPARING = "awaiting_preparing"
    OPENING = "opening"
    RUNNING = "running"
    OFF_RECORD = "off_record"


_PHASES: Final[Mapping[TurnState, Phase]] = {
    TurnState.IDLE: Phase.IDLE,
    TurnState.PREPARING: Phase.PREFLIGHT,
    TurnState.AWAITING: Phase.PREFLIGHT,
    TurnState.AWAITING_PREPARING: Phase.PREFLIGHT,
    TurnState.OPENING: Phase.BUSY,
    TurnState.RUNNING: Phase.BUSY,
    TurnState.OFF_RECORD: Phase.IDLE,
}


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnPreparing:
    """The host is about to start a turn: no longer safely idle."""


@dataclass(frozen=True, slots=True)
class TurnAbandoned:
    """A turn reported as preparing will not run after all."""


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A turn started; ``by`` is who started it when the host knows (else learned from its
    opening messages)."""

    by: Provenance = Provenance.UNKNOWN


@dataclass(frozen=True, slots=True)
class TurnOpened:
    """A message opening the running turn, by ``by``; a notification names ``handles``."""

    by: Provenance
    handles: tuple[TaskHandle, ...] = ()


@dataclass(frozen=True, slots=True)
class OurMessageStarted:
    """A message this extension submitted entered the conversation (ids from its details)."""

    message_id: str
    sender_instance_id: str


@dataclass(frozen=True, slots=True)
class ModelReplied:
    """The model's first reply of the turn began: the opening is over."""


@dataclass(frozen=True, slots=True)
class TurnAborted:
    """The running turn was aborted."""


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn ended, with ``ending`` from its last assistant message."""

    ending: TurnEnding


#: Everything a host adapter reports.
TurnEvent: TypeAlias = (
    TurnPreparing
    | TurnAbandoned
    | TurnStarted
    | TurnOpened
    | OurMessageStarted
    | ModelReplied
    | TurnAborted
    | TurnEnded
)


class EventKind(StrEnum):
    """The table's columns: the host's events, then admission's and the runtime's own."""

    PREPARING = "preparing"
    ABANDONED = "abandoned"
    STARTED = "started"
    OPENED = "opened"
    OURS = "ours"
    REPLIED = "replied"
    ABORTED = "aborted"
    ENDED = "ended"
    #: Admission hands a message to the host (only when safely idle).
    SUBMITTING = "submitting"
    #: The host refused it.
    SUBMIT_FAILED = "submit_failed"
    #: It started no turn within the grace period.
    NO_START = "no_start"
    #: Its incarnation ended: it waits for nothing any more.
    WITHDRAWN = "withdrawn"
    #: The local user reopened the inbox (only with nothing running).
    RESET = "reset"
    #: A new incarnation replaced the old one.
    REBASE = "rebase"


_KIND_OF: Final[Mapping[type, EventKind]] = {
    TurnPreparing: EventKind.PREPARING,
    TurnAbandoned: EventKind.ABANDONED,
    TurnStarted: EventKind.STARTED,
    TurnOpened: EventKind.OPENED,
    OurMessageStarted: EventKind.OURS,
    ModelReplied: EventKind.REPLIED,
    TurnAborted: EventKind.ABORTED,
    TurnEnded: EventKind.ENDED,
}


# -- the table -------------------------------------------------------------------------------------


class Do(StrEnum):
    """What a transition does besides changing state, in the order a step lists them."""

    #: Open the turn's record: a peer turn if a message of ours was landing, else ``by``.
    BEGIN = "begin"
    #: An opening message says more about who started the turn.
    OBSERVE = "observe"
    #: Tell admission our message entered the conversation (and learn what it submitted).
    CONFIRM = "confirm"
    #: The running turn is cancelled: restricted for whatever it still tries.
    CANCEL = "cancel"
    #: Tell admission to close the inbox (an abort).
    LATCH = "latch"
    #: Close the turn's record and tell admission how the turn settled.
    SETTLE = "settle"
    #: A message of ours waits for its turn, until a deadline.
    AWAIT = "await"
    #: It waits no more; it may still land in the next turn (the host has it).
    FORGET = "forget"
    #: The host refused it: it neither waits nor lands.
    DROP = "drop"
    #: Forget the running turn's record and the last provenance (a new incarnation).
    UNRECORD = "unrecord"


@dataclass(frozen=True, slots=True)
class Step:
    """One cell of the table: the next state and what to do on the way."""

    to: TurnState
    does: tuple[Do, ...] = ()


T = TurnState
K = EventKind


def _same(state: TurnState, *does: Do) -> Step:
    return Step(state, does)


#: The whole machine, (state, event kind) -> step, or ``None``: that event cannot come in that
#: state unless we have a bug. Read one state's block to see everything that can happen in it.
TRANSITIONS: Final[Mapping[tuple[TurnState, EventKind], Step | None]] = {
    # -- IDLE: nothing runs, nothing is announced, nothing of ours waits
    (T.IDLE, K.PREPARING): Step(T.PREPARING),
    (T.IDLE, K.ABANDONED): _same(T.IDLE),
    (T.IDLE, K.STARTED): Step(T.OPENING, (Do.BEGIN,)),
    (T.IDLE, K.OPENED): _same(T.IDLE),
    (T.IDLE, K.OURS): _same(T.IDLE, Do.CONFIRM),
    (T.IDLE, K.REPLIED): _same(T.IDLE),
    (T.IDLE, K.ABORTED): _same(T.IDLE, Do.LATCH),
    (T.IDLE, K.ENDED): _same(T.IDLE, Do.SETTLE),
    (T.IDLE, K.SUBMITTING): Step(T.AWAITING, (Do.AWAIT,)),
    (T.IDLE, K.SUBMIT_FAILED): _same(T.IDLE, Do.DROP),
    (T.IDLE, K.NO_START): None,
    (T.IDLE, K.WITHDRAWN): _same(T.IDLE),
    (T.IDLE, K.RESET): _same(T.IDLE),
    (T.IDLE, K.REBASE): _same(T.IDLE, Do.UNRECORD),
    # -- PREPARING: the host announced a turn
    (T.PREPARING, K.PREPARING): _same(T.PREPARING),
    (T.PREPARING, K.ABANDONED): Step(T.IDLE),
    (T.PREPARING, K.STARTED): Step(T.OPENING, (Do.BEGIN,)),
    (T.PREPARING, K.OPENED): _same(T.PREPARING),
    (T.PREPARING, K.OURS): _same(T.PREPARING, Do.CONFIRM),
    (T.PREPARING, K.REPLIED): _same(T.PREPARING),
    (T.PREPARING, K.ABORTED): _same(T.PREPARING, Do.LATCH),
    (T.PREPARING, K.ENDED): Step(T.IDLE, (Do.SETTLE,)),  # it failed before it started
    (T.PREPARING, K.SUBMITTING): None,  # admission submits only when idle
    (T.PREPARING, K.SUBMIT_FAILED): _same(T.PREPARING, Do.DROP),
    (T.PREPARING, K.NO_START): None,
    (T.PREPARING, K.WITHDRAWN): _same(T.PREPARING),
    (T.PREPARING, K.RESET): Step(T.IDLE),
    (T.PREPARING, K.REBASE): _same(T.PREPARING, Do.UNRECORD),
    # -- AWAITING: our submission waits for the turn it starts
    (T.AWAITING, K.PREPARING): Step(T.AWAITING_PREPARING),
    (T.AWAITING, K.ABANDONED): _same(T.AWAITING),
    (T.AWAITING, K.STARTED): Step(T.OPENING, (Do.BEGIN,)),
    (T.AWAITING, K.OPENED): _same(T.AWAITING),
    (T.AWAITING, K.OURS): _same(T.AWAITING, Do.CONFIRM),
    (T.AWAITING, K.REPLIED): _same(T.AWAITING),
    (T.AWAITING, K.ABORTED): _same(T.AWAITING, Do.LATCH),
    (T.AWAITING, K.ENDED): _same(T.AWAITING, Do.SETTLE),
    (T.AWAITING, K.SUBMITTING): None,
    (T.AWAITING, K.SUBMIT_FAILED): Step(T.IDLE, (Do.DROP,)),
    (T.AWAITING, K.NO_START): Step(T.IDLE, (Do.FORGET,)),
    (T.AWAITING, K.WITHDRAWN): Step(T.IDLE, (Do.FORGET,)),
    (T.AWAITING, K.RESET): None,  # resume waits until our submission has its turn
    (T.AWAITING, K.REBASE): Step(T.IDLE, (Do.FORGET, Do.UNRECORD)),
    # -- AWAITING_PREPARING: both
    (T.AWAITING_PREPARING, K.PREPARING): _same(T.AWAITING_PREPARING),
    (T.AWAITING_PREPARING, K.ABANDONED): Step(T.AWAITING),
    (T.AWAITING_PREPARING, K.STARTED): Step(T.OPENING, (Do.BEGIN,)),
    (T.AWAITING_PREPARING, K.OPENED): _same(T.AWAITING_PREPARING),
    (T.AWAITING_PREPARING, K.OURS): _same(T.AWAITING_PREPARING, Do.CONFIRM),
    (T.AWAITING_PREPARING, K.REPLIED): _same(T.AWAITING_PREPARING),
    (T.AWAITING_PREPARING, K.ABORTED): _same(T.AWAITING_PREPARING, Do.LATCH),
    (T.AWAITING_PREPARING, K.ENDED): Step(T.AWAITING, (Do.SETTLE,)),
    (T.AWAITING_PREPARING, K.SUBMITTING): None,
    (T.AWAITING_PREPARING, K.SUBMIT_FAILED): Step(T.PREPARING, (Do.DROP,)),
    (T.AWAITING_PREPARING, K.NO_START): Step(T.PREPARING, (Do.FORGET,)),
    (T.AWAITING_PREPARING, K.WITHDRAWN): Step(T.PREPARING, (Do.FORGET,)),
    (T.AWAITING_PREPARING, K.RESET): None,
    (T.AWAITING_PREPARING, K.REBASE): Step(T.PREPARING, (Do.FORGET, Do.UNRECORD)),
    # -- OPENING: a turn runs and its opening messages say who started it
    (T.OPENING, K.PREPARING): _same(T.OPENING),
    (T.OPENING, K.ABANDONED): _same(T.OPENING),
    (T.OPENING, K.STARTED): _same(T.OPENING),  # a host retry keeps the turn's provenance
    (T.OPENING, K.OPENED): _same(T.OPENING, Do.OBSERVE),
    (T.OPENING, K.OURS): _same(T.OPENING, Do.CONFIRM, Do.OBSERVE),
    (T.OPENING, K.REPLIED): Step(T.RUNNING),
    (T.OPENING, K.ABORTED): _same(T.OPENING, Do.CANCEL, Do.LATCH),
    (T.OPENING, K.ENDED): Step(T.IDLE, (Do.SETTLE,)),
    (T.OPENING, K.SUBMITTING): None,
    (T.OPENING, K.SUBMIT_FAILED): _same(T.OPENING, Do.DROP),  # it started the turn, then threw
    (T.OPENING, K.NO_START): None,
    (T.OPENING, K.WITHDRAWN): _same(T.OPENING),
    (T.OPENING, K.RESET): None,
    (T.OPENING, K.REBASE): Step(T.OFF_RECORD, (Do.UNRECORD,)),
    # -- RUNNING: a turn runs; nothing relabels it any more
    (T.RUNNING, K.PREPARING): _same(T.RUNNING),
    (T.RUNNING, K.ABANDONED): _same(T.RUNNING),
    (T.RUNNING, K.STARTED): _same(T.RUNNING),
    (T.RUNNING, K.OPENED): _same(T.RUNNING),
    (T.RUNNING, K.OURS): _same(T.RUNNING, Do.CONFIRM),
    (T.RUNNING, K.REPLIED): _same(T.RUNNING),
    (T.RUNNING, K.ABORTED): _same(T.RUNNING, Do.CANCEL, Do.LATCH),
    (T.RUNNING, K.ENDED): Step(T.IDLE, (Do.SETTLE,)),
    (T.RUNNING, K.SUBMITTING): None,
    (T.RUNNING, K.SUBMIT_FAILED): _same(T.RUNNING, Do.DROP),
    (T.RUNNING, K.NO_START): None,
    (T.RUNNING, K.WITHDRAWN): _same(T.RUNNING),
    (T.RUNNING, K.RESET): None,
    (T.RUNNING, K.REBASE): Step(T.OFF_RECORD, (Do.UNRECORD,)),
    # -- OFF_RECORD: a turn that began before this incarnation vouches for nothing; whether the
    # session is idle is then the host's word alone
    (T.OFF_RECORD, K.PREPARING): _same(T.OFF_RECORD),
    (T.OFF_RECORD, K.ABANDONED): _same(T.OFF_RECORD),
    (T.OFF_RECORD, K.STARTED): Step(T.OPENING, (Do.BEGIN,)),
    (T.OFF_RECORD, K.OPENED): _same(T.OFF_RECORD),
    (T.OFF_RECORD, K.OURS): _same(T.OFF_RECORD, Do.CONFIRM),
    (T.OFF_RECORD, K.REPLIED): _same(T.OFF_RECORD),
    (T.OFF_RECORD, K.ABORTED): _same(T.OFF_RECORD, Do.LATCH),
    (T.OFF_RECORD, K.ENDED): Step(T.IDLE, (Do.SETTLE,)),
    (T.OFF_RECORD, K.SUBMITTING): Step(T.AWAITING, (Do.AWAIT,)),  # the host said it is idle
    (T.OFF_RECORD, K.SUBMIT_FAILED): _same(T.OFF_RECORD, Do.DROP),
    (T.OFF_RECORD, K.NO_START): None,
    (T.OFF_RECORD, K.WITHDRAWN): _same(T.OFF_RECORD),
    (T.OFF_RECORD, K.RESET): _same(T.OFF_RECORD),
    (T.OFF_RECORD, K.REBASE): _same(T.OFF_RECORD, Do.UNRECORD),
}


class TurnEventError(LocalProtocolError):
    """An event came in a state where the table says it cannot (a bug of ours); nothing changed."""


# -- the observer ----------------------------------------------------------------------------------


class TurnObserver(Protocol):
    """What the tracker tells admission (the running incarnation's)."""

    def message_entered(self, message_id: str, sender_instance_id: str) -> PeerClaim | None:
        """Our message entered the conversation: confirm its row; return what it was
        (its goal and authenticated sender), or ``None`` for a message we did not submit."""
        ...

    def turn_aborted(self) -> None:
        """The running turn was aborted: latch."""
        ...

    def turn_settled(self, settle: Settle) -> None:
        """A turn ended: latch if unsafe, owe one flush if safe."""
        ...


# -- the tracker -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Record:
    """The running turn as the tracker knows it."""

    provenance: Provenance
    cancelled: bool = False
    claims: set[PeerClaim] = field(default_factory=set)
    handles: set[TaskHandle] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Awaiting:
    key: RowKey
    deadline: float  # monotonic seconds


class TurnTracker:
    """The current turn of one host session (see the module docstring). Pure: no clock of its
    own (deadlines are values admission gives and checks), no I/O, no tasks."""

    def __init__(self) -> None:
        self._state = TurnState.IDLE
        self._record: _Record | None = None
        self._last = Provenance.UNKNOWN
        self._awaiting: _Awaiting | None = None
        # A message of ours the host took, and no turn started since: it lands in the next one.
        self._landing = False
        self._observer: TurnObserver | None = None

    def observe(self, observer: TurnObserver | None) -> None:
        """Tell ``observer`` (the running incarnation's admission) from now on; ``None``: no one."""
        self._observer = observer

    # -- reads -----------------------------------------------------------------------------------

    @property
    def state(self) -> TurnState:
        """The current state."""
        return self._state

    @property
    def submittable(self) -> bool:
        """Nothing on record keeps admission from submitting: idle, or off the record (where
        only the host can say whether it is idle; admission asks it either way)."""
        return self._state in (TurnState.IDLE, TurnState.OFF_RECORD)

    @property
    def phase(self) -> Phase:
        """Admission's view: idle, preflight or busy."""
        return _PHASES[self._state]

    @property
    def on_record(self) -> bool:
        """True while a turn this incarnation saw start is running."""
        return self._record is not None

    @property
    def turn_running(self) -> bool:
        """True while the host runs a turn, whether or not this incarnation saw it start."""
        return self._state in (TurnState.OPENING, TurnState.RUNNING, TurnState.OFF_RECORD)

    @property
    def host_active(self) -> bool:
        """True while the host prepares or runs a turn (on record or not)."""
        return self._state not in (TurnState.IDLE, TurnState.AWAITING)

    @property
    def queueable(self) -> bool:
        """A turn runs that was not cancelled and whose provenance is known: a capable sender's
        message may wait for its end."""
        record = self._record
        return record is not None and not record.cancelled and record.provenance.known

    @property
    def awaiting(self) -> RowKey | None:
        """The message of ours whose turn is still due, if one is."""
        return None if self._awaiting is None else self._awaiting.key

    @property
    def deadline(self) -> float | None:
        """When our waiting submission's grace ends (monotonic seconds), if one waits."""
        return None if self._awaiting is None else self._awaiting.deadline

    @property
    def authority(self) -> TurnAuthority:
        """The running turn's authority; :data:`NO_TURN` outside a turn on record."""
        record = self._record
        if record is None:
            return NO_TURN
        return TurnAuthority(record.provenance, record.cancelled)

    def authority_for_call(self, *, own_loop: bool) -> TurnAuthority:
        """The authority a tool call is judged by.

        A call from the session's own loop belongs to the running turn (outside one it is
        unknown). A call from elsewhere — a sub-agent of a workflow, checked through the host's
        gate — belongs to whatever work started it, which we cannot see: while a turn runs it is
        judged by that turn (the more restrictive reading when both are possible), between turns
        by the provenance of the last turn, the one that most plausibly started it. That last
        turn's cancellation is not carried over: an abort stops a turn, not work it started.
        """
        if self._record is not None or own_loop:
            return self.authority
        return TurnAuthority(self._last)

    @property
    def facts(self) -> TurnFacts | None:
        """The running turn's opening facts, or ``None`` outside a turn on record."""
        record = self._record
        if record is None:
            return None
        return TurnFacts(
            record.provenance,
            record.cancelled,
            frozenset(record.claims),
            frozenset(record.handles),
        )

    # -- the host's events -----------------------------------------------------------------------

    def handle(self, event: TurnEvent) -> None:
        """Apply one host event."""
        self._apply(_KIND_OF[type(event)], event)

    # -- admission's and the runtime's events ----------------------------------------------------

    def submitting(self, key: RowKey, *, deadline: float) -> None:
        """Admission is handing message ``key`` to the host; its turn must start by ``deadline``.
        Call it before the host's submit: a host may start the turn inside that call."""
        self._apply(K.SUBMITTING, _Awaiting(key, deadline))

    def submit_failed(self, key: RowKey) -> None:
        """The host refused message ``key``: it waits for nothing and will not land."""
        self._apply(K.SUBMIT_FAILED, key)

    def expire(self, now: float) -> RowKey | None:
        """If our waiting submission's grace has ended by ``now``, stop waiting for it and
        return its key (admission then latches); else ``None``."""
        awaiting = self._awaiting
        if awaiting is None or now < awaiting.deadline:
            return None
        self._apply(K.NO_START, None)
        return awaiting.key

    def withdraw(self) -> None:
        """Admission's incarnation ended: nothing of it waits for a turn any more."""
        self._apply(K.WITHDRAWN, None)

    def reset(self) -> None:
        """The local user reopened the inbox with nothing running: back to idle."""
        self._apply(K.RESET, None)

    def rebase(self) -> None:
        """A new incarnation starts: it vouches for no turn that began before it."""
        self._apply(K.REBASE, None)

    # -- internals -------------------------------------------------------------------------------

    def _apply(self, kind: EventKind, payload: object) -> None:
        step = TRANSITIONS[(self._state, kind)]
        if step is None:
            raise TurnEventError(f"{kind.value} cannot happen while {self._state.value}")
        claim: PeerClaim | None = None
        for do in step.does:
            if do is Do.BEGIN:
                assert isinstance(payload, TurnStarted)
                peer = self._landing
                self._landing = False
                self._awaiting = None
                self._record = _Record(Provenance.PEER if peer else payload.by)
            elif do is Do.CONFIRM:
                assert isinstance(payload, OurMessageStarted)
                claim = self._confirm(payload)
            elif do is Do.OBSERVE:
                self._learn(payload, claim)
            elif do is Do.CANCEL:
                assert self._record is not None
                self._record.cancelled = True
            elif do is Do.LATCH:
                if self._observer is not None:
                    self._observer.turn_aborted()
            elif do is Do.SETTLE:
                assert isinstance(payload, TurnEnded)
                settle = self._settle(payload.ending)
                if self._observer is not None:
                    self._observer.turn_settled(settle)
            elif do is Do.AWAIT:
                assert isinstance(payload, _Awaiting)
                self._awaiting = payload
                self._landing = True
            elif do is Do.FORGET:
                self._awaiting = None
            elif do is Do.DROP:
                if self._awaiting is not None and self._awaiting.key == payload:
                    self._awaiting = None
                self._landing = False
            elif do is Do.UNRECORD:
                self._record = None
                self._last = Provenance.UNKNOWN
        self._state = step.to

    def _confirm(self, event: OurMessageStarted) -> PeerClaim | None:
        if self._observer is None:
            return None
        return self._observer.message_entered(event.message_id, event.sender_instance_id)

    def _learn(self, event: object, claim: PeerClaim | None) -> None:
        record = self._record
        assert record is not None
        if isinstance(event, OurMessageStarted):
            provenance = Provenance.PEER
        else:
            assert isinstance(event, TurnOpened)
            provenance = event.by
            record.handles.update(event.handles)
        if claim is not None:
            record.claims.add(claim)
        if RANK[provenance] > RANK[record.provenance]:
            record.provenance = provenance

    def _settle(self, ending: TurnEnding) -> Settle:
        record = self._record
        self._record = None
        if record is not None:
            self._last = record.provenance
        if (
            ending is TurnEnding.STOP
            and record is not None
            and not record.cancelled
            and record.provenance.known
        ):
            return Settle.SAFE
        # Fail closed (spec §5.5-5.6): a turn we cannot vouch for — cancelled, of unknown
        # provenance, or ended any way but a clean stop — closes the inbox. Only a clean stop with
        # no turn on record (nothing was running, as far as we know) leaves it open.
        if record is None and ending is TurnEnding.STOP:
            return Settle.QUIET
        return Settle.UNSAFE


__all__ = [
    "TRANSITIONS",
    "Do",
    "EventKind",
    "ModelReplied",
    "OurMessageStarted",
    "Phase",
    "Settle",
    "Step",
    "TurnAbandoned",
    "TurnAborted",
    "TurnEnded",
    "TurnEnding",
    "TurnEvent",
    "TurnEventError",
    "TurnObserver",
    "TurnOpened",
    "TurnPreparing",
    "TurnStarted",
    "TurnState",
    "TurnTracker",
]
