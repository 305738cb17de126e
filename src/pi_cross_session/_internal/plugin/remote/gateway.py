"""The gateway: one per user and agent dir, the machine's only door to the remote plane.

Four loops in one task group (docs/remote.md):

* **publish** — this machine's live sessions into the KV bucket (:mod:`.publish`);
* **mirror** — every verified record of other machines, kept while refreshed (:mod:`.mirror`),
  each live one with a local **proxy** (a registration and a socket, :mod:`.proxy`) within the
  cap, shared fairly between the machines
  (:mod:`~pi_cross_session._internal.security.remote.proxy_shares`);
* **outbound** — a message or status query a local session sends to a proxy goes, MACed, to the
  remote machine's gateway (NATS request/reply, one attempt, ``hop_deadline_s``) and its reply
  comes back as the proxy's answer — or as no answer at all when nobody knows the outcome;
* **inbound** — a verified request from another machine is delivered to the real session with the
  ordinary exchange, under a local identity for that remote sender, within that machine's bounds.

Nothing is retried, ever. Every decision of trust and quantity is made by the pure classes of
:mod:`pi_cross_session._internal.security.remote`; this module moves bytes and files.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import anyio
import anyio.abc
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from pi_cross_session._internal.plugin.remote import files, identities
from pi_cross_session._internal.plugin.remote.link import (
    HopTimeoutError,
    Link,
    NoRespondersError,
    PermissionDeniedError,
    UnreachableError,
)
from pi_cross_session._internal.plugin.remote.mirror import Mirror
from pi_cross_session._internal.plugin.remote.problems import RecentProblems
from pi_cross_session._internal.plugin.remote.proxy import ProxySocket
from pi_cross_session._internal.plugin.remote.publish import Publisher
from pi_cross_session._internal.plugin.remote.said import SaidOnce
from pi_cross_session._internal.plugin.remote.trust_watch import TrustWatch
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.capabilities import CANCEL_SAFE_QUEUE, DELIVERY_RECEIPTS
from pi_cross_session._internal.protocol.codes import (
    OK_RECEIPTS,
    STATUS_ANSWERS,
    Code,
    SenderState,
    classify,
    refusal_text,
    sender_code,
)
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.fairness import SharedCap
from pi_cross_session._internal.protocol.frames import (
    WIRE_VERSION,
    Message,
    PeerIdentity,
    Response,
    Sender,
    StatusQuery,
)
from pi_cross_session._internal.protocol.io import memory
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig, ExchangeError, Exchanger
from pi_cross_session._internal.protocol.io.offload import Offload
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    REQUEST_KINDS,
    Envelope,
    EnvelopeError,
    Kind,
    Outcome,
    PeerRecord,
    RemoteMessage,
    RemoteSender,
    ReplyBody,
    SendBody,
    StatusBody,
)
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_GATEWAY_CONNECTIONS,
    MAX_PROXIES,
    OLDER_CHECK_EVERY_S,
    REMOTE_DELIVERY_DEADLINE_S,
    REMOTE_HOP_DEADLINE_S,
    REMOTE_PUBLISH_EVERY_S,
    REMOTE_RECORD_TTL_S,
    REMOTE_SCAN_EVERY_S,
    REMOTE_SESSION_WAIT_S,
    REMOTE_SNAPSHOT_EVERY_S,
    REMOTE_SNAPSHOT_REFRESH_S,
    REMOTE_SWEEP_EVERY_S,
    VERIFY_ON_LOOP_BYTES,
)
from pi_cross_session._internal.security.auth import Authenticator, Caller, LocalIdentity
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from pi_cross_session._internal.security.remote.identity import MachineKey
from pi_cross_session._internal.security.remote.pairing import Pairs
from pi_cross_session._internal.security.remote.pauses import MachinePauses, counts_towards_a_pause
from pi_cross_session._internal.security.remote.proxy_shares import ProxyShares, Verdict
from pi_cross_session._internal.security.remote.records import RecordBook
from pi_cross_session._internal.security.remote.senders import (
    Claim,
    MachineFlow,
    SenderTable,
    SessionDoors,
    derive_instance_id,
)
from pi_cross_session._internal.security.remote.trust import (
    Cause,
    Rejected,
    TrustConfig,
    Verified,
    Verifier,
)
from pi_cross_session._internal.security.tokens import new_token

logger = logging.getLogger(__name__)

#: What a proxy may advertise of a remote session's capabilities: never goal scope (goal grants
#: stay local, docs/remote.md), nothing we do not carry.
CARRIED_CAPABILITIES = (CANCEL_SAFE_QUEUE, DELIVERY_RECEIPTS)


def carried(capabilities: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The capabilities that survive the hop, in our order."""
    return tuple(c for c in CARRIED_CAPABILITIES if c in capabilities)


def _seconds_left(until: float | None, now: float) -> float | None:
    return None if until is None else round(max(0.0, until - now), 1)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """Everything a gateway is told at start (the command line builds it)."""

    machine: str
    key: MachineKey
    trust: TrustConfig
    inbound: bool
    max_proxies: int = MAX_PROXIES
    scan_every_s: float = REMOTE_SCAN_EVERY_S
    publish_every_s: float = REMOTE_PUBLISH_EVERY_S
    record_ttl_s: float = REMOTE_RECORD_TTL_S
    sweep_every_s: float = REMOTE_SWEEP_EVERY_S
    hop_deadline_s: float = REMOTE_HOP_DEADLINE_S
    delivery_deadline_s: float = REMOTE_DELIVERY_DEADLINE_S
    session_wait_s: float = REMOTE_SESSION_WAIT_S
    snapshot_every_s: float = REMOTE_SNAPSHOT_EVERY_S
    write_snapshot: bool = True
    #: Follow the trust file and the deployment's roster while running (the command line does;
    #: ``trust`` is then what they say at start) so trust changes take effect within seconds.
    watch: TrustWatch | None = None
    #: The command line fixed remote inbound (``--inbound``): the trust file's setting is ignored.
    inbound_fixed: bool = False


@dataclass(slots=True)
class _Proxy:
    machine: str
    record: PeerRecord
    registration: Registration
    token: str
    capabilities: tuple[str, ...]
    scope: anyio.CancelScope
    socket: ProxySocket
    #: Which proxy this gateway opened when (the newest gives way first to a fair share).
    opened: int


@dataclass(slots=True)
class _SenderIdentity:
    machine: str
    registration: Registration
    token: str


@dataclass(slots=True)
class GatewayStatistics:
    """Counters since start, for the status snapshot and tests."""

    forwarded: dict[str, int] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)
    #: Remote sessions left without a proxy because their machine had its share of the cap.
    proxies_refused: int = 0
    proxies_evicted: int = 0
    proxies_opened: int = 0
    proxies_closed: int = 0
    senders_made: int = 0

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1


class Gateway:
    """One gateway: run it with ``await task_group.start(gateway.run)``; cancel to stop."""

    def __init__(
        self,
        locations: Locations,
        options: GatewayOptions,
        link: Link,
        *,
        wall_ms: Callable[[], int] = _wall_ms,
        pauses: MachinePauses | None = None,
    ) -> None:
        self.locations = locations
        self.options = options
        self._link = link
        self._wall_ms = wall_ms
        self._pid = os.getpid()
        self._secret = secrets.token_bytes(32)
        self.started_at_ms = wall_ms()
        self._pairs = Pairs(account=options.trust.account, me=options.machine, key=options.key)
        self._verifier = Verifier(
            me=options.machine,
            trust=options.trust,
            pairs=self._pairs,
            started_at_ms=self.started_at_ms,
            record_max_age_ms=int(options.record_ttl_s * 1000),
        )
        self._book = RecordBook(ttl_s=options.record_ttl_s)
        self._mirror = Mirror(
            machine=options.machine,
            verifier=self._verifier,
            link=link,
            book=self._book,
            wall_ms=wall_ms,
            changed=self._reconcile,
            refused=self._false_from,
        )
        self._shares = ProxyShares(cap=options.max_proxies, machines=len(self._mirror.origins))
        #: Sessions whose machine had its share of the cap when they came: listed as such.
        self._capped: set[tuple[str, str]] = set()
        self._opened = 0
        #: Whether the deployment refuses what no machine may do (``None``: not known yet).
        self.permissions_enforced: bool | None = None
        self._earlier_layout_seen = False
        self._proxies: dict[str, _Proxy] = {}
        #: Deciding on a proxy and opening it are one step: two records heard at once (the
        #: watch and the sweep) must not both take the last free slot (the cap was overrun by
        #: up to 6 of 128 in bench/remote_scale.py before).
        self._opening = anyio.Lock()
        self._senders: dict[str, _SenderIdentity] = {}
        self._making_identity = anyio.Lock()
        self._sender_table = SenderTable()
        self._flow = MachineFlow()
        self._doors = SessionDoors()
        self._slots: dict[str, anyio.Semaphore] = {}
        self._handled_since_sweep = False
        self._connections = SharedCap(cap=MAX_GATEWAY_CONNECTIONS)
        self._exchangers: dict[tuple[str, ...], Exchanger] = {}
        self._probe_exchanger = Exchanger(locations, fs)
        # Inline on a local filesystem, in a worker thread elsewhere (as sessions read files).
        self._peers_dir = Offload(fs, locations.peers_dir)
        self._publisher = Publisher(
            locations=locations,
            machine=options.machine,
            account=options.trust.account,
            key=options.key,
            link=link,
            exchanger=self._probe_exchanger,
            wall_ms=wall_ms,
            republish_s=options.publish_every_s,
            on_bucket_error=self._mirror.bucket_failed,
        )
        self._group: anyio.abc.TaskGroup | None = None
        self._requests: dict[str, Subscription] = {}
        #: Machines whose requests or records failed their MAC or signature in a burst, on a
        #: deployment that vouches they sent them: not listened to for a while
        #: (security/remote/pauses.py).
        self._pauses = pauses or MachinePauses()
        self._pause_scopes: dict[str, anyio.CancelScope] = {}
        #: When a false MAC of each machine was last looked at for an older version's signature.
        self._older_checked: dict[str, float] = {}
        #: Told (one line for people) whenever what this gateway trusts changes while it runs.
        self.on_trust_changed: Callable[[str], None] = logger.info
        self.trust_changes = 0
        self._dirty = True
        self.stats = GatewayStatistics()
        self.ready = anyio.Event()
        #: The last warnings and errors of the remote plane, for the status snapshot.
        self.problems = RecentProblems()
        self._said = SaidOnce()

    # -- running -----------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; on the way out withdraw everything this gateway published."""
        self.problems.attach()
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                await self._check_permissions()
                for origin in self._mirror.origins:
                    await self._serve_requests(origin)
                if not self.permissions_enforced:
                    await self._link.serve(
                        env.earlier_request_subject(self.options.machine), self._on_earlier
                    )
                await self._mirror.start(group)
                if self.options.watch is not None:
                    await self.options.watch.start(self._link, group)
                self._link.on_reconnect = self._after_reconnect
                await self._publisher.scan_once()
                group.start_soon(self._publish_loop)
                group.start_soon(self._sweep_loop)
                if self.options.write_snapshot:
                    group.start_soon(self._snapshot_loop)
                self.ready.set()
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await self._cleanup()

    async def _serve_requests(self, origin: str) -> None:
        self._requests[origin] = await self._link.serve(
            env.request_subject(self.options.machine, origin), partial(self._on_request, origin)
        )

    async def _stop_serving(self, origin: str) -> None:
        subscription = self._requests.pop(origin, None)
        if subscription is not None:
            await self._link.unserve(subscription, f"{origin}'s requests")

    def _false_from(self, origin: str, cause: Cause) -> None:
        """Count a request or record from ``origin`` that failed its MAC or signature (or its
        room for one); pause the machine after a burst, where the deployment vouches that it
        sent them."""
        if not counts_towards_a_pause(cause, vouched=self.permissions_enforced):
            return
        pause_s = self._pauses.failed(origin, anyio.current_time())
        if pause_s is not None and self._group is not None:
            # In a task of its own: this runs inside a subscription's own handler, which
            # unsubscribing cancels.
            self._group.start_soon(self._pause, origin, pause_s)

    async def _pause(self, origin: str, pause_s: float) -> None:
        logger.warning("%s", remote_plane.machine_paused(origin, pause_s))
        self._dirty = True
        # Records first: once its requests find nobody, nothing of it is taken any more.
        await self._mirror.pause(origin)
        await self._stop_serving(origin)
        with anyio.CancelScope() as scope:
            self._pause_scopes[origin] = scope
            await anyio.sleep(pause_s)
        if self._pause_scopes.get(origin) is scope:
            # Over by itself: the next pause, with nothing good first, is twice as long.
            await self._resume(origin, afresh=False)

    def _end_pause(self, origin: str, *, afresh: bool = True) -> None:
        scope = self._pause_scopes.pop(origin, None)
        if scope is not None:
            scope.cancel()
        if afresh:
            self._pauses.forget(origin)
        else:
            self._pauses.ended(origin)

    async def _resume(self, origin: str, *, afresh: bool = True) -> None:
        """Listen to ``origin`` again, if a pause had stopped that."""
        paused = origin in self._pause_scopes
        self._end_pause(origin, afresh=afresh)
        if not paused or origin not in self._mirror.origins:
            return
        if origin not in self._requests:
            await self._serve_requests(origin)
        await self._mirror.resume(origin)
        self._dirty = True
        logger.info("listening to %s again (its requests and records)", origin)

    async def apply_trust(self, trust: TrustConfig) -> None:
        """Trust ``trust`` from now on: follow the machines it adds (their requests and
        records), forget those it removes (their proxies close), take its inbound setting. A
        machine trusted under a new key (it rotated its keys) is trusted under that key alone
        from now on: what its old key vouched for is forgotten (its proxies close), and its
        records are read again, each taken only when the new key signed it."""
        before = set(self._mirror.origins)
        keys_before = dict(self._verifier.trust.machines)
        self._verifier.trust = trust
        after = set(self._mirror.origins)
        rekeyed = sorted(o for o in before & after if keys_before[o] != trust.machines[o])
        for origin in rekeyed:
            await self._resume(origin)  # a new key: whatever its old one earned ends
            for key in await self._mirror.unfollow(origin):
                self._capped.discard(key)
                await self._reconcile(key)
            await self._mirror.follow(origin)
        for origin in sorted(after - before):
            await self._serve_requests(origin)
            await self._mirror.follow(origin)
        for origin in sorted(before - after):
            self._end_pause(origin)
            self._older_checked.pop(origin, None)
            await self._stop_serving(origin)
            for key in await self._mirror.unfollow(origin):
                self._capped.discard(key)
                await self._reconcile(key)
        self._shares = ProxyShares(cap=self.options.max_proxies, machines=len(after))
        inbound = self.options.inbound if self.options.inbound_fixed else trust.inbound
        changed_inbound = inbound != self.options.inbound
        if changed_inbound:
            self.options = replace(self.options, inbound=inbound)
        self.trust_changes += 1
        self._dirty = True
        added, removed = sorted(after - before), sorted(before - after)
        words = [f"now trusting {', '.join(sorted(after)) or 'nobody'}"]
        if added:
            words.append(f"added {', '.join(added)}")
        if removed:
            words.append(f"removed {', '.join(removed)}")
        if rekeyed:
            words.append(f"new key for {', '.join(rekeyed)}")
        if changed_inbound:
            words.append(f"remote inbound {'on' if inbound else 'off'}")
        changed = added or removed or rekeyed or changed_inbound
        heading = "trust changed" if changed else "trust unchanged"
        self.on_trust_changed(f"{heading}: " + "; ".join(words))
        if self._group is not None and (added or self._capped):
            self._group.start_soon(self._fill_free_slots)

    async def _check_permissions(self) -> None:
        self.permissions_enforced = await self._link.permissions_enforced()
        if self.permissions_enforced is None:
            logger.warning(
                "could not tell whether this NATS deployment enforces per-machine permissions "
                "(its server did not answer a probe); treating it as open"
            )
        elif not self.permissions_enforced:
            logger.warning(
                "this NATS deployment does not enforce per-machine permissions: any client that "
                "can connect may read every message, hide sessions, swallow or flood requests "
                "(our signatures and MACs still refuse what they forge); run the deployment's "
                "server with 'pi-cross-session remote hub', or set your own up with "
                "'pi-cross-session remote deploy' (docs/remote.md)"
            )

    async def _on_earlier(self, msg: Msg) -> None:
        # A gateway of the layout before origins moved into the subject: say so once, read
        # nothing (its origin is not vouched for by the subject).
        if not self._earlier_layout_seen:
            self._earlier_layout_seen = True
            logger.warning(
                "a gateway of an earlier pi-cross-session version sent a request to this machine "
                "(subject %s); it cannot be answered until that machine is upgraded",
                env.earlier_request_subject(self.options.machine),
            )

    async def _after_reconnect(self) -> None:
        # Puts made while we were away reached the bucket but not our subscriptions.
        if self._group is not None:
            self._group.start_soon(self._mirror.read_current)

    async def _cleanup(self) -> None:
        try:
            await self._withdraw()
        finally:
            self.problems.detach()

    async def _withdraw(self) -> None:
        with anyio.move_on_after(2):
            await self._publisher.withdraw_all()
        for local_id in list(self._proxies):
            await self._close_proxy(local_id)
        for local_id in list(self._senders):
            await self._remove_sender(local_id)
        if self.options.write_snapshot:
            try:
                await anyio.to_thread.run_sync(files.remove_snapshot, self.locations)
            except CrossSessionError as exc:
                logger.info("could not remove the snapshot: %s", exc)

    async def _publish_loop(self) -> None:
        while True:
            await anyio.sleep(self.options.scan_every_s)
            try:
                await self._publisher.scan_once()
            except Exception:
                logger.exception("publishing this machine's sessions failed; trying again")

    # -- proxies of other machines' sessions -----------------------------------------------------

    async def _sweep_loop(self) -> None:
        while True:
            await anyio.sleep(self.options.sweep_every_s)
            if self._handled_since_sweep:
                # Each request's envelope, frames and buffers were freed, but glibc keeps freed
                # heap (and the RSS with it) until asked: ask once a sweep while requests come
                # in, and once more after the last (as the endpoint does after large frames).
                self._handled_since_sweep = False
                memory.give_back()
            await self._mirror.expire()
            if self._capped or len(self._proxies) < self.options.max_proxies:
                await self._fill_free_slots()

    async def _fill_free_slots(self) -> None:
        """Give proxies to sessions that have none, machines furthest below their share first."""
        held = self._held_per_machine()
        waiting = sorted(
            (key for key, _ in self._book.items() if self._local_id(*key) not in self._proxies),
            key=lambda k: (held.get(k[0], 0), self._book.seen(k) or 0.0),
        )
        for key in waiting:
            if len(self._proxies) >= self.options.max_proxies and not self._capped:
                break
            await self._reconcile(key)

    def _held_per_machine(self) -> dict[str, int]:
        held: dict[str, int] = {}
        for proxy in self._proxies.values():
            held[proxy.machine] = held.get(proxy.machine, 0) + 1
        return held

    def _local_id(self, machine: str, remote_id: str) -> str:
        return derive_instance_id(self._secret, machine, remote_id)

    async def _reconcile(self, key: tuple[str, str]) -> None:
        """Make the proxy of ``key`` match its record (open, update, close)."""
        self._dirty = True
        machine, remote_id = key
        local_id = self._local_id(machine, remote_id)
        record = self._book.get(key)
        proxy = self._proxies.get(local_id)
        if record is None:
            self._capped.discard(key)
            if proxy is not None:
                await self._close_proxy(local_id)
            return
        if proxy is None:
            await self._maybe_open(machine, local_id, record, key)
            return
        if proxy.record == record:
            return
        if carried(record.capabilities) != proxy.capabilities:
            await self._close_proxy(local_id)
            await self._open_proxy(machine, local_id, record)
            return
        proxy.record = record
        registration = self._proxy_registration(machine, local_id, record, proxy.token)
        # A refresh that changes nothing a listing shows writes nothing (every record is put
        # again every third of its TTL: rewriting each proxy's file was most of an idle
        # gateway's cost in bench/remote_scale.py).
        if registration != proxy.registration:
            proxy.registration = registration
            await self._write(registration, machine)

    async def _maybe_open(
        self, machine: str, local_id: str, record: PeerRecord, key: tuple[str, str]
    ) -> None:
        async with self._opening:
            if local_id not in self._proxies:  # another task may have opened it meanwhile
                await self._open_within_cap(machine, local_id, record, key)

    async def _open_within_cap(
        self, machine: str, local_id: str, record: PeerRecord, key: tuple[str, str]
    ) -> None:
        decision = self._shares.decide(machine, self._held_per_machine())
        if decision.verdict is Verdict.FULL:
            if key not in self._capped:
                self._capped.add(key)
                self.stats.proxies_refused += 1
            return
        if decision.verdict is Verdict.EVICT:
            assert decision.victim is not None
            newest = max(
                (p for p in self._proxies.values() if p.machine == decision.victim),
                key=lambda p: p.opened,
            )
            self.stats.proxies_evicted += 1
            await self._close_proxy(newest.registration.instance_id)
            self._capped.add((newest.machine, newest.record.instance_id))
        self._capped.discard(key)
        await self._open_proxy(machine, local_id, record)

    def _proxy_registration(
        self, machine: str, local_id: str, record: PeerRecord, token: str
    ) -> Registration:
        return identities.build(
            self.locations,
            local_id=local_id,
            machine=machine,
            remote_id=record.id,
            name=record.name,
            cwd=record.cwd,
            status=record.status,
            inbound=record.inbound,
            started_at=record.started_at,
            updated_at=record.updated_at,
            token=token,
        )

    async def _open_proxy(self, machine: str, local_id: str, record: PeerRecord) -> None:
        assert self._group is not None
        sender = self._senders.pop(local_id, None)
        token = new_token() if sender is None else sender.token
        try:
            registration = self._proxy_registration(machine, local_id, record, token)
        except CrossSessionError as exc:
            logger.info("cannot make a proxy for %s on %s: %s", record.instance_id, machine, exc)
            return
        capabilities = carried(record.capabilities)
        identity = LocalIdentity(
            session_id=registration.id, instance_id=local_id, token=token, pid=self._pid
        )
        authenticator = Authenticator(
            identity,
            self.locations,
            files=PeersDirFiles(self.locations),
            capabilities=capabilities,
        )
        socket = ProxySocket(
            registration.socket_path,
            authenticator,
            partial(self._forward, local_id),
            shared=self._connections,
            capabilities=capabilities,
        )
        scope = anyio.CancelScope()
        self._opened += 1
        self._proxies[local_id] = _Proxy(
            machine, record, registration, token, capabilities, scope, socket, self._opened
        )
        try:
            await self._group.start(self._serve_proxy, socket, scope)
            await self._write(registration, machine)
        except (OSError, CrossSessionError) as exc:
            logger.warning("proxy for %s on %s failed to start: %s", record.name, machine, exc)
            await self._close_proxy(local_id)
            return
        self.stats.proxies_opened += 1
        self._dirty = True

    @staticmethod
    async def _serve_proxy(
        socket: ProxySocket,
        scope: anyio.CancelScope,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        with scope:
            await socket.serve(task_status=task_status)

    async def _close_proxy(self, local_id: str) -> None:
        proxy = self._proxies.pop(local_id, None)
        if proxy is None:
            return
        # The registration goes first, so no lister finds a registration without its socket.
        await self._remove_file(local_id)
        proxy.scope.cancel()
        self._sender_table.release(proxy.machine, local_id)
        self.stats.proxies_closed += 1
        self._dirty = True

    async def _write(self, registration: Registration, machine: str) -> None:
        await anyio.to_thread.run_sync(identities.write, self.locations, registration, machine)

    async def _remove_file(self, local_id: str) -> None:
        try:
            await anyio.to_thread.run_sync(identities.remove, self.locations, local_id)
        except CrossSessionError as exc:
            logger.warning("could not remove registration %s: %s", local_id, exc)

    # -- outbound: a proxy's second frame, carried to the remote machine -------------------------

    def _proxy_reply(self, proxy: _Proxy, request_id: str, *, ok: bool, status: str) -> Response:
        peer = PeerIdentity(
            id=proxy.registration.id, instance_id=proxy.registration.instance_id, pid=self._pid
        )
        return Response.build(
            request_id=request_id,
            ok=ok,
            status=status,
            error=None if ok else refusal_text(status),
            peer=peer if ok else None,
            capabilities=proxy.capabilities,
        )

    async def _forward(
        self, local_id: str, caller: Caller, request: Message | StatusQuery
    ) -> Response | None:
        proxy = self._proxies.get(local_id)
        sender = caller.sender
        assert sender is not None  # the proxy forwards authenticated requests only
        if proxy is None:
            # Closed while the sender connected: its remote session went (or lost its slot).
            return Response.build(
                request_id=request.request_id,
                ok=False,
                status=Code.NOT_FOUND,
                error=refusal_text(Code.NOT_FOUND),
                capabilities=CARRIED_CAPABILITIES,
            )
        if isinstance(request, Message) and request.goal_id is not None:
            # Goal grants are local: no proxy advertises goal scope, and none carries it.
            return self._refuse(proxy, request, Code.UNSUPPORTED)
        remote_sender = RemoteSender(
            id=sender.id,
            instance_id=sender.instance_id,
            name=sender.name,
            capabilities=list(carried(caller.capabilities)),
        )
        body: SendBody | StatusBody
        if isinstance(request, Message):
            body = SendBody(
                target=proxy.record.instance_id,
                sender=remote_sender,
                message=RemoteMessage(
                    message_id=request.message_id,
                    text=request.text,
                    summary=request.summary,
                    sent_at=request.sent_at,
                ),
            )
            kind = Kind.SEND
        else:
            body = StatusBody(
                target=proxy.record.instance_id, sender=remote_sender, message_id=request.message_id
            )
            kind = Kind.STATUS
        nonce = secrets.token_hex(16)
        envelope = env.build(
            kind=kind,
            account=self.options.trust.account,
            origin=self.options.machine,
            to=proxy.machine,
            nonce=nonce,
            at_ms=self._wall_ms(),
            body=body,
        )
        payload = self._sealed_for(proxy.machine, env.encode(envelope))
        if payload is None:
            # No longer trusted (its proxy is closing), or a key that cannot pair.
            self.stats.count(self.stats.forwarded, Code.NOT_FOUND)
            return self._refuse(proxy, request, Code.NOT_FOUND)
        try:
            reply = await self._link.request(
                env.request_subject(proxy.machine, self.options.machine),
                payload,
                self.options.hop_deadline_s,
                partial(self._read_reply, nonce=nonce, machine=proxy.machine),
            )
        except NoRespondersError:
            # NATS took it and nobody serves that machine's subject from us, while its records
            # are fresh (the proxy exists): it has not trusted this machine, or its gateway
            # stopped or lost NATS within a TTL. Which of the two, nothing here can tell.
            self.stats.count(self.stats.forwarded, Code.NOT_LISTENING)
            self._not_listening(proxy.machine)
            return self._refuse(proxy, request, Code.NOT_LISTENING)
        except UnreachableError as exc:
            too_large = "max_payload" in str(exc)
            code = Code.MESSAGE_TOO_LARGE if too_large else Code.UNREACHABLE
            self.stats.count(self.stats.forwarded, code)
            return self._refuse(proxy, request, code)
        except PermissionDeniedError:
            self.stats.count(self.stats.forwarded, Code.PERMISSION_DENIED)
            return self._refuse(proxy, request, Code.PERMISSION_DENIED)
        except HopTimeoutError:
            self.stats.count(self.stats.forwarded, "hop_timeout")
            return None
        outcome, status = reply.outcome, reply.status
        self.stats.count(self.stats.forwarded, f"{outcome.value}:{status}")
        if outcome is Outcome.RECEIPT and isinstance(request, Message) and status in OK_RECEIPTS:
            return self._proxy_reply(proxy, request.request_id, ok=True, status=status)
        if outcome is Outcome.ANSWER and isinstance(request, StatusQuery):
            if status in STATUS_ANSWERS:
                return self._proxy_reply(proxy, request.request_id, ok=True, status=status)
            return None
        if outcome is Outcome.REFUSED:
            word = sender_code(status)
            if classify(word).state is SenderState.RECEIPT_UNKNOWN:
                return None  # a "refusal" that is no refusal: say nothing rather than lie
            return self._refuse(proxy, request, word)
        return None  # unknown, or an outcome that does not fit the request

    def _refuse(self, proxy: _Proxy, request: Message | StatusQuery, code: str) -> Response:
        return self._proxy_reply(proxy, request.request_id, ok=False, status=code)

    def _read_reply(self, payload: bytes, *, nonce: str, machine: str) -> ReplyBody | None:
        """The reply body, when ``payload`` is ``machine``'s MACed answer to ``nonce``."""
        verdict = self._verifier.check(
            payload, self._wall_ms(), origin=machine, kinds={Kind.REPLY}, reply_to=nonce
        )
        if not isinstance(verdict, Verified):
            self.stats.count(self.stats.forwarded, "bad_reply")
            self._say_why_refused(verdict, machine, "a reply", payload)
            return None
        self._said.clear(machine)
        try:
            body = verdict.envelope.read_body()
        except EnvelopeError:
            return None
        return body if isinstance(body, ReplyBody) else None

    def _not_listening(self, machine: str) -> None:
        # Said here too: the person who sees the gateway's output may not be the sender.
        if self._said.first("not_listening", machine):
            meaning = remote_plane.remote_refusal(Code.NOT_LISTENING, machine)
            fix = remote_plane.remote_next(Code.NOT_LISTENING, machine)
            logger.warning("a send to %s was not delivered: %s; %s", machine, meaning, fix)

    def _say_why_refused(
        self, verdict: Verified | Rejected, machine: str, what: str, payload: bytes
    ) -> None:
        """Say once per machine that its envelopes are refused for their time (clock skew), or
        because it runs a version that signs what this one MACs."""
        if not isinstance(verdict, Rejected):
            return
        if verdict.cause is Cause.BAD_SIGNATURE:
            # Looked at once a minute per machine at most: junk under its name must not cost a
            # signature check each, nor hide an older gateway for good by coming first.
            now = anyio.current_time()
            if now - self._older_checked.get(machine, -OLDER_CHECK_EVERY_S) < OLDER_CHECK_EVERY_S:
                return
            self._older_checked[machine] = now
            older = self._verifier.signed_as_before(payload, machine)
            if older and self._said.first("older", machine):
                logger.warning("%s", remote_plane.older_gateway(machine, what))
            return
        if verdict.cause is not Cause.CLOCK:
            return
        if verdict.envelope is not None and self._said.first("clock", machine):
            skew_ms = self._wall_ms() - verdict.envelope.at
            logger.warning("%s", remote_plane.clock_skew(machine, skew_ms, what))

    # -- inbound: requests from other machines -------------------------------------------------

    async def _on_request(self, origin: str, msg: Msg) -> None:
        """NATS calls this for every request from ``origin`` (the subject names it), one at a
        time per origin: checks here are bounded and nothing is parsed before the signature
        verifies; the delivery runs in its own task, within the machine's bounds."""
        self._handled_since_sweep = True
        kinds = REQUEST_KINDS
        screened = self._verifier.screen(msg.data, origin=origin, kinds=kinds)
        if isinstance(screened, Rejected):
            self._false_from(origin, screened.cause)
            return
        if len(screened.data) > VERIFY_ON_LOOP_BYTES:
            # Verifying a signature hashes every byte: a large payload (honest ones are rare;
            # a flood of junk is not) is verified in a worker thread, so that other origins'
            # requests and the proxies are not held up meanwhile.
            signed = await anyio.to_thread.run_sync(screened.verify)
        else:
            signed = screened.verify()
        verdict = self._verifier.judge(signed, self._wall_ms(), origin=origin, kinds=kinds)
        if isinstance(verdict, Rejected):
            self._false_from(origin, verdict.cause)
            self._say_why_refused(verdict, origin, "a message", msg.data)
            if verdict.answer is not None and verdict.envelope is not None:
                await self._answer(msg, verdict.envelope, Outcome.REFUSED, verdict.answer)
            return
        envelope = verdict.envelope
        self._pauses.heard(origin)
        if not self.options.inbound:
            # The machine refuses, not the session: said so, so that nobody blames the session.
            await self._answer(msg, envelope, Outcome.REFUSED, Code.REMOTE_INBOUND_OFF)
            return
        refused = self._flow.start(envelope.origin, anyio.current_time())
        if refused is not None:
            await self._answer(msg, envelope, Outcome.REFUSED, refused)
            return
        assert self._group is not None
        self._group.start_soon(self._deliver, msg, envelope)

    async def _deliver(self, msg: Msg, envelope: Envelope) -> None:
        outcome: Outcome = Outcome.UNKNOWN
        status: str = Code.CANCELLED
        try:
            outcome, status = await self._deliver_locally(envelope)
        finally:
            self._flow.finish(envelope.origin)
            self.stats.count(self.stats.delivered, f"{outcome.value}:{status}")
            with anyio.CancelScope(shield=True):
                await self._answer(msg, envelope, outcome, status)

    async def _deliver_locally(self, envelope: Envelope) -> tuple[Outcome, str]:
        try:
            body = envelope.read_body()
        except EnvelopeError:
            return Outcome.REFUSED, Code.INVALID_FRAME
        assert isinstance(body, SendBody | StatusBody)
        # The session's door admits MAX_CONNECTIONS at once: every machine together gets a part
        # of it, a short line, and beyond that a refusal that says nothing reached the session.
        session = body.target
        if not self._doors.arrive(session):
            return Outcome.REFUSED, Code.RATE_LIMITED
        try:
            slots = self._slots.get(session)
            if slots is None:
                slots = self._slots[session] = anyio.Semaphore(self._doors.open_at_once)
            try:
                # A free slot is taken at once: ``acquire`` would first give the loop a pass.
                slots.acquire_nowait()
            except anyio.WouldBlock:
                entered = False
                with anyio.move_on_after(self.options.session_wait_s):
                    await slots.acquire()
                    entered = True
                if not entered:
                    return Outcome.REFUSED, Code.RATE_LIMITED  # waited its time in line
            try:
                return await self._deliver_to(envelope, body)
            finally:
                slots.release()
        finally:
            if self._doors.leave(session):
                self._slots.pop(session, None)

    async def _deliver_to(
        self, envelope: Envelope, body: SendBody | StatusBody
    ) -> tuple[Outcome, str]:
        target = await self._target(body.target)
        if target is None:
            return Outcome.REFUSED, Code.NOT_FOUND
        identity = await self._sender_identity(envelope.origin, body.sender)
        if identity is None:
            return Outcome.REFUSED, Code.RATE_LIMITED
        registration, token = identity
        sender = Sender(id=registration.id, instance_id=registration.instance_id, token=token)
        exchanger = self._exchanger(carried(body.sender.capabilities))
        try:
            if isinstance(body, SendBody):
                message = Message.model_validate(
                    {
                        "v": WIRE_VERSION,
                        "type": "message",
                        "request_id": str(uuid.uuid4()),
                        "message_id": body.message.message_id,
                        "text": body.message.text,
                        "summary": body.message.summary,
                        "sent_at": body.message.sent_at,
                    }
                )
                receipt = await exchanger.send(target, sender=sender, message=message)
                return Outcome.RECEIPT, receipt.status
            receipt = await exchanger.query_status(
                target, sender=sender, message_id=body.message_id
            )
            return Outcome.ANSWER, receipt.status
        except ExchangeError as exc:
            if exc.verdict.state is SenderState.RECEIPT_UNKNOWN:
                return Outcome.UNKNOWN, exc.code
            return Outcome.REFUSED, exc.code

    async def _target(self, instance_id: str) -> Registration | None:
        """The real local session ``instance_id`` (never one of the gateway's own)."""
        try:
            path = self.locations.registration_path(instance_id)
            raw = await self._peers_dir.run(fs.read_registration_bytes, path)
            registration = parse_registration(
                raw,
                file_stem=instance_id,
                expected_socket_path=self.locations.socket_path(instance_id),
            )
        except (CrossSessionError, ValueError):
            return None
        return None if registration.pid == self._pid else registration

    def _exchanger(self, capabilities: tuple[str, ...]) -> Exchanger:
        exchanger = self._exchangers.get(capabilities)
        if exchanger is None:
            config = ExchangeConfig(
                send_deadline_s=self.options.delivery_deadline_s, capabilities=capabilities
            )
            exchanger = self._exchangers[capabilities] = Exchanger(
                self.locations, fs, config=config
            )
        return exchanger

    async def _sender_identity(
        self, machine: str, remote: RemoteSender
    ) -> tuple[Registration, str] | None:
        """The local identity of a remote sender: its proxy, or a send-only registration."""
        local_id = self._local_id(machine, remote.instance_id)
        claimed = self._sender_table.claim(machine, local_id, anyio.current_time())
        if claimed.claim is Claim.FULL:
            return None
        if claimed.evicted is not None and claimed.evicted not in self._proxies:
            await self._remove_sender(claimed.evicted)
        proxy = self._proxies.get(local_id)
        if proxy is not None:
            return proxy.registration, proxy.token
        known = self._senders.get(local_id)
        if known is not None:
            return known.registration, known.token
        # Made under a lock: a sender's first messages often arrive together, and two
        # identities made at once would each write the registration with its own token, so
        # the deliveries holding the token that lost would fail authentication, then and later.
        async with self._making_identity:
            return await self._new_identity(machine, local_id, remote)

    async def _new_identity(
        self, machine: str, local_id: str, remote: RemoteSender
    ) -> tuple[Registration, str] | None:
        proxy = self._proxies.get(local_id)
        if proxy is not None:
            return proxy.registration, proxy.token
        known = self._senders.get(local_id)
        if known is not None:
            return known.registration, known.token
        token = new_token()
        now = self._wall_ms()
        try:
            registration = identities.build(
                self.locations,
                local_id=local_id,
                machine=machine,
                remote_id=remote.id,
                name=remote.name,
                cwd="",
                status="idle",
                inbound="refuse",
                started_at=now,
                updated_at=now,
                token=token,
            )
            await self._write(registration, machine)
        except CrossSessionError as exc:
            logger.warning("cannot write the identity of a sender of %s: %s", machine, exc)
            self._sender_table.release(machine, local_id)
            return None
        self._senders[local_id] = _SenderIdentity(machine, registration, token)
        self.stats.senders_made += 1
        return registration, token

    async def _remove_sender(self, local_id: str) -> None:
        known = self._senders.pop(local_id, None)
        if known is not None:
            self._sender_table.release(known.machine, local_id)
            await self._remove_file(local_id)

    async def _answer(self, msg: Msg, request: Envelope, outcome: Outcome, status: str) -> None:
        reply = env.build(
            kind=Kind.REPLY,
            account=self.options.trust.account,
            origin=self.options.machine,
            to=request.origin,
            nonce=secrets.token_hex(16),
            at_ms=self._wall_ms(),
            body=ReplyBody(outcome=outcome, status=status),
            re=request.id,
        )
        payload = self._sealed_for(request.origin, env.encode(reply))
        if payload is not None:  # None: no longer trusted since its request came; it learns nothing
            await self._link.respond(msg, payload)

    def _sealed_for(self, machine: str, data: bytes) -> bytes | None:
        return self._pairs.seal(machine, self._verifier.trust.machines.get(machine), data)

    # -- status ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What ``peers --remote`` shows: every verified remote session, and the figures."""
        now = anyio.current_time()
        records = []
        for (machine, remote_id), record in sorted(
            self._book.items(), key=lambda item: -item[1].updated_at
        ):
            proxy = self._proxies.get(self._local_id(machine, remote_id))
            seen = self._book.seen((machine, remote_id))
            records.append(
                {
                    "machine": machine,
                    **record.to_wire(),
                    "ageS": round(now - (seen if seen is not None else now), 1),
                    "proxy": None
                    if proxy is None
                    else {"name": proxy.registration.name, "ref": proxy.registration.ref},
                    "noProxy": "cap" if (machine, remote_id) in self._capped else None,
                }
            )
        diagnostics = self._verifier.diagnostics()
        return {
            "version": 1,
            "machine": self.options.machine,
            "publicKey": self.options.key.public_text(),
            "pid": self._pid,
            "writtenAt": self._wall_ms(),
            "startedAt": self.started_at_ms,
            "ready": self.ready.is_set(),
            "inbound": "on" if self.options.inbound else "off",
            "account": self.options.trust.account,
            "connected": self._link.connected,
            "server": self._link.status(),
            "permissions": {None: "unknown", True: "enforced", False: "open"}[
                self.permissions_enforced
            ],
            "bucket": self._mirror.health.to_json(),
            "records": records,
            "skewMs": dict(self._mirror.skew_ms),
            "published": self._publisher.stats.published,
            "machines": self._machines(),
            "proxies": len(self._proxies),
            "maxProxies": self.options.max_proxies,
            "proxyShare": self._shares.share,
            "capped": len(self._capped),
            "recentErrors": self.problems.to_json(),
            "trustChanges": self.trust_changes,
            "rosterSeq": None if self.options.watch is None else self.options.watch.roster_seq,
            "senders": len(self._senders),
            "forwarded": dict(self.stats.forwarded),
            "delivered": dict(self.stats.delivered),
            "rejected": dict(diagnostics.rejected),
            "recentRejections": list(diagnostics.recent),
            "refusedByMachineBounds": self._flow.refused,
            "refusedBySessionBounds": self._doors.refused,
            "recordsIgnored": self._book.ignored,
            "unsignedDeletes": self._mirror.unsigned_deletes,
            "staleRecords": self._mirror.stale_records,
            "droppedByClient": self._link.dropped,
        }

    def _machines(self) -> list[dict[str, Any]]:
        """Each trusted machine: its sessions seen, their proxies here and those left without
        one, when it was last heard of, how far its clock is from ours, and how long it is
        still paused (``None``: it is listened to)."""
        now = anyio.current_time()
        sessions: dict[str, int] = {}
        for (machine, _), _record in self._book.items():
            sessions[machine] = sessions.get(machine, 0) + 1
        capped: dict[str, int] = {}
        for machine, _ in self._capped:
            capped[machine] = capped.get(machine, 0) + 1
        held = self._held_per_machine()
        return [
            {
                "machine": machine,
                "sessions": sessions.get(machine, 0),
                "proxies": held.get(machine, 0),
                "capped": capped.get(machine, 0),
                "lastRecordAt": self._mirror.last_record_at.get(machine),
                "skewMs": self._mirror.skew_ms.get(machine),
                "pausedForS": _seconds_left(self._pauses.paused_until(machine, now), now),
            }
            for machine in self._mirror.origins
        ]

    async def _snapshot_loop(self) -> None:
        written = -REMOTE_SNAPSHOT_REFRESH_S
        problems = -1
        while True:
            # At once after a change (a new warning too); at least every REMOTE_SNAPSHOT_REFRESH_S
            # anyway, so that a reader sees the counters move and can tell a live gateway's
            # snapshot from a stale one.
            changed = self._dirty or self.problems.seen != problems
            if changed or anyio.current_time() - written >= REMOTE_SNAPSHOT_REFRESH_S:
                self._dirty = False
                problems = self.problems.seen
                written = anyio.current_time()
                try:
                    await anyio.to_thread.run_sync(
                        files.write_snapshot, self.locations, self.snapshot()
                    )
                except CrossSessionError as exc:
                    logger.info("could not write the snapshot: %s", exc)
            await anyio.sleep(self.options.snapshot_every_s)
