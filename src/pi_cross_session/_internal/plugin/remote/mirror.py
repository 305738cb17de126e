"""The mirror: other machines' sessions as their signed records say, and the bucket's health.

Records reach a gateway two ways, neither through a JetStream consumer (a machine may not create
one, docs/remote.md "Who may do what"):

* **live**: a plain subscription to each trusted machine's record subjects sees every put as it
  is made, one queue per machine, so one machine's flood fills only its own;
* **current**: at start and after every reconnect, the stream's direct get hands over the newest
  message of each key, machine by machine, bounded in count and bytes.

Every message is judged by its subject first (a trusted machine's key, or nothing is read), then
by its signature over the bytes as they arrived, and only then parsed
(:class:`~pi_cross_session._internal.security.remote.trust.Verifier`); the
:class:`~pi_cross_session._internal.security.remote.records.RecordBook` keeps the newest by
sequence. A delete or purge marker nobody signed removes nothing: the gateway reads that key again
instead.

The bucket itself is checked at start, whenever an operation on it fails, and on a schedule while
it is not as it must be: missing, or with a configuration that lost a protection, it is created or
put back where this machine may, and reported either way (one log line at the default verbosity,
saying when it is checked again, and the status snapshot). A server without JetStream is said to
be one at once, with what to add.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import anyio
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from pi_cross_session._internal.plugin.remote import bucket
from pi_cross_session._internal.plugin.remote.link import (
    BucketError,
    HopTimeoutError,
    Link,
    LinkConfig,
    NoJetStreamError,
    PermissionDeniedError,
    Record,
    UnreachableError,
)
from pi_cross_session._internal.plugin.remote.said import SaidOnce
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    RECORD_KINDS,
    EnvelopeError,
    PeerRecord,
    Tombstone,
)
from pi_cross_session._internal.protocol.remote.settings import (
    BUCKET_CHECK_EVERY_S,
    JETSTREAM_READY_S,
    JETSTREAM_RETRY_S,
    REMOTE_READ_BYTES_PER_MACHINE,
    REMOTE_RECORDS_PER_MACHINE,
)
from pi_cross_session._internal.security.remote.records import Key, Offer, RecordBook
from pi_cross_session._internal.security.remote.trust import Cause, Rejected, Verified, Verifier

logger = logging.getLogger(__name__)

_CHANGES = frozenset({Offer.NEW, Offer.UPDATED, Offer.REMOVED})

#: The bucket's state when this server has no JetStream for us.
NO_JETSTREAM: Final = "no-jetstream"
#: States of the bucket that are checked again on a schedule until they clear.
RECHECKED: Final = frozenset({NO_JETSTREAM, "missing", "altered", "unknown"})


@dataclass(slots=True)
class BucketHealth:
    """What the last check of the bucket found (``state`` is one word, ``detail`` a sentence)."""

    state: str = "unchecked"
    detail: str = ""
    checks: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "detail": self.detail, "checks": self.checks}


class Mirror:
    """Other machines' records, kept current; ``changed`` is awaited for every session whose
    record appeared, changed or ended."""

    def __init__(
        self,
        *,
        machine: str,
        verifier: Verifier,
        link: Link,
        book: RecordBook,
        wall_ms: Callable[[], int],
        changed: Callable[[Key], Awaitable[None]],
        refused: Callable[[str, Cause], None] = lambda origin, cause: None,
    ) -> None:
        self._machine = machine
        self._verifier = verifier
        self._link = link
        self.book = book
        self._wall_ms = wall_ms
        self._changed = changed
        #: Told of every live record refused, with why (the gateway counts false ones).
        self._refused = refused
        #: Machines not listened to for a while: their records are kept as they were.
        self.paused: set[str] = set()
        self.skew_ms: dict[str, int] = {}
        #: The newest ``at`` (the origin's clock, ms) of each machine's verified records and
        #: tombstones: when it was last heard of.
        self.last_record_at: dict[str, int] = {}
        self.health = BucketHealth()
        self._checking = anyio.Lock()
        self._last_check = -BUCKET_CHECK_EVERY_S
        self._earlier: set[str] = set()
        self._said = SaidOnce()
        self._group: anyio.abc.TaskGroup | None = None
        self._following: dict[str, Subscription] = {}
        #: Unsigned delete or purge markers seen (each answered by a fresh read of its key).
        self.unsigned_deletes = 0
        #: Signed records or tombstones refused as older than what was seen for their session.
        self.stale_records = 0

    @property
    def origins(self) -> list[str]:
        return sorted(m for m in self._verifier.trust.machines if m != self._machine)

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        """Check the bucket, follow every trusted machine's records, then read the current ones
        (in that order, so nothing put meanwhile is missed); while the bucket is not as it must
        be, check it again every ``BUCKET_CHECK_EVERY_S``."""
        self._group = group
        await self.check_bucket(force=True)
        group.start_soon(self._recheck_loop)
        for origin in self.origins:
            await self._subscribe(origin)
        await self.read_current()

    async def _subscribe(self, origin: str) -> None:
        self._following[origin] = await self._link.serve(
            env.records_of(origin), partial(self._on_message, origin)
        )

    async def follow(self, origin: str) -> None:
        """Follow a machine trusted since the start: its records as they come, then the
        current ones."""
        if origin in self._following:
            return
        await self._subscribe(origin)
        try:
            await self._read(origin, env.records_of(origin), REMOTE_RECORDS_PER_MACHINE)
        except (BucketError, UnreachableError, PermissionDeniedError) as exc:
            logger.info("reading the records of %s: %s", origin, exc)

    async def pause(self, origin: str) -> None:
        """Stop taking ``origin``'s records for a while, keeping those taken (see
        security/remote/pauses.py)."""
        self.paused.add(origin)
        await self._unsubscribe(origin)

    async def resume(self, origin: str) -> None:
        """Take ``origin``'s records again, reading the current ones first: those that ended
        meanwhile expire as they would have."""
        self.paused.discard(origin)
        await self.follow(origin)

    async def _unsubscribe(self, origin: str) -> None:
        subscription = self._following.pop(origin, None)
        if subscription is not None:
            await self._link.unserve(subscription, f"{origin}'s records")

    async def unfollow(self, origin: str) -> list[Key]:
        """Stop following a machine no longer trusted; the sessions of it that were live."""
        self.paused.discard(origin)
        await self._unsubscribe(origin)
        self.skew_ms.pop(origin, None)
        return self.book.forget(origin)

    # -- records -----------------------------------------------------------------------------------

    async def _on_message(self, origin: str, msg: Msg) -> None:
        operation = msg.headers.get("KV-Operation") if msg.headers else None
        await self._take(origin, Record(msg.subject, msg.data, operation), live=True)

    async def _take(self, origin: str, record: Record, *, live: bool = False) -> None:
        key = env.parse_record_subject(record.subject)
        if key is None or key[0] != origin:
            return
        if record.operation is not None:
            # A delete or purge marker: nobody signed it, so it removes nothing; the key's
            # current record is read again (a signed tombstone there would say "gone").
            self.unsigned_deletes += 1
            if self._group is not None:
                self._group.start_soon(self._reread, origin, record.subject)
            return
        verdict = self._verifier.check(
            record.data, self._wall_ms(), origin=origin, kinds=RECORD_KINDS
        )
        if not isinstance(verdict, Verified):
            if live:
                self._maybe_skewed(origin, verdict)
                self._refused(origin, verdict.cause)
            return
        self._said.clear(origin)
        try:
            body = verdict.envelope.read_body()
        except EnvelopeError:
            if origin not in self._earlier:
                self._earlier.add(origin)
                logger.warning(
                    "machine %s publishes records this gateway cannot read (an earlier version of "
                    "pi-cross-session?); upgrade its gateway",
                    origin,
                )
            return
        if not isinstance(body, PeerRecord | Tombstone) or body.instance_id != key[1]:
            return
        at = verdict.envelope.at
        if live:
            # Only a record that arrived as it was put measures the clocks: one read from the
            # bucket may have waited there up to a TTL.
            self.skew_ms[origin] = self._wall_ms() - at
        self.last_record_at[origin] = max(at, self.last_record_at.get(origin, at))
        offer = self.book.offer(origin, at, body, anyio.current_time())
        if offer is Offer.STALE:
            self.stale_records += 1
        if offer in _CHANGES:
            await self._changed(key)

    async def _read(self, origin: str, subjects: str, limit: int) -> None:
        """Take the current record of each of ``origin``'s keys under ``subjects``."""
        for record in await self._link.read_records(subjects, limit, REMOTE_READ_BYTES_PER_MACHINE):
            if record.operation is None:  # a marker nobody signed is no record
                await self._take(origin, record)

    async def _reread(self, origin: str, subject: str) -> None:
        try:
            await self._read(origin, subject, 1)
        except (BucketError, UnreachableError, PermissionDeniedError) as exc:
            logger.info("reading %s again: %s", subject, exc)

    async def read_current(self) -> None:
        """Take the bucket's current record of every trusted machine's sessions (but those of
        machines paused: their pause's end reads them)."""
        for origin in self.origins:
            if origin in self.paused:
                continue
            try:
                await self._read(origin, env.records_of(origin), REMOTE_RECORDS_PER_MACHINE)
            except BucketError as exc:
                self.bucket_failed(exc)
                return
            except (UnreachableError, PermissionDeniedError) as exc:
                logger.info("reading the records of %s: %s", origin, exc)

    async def expire(self) -> None:
        """End the records nobody refreshed in time."""
        for key in self.book.expire(anyio.current_time(), self._wall_ms(), self.paused):
            await self._changed(key)

    # -- the bucket --------------------------------------------------------------------------------

    def bucket_failed(self, exc: BucketError) -> None:
        """An operation on the bucket failed: check it (soon, and not more than every few s)."""
        logger.info("the bucket: %s", exc)
        if self._group is not None:
            self._group.start_soon(self.check_bucket)

    async def check_bucket(self, *, force: bool = False) -> None:
        """Verify the bucket exists as it must; create or repair it where this machine may."""
        if self._checking.locked():
            return
        async with self._checking:
            now = anyio.current_time()
            if not force and now - self._last_check < BUCKET_CHECK_EVERY_S:
                return
            self._last_check = now
            self._report(*await ensure_bucket(self._link))

    async def _recheck_loop(self) -> None:
        # A bucket nobody could put right (no JetStream, missing where this machine may not
        # create it) is looked at again on a schedule, not only when an operation fails: a
        # gateway with no session to publish would otherwise never notice it came back.
        while True:
            await anyio.sleep(BUCKET_CHECK_EVERY_S)
            if self.health.state not in RECHECKED:
                continue
            await self.check_bucket()
            if self.health.state not in RECHECKED:
                await self.read_current()

    def _report(self, state: str, detail: str) -> None:
        changed = (state, detail) != (self.health.state, self.health.detail)
        self.health.state, self.health.detail = state, detail
        self.health.checks += 1
        if changed and state != "ok":
            again = (
                f"; checking again every {BUCKET_CHECK_EVERY_S:g} s"
                if state in RECHECKED and state != NO_JETSTREAM
                else ""
            )
            logger.warning("remote discovery: %s%s", detail, again)
        elif changed and self.health.checks > 1:
            logger.warning("remote discovery: the bucket is as it should be again")

    def _maybe_skewed(self, origin: str, verdict: object) -> None:
        """A record that arrived as it was put, refused for its time: the clocks disagree."""
        if not isinstance(verdict, Rejected) or verdict.cause is not Cause.CLOCK:
            return
        if verdict.envelope is not None and self._said.first("clock", origin):
            skew_ms = self._wall_ms() - verdict.envelope.at
            logger.warning("%s", remote_plane.clock_skew(origin, skew_ms, "a session record"))


async def ensure_bucket_with(config: LinkConfig) -> tuple[str, str]:
    """What ``remote bucket`` does: connect with ``config`` (the administrator's), run
    :func:`ensure_bucket`, disconnect."""
    link = Link(config)
    await link.connect()
    try:
        return await ensure_bucket(link)
    finally:
        await link.close()


async def ensure_bucket(link: Link) -> tuple[str, str]:
    """Check the bucket; create or repair it where ``link``'s user may. Returns the state (one
    word: ``ok``, ``created``, ``repaired``, ``missing``, ``altered``, ``unverified`` or
    ``unknown``, ``no-jetstream``) and, unless ``ok``, a sentence saying what was found and
    done."""
    deadline = anyio.current_time() + JETSTREAM_READY_S
    while True:
        try:
            config = await link.bucket_config()
            break
        except PermissionDeniedError:
            return "unverified", "this machine may not read the bucket's configuration"
        except NoJetStreamError:
            # Nobody serves the JetStream API: a server without it, which waiting cannot mend
            # (one that is starting answers, even if only to say it is not ready).
            return NO_JETSTREAM, remote_plane.no_jetstream(link.where, BUCKET_CHECK_EVERY_S)
        except (BucketError, UnreachableError, HopTimeoutError) as exc:
            # A cluster that has just started answers nothing until it elected its leader.
            if anyio.current_time() >= deadline:
                return "unknown", f"the bucket could not be checked: {exc}"
            link.jetstream_not_ready(exc, deadline)
            await anyio.sleep(JETSTREAM_RETRY_S)
    if config is None:
        return await _make(link, update=False, why="the bucket did not exist")
    found = bucket.problems(config, link.bucket_spec)
    if found:
        return await _make(link, update=True, why="the bucket was altered: " + "; ".join(found))
    return "ok", ""


async def _make(link: Link, *, update: bool, why: str) -> tuple[str, str]:
    try:
        await link.make_bucket(update=update)
    except PermissionDeniedError:
        return ("altered" if update else "missing"), (
            f"{why}, and this machine may not {'repair' if update else 'create'} it; a hub "
            "does that by itself, and on a deployment set up by hand its administrator can: "
            "pi-cross-session remote bucket"
        )
    except (BucketError, UnreachableError, HopTimeoutError) as exc:
        return ("altered" if update else "missing"), f"{why}; putting it back failed: {exc}"
    return (
        "repaired" if update else "created"
    ), f"{why}; it was {'put back' if update else 'created'}"
