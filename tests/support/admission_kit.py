"""A test bench for :class:`~pi_cross_session._internal.security.admission.Admission`: a clock that
only moves when told to, a host that records (or refuses) submissions, the session's turn tracker
(which the kit's ``turn_*`` methods feed as a host adapter would), and factories for callers and
messages.

Nothing here sleeps or touches a socket; every deadline is crossed by :meth:`FakeClock.advance`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.bridge import BRIDGE_PREFIX
from pi_cross_session._internal.protocol.capabilities import ADVERTISED, CANCEL_SAFE_QUEUE
from pi_cross_session._internal.protocol.codes import RETRYABLE, Code
from pi_cross_session._internal.protocol.frames import Message, Response, StatusQuery
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.registration import Registration, build_registration
from pi_cross_session._internal.security.admission import Admission, Delivery, Row
from pi_cross_session._internal.security.auth import Caller, LocalIdentity
from pi_cross_session._internal.security.goals import LOCAL_COMMAND, Goals, Member, Scope
from pi_cross_session._internal.security.limits import (
    LifetimeBudget,
    MessageIdLedger,
    RateLimiter,
    TextDedup,
)
from pi_cross_session._internal.security.provenance import PeerClaim, Provenance
from pi_cross_session._internal.security.turns import (
    OurMessageStarted,
    Settle,
    TurnAbandoned,
    TurnAborted,
    TurnEnded,
    TurnEnding,
    TurnOpened,
    TurnPreparing,
    TurnStarted,
    TurnTracker,
)
from tests.support.clocks import START_WALL_MS, FakeClock

#: Where the fixture registrations claim to listen; nothing is ever created there.
FIXTURE_LOCATIONS = environment.resolve(
    env={paths.AGENT_DIR_ENV: "/tmp/xs-admission-kit/agent"}, uid=0
)

RECEIVER = LocalIdentity(
    session_id="receiver-session",
    instance_id="0" * 31 + "1",
    token="ab" * 32,
    pid=4242,
)


def _hex(name: str, length: int) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:length]


@dataclass
class FakeHost:
    """The host session as admission sees it: idle or not, and a ``submit`` that may throw."""

    idle: bool = True
    failure: Exception | None = None
    submitted: list[Delivery] = field(default_factory=list)
    attempts: int = 0
    #: Runs inside ``submit`` after a success: a host that reports events synchronously.
    during_submit: Callable[[Delivery], None] | None = None
    #: Runs first thing in ``submit``: lets a test check the receiver's state at that moment.
    before_submit: Callable[[Delivery], None] | None = None

    def is_idle(self) -> bool:
        return self.idle

    def submit(self, delivery: Delivery) -> None:
        if self.before_submit is not None:
            self.before_submit(delivery)
        self.attempts += 1
        if self.failure is not None:
            raise self.failure
        self.submitted.append(delivery)
        if self.during_submit is not None:
            self.during_submit(delivery)


def registration(name: str) -> Registration:
    """A deterministic, valid registration for a sender called ``name``."""
    instance_id = _hex("instance:" + name, 32)
    return build_registration(
        session_id=f"session-{name}",
        session_name=name,
        instance_id=instance_id,
        cwd="/home/dev",
        pid=1000 + int(_hex("pid:" + name, 4), 16) % 30000,
        started_at=START_WALL_MS - 60_000,
        updated_at=START_WALL_MS - 60_000,
        status="idle",
        inbound="accept",
        socket_path=FIXTURE_LOCATIONS.socket_path(instance_id),
        token=_hex("token:" + name, 64),
    )


def caller(name: str, *, capable: bool = True, request_id: str = "hello-1") -> Caller:
    """An authenticated caller; ``capable`` means its hello listed ``cancel-safe-queue-v1``."""
    return Caller(
        request_id=request_id,
        sender=registration(name),
        capabilities=(CANCEL_SAFE_QUEUE,) if capable else (),
    )


def probe_caller() -> Caller:
    """A hello without ``from``: it may probe, never deliver."""
    return Caller(request_id="probe-1", sender=None, capabilities=(CANCEL_SAFE_QUEUE,))


def message(
    text: str,
    *,
    sent_at: int,
    message_id: str,
    request_id: str | None = None,
    summary: str = "a summary",
    goal_id: str | None = None,
) -> Message:
    body: dict[str, Any] = {
        "v": 1,
        "type": "message",
        "requestId": request_id or f"req-{message_id}",
        "messageId": message_id,
        "text": text,
        "summary": summary,
        "sentAt": sent_at,
    }
    if goal_id is not None:
        body["goalId"] = goal_id
    return Message.model_validate(body)


def status_query(message_id: str, *, request_id: str = "status-req") -> StatusQuery:
    return StatusQuery.model_validate(
        {"v": 1, "type": "status", "requestId": request_id, "messageId": message_id}
    )


def bridge_text(now_ms: int, **overrides: Any) -> str:
    """A bridge envelope valid at ``now_ms``, with fields replaced (or removed, given ``...``)."""
    envelope: dict[str, Any] = {
        "version": 1,
        "origin": "origin-1",
        "correlationId": "corr-1",
        "expiresAt": now_ms + 10_000,
        "hops": 0,
        "budget": 8,
        "payload": {"kind": "ping"},
    }
    for key, value in overrides.items():
        if value is ...:
            envelope.pop(key, None)
        else:
            envelope[key] = value
    return BRIDGE_PREFIX + json.dumps(envelope)


def check_reply(reply: Response, *, request_id: str) -> None:
    """What every receiver reply must satisfy (spec §3.4), whatever it says."""
    assert reply.v == 1
    assert reply.type == "response"
    assert reply.request_id == request_id
    assert reply.code == reply.state == reply.status
    assert reply.retryable is ((not reply.ok) and reply.status in RETRYABLE)
    assert tuple(reply.capabilities or ()) == ADVERTISED
    assert reply.next
    if reply.ok:
        assert reply.peer == {
            "id": RECEIVER.session_id,
            "instanceId": RECEIVER.instance_id,
            "pid": RECEIVER.pid,
        }
    else:
        assert reply.peer is None
        assert reply.error  # every refusal explains itself


class Kit:
    """One receiver incarnation under test, with its own clock, host, budget and policies."""

    def __init__(
        self,
        *,
        budget: int = 256,
        inbound: str = "accept",
        rate: RateLimiter | None = None,
        message_ids: MessageIdLedger | None = None,
        texts: TextDedup | None = None,
        **options: Any,
    ) -> None:
        self.clock = FakeClock()
        self.host = FakeHost()
        self.budget = LifetimeBudget(units=budget)
        self.inbound = inbound
        self.latches: list[str] = []
        self.turns = TurnTracker()
        self.admission = Admission(
            RECEIVER,
            clock=self.clock.clock,
            turns=self.turns,
            submit=self.host.submit,
            budget=self.budget,
            inbound=lambda: self.inbound,
            host_idle=self.host.is_idle,
            rate=rate if rate is not None else RateLimiter(),
            message_ids=message_ids if message_ids is not None else MessageIdLedger(),
            texts=texts if texts is not None else TextDedup(),
            on_latch=self.latches.append,
            **options,
        )
        self.settles: list[Settle] = []
        self.turns.observe(_Relay(self.admission, self.settles))
        self._serial = 0

    # -- host events, reported to the tracker as a host adapter would ----------------------------

    def turn_preparing(self) -> None:
        self.turns.handle(TurnPreparing())

    def turn_not_started(self) -> None:
        self.turns.handle(TurnAbandoned())

    def turn_started(self, source: Provenance = Provenance.UNKNOWN) -> None:
        self.turns.handle(TurnStarted(source))

    def turn_identified(self, source: Provenance) -> None:
        self.turns.handle(TurnOpened(source))

    def message_started(self, message_id: str, sender_instance_id: str) -> None:
        self.turns.handle(OurMessageStarted(message_id, sender_instance_id))

    def turn_aborted(self) -> None:
        self.turns.handle(TurnAborted())

    def turn_ended(self, ending: TurnEnding) -> bool:
        """End the turn; True when it settled safely and one queued message is owed a flush."""
        before = len(self.settles)
        self.turns.handle(TurnEnded(ending))
        safe = self.settles[before:] == [Settle.SAFE]
        return safe and self.admission.flush_owed

    # The policies the admission actually uses. They are read back from the admission rather than
    # kept from the constructor because ``Admission.__init__`` takes ``rate or RateLimiter()``: the
    # policy classes define ``__len__``, so a fresh (empty) injected instance is falsy and silently
    # replaced (see test_admission.py::test_an_injected_rate_limiter_is_the_one_used).
    @property
    def rate(self) -> RateLimiter:
        return self.admission._rate

    @property
    def ids(self) -> MessageIdLedger:
        return self.admission._ids

    @property
    def texts(self) -> TextDedup:
        return self.admission._texts

    def fresh_id(self) -> str:
        self._serial += 1
        return f"m{self._serial}"

    def message(
        self,
        text: str | None = None,
        *,
        age_ms: int = 0,
        message_id: str | None = None,
        goal_id: str | None = None,
        request_id: str | None = None,
    ) -> Message:
        """A message sent ``age_ms`` ago (negative: dated in the future), with fresh ids."""
        message_id = message_id or self.fresh_id()
        return message(
            text if text is not None else f"text of {message_id}",
            sent_at=self.clock.wall_ms() - age_ms,
            message_id=message_id,
            request_id=request_id,
            goal_id=goal_id,
        )

    def send(self, who: Caller | str, text: str | None = None, **fields: Any) -> Response:
        """Admit one message from ``who`` and check the reply's invariants."""
        sender = caller(who) if isinstance(who, str) else who
        msg = self.message(text, **fields)
        reply = self.admission.admit(sender, msg)
        check_reply(reply, request_id=msg.request_id)
        return reply

    def query(self, who: Caller | str, message_id: str) -> Response:
        sender = caller(who) if isinstance(who, str) else who
        query = status_query(message_id)
        reply = self.admission.status(sender, query)
        check_reply(reply, request_id=query.request_id)
        return reply

    def row(self, who: str, message_id: str) -> Row | None:
        return self.admission.row(registration(who).instance_id, message_id)

    def state(self, who: str, message_id: str) -> str | None:
        found = self.row(who, message_id)
        return None if found is None else found.state

    def queue_from(self, who: str, count: int, *, capable: bool = True) -> list[str]:
        """Queue ``count`` messages from ``who`` (a turn must be running); returns their ids."""
        ids = []
        for _ in range(count):
            message_id = self.fresh_id()
            reply = self.send(caller(who, capable=capable), message_id=message_id)
            assert reply.status == Code.QUEUED, reply
            ids.append(message_id)
        return ids


class _Relay:
    """The tracker's observer: admission, with each settle also noted for the test."""

    def __init__(self, admission: Admission, settles: list[Settle]) -> None:
        self._admission = admission
        self._settles = settles

    def message_entered(self, message_id: str, sender_instance_id: str) -> PeerClaim | None:
        return self._admission.message_entered(message_id, sender_instance_id)

    def turn_aborted(self) -> None:
        self._admission.turn_aborted()

    def turn_settled(self, settle: Settle) -> None:
        self._settles.append(settle)
        self._admission.turn_settled(settle)


def goals_with(*members: str, goal_id: str = "goal-1") -> Goals:
    """A receiver's :class:`Goals` with an active goal ``goal_id`` binding the named senders
    (each by the exact instance id and session id of :func:`registration`)."""
    goals = Goals(
        Scope(RECEIVER.session_id, RECEIVER.instance_id, "/home/dev"), new_id=lambda: goal_id
    )
    goals.start("ship the release", authority=LOCAL_COMMAND)
    if members:
        bound = [Member(registration(m).instance_id, registration(m).id) for m in members]
        goals.bind(goal_id, bound, authority=LOCAL_COMMAND)
    return goals
