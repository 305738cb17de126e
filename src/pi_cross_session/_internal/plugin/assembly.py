"""Building one incarnation of a session: its identity and every part that serves it.

An *incarnation* is what :class:`~pi_cross_session._internal.plugin.runtime.SessionRuntime` runs
from start (or reload) to stop: a fresh instance id and token, a lifetime budget, a goal state
seeded with the session's task evidence, an admission state machine reading the session's turn
tracker, an authenticator, the endpoint that serves them, the registrar that publishes them and the
exchanger that sends for them. :func:`assemble` builds those parts and wires them to each other and
to the few things the runtime supplies (:class:`Wiring`); it starts nothing — no task, no socket, no
file — so the runtime's lifecycle (run, stop, reload, heartbeat, maintenance) is the only place
where anything begins or ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import anyio

from pi_cross_session._internal.plugin.host import HoldsReceipts, HostPort
from pi_cross_session._internal.plugin.journaling import SessionJournal, journal_setting
from pi_cross_session._internal.protocol.capabilities import ADVERTISED
from pi_cross_session._internal.protocol.io.discovery import Registrar
from pi_cross_session._internal.protocol.io.endpoint import Endpoint, EndpointConfig
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig, Exchanger
from pi_cross_session._internal.protocol.limits import HEARTBEAT_INTERVAL_S, LIFETIME_BUDGET
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration, Status
from pi_cross_session._internal.security.admission import Admission, Clock, Delivery
from pi_cross_session._internal.security.auth import Authenticator, LocalIdentity
from pi_cross_session._internal.security.goals import GoalConfirmations, Goals, Scope
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal import JournalPolicy
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from pi_cross_session._internal.security.limits import LifetimeBudget
from pi_cross_session._internal.security.receiver import SessionReceiver
from pi_cross_session._internal.security.rows import Row
from pi_cross_session._internal.security.tokens import new_instance_id, new_token
from pi_cross_session._internal.security.turns import TurnTracker


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


SYSTEM_CLOCK: Final = Clock(wall_ms=_wall_ms, monotonic=time.monotonic)


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """Settings of a runtime; every bound defaults to the contract's value."""

    inbound: str = "accept"
    budget: int = LIFETIME_BUDGET
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    exchange: ExchangeConfig = field(default_factory=ExchangeConfig)
    clock: Clock = SYSTEM_CLOCK
    #: Extra keyword arguments for :class:`Admission` (tests use small queues and windows).
    admission: dict[str, float | int] = field(default_factory=dict)
    #: Resolve git metadata in listings.
    with_git: bool = True
    #: List once right after start-up, to reap dead sessions early (spec §1.5). Tests of the
    #: registrar's own failures turn it off: that listing may recreate a removed peers dir.
    listing_at_start: bool = True
    #: The event journal's policy; ``None``: what ``PI_CROSS_SESSION_JOURNAL`` says
    #: (:mod:`.journaling`).
    journal: JournalPolicy | None = None
    #: What kind of session this is, as ``watch`` shows it (``pi-python``, ``mcp``, ``inbox``…).
    kind: str = "library"


@dataclass(slots=True)
class Incarnation:
    """The parts of one incarnation, and the little state its lifecycle keeps about it."""

    identity: LocalIdentity
    started_at: int
    budget: LifetimeBudget
    admission: Admission
    endpoint: Endpoint[object]
    registrar: Registrar
    exchanger: Exchanger
    goals: Goals
    confirmations: GoalConfirmations
    authenticator: Authenticator
    wake: anyio.Event = field(default_factory=anyio.Event)
    #: Set when a safe settle leaves the queue a submission owed (see ``Admission.flush_owed``).
    flush_wake: anyio.Event = field(default_factory=anyio.Event)
    refresh_due: bool = False
    #: The published ``status``: ``busy`` from a turn's start to its end, as the contract says
    #: (spec §1.3), whatever the admission phase does in between (preflight, flushes).
    status: Status = "idle"
    outbound: set[anyio.CancelScope] = field(default_factory=set)
    failure: BaseException | None = None
    #: This incarnation's event journal (a disabled one when the user turned journaling off).
    journal: SessionJournal | None = None


@dataclass(frozen=True, slots=True)
class Wiring:
    """What an incarnation needs from the runtime that owns it."""

    host: HostPort
    locations: Locations
    options: RuntimeOptions
    #: The host session's turn tracker (admission reads it; it outlives incarnations).
    turns: TurnTracker
    #: The inbound policy in effect now.
    inbound: Callable[[], str]
    #: The registration as it would be written now, for this identity, start and status.
    describe: Callable[[LocalIdentity, int, Status], Registration]
    #: Hand an admitted message to the host (framed for the model).
    submit: Callable[[Delivery], None]
    #: The inbox latched (the reason); the incarnation is passed so it can be woken.
    on_latch: Callable[[Incarnation, str], None]
    #: The registration could not be kept (a heartbeat failure): the incarnation must end.
    on_failure: Callable[[Incarnation, BaseException], None]
    #: Every change of a message row, for a watcher (the command-line inbox).
    on_row: Callable[[Row], None] | None
    #: Every new piece of task evidence, for the host's session journal.
    on_evidence: Callable[[dict[str, object]], None]
    #: Task evidence carried over from earlier incarnations (never a grant).
    evidence: Iterable[Mapping[str, object]]
    #: The session's published name now (the journal names this side with it).
    name: Callable[[], str] = lambda: ""
    #: A receiver event was journaled (the live state may have to follow the queue).
    on_journaled: Callable[[Incarnation], None] | None = None


def assemble(wiring: Wiring) -> Incarnation:
    """Build a new incarnation's parts, wired to each other and to ``wiring``; starts nothing."""
    host, locations, options = wiring.host, wiring.locations, wiring.options
    identity = LocalIdentity(
        session_id=host.session_id,
        instance_id=new_instance_id(),
        token=new_token(),
        pid=os.getpid(),
    )
    clock = options.clock
    budget = LifetimeBudget(units=options.budget)
    goals = Goals(
        Scope(identity.session_id, identity.instance_id, host.cwd), on_record=wiring.on_evidence
    )
    goals.import_evidence(wiring.evidence)
    # The callbacks below need the incarnation they belong to, which exists only at the end.
    holder: list[Incarnation] = []

    def on_latch(reason: str) -> None:
        if holder:
            wiring.on_latch(holder[0], reason)

    policy = options.journal if options.journal is not None else journal_setting().policy

    def journaled() -> None:
        if holder and wiring.on_journaled is not None:
            wiring.on_journaled(holder[0])

    journal = SessionJournal.open(
        locations.agent_dir,
        identity.instance_id,
        policy,
        name=wiring.name,
        wall_ms=clock.wall_ms,
        on_moved=journaled,
    )
    admission = Admission(
        identity,
        clock=clock,
        turns=wiring.turns,
        submit=wiring.submit,
        budget=budget,
        inbound=wiring.inbound,
        host_idle=host.is_idle,
        on_latch=on_latch,
        on_row=wiring.on_row,
        goals=goals,
        journal=journal if journal.enabled else None,
        **options.admission,  # type: ignore[arg-type]
    )
    authenticator = Authenticator(
        identity, locations, files=PeersDirFiles(locations), capabilities=ADVERTISED
    )
    endpoint: Endpoint[object] = Endpoint(
        locations.socket_path(identity.instance_id),
        SessionReceiver(
            authenticator,
            admission,
            hold=host.hold_receipt if isinstance(host, HoldsReceipts) else None,
        ),  # type: ignore[arg-type]
        files=fs,
        config=options.endpoint,
    )
    started_at = clock.wall_ms()

    def registration() -> Registration:
        return wiring.describe(identity, started_at, holder[0].status if holder else "idle")

    def on_failure(exc: BaseException) -> None:
        if holder:
            wiring.on_failure(holder[0], exc)

    registrar = Registrar(
        locations,
        fs,
        registration,
        heartbeat_interval_s=options.heartbeat_interval_s,
        on_failure=on_failure,
        clock=clock.wall_ms,
    )
    incarnation = Incarnation(
        identity=identity,
        started_at=started_at,
        budget=budget,
        admission=admission,
        endpoint=endpoint,
        registrar=registrar,
        exchanger=Exchanger(locations, fs, config=options.exchange),
        goals=goals,
        confirmations=GoalConfirmations(),
        authenticator=authenticator,
        status="busy" if wiring.turns.on_record else "idle",
        journal=journal,
    )
    holder.append(incarnation)
    return incarnation


__all__ = ["SYSTEM_CLOCK", "Incarnation", "RuntimeOptions", "Wiring", "assemble"]
