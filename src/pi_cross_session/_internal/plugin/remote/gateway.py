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

The proxies and the outbound loop are :mod:`.outbound`'s, the inbound loop is :mod:`.inbound`'s;
this module is the machine side that wires them: the link, trust and pairing, the pauses of a
misbehaving machine, whom it listens to, publishing, the sweep, and the status snapshot.

Nothing is retried, ever. Every decision of trust and quantity is made by the pure classes of
:mod:`pi_cross_session._internal.security.remote`; this module moves bytes and files.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
import anyio.abc
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.gateway_common import (
    GatewayParts,
    GatewayStatistics,
    RefusalWarnings,
)
from pi_cross_session._internal.plugin.remote.inbound import Inbound
from pi_cross_session._internal.plugin.remote.link import Link
from pi_cross_session._internal.plugin.remote.mirror import Mirror
from pi_cross_session._internal.plugin.remote.outbound import Outbound
from pi_cross_session._internal.plugin.remote.problems import RecentProblems
from pi_cross_session._internal.plugin.remote.publish import Publisher
from pi_cross_session._internal.plugin.remote.trust_watch import TrustWatch
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io import memory
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_PROXIES,
    REMOTE_DELIVERY_DEADLINE_S,
    REMOTE_HOP_DEADLINE_S,
    REMOTE_PUBLISH_EVERY_S,
    REMOTE_RECORD_TTL_S,
    REMOTE_SCAN_EVERY_S,
    REMOTE_SESSION_WAIT_S,
    REMOTE_SNAPSHOT_EVERY_S,
    REMOTE_SNAPSHOT_REFRESH_S,
    REMOTE_SWEEP_EVERY_S,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote.identity import MachineKey
from pi_cross_session._internal.security.remote.pairing import Pairs
from pi_cross_session._internal.security.remote.pauses import MachinePauses, counts_towards_a_pause
from pi_cross_session._internal.security.remote.records import Key, RecordBook
from pi_cross_session._internal.security.remote.trust import Cause, TrustConfig, Verifier

logger = logging.getLogger(__name__)


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


class Gateway:
    """One gateway: run it with ``await task_group.start(gateway.run)``; cancel to stop.

    It owns the link, trust and pairing, the pauses, whom it listens to, publishing and the
    status snapshot, and wires its two sides: :class:`~.outbound.Outbound` (the proxies, and what
    goes through them) and :class:`~.inbound.Inbound` (other machines' requests), which share the
    local ids of remote sessions and tell each other through it when a proxy takes a sender's
    identity over or gives its own up.
    """

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
            changed=self._record_changed,
            refused=self._false_from,
        )
        #: Whether the deployment refuses what no machine may do (``None``: not known yet).
        self.permissions_enforced: bool | None = None
        self._earlier_layout_seen = False
        #: Machines whose requests or records failed their MAC or signature in a burst, on a
        #: deployment that vouches they sent them: not listened to for a while
        #: (security/remote/pauses.py).
        self._pauses = pauses or MachinePauses()
        self._pause_scopes: dict[str, anyio.CancelScope] = {}
        self.stats = GatewayStatistics()
        self._warnings = RefusalWarnings(self._verifier, wall_ms)
        parts = GatewayParts(
            locations=locations,
            machine=options.machine,
            account=options.trust.account,
            link=link,
            verifier=self._verifier,
            warnings=self._warnings,
            stats=self.stats,
            wall_ms=wall_ms,
            pid=self._pid,
            seal=self._sealed_for,
        )
        self._outbound = Outbound(
            parts,
            max_proxies=options.max_proxies,
            machines=len(self._mirror.origins),
            hop_deadline_s=options.hop_deadline_s,
            book=self._book,
            adopt=self._adopt_sender,
            closed=self._proxy_closed,
            on_change=self._changed,
        )
        self._inbound = Inbound(
            parts,
            session_wait_s=options.session_wait_s,
            delivery_deadline_s=options.delivery_deadline_s,
            proxies=self._outbound,
            # Read at each request: a trust change may turn remote inbound on or off.
            accepting=lambda: self.options.inbound,
            refused=self._false_from,
            heard=self._pauses.heard,
        )
        self._probe_exchanger = Exchanger(locations, fs)
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
        #: Told (one line for people) whenever what this gateway trusts changes while it runs.
        self.on_trust_changed: Callable[[str], None] = logger.info
        self.trust_changes = 0
        self._dirty = True
        self.ready = anyio.Event()
        #: The last warnings and errors of the remote plane, for the status snapshot.
        self.problems = RecentProblems()

    # -- wiring ------------------------------------------------------------------------------------

    async def _record_changed(self, key: Key) -> None:
        await self._outbound.reconcile(key)

    def _adopt_sender(self, local_id: str) -> str | None:
        return self._inbound.adopt(local_id)

    def _proxy_closed(self, machine: str, local_id: str) -> None:
        self._inbound.release(machine, local_id)

    def _changed(self) -> None:
        self._dirty = True

    def _sealed_for(self, machine: str, data: bytes) -> bytes | None:
        return self._pairs.seal(machine, self._verifier.trust.machines.get(machine), data)

    # -- running -----------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; on the way out withdraw everything this gateway published."""
        self.problems.attach()
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                self._outbound.start(group)
                self._inbound.start(group)
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
            env.request_subject(self.options.machine, origin),
            partial(self._inbound.on_request, origin),
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
                await self._outbound.forget(key)
            await self._mirror.follow(origin)
        for origin in sorted(after - before):
            await self._serve_requests(origin)
            await self._mirror.follow(origin)
        for origin in sorted(before - after):
            self._end_pause(origin)
            self._warnings.forget(origin)
            await self._stop_serving(origin)
            for key in await self._mirror.unfollow(origin):
                await self._outbound.forget(key)
        self._outbound.share_among(len(after))
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
        if self._group is not None and (added or self._outbound.capped):
            self._group.start_soon(self._outbound.fill_free_slots)

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
        await self._outbound.close_all()
        await self._inbound.remove_all()
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

    async def _sweep_loop(self) -> None:
        while True:
            await anyio.sleep(self.options.sweep_every_s)
            if self._inbound.handled_since_sweep():
                # Each request's envelope, frames and buffers were freed, but glibc keeps freed
                # heap (and the RSS with it) until asked: ask once a sweep while requests come
                # in, and once more after the last (as the endpoint does after large frames).
                memory.give_back()
            await self._mirror.expire()
            if self._outbound.capped or self._outbound.held < self.options.max_proxies:
                await self._outbound.fill_free_slots()

    # -- status ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What ``peers --remote`` shows: every verified remote session, and the figures."""
        now = anyio.current_time()
        records = []
        for (machine, remote_id), record in sorted(
            self._book.items(), key=lambda item: -item[1].updated_at
        ):
            proxy = self._outbound.registration((machine, remote_id))
            seen = self._book.seen((machine, remote_id))
            records.append(
                {
                    "machine": machine,
                    **record.to_wire(),
                    "ageS": round(now - (seen if seen is not None else now), 1),
                    "proxy": None if proxy is None else {"name": proxy.name, "ref": proxy.ref},
                    "noProxy": "cap" if self._outbound.is_capped((machine, remote_id)) else None,
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
            "proxies": self._outbound.held,
            "maxProxies": self.options.max_proxies,
            "proxyShare": self._outbound.share,
            "capped": self._outbound.capped,
            "recentErrors": self.problems.to_json(),
            "trustChanges": self.trust_changes,
            "rosterSeq": None if self.options.watch is None else self.options.watch.roster_seq,
            "senders": self._inbound.senders,
            "forwarded": dict(self.stats.forwarded),
            "delivered": dict(self.stats.delivered),
            "rejected": dict(diagnostics.rejected),
            "recentRejections": list(diagnostics.recent),
            "refusedByMachineBounds": self._inbound.refused_by_machine_bounds,
            "refusedBySessionBounds": self._inbound.refused_by_session_bounds,
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
        capped = self._outbound.capped_per_machine()
        held = self._outbound.held_per_machine()
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
