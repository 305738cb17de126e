"""This machine's live sessions, published into the KV bucket (docs/remote.md, "KV record").

Every ``REMOTE_SCAN_EVERY_S`` the publisher reads the peers dir with the file checks every reader
applies, skips what the gateway itself registered (its proxies and remote senders carry its pid),
probes the rest as any listing does (which also tells each session's capabilities), and puts a
signed record for each live one: at once when it is new or changed, and every
``REMOTE_PUBLISH_EVERY_S`` anyway, so the bucket's TTL keeps it. A session that is gone gets a
signed **tombstone** on its key, the only thing readers take as "gone" at once (an unsigned
delete removes nothing). Every record and tombstone carries the next of this machine's sequence
numbers (:func:`next_seq`), so readers never take an older one back. No token, socket path or pid
is published.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from pi_cross_session._internal.plugin.remote.link import (
    BucketError,
    Link,
    PermissionDeniedError,
    UnreachableError,
)
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.limits import (
    MAX_LISTED_REGISTRATIONS,
)
from pi_cross_session._internal.protocol.paths import Locations, instance_id_from_filename
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    EVERYONE,
    Kind,
    PeerRecord,
    Tombstone,
)
from pi_cross_session._internal.protocol.remote.settings import (
    REMOTE_PUBLISH_EVERY_S,
    REMOTE_RECORD_CWD_CHARS,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote.identity import MachineKey

logger = logging.getLogger(__name__)


def read_local(locations: Locations, own_pid: int) -> list[Registration]:
    """Every registration of the peers dir that passes the readers' checks and is not ours
    (blocking: run it in a worker thread)."""
    try:
        window = fs.list_registration_names(locations.peers_dir, limit=MAX_LISTED_REGISTRATIONS)
    except CrossSessionError:
        return []
    found: list[Registration] = []
    for name in window.names:
        instance_id = instance_id_from_filename(name)
        if instance_id is None:
            continue
        try:
            raw = fs.read_registration_bytes(locations.registration_path(instance_id))
            registration = parse_registration(
                raw,
                file_stem=instance_id,
                expected_socket_path=locations.socket_path(instance_id),
            )
        except (CrossSessionError, ValueError):
            continue
        if registration.pid != own_pid:
            found.append(registration)
    return found


def next_seq(last: int, wall_ms: int) -> int:
    """The sequence of this machine's next record: above the last, and never below the clock's
    microseconds-ish (``wall_ms * 1000``), so that a restarted gateway, which has forgotten its
    last, still signs above everything it signed before (unless the clock stepped back)."""
    return max(last + 1, wall_ms * 1000)


def record_of(
    registration: Registration, capabilities: tuple[str, ...], *, seq: int = 0
) -> PeerRecord:
    """What is published of a live local session (``seq`` set when it is signed)."""
    return PeerRecord(
        seq=seq,
        id=registration.id,
        instance_id=registration.instance_id,
        name=registration.name,
        cwd=registration.cwd[:REMOTE_RECORD_CWD_CHARS],
        status=registration.status,
        inbound=registration.inbound,
        started_at=int(registration.started_at),
        updated_at=int(registration.updated_at),
        capabilities=list(capabilities),
    )


def sealed_record(
    key: MachineKey, *, machine: str, account: str, body: PeerRecord | Tombstone, at_ms: int
) -> bytes:
    """A record (or tombstone) of ``machine``, signed: what goes on its key in the bucket."""
    envelope = env.build(
        kind=Kind.GONE if isinstance(body, Tombstone) else Kind.PEER,
        account=account,
        origin=machine,
        to=EVERYONE,
        nonce=secrets.token_hex(16),
        at_ms=at_ms,
        body=body,
    )
    return key.seal(env.encode(envelope))


@dataclass(slots=True)
class PublisherStatistics:
    scans: int = 0
    puts: int = 0
    deletes: int = 0
    failures: int = 0
    published: int = 0


@dataclass(slots=True)
class _Published:
    record: PeerRecord
    at: float


@dataclass(slots=True)
class Publisher:
    """Keeps the bucket's records of this machine true."""

    locations: Locations
    machine: str
    account: str
    key: MachineKey
    link: Link
    exchanger: Exchanger
    own_pid: int = field(default_factory=os.getpid)
    wall_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    republish_s: float = REMOTE_PUBLISH_EVERY_S
    stats: PublisherStatistics = field(default_factory=PublisherStatistics)
    #: Called when the bucket refused or lacked a record, so the gateway checks the bucket.
    on_bucket_error: Callable[[BucketError], None] = field(default=lambda exc: None)
    _published: dict[str, _Published] = field(default_factory=dict)
    _seq: int = 0

    async def scan_once(self) -> None:
        """One pass: read, probe, put what changed or is due, delete what is gone."""
        self.stats.scans += 1
        registrations = await anyio.to_thread.run_sync(read_local, self.locations, self.own_pid)
        live: dict[str, PeerRecord] = {}

        async def probe(registration: Registration) -> None:
            try:
                receipt = await self.exchanger.probe(registration)
            except ExchangeError:
                return
            live[registration.instance_id] = record_of(registration, receipt.peer_capabilities)

        async with anyio.create_task_group() as group:
            for registration in registrations:
                group.start_soon(probe, registration)
        now = anyio.current_time()
        for instance_id, record in live.items():
            known = self._published.get(instance_id)
            if known is not None and known.record == record and now - known.at < self.republish_s:
                continue
            if await self._put(record):
                self._published[instance_id] = _Published(record, now)
        for instance_id in [i for i in self._published if i not in live]:
            if await self._put(Tombstone(seq=0, instance_id=instance_id)):
                self.stats.deletes += 1
                del self._published[instance_id]
            # else tried again next pass; the TTL ends it anyway
        self.stats.published = len(self._published)

    async def _put(self, body: PeerRecord | Tombstone) -> bool:
        wall_ms = self.wall_ms()
        self._seq = next_seq(self._seq, wall_ms)
        sealed = sealed_record(
            self.key,
            machine=self.machine,
            account=self.account,
            body=body.model_copy(update={"seq": self._seq}),
            at_ms=wall_ms,
        )
        try:
            await self.link.put(env.record_subject(self.machine, body.instance_id), sealed)
        except BucketError as exc:
            self.stats.failures += 1
            self.on_bucket_error(exc)
            return False
        except (UnreachableError, PermissionDeniedError) as exc:
            self.stats.failures += 1
            logger.info("could not publish %s: %s", body.instance_id, exc)
            return False
        self.stats.puts += 1
        return True

    async def withdraw_all(self) -> None:
        """A tombstone for every record of ours (at shutdown; best effort, the TTL ends the
        rest)."""
        for instance_id in list(self._published):
            if not await self._put(Tombstone(seq=0, instance_id=instance_id)):
                return
            del self._published[instance_id]
