"""One object per host session that owns every part of cross-session messaging.

:class:`SessionRuntime` ties the planes together for one host session:

* an **incarnation** — a fresh instance id and token, a registration, an endpoint, an admission
  state machine and a lifetime budget — lives from :meth:`SessionRuntime.run` until
  :meth:`~SessionRuntime.stop` or :meth:`~SessionRuntime.reload` (which starts a new incarnation
  with fresh state: nothing carries over, not the budget, not the message states);
* the host reports its turns through :meth:`~SessionRuntime.on_turn`, in the vocabulary of
  :mod:`pi_cross_session._internal.security.turns`; the one :class:`TurnTracker` those events feed
  outlives incarnations (the gate reads it even while the inbox is down) and tells the running
  incarnation's admission what it needs to know;
* the model's tools call :meth:`~SessionRuntime.list_peers` and :meth:`~SessionRuntime.send`.

This module is the lifecycle (run, stop, reload, heartbeat, maintenance, cleanup) and the API the
host, the user's commands and the model's tools call; :mod:`.assembly` builds each incarnation's
parts.

Structured concurrency: everything an incarnation runs (endpoint, heartbeat, maintenance) lives in
one task group inside :meth:`run`; stopping cancels that group, fences the registrar, marks pending
messages ``dropped_shutdown`` and removes the registration, then the socket. Sends in flight when an
incarnation stops end as ``cancelled`` (receipt unknown). Nothing is fire-and-forget.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import anyio
import anyio.abc

from pi_cross_session._internal.plugin import outbound
from pi_cross_session._internal.plugin.assembly import (
    Incarnation,
    RuntimeOptions,
    Wiring,
    assemble,
)
from pi_cross_session._internal.plugin.host import HostPort
from pi_cross_session._internal.plugin.journaling import journal_setting
from pi_cross_session._internal.plugin.render import host_status, peer_text, receiving
from pi_cross_session._internal.plugin.reports import GoalView, PeerChecks, Pressure, SendReport
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.frames import Sender
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.discovery import Listing, list_peers
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.io.gitinfo import resolve_git_info
from pi_cross_session._internal.protocol.io.peercred import PEER_CREDENTIALS_SOURCE
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    PublicPeer,
    Registration,
    Status,
    build_registration,
    default_name,
    inbound_from_flag,
)
from pi_cross_session._internal.security.admission import (
    Delivery,
    Latch,
    ResumeOutcome,
    Snapshot,
    TurnOutcome,
)
from pi_cross_session._internal.security.auth import LocalIdentity
from pi_cross_session._internal.security.goals import (
    NO_GOAL,
    Authority,
    GoalEnd,
    GoalError,
    GoalErrorCode,
    Goals,
    GoalStatus,
    Member,
    RevokeReason,
    TaskHandle,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal_network import (
    InboundState,
    LiveGoal,
    LiveState,
    prune_ended,
    write_live_state,
)
from pi_cross_session._internal.security.rows import Row
from pi_cross_session._internal.security.turns import TurnAborted, TurnEvent, TurnTracker

logger = logging.getLogger(__name__)

#: Longest the maintenance loop sleeps when nothing is due (a safety net, not a schedule).
MAINTENANCE_MAX_SLEEP_S: Final = 1.0


class NotReadyError(CrossSessionError):
    """The runtime has no running incarnation (not started yet, or stopped)."""

    code = Code.NOT_READY


class SessionRuntime:
    """Cross-session messaging for one host session."""

    def __init__(
        self,
        host: HostPort,
        *,
        locations: Locations | None = None,
        options: RuntimeOptions | None = None,
        on_row: Callable[[Row], None] | None = None,
        on_goal_evidence: Callable[[Mapping[str, object]], None] | None = None,
        reopen: str = receiving.REOPEN_WITH_COMMAND,
    ) -> None:
        self.host = host
        #: How this host's user reopens a closed inbox, in the words the notices and the status
        #: use (``/cross-session-resume`` by default; the command-line inbox has its own).
        self.reopen = reopen
        self._on_row = on_row
        # Where task ownership evidence is journaled (the host's session journal), if anywhere.
        self._on_goal_evidence = on_goal_evidence
        self.locations = locations or environment.resolve()
        self.options = options or RuntimeOptions()
        self._inbound = inbound_from_flag(self.options.inbound)
        # A name set for this session (options or /cross-session-name); None: the host's.
        self._name: str | None = None
        self._current: Incarnation | None = None
        self._stop_requested = False
        self._reload_requested = False
        self._control = anyio.Event()
        self._ready = anyio.Event()
        self._finished = anyio.Event()
        self._running = False
        self.last_error: BaseException | None = None
        self.incarnations = 0
        self._last_snapshot: Snapshot | None = None
        # Task ownership evidence carried from one incarnation to the next (never a grant).
        self._evidence: tuple[Mapping[str, object], ...] = ()
        self._last_goal_end: GoalEnd | None = None
        #: The host session's current turn, fed by :meth:`on_turn`; read by the gate.
        self.turns = TurnTracker()
        # The live state last written beside the journal (its time set to 0, for comparing), and
        # what it was built from (a pass with nothing changed builds nothing).
        self._live: LiveState | None = None
        self._live_key: tuple[object, ...] | None = None
        self._name_key: tuple[str, str | None] | None = None
        self._name_value = ""
        self._pruned = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run incarnations until :meth:`stop`. Reports ready once the first one is registered.

        A reload ends the current incarnation and starts a new one inside this call.
        """
        if self._running:
            raise RuntimeError("this runtime is already running")
        self._running = True
        reported = failed = False
        if self.options.journal is None and (warning := journal_setting().warning) is not None:
            self._notify(warning)
        try:
            while not self._stop_requested:
                if self._reload_requested:
                    # A new incarnation vouches for no turn that began before it.
                    self.turns.rebase()
                self._reload_requested = False
                incarnation = self._new_incarnation()
                self._current = incarnation
                self.turns.observe(incarnation.admission)
                try:
                    async with anyio.create_task_group() as group:
                        await group.start(incarnation.endpoint.serve)
                        await incarnation.registrar.register()
                        await group.start(incarnation.registrar.run_heartbeat)
                        group.start_soon(self._maintain, incarnation)
                        if not self._pruned:
                            self._pruned = True
                            group.start_soon(self._prune_journals)
                        group.start_soon(self._flush_when_owed, incarnation)
                        if self.options.listing_at_start:
                            group.start_soon(self._initial_listing, incarnation)
                        self.incarnations += 1
                        self._ready.set()
                        if not reported:
                            task_status.started()
                            reported = True
                        await self._wait_for_control()
                        group.cancel_scope.cancel()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._close(incarnation)
                if incarnation.failure is not None and not self._reload_requested:
                    break
        except BaseException as exc:
            failed = True
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                # A task group wraps the one failure in a group; the failure says more.
                while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                    exc = exc.exceptions[0]
                self.last_error = exc
            raise
        finally:
            self._current = None
            self._running = False
            self._finished.set()
            self._ready.set()  # a reload() waiting for an incarnation that will never come
            # Reported as started only when nothing failed: a caller's ``start()`` must see
            # the error of a first registration that failed, not an inbox that is not there.
            if not reported and not failed:
                task_status.started()

    async def _wait_for_control(self) -> None:
        while not (self._stop_requested or self._reload_requested):
            current = self._current
            if current is not None and current.failure is not None:
                return
            await self._control.wait()
            self._control = anyio.Event()

    def _signal(self) -> None:
        self._control.set()

    def request_stop(self) -> None:
        """Ask :meth:`run` to end (usable from synchronous callbacks)."""
        self._stop_requested = True
        self._cancel_outbound()
        self._signal()

    async def stop(self) -> None:
        """End the running incarnation and :meth:`run`; idempotent."""
        self.request_stop()
        if self._running:
            await self._finished.wait()

    async def wait_finished(self) -> None:
        """Return once :meth:`run` has ended (for whatever reason)."""
        await self._finished.wait()

    async def reload(self) -> None:
        """Replace the incarnation with a new one (new instance id, token, fresh state)."""
        if not self._running or self._stop_requested:
            raise NotReadyError("the runtime is not running")
        self._ready = anyio.Event()
        self._reload_requested = True
        self._cancel_outbound()
        self._signal()
        await self._ready.wait()
        if not self._running or self._current is None:
            raise NotReadyError("the new incarnation could not start") from self.last_error

    def emergency_cleanup(self) -> None:
        """Remove this incarnation's files without the event loop (process exit fallback)."""
        current = self._current
        if current is None:
            return
        current.admission.shutdown()
        for path in (
            self.locations.registration_path(current.identity.instance_id),
            self.locations.socket_path(current.identity.instance_id),
        ):
            try:
                fs.remove_file(path)
            except CrossSessionError as exc:
                logger.warning("cleanup could not remove %s: %s", path, sanitize.line(str(exc)))

    def _cancel_outbound(self) -> None:
        current = self._current
        if current is not None:
            for scope in list(current.outbound):
                scope.cancel()

    def _new_incarnation(self) -> Incarnation:
        return assemble(
            Wiring(
                host=self.host,
                locations=self.locations,
                options=self.options,
                turns=self.turns,
                inbound=lambda: self._inbound,
                describe=self._registration,
                submit=self._submit_to_host,
                on_latch=self._on_latch,
                on_failure=self._on_registration_lost,
                on_row=self._on_row,
                on_evidence=self._journal_evidence,
                evidence=self._evidence,
                name=self._published_name,
                on_journaled=self._journaled,
            )
        )

    def _published_name(self) -> str:
        # Asked for every journal line: cleaning a name is dearer than comparing two strings.
        key = (self.host.session_id, self._session_name())
        if key != self._name_key:
            self._name_key, self._name_value = key, default_name(*key)
        return self._name_value

    def _journaled(self, incarnation: Incarnation) -> None:
        # The maintenance pass publishes the live state; wake it only when the queue changed.
        live = self._live
        if live is None or live.queue != incarnation.admission.queue_depth:
            self._wake(incarnation)

    def _on_latch(self, incarnation: Incarnation, reason: str) -> None:
        latch = incarnation.admission.latch
        if latch is not None:  # always, once admission called this; kept for the type
            self._notify(
                host_status.inbox_latched(latch, incarnation.goals.last_end, reopen=self.reopen)
            )
        self._wake(incarnation, refresh=True)

    def _on_registration_lost(self, incarnation: Incarnation, exc: BaseException) -> None:
        self.last_error = exc
        self._notify(host_status.registration_lost(exc))
        incarnation.failure = exc
        self._signal()

    def _registration(
        self, identity: LocalIdentity, started_at: int, status: Status
    ) -> Registration:
        return build_registration(
            session_id=identity.session_id,
            session_name=default_name(identity.session_id, self._session_name()),
            instance_id=identity.instance_id,
            cwd=self.host.cwd,
            pid=identity.pid,
            started_at=started_at,
            updated_at=self.options.clock.wall_ms(),
            status=status,
            inbound=self._inbound,
            socket_path=self.locations.socket_path(identity.instance_id),
            token=identity.token,
        )

    async def _close(self, incarnation: Incarnation) -> None:
        """Cleanup in the contract's order: fence, drop pending, registration, socket."""
        for scope in list(incarnation.outbound):
            scope.cancel()
        reason = RevokeReason.RELOAD if self._reload_requested else RevokeReason.SHUTDOWN
        incarnation.admission.shutdown(reason)
        self.turns.observe(None)
        incarnation.confirmations.clear()
        self._evidence = incarnation.goals.export_evidence()
        self._last_snapshot = incarnation.admission.snapshot()
        self._last_goal_end = incarnation.goals.last_end or self._last_goal_end
        await incarnation.registrar.unregister()
        try:
            await anyio.to_thread.run_sync(
                fs.remove_file, self.locations.socket_path(incarnation.identity.instance_id)
            )
        except CrossSessionError as exc:
            logger.warning("could not remove our socket: %s", sanitize.line(str(exc)))
        if self._live is not None:  # only a session that said it was running says it ended
            await self._publish_live(incarnation, ended=True)
        if incarnation.journal is not None:
            incarnation.journal.close()
        self._live = self._live_key = None

    async def _initial_listing(self, incarnation: Incarnation) -> None:
        """One listing right after start-up (spec §1.5), so that registrations of sessions that
        died are reaped early rather than at the next send; its result is not needed."""
        try:
            await list_peers(
                self.locations,
                fs,
                incarnation.exchanger.is_live,
                self_instance_id=incarnation.identity.instance_id,
                with_git=False,
                probe_guard_s=incarnation.exchanger.listing_guard_s,
            )
        except CrossSessionError as exc:
            logger.info("the start-up listing failed: %s", sanitize.line(str(exc)))

    async def _maintain(self, incarnation: Incarnation) -> None:
        """Expire, flush and refresh when due; sleeps until the next deadline or a wake-up."""
        admission = incarnation.admission
        clock = self.options.clock
        while True:
            deadline = admission.next_deadline()
            delay = MAINTENANCE_MAX_SLEEP_S
            if deadline is not None:
                delay = min(delay, max(0.0, deadline - clock.monotonic()))
            with anyio.move_on_after(delay):
                await incarnation.wake.wait()
            incarnation.wake = anyio.Event()
            admission.tick()
            if admission.flush_owed:
                # Retried on every pass until the host is idle: a settle seen while the host
                # still looked busy must not strand the queue.
                admission.flush_one()
            if incarnation.refresh_due:
                incarnation.refresh_due = False
                try:
                    await incarnation.registrar.refresh()
                except CrossSessionError as exc:
                    logger.warning("registration refresh failed: %s", sanitize.line(str(exc)))
            await self._publish_live(incarnation)

    def _live_state(self, incarnation: Incarnation, *, ended: bool) -> LiveState:
        """What this session publishes about itself beside its journal (time left at 0)."""
        admission = incarnation.admission
        latch = admission.latch
        reason: str | None = None
        if latch is not None:
            inbound = InboundState.LATCHED
            reason = receiving.live_latched(latch, self.reopen)
        elif self._inbound != "accept":
            inbound = InboundState.REFUSING
            reason = receiving.LIVE_REFUSING
        else:
            inbound = InboundState.OPEN
        goal = incarnation.goals.status()
        return LiveState(
            at=0,
            instance_id=incarnation.identity.instance_id,
            name=self._published_name(),
            host=self.options.kind,
            inbound=inbound,
            queue=admission.queue_depth,
            reason=reason,
            goal=None if goal.goal_id is None else LiveGoal(goal.goal_id, goal.objective or ""),
            ended=ended,
        )

    async def _publish_live(self, incarnation: Incarnation, *, ended: bool = False) -> None:
        """Write the live state if it changed (in a thread: it is a file replaced by rename)."""
        journal = incarnation.journal
        if journal is None or not journal.enabled:
            return
        admission = incarnation.admission
        key = (
            admission.latch,
            self._inbound,
            admission.queue_depth,
            incarnation.goals.active_id,
            self._published_name(),
            ended,
        )
        if key == self._live_key and self._live is not None:
            return
        state = self._live_state(incarnation, ended=ended)
        if state == self._live:
            self._live_key = key
            return
        stamped = dataclasses.replace(state, at=self.options.clock.wall_ms())
        try:
            await anyio.to_thread.run_sync(write_live_state, journal.directory, stamped)
            # After the write: a failed one is tried again at the next pass.
            self._live, self._live_key = state, key
        except (OSError, CrossSessionError) as exc:
            # The journal's own writer warns once when its dir is unusable; this is its echo.
            logger.info("could not publish the live state: %s", sanitize.line(str(exc)))

    async def _prune_journals(self) -> None:
        """Remove the journals of sessions that ended long ago (once per runtime)."""

        def prune() -> int:
            live = fs.list_registration_names(self.locations.peers_dir)
            return prune_ended(self.locations.agent_dir, (name[:-5] for name in live.names))

        try:
            removed = await anyio.to_thread.run_sync(prune)
        except (OSError, CrossSessionError) as exc:
            logger.info("could not prune old journals: %s", sanitize.line(str(exc)))
            return
        if removed:
            logger.info("removed the journals of %d sessions that ended long ago", removed)

    async def _flush_when_owed(self, incarnation: Incarnation) -> None:
        """Make the queue's owed submission on the loop's next turn after a safe settle (spec §5.5),
        not behind a registration refresh the maintenance pass may be awaiting: until it is made,
        a newcomer meets an idle session with a queue and is told ``busy``."""
        admission = incarnation.admission
        while True:
            await incarnation.flush_wake.wait()
            incarnation.flush_wake = anyio.Event()
            if admission.flush_owed:
                admission.flush_one()

    def _wake(self, incarnation: Incarnation, *, refresh: bool = False) -> None:
        incarnation.refresh_due = incarnation.refresh_due or refresh
        incarnation.wake.set()

    def _submit_to_host(self, delivery: Delivery) -> None:
        inc = self._current
        goal = None if inc is None or delivery.goal_id is None else inc.goals.status()
        self.host.submit(delivery, peer_text.peer_message(delivery, goal))

    def _journal_evidence(self, entry: dict[str, object]) -> None:
        if self._on_goal_evidence is None:
            return
        try:
            self._on_goal_evidence(entry)
        except Exception:  # the evidence stays in memory; only its copy in the journal failed
            logger.exception("could not journal goal evidence")

    def _notify(self, text: str) -> None:
        try:
            self.host.notify(text)
        except Exception:  # a notification must never break what triggered it
            logger.exception("host notification failed")

    # -- host events -----------------------------------------------------------------------------

    def note_turn_outcome(self, outcome: TurnOutcome) -> None:
        """The host says how the turn now ending ended (its stop reason and error text), just
        before it reports that abort or end with :meth:`on_turn`: if the event closes the inbox,
        this is part of the reason the user, the status and refused senders are given."""
        if (inc := self._current) is not None:
            inc.admission.note_turn_outcome(outcome)

    def on_turn(self, event: TurnEvent) -> None:
        """The host reports one turn event (the vocabulary is
        :mod:`pi_cross_session._internal.security. turns`'s). The tracker applies it and tells
        admission what follows; the registration is republished when the turn starts or ends
        (``busy`` from a turn's start to its end,
        spec §1.3) or the inbox latches, and the maintenance pass runs (a safe end owes a flush)."""
        self.turns.handle(event)
        if (inc := self._current) is not None:
            status: Status = "busy" if self.turns.on_record else "idle"
            changed = status != inc.status
            inc.status = status
            if inc.admission.flush_owed:
                inc.flush_wake.set()
            self._wake(inc, refresh=changed or isinstance(event, TurnAborted))

    def on_session_info_changed(self) -> None:
        """Name or cwd changed: republish. A goal is scoped to the cwd it started in, so a cwd
        change ends it (rather than leaving a goal nobody can use or end)."""
        if (inc := self._current) is not None:
            owner = inc.goals.status().owner
            if owner is not None and owner.cwd != self.host.cwd:
                inc.admission.end_goal(RevokeReason.SCOPE_CHANGED)
                self._notify(host_status.goal_ended(inc.goals.last_end))
            self._wake(inc, refresh=True)

    # -- local user ------------------------------------------------------------------------------

    @property
    def inbound(self) -> str:
        """The effective inbound policy: ``accept`` or ``refuse``."""
        return self._inbound

    def set_inbound(self, value: str) -> str:
        """Change the inbound policy (anything but ``accept`` means ``refuse``); republishes."""
        self._inbound = inbound_from_flag(value)
        if (inc := self._current) is not None:
            self._wake(inc, refresh=True)
        return self._inbound

    def _session_name(self) -> str | None:
        return self._name if self._name is not None else self.host.session_name

    @property
    def name(self) -> str | None:
        """The name the registration publishes now (cleaned), or ``None`` when not running."""
        inc = self._current
        return None if inc is None else default_name(inc.identity.session_id, self._session_name())

    def set_name(self, name: str | None) -> None:
        """Publish ``name`` from now on (``None``: the host's session name again).

        The incarnation stays the same (instance id, token, ref, message states): only the
        registration is rewritten, as every write refreshes its name (spec §1.4).
        """
        self._name = name
        if (inc := self._current) is not None:
            self._wake(inc, refresh=True)

    async def rename(self, name: str | None) -> str | None:
        """:meth:`set_name`, then wait until the registration says so; returns the published
        name (``None`` when not running). Raises the file layer's error if the write fails."""
        self.set_name(name)
        inc = self._current
        if inc is None:
            return None
        await inc.registrar.refresh()
        return self.name

    def resume(self) -> ResumeOutcome:
        """``/cross-session-resume``."""
        inc = self._current
        if inc is None:
            return ResumeOutcome(False, 0, "the inbox is not running")
        outcome = inc.admission.resume()
        self._wake(inc, refresh=True)
        return outcome

    @property
    def latch(self) -> Latch | None:
        """Why the running incarnation's inbox is closed, while it is."""
        inc = self._current
        return None if inc is None else inc.admission.latch

    def snapshot(self) -> Snapshot | None:
        """The receiver's state, for ``/cross-session-status``: the running incarnation's, else
        the last one's as it was when it stopped, else ``None``."""
        inc = self._current
        return self._last_snapshot if inc is None else inc.admission.snapshot()

    @property
    def identity(self) -> LocalIdentity | None:
        """The running incarnation's identity."""
        inc = self._current
        return None if inc is None else inc.identity

    def remaining_budget(self) -> int | None:
        """Units left in the running incarnation's lifetime budget."""
        inc = self._current
        return None if inc is None else inc.budget.remaining

    def registration(self) -> Registration | None:
        """Our registration as it would be written now."""
        inc = self._current
        if inc is None:
            return None
        return self._registration(inc.identity, inc.started_at, inc.status)

    def peer_checks(self) -> PeerChecks | None:
        """What the kernel peer checks and hello authentication refused, for the status."""
        inc = self._current
        if inc is None:
            return None
        stats = inc.endpoint.statistics()
        registrar = inc.registrar
        retried_at = registrar.last_retry_at
        pressure = Pressure(
            accept_failures=stats.accept_failures,
            last_accept_failure=stats.last_accept_failure,
            last_accept_failure_age_s=stats.last_accept_failure_age_s,
            descriptor_cap=stats.descriptor_cap,
            shed_for_descriptors=stats.shed_for_descriptors,
            request_deadline_cuts=stats.request_deadline_cuts,
            costly_frames=stats.costly_frames,
            throttled_reads=stats.throttled_reads,
            registration_retries=registrar.retries,
            last_registration_retry_age_s=None
            if retried_at is None
            else max(0.0, (self.options.clock.wall_ms() - retried_at) / 1000),
        )
        return PeerChecks(
            source=PEER_CREDENTIALS_SOURCE,
            auth=inc.authenticator.diagnostics(),
            foreign_uid_closed=stats.foreign_uid_closed,
            credentials_unreadable=stats.credentials_unreadable,
            unverified=stats.unverified,
            shed=stats.shed,
            pressure=pressure,
        )

    # -- goals -----------------------------------------------------------------------------------

    def goal_status(self) -> GoalStatus:
        """The active goal's view (``{goalId: null}`` without one); anyone may ask."""
        inc = self._current
        return NO_GOAL if inc is None else inc.goals.status()

    def goal_view(self) -> GoalView:
        """Everything ``/cross-session-status`` shows about goals."""
        inc = self._current
        if inc is None:
            return GoalView(NO_GOAL, self._last_goal_end, 0, 0)
        return GoalView(
            inc.goals.status(),
            inc.goals.last_end or self._last_goal_end,
            len(inc.confirmations),
            inc.goals.evidence_count,
        )

    def goal_start(self, objective: str, *, authority: Authority) -> GoalStatus:
        """Start a goal; only a genuine local user turn may (raises :class:`GoalError`)."""
        return self._goals().start(objective, authority=authority)

    async def goal_bind(
        self,
        goal_id: str,
        peer_ids: Sequence[str] = (),
        *,
        tasks: Sequence[TaskHandle] = (),
        authority: Callable[[], Authority],
    ) -> GoalStatus:
        """Bind live peers (by instance id) and task handles to the active goal.

        Each peer id must be the instance id of a live session now; its session id as seen now
        is what membership will require. ``authority`` is asked before and again after the
        listing, because the turn may have been cancelled meanwhile.
        """
        inc = self._require_current()
        goals = inc.goals
        goals.check_bind(goal_id, authority=authority())
        members: list[Member] = []
        if peer_ids:
            listing = await self.list_peers(with_git=False)
            live = {peer.instance_id: peer for peer in listing.peers}
            for peer_id in peer_ids:
                peer = live.get(peer_id)
                if peer is None:
                    raise GoalError(
                        GoalErrorCode.INVALID, f"{peer_id} is not the runtime id of a live peer"
                    )
                members.append(Member(peer.instance_id, peer.id))
        if self._current is not inc:
            raise NotReadyError("the session was reloaded while binding")
        return goals.bind(goal_id, members, tasks=tasks, authority=authority())

    def goal_unbind(
        self, goal_id: str, peer_ids: Sequence[str], *, authority: Authority
    ) -> GoalStatus:
        """Unbind peers; their queued scoped messages end ``dropped_goal_revoked``."""
        inc = self._require_current()
        status = inc.goals.unbind(goal_id, peer_ids, authority=authority)
        inc.admission.drop_unbound()
        return status

    def goal_complete(self, goal_id: str, *, authority: Authority) -> str:
        """End the goal as done (local authority or a turn scoped to it)."""
        inc = self._require_current()
        ended = inc.goals.complete(goal_id, authority=authority)
        inc.admission.revoke_goal(ended)
        return ended

    def goal_cancel(self, goal_id: str, *, authority: Authority) -> str:
        """End the goal as abandoned (local authority only)."""
        inc = self._require_current()
        ended = inc.goals.cancel(goal_id, authority=authority)
        inc.admission.revoke_goal(ended)
        return ended

    @property
    def goals(self) -> Goals | None:
        """The running incarnation's goal state (for the host's gate and provenance)."""
        inc = self._current
        return None if inc is None else inc.goals

    def seed_goal_evidence(self, entries: Iterable[Mapping[str, object]]) -> int:
        """Task ownership evidence restored from the host's journal at session start: kept for
        every incarnation of this runtime. Never restores a goal. Returns the entries taken."""
        entries = tuple(entries)
        self._evidence = (*self._evidence, *entries)
        inc = self._current
        if inc is not None and inc.goals.active_id is None:
            return inc.goals.import_evidence(entries).imported
        return 0

    def goal_evidence(self) -> tuple[Mapping[str, object], ...]:
        """All task ownership evidence this runtime holds (and the notes of calls whose result is
        due), in the journal's format: the running incarnation's, else what the last one left."""
        inc = self._current
        return self._evidence if inc is None else inc.goals.export_evidence()

    def _goals(self) -> Goals:
        return self._require_current().goals

    def _require_current(self) -> Incarnation:
        inc = self._current
        if inc is None or self._stop_requested:
            raise NotReadyError("the cross-session inbox is not running")
        return inc

    # -- model tools -----------------------------------------------------------------------------

    async def me(self) -> PublicPeer | None:
        """Our own public view, with git metadata."""
        registration = self.registration()
        if registration is None:
            return None
        git = None
        if self.options.with_git:
            git = (await resolve_git_info([registration.cwd])).get(registration.cwd)
        return PublicPeer.from_registration(registration, git=git)

    async def list_peers(self, *, with_git: bool = True) -> Listing:
        """The other live sessions of this agent dir, newest first; with git metadata unless
        ``with_git`` is false (a listing nobody reads, such as a send's, never needs it)."""
        inc = self._current
        exchanger = inc.exchanger if inc is not None else Exchanger(self.locations, fs)
        return await list_peers(
            self.locations,
            fs,
            exchanger.is_live,
            self_instance_id=None if inc is None else inc.identity.instance_id,
            with_git=with_git and self.options.with_git,
            probe_guard_s=exchanger.listing_guard_s,
        )

    async def _list_for_sending(self) -> Listing:
        # Resolving a target reads names, refs and ids, never git: see docs/performance.md.
        return await self.list_peers(with_git=False)

    def outbox(self) -> outbound.Outbox | None:
        """What this session sends with: its identity, exchanger and budget."""
        inc = self._current
        if inc is None or self._stop_requested:
            return None
        registration = self._registration(inc.identity, inc.started_at, inc.status)
        return outbound.Outbox(
            sender=Sender(
                id=inc.identity.session_id,
                instance_id=inc.identity.instance_id,
                token=inc.identity.token,
            ),
            exchanger=inc.exchanger,
            list_peers=self._list_for_sending,
            wall_ms=self.options.clock.wall_ms,
            budget=inc.budget,
            me=PublicPeer.from_registration(registration),
            confirmations=inc.confirmations,
            journal=inc.journal,
        )

    async def send(
        self,
        target: str,
        text: str,
        *,
        summary: str | None = None,
        goal_id: str | None = None,
        wait_s: float = 0.0,
    ) -> SendReport:
        """Send one message (scoped to ``goal_id`` if given) and report exactly what is known
        about its fate; ``wait_s`` waits (at most 30 s) for a delivery receipt."""
        outbox = self.outbox()
        inc = self._current
        if outbox is None or inc is None:
            problem = outbound.check_input(target, text, summary, goal_id)
            if problem is not None:
                return outbound.local_failure(*problem)
            return outbound.local_failure(Code.NOT_READY, "the cross-session inbox is not running")
        scope = anyio.CancelScope()
        inc.outbound.add(scope)
        try:
            return await outbound.send(
                outbox, target, text, summary=summary, goal_id=goal_id, scope=scope, wait_s=wait_s
            )
        finally:
            inc.outbound.discard(scope)

    async def query_status(self, target: str, message_id: str) -> SendReport:
        """Ask a peer what became of a message this incarnation sent it."""
        outbox = self.outbox()
        if outbox is None:
            return outbound.local_failure(Code.NOT_READY, "the cross-session inbox is not running")
        return await outbound.query_status(outbox, target, message_id)


__all__ = [
    "NotReadyError",
    "RuntimeOptions",
    "SessionRuntime",
]
