"""A host session whose turns the test drives by hand, for runtime tests over real sockets.

:class:`ScriptedHost` implements :class:`~pi_cross_session._internal.plugin.host.HostPort` and
nothing more: it records every ``submit`` call (successful or not) and every notice, says idle or
busy as the test sets it, and raises from ``submit`` when told to. It never reports anything to the
runtime by itself: the test does that with :class:`Turns`, which pairs each host event with the
runtime call a real host adapter would make (so ``is_idle()`` and the runtime's view of the turn
never disagree unless a test makes them disagree on purpose).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.security.admission import Delivery
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import (
    OurMessageStarted,
    TurnAborted,
    TurnEnded,
    TurnEnding,
    TurnPreparing,
    TurnStarted,
)


@dataclass(frozen=True, slots=True)
class Submission:
    """One ``submit`` call the runtime made: what it handed over and whether the host took it."""

    delivery: Delivery
    content: str
    taken: bool


@dataclass
class ScriptedHost:
    """A :class:`~pi_cross_session._internal.plugin.host.HostPort` double driven by the test."""

    name: str | None = "receiver"
    cwd: str = "/home/dev/scripted"
    session: str = field(default_factory=lambda: str(uuid.uuid4()))
    #: What :meth:`is_idle` answers.
    idle: bool = True
    #: When set, :meth:`submit` raises it (after recording the attempt).
    failure: Exception | None = None
    #: Every call of :meth:`submit`, in order, including the ones that raised.
    calls: list[Submission] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    # -- HostPort --------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.session

    @property
    def session_name(self) -> str | None:
        return self.name

    def is_idle(self) -> bool:
        return self.idle

    def submit(self, delivery: Delivery, content: str) -> None:
        taken = self.failure is None
        self.calls.append(Submission(delivery, content, taken))
        if self.failure is not None:
            raise self.failure

    def notify(self, text: str) -> None:
        self.notices.append(text)

    # -- what the tests read ---------------------------------------------------------------------

    @property
    def submitted(self) -> list[Delivery]:
        """Deliveries the host took, in order."""
        return [call.delivery for call in self.calls if call.taken]


class Turns:
    """Host events as a real adapter reports them: host state first, then the runtime call."""

    def __init__(self, host: ScriptedHost, runtime: SessionRuntime) -> None:
        self.host = host
        self.runtime = runtime
        self._settled = 0

    def preparing(self) -> None:
        """A prompt arrived; the turn has not started (``before_agent_start``)."""
        self.runtime.on_turn(TurnPreparing())

    def start(self, source: Provenance) -> None:
        """A turn started (``agent_start``); the host is busy from now on."""
        self.host.idle = False
        self.runtime.on_turn(TurnStarted(source))

    def end(self, ending: TurnEnding = TurnEnding.STOP) -> None:
        """The turn settled (``agent_settled``) with ``ending``; the host is idle again."""
        self.host.idle = True
        self.runtime.on_turn(TurnEnded(ending))

    def abort(self) -> None:
        """The running turn's abort signal fired."""
        self.runtime.on_turn(TurnAborted())

    def user_turn(self) -> None:
        """A genuine user prompt started a turn."""
        self.preparing()
        self.start(Provenance.USER)

    def run_peer_turn(self, delivery: Delivery) -> None:
        """The turn a submitted peer message starts, shown, and ended cleanly."""
        self.start(Provenance.PEER)
        self.runtime.on_turn(OurMessageStarted(delivery.message_id, delivery.sender.instance_id))
        self.end(TurnEnding.STOP)

    def settle_submissions(self) -> int:
        """Run the peer turn of every submission not yet run; returns how many were run."""
        pending = self.host.submitted[self._settled :]
        for delivery in pending:
            self.run_peer_turn(delivery)
        self._settled += len(pending)
        return len(pending)
