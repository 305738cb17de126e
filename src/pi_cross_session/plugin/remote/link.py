"""The gateway's one connection to NATS: requests, the subjects it serves, the bucket.

The only module that talks to the NATS client; everything above it sees our exceptions:

* :class:`UnreachableError` — the payload certainly did not leave (no connection, nobody serving
  the subject, too large for the server);
* :class:`PermissionDeniedError` — the server refused this machine the publish (its credentials do
  not allow that subject): certainly not delivered, and said as such, not as a timeout;
* :class:`HopTimeoutError` — it may have left; no acceptable reply came in time;
* :class:`BucketError` — the bucket is missing, or refused an operation.

**Replies.** Every request is answered on this machine's own inbox (``pi-xs.v1.in.<machine>``,
which a deployment lets nobody else read). A request waits for the first reply its caller
*accepts* (a verified one), not merely the first to arrive, and looks at no more than
:data:`REPLY_CANDIDATES`: on a deployment without permissions, a stranger answering first with
junk cannot turn a receipt into an unknown.

**Permission denials** reach the client only through its error callback, naming the subject; a
request or put waiting on that subject ends at once with :class:`PermissionDeniedError`.

Reconnects are the client's: it tries for as long as the gateway runs. A request while the
connection is down is refused at once (:class:`UnreachableError`) instead of being buffered for
a later flush, so that "not sent" is true when we say it.
"""

from __future__ import annotations

import json
import logging
import secrets
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
import anyio.lowlevel
import nats.errors
from nats.aio.client import Client, RawCredentials
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from pi_cross_session.plugin.remote.bucket import BucketSpec
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.remote import envelope as env
from pi_cross_session.protocol.remote.settings import (
    BUCKET_OPERATION_TIMEOUT_S,
    JETSTREAM_READY_S,
    MAX_API_ANSWER_BYTES,
    NATS_CONNECT_TIMEOUT_S,
    NATS_RECONNECT_WAIT_S,
    REMOTE_PENDING_BYTES_PER_ORIGIN,
    REPLY_CANDIDATES,
)

logger = logging.getLogger(__name__)


class _QuietTlsClose(logging.Filter):
    """asyncio warns that nats-py's protocol asks to keep a TLS stream half open at its end,
    which TLS cannot; it is harmless and would print on every clean stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_QuietTlsClose())

T = TypeVar("T")

#: The header a NATS status message carries (503: nobody serves the subject).
_STATUS: Final = "Status"
_PERMISSIONS: Final = "permissions violation for "


class UnreachableError(CrossSessionError):
    """The payload was not handed to NATS: certainly not delivered."""

    code = "unreachable"


class PermissionDeniedError(CrossSessionError):
    """The NATS server refused this machine the subject: certainly not delivered."""

    code = "permission_denied"


class HopTimeoutError(CrossSessionError):
    """A request went out and no acceptable reply came in time: nobody knows what happened."""

    code = "timeout"


class BucketError(CrossSessionError):
    """The bucket is missing, or refused what we asked of it."""

    code = "bucket"

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class RefusedError(CrossSessionError):
    """The NATS servers answered a request of the deployment's administrator with an error."""

    code = "refused"


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """How to reach NATS: URLs, TLS, credentials, and the machine whose inbox this is."""

    servers: tuple[str, ...]
    #: The machine whose inbox this connection uses; ``None`` for a deployment's administrator.
    machine: str | None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    user: str | None = None
    password: str | None = None
    #: NATS credentials text (user JWT and seed), from the machine's files.
    credentials: str | None = None
    name: str = "pi-cross-session gateway"
    bucket: BucketSpec = field(default_factory=BucketSpec)


@dataclass(frozen=True, slots=True)
class Record:
    """One message of the bucket: its subject and payload (a record, a tombstone, or junk)."""

    subject: str
    data: bytes
    #: ``DEL`` or ``PURGE`` for a delete marker nobody signed (a KV tool's delete); else ``None``.
    operation: str | None = None


def _tls_context(config: LinkConfig) -> ssl.SSLContext | None:
    wants_tls = config.tls_ca is not None or any(s.startswith("tls://") for s in config.servers)
    if not wants_tls:
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.tls_ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.tls_cert is not None:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


class _Waiting:
    """Replies arriving for one request (bounded), and how it ended."""

    __slots__ = ("arrived", "denied", "limit", "replies", "subject", "token")

    def __init__(self, subject: str, limit: int) -> None:
        self.subject = subject.lower()
        self.limit = limit
        self.token = secrets.token_hex(8)
        self.replies: deque[Msg] = deque()
        self.arrived = anyio.Event()
        self.denied = False

    async def next(self, denied: str) -> Msg:
        """The next reply to arrive; :class:`PermissionDeniedError` (``denied``) once the server
        refused the request."""
        while True:
            if self.denied:
                raise PermissionDeniedError(denied)
            if self.replies:
                return self.replies.popleft()
            await self.arrived.wait()
            self.arrived = anyio.Event()

    def add(self, msg: Msg) -> None:
        if len(self.replies) < self.limit:
            self.replies.append(msg)
            self.arrived.set()

    def deny(self) -> None:
        self.denied = True
        self.arrived.set()


class Link:
    """One NATS connection of one machine."""

    def __init__(self, config: LinkConfig) -> None:
        self._config = config
        self._nc: Client | None = None
        self._inbox = "_INBOX" if config.machine is None else env.inbox_prefix(config.machine)
        self._waiting: dict[str, _Waiting] = {}
        self._denied_subscriptions: set[str] = set()
        self._closing = False
        self.disconnects = 0
        self.reconnects = 0
        #: Messages the client dropped because a subscription's queue was full, since start.
        self.dropped = 0
        #: Called after every reconnect (the mirror reads the bucket again then).
        self.on_reconnect: Callable[[], Awaitable[None]] | None = None

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def bucket_spec(self) -> BucketSpec:
        """The bucket as this deployment wants it (what the gateway creates and checks)."""
        return self._config.bucket

    @property
    def max_payload(self) -> int:
        return 0 if self._nc is None else self._nc.max_payload

    # -- connecting --------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect (bounded by :data:`NATS_CONNECT_TIMEOUT_S`) and open this machine's inbox."""
        options: dict[str, Any] = {
            "servers": list(self._config.servers),
            "name": self._config.name,
            "connect_timeout": NATS_CONNECT_TIMEOUT_S,
            "reconnect_time_wait": NATS_RECONNECT_WAIT_S,
            "max_reconnect_attempts": -1,
            "allow_reconnect": True,
            # Servers in the order given: a gateway lists its nearest node first.
            "dont_randomize": True,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnect,
            "reconnected_cb": self._on_reconnect,
            # A publish during a reconnect must fail, not wait for a later flush (module doc).
            "pending_size": 0,
            "inbox_prefix": self._inbox,
        }
        context = _tls_context(self._config)
        if context is not None:
            options["tls"] = context
        if self._config.credentials is not None:
            options["user_credentials"] = RawCredentials(self._config.credentials)
        elif self._config.user is not None:
            options["user"] = self._config.user
            options["password"] = self._config.password
        # The client would try the first connection for ever (it reconnects without end), so
        # the first one is bounded here; reconnects later are unbounded, as they should be.
        client = Client()
        where = ", ".join(self._config.servers)
        try:
            with anyio.fail_after(NATS_CONNECT_TIMEOUT_S * max(2, len(self._config.servers))):
                await client.connect(**options)
        except Exception as exc:
            with anyio.CancelScope(shield=True):
                try:
                    await client.close()
                except Exception as close_exc:  # closing is best effort
                    logger.info("closing the failed NATS client: %s", close_exc)
            detail = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            raise UnreachableError(f"cannot connect to NATS at {where}: {detail}") from None
        self._nc = client
        await client.subscribe(f"{self._inbox}.r.*", cb=self._on_reply)

    async def _on_error(self, exc: Exception) -> None:
        text = str(exc)
        if isinstance(exc, nats.errors.SlowConsumerError):
            self.dropped += 1
            return
        at = text.lower().find(_PERMISSIONS)
        if at < 0:
            logger.info("NATS: %s", text)
            return
        # nats: permissions violation for publish to "<subject>" / for subscription to "<…>"
        what = text[at + len(_PERMISSIONS) :]
        subject = what.split('"')[1].lower() if what.count('"') >= 2 else ""
        if what.startswith("subscription"):
            self._denied_subscriptions.add(subject)
            logger.warning("NATS refused this machine a subscription: %s", subject)
            return
        for waiting in self._waiting.values():
            if waiting.subject == subject:
                waiting.deny()
        if subject != env.OPEN_PROBE_SUBJECT.lower():  # refused on purpose: the probe
            logger.warning("NATS refused this machine a publish to %s", subject)

    async def _on_disconnect(self) -> None:
        if self._closing:
            return
        self.disconnects += 1
        logger.warning("NATS connection lost; reconnecting")

    async def _on_reconnect(self) -> None:
        self.reconnects += 1
        logger.warning("NATS connection back")
        if self.on_reconnect is not None:
            await self.on_reconnect()

    async def close(self) -> None:
        self._closing = True
        nc, self._nc = self._nc, None
        if nc is not None:
            try:
                await nc.close()
            except Exception as exc:  # closing is best effort
                logger.info("closing NATS: %s", exc)

    async def permissions_enforced(self) -> bool | None:
        """Whether the server refuses this machine what no machine may do: a publish into an
        inbox that is nobody's. Refused (a permission violation): enforced; let through to
        nobody (the server's "no responders"): open; neither in time: ``None``."""
        try:
            await self.request(env.OPEN_PROBE_SUBJECT, b"", NATS_CONNECT_TIMEOUT_S, lambda _: None)
        except PermissionDeniedError:
            return True
        except UnreachableError:
            return False
        except HopTimeoutError:
            return None
        return None  # pragma: no cover - the probe accepts no reply

    def _require(self) -> Client:
        nc = self._nc
        if nc is None or not nc.is_connected:
            raise UnreachableError("no NATS connection")
        return nc

    # -- requests ----------------------------------------------------------------------------------

    async def _on_reply(self, msg: Msg) -> None:
        waiting = self._waiting.get(msg.subject.rpartition(".")[2])
        if waiting is not None:
            waiting.add(msg)

    async def request(
        self, subject: str, payload: bytes, timeout_s: float, accept: Callable[[bytes], T | None]
    ) -> T:
        """Send one request and return what ``accept`` makes of the first reply it accepts."""
        waiting = await self._send(subject, payload, REPLY_CANDIDATES)
        try:
            with anyio.move_on_after(timeout_s):
                while True:
                    msg = await waiting.next(f"this machine may not publish to {subject}")
                    if _status(msg) == "503":
                        raise UnreachableError("no gateway serves that machine")
                    accepted = accept(bytes(msg.data))
                    if accepted is not None:
                        return accepted
            raise HopTimeoutError("no reply in time")
        finally:
            self._waiting.pop(waiting.token, None)

    async def _send(self, subject: str, payload: bytes, limit: int) -> _Waiting:
        nc = self._require()
        if len(payload) > nc.max_payload:
            raise UnreachableError("larger than the NATS server's max_payload")
        waiting = _Waiting(subject, limit)
        self._waiting[waiting.token] = waiting
        try:
            await nc.publish(subject, payload, reply=f"{self._inbox}.r.{waiting.token}")
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError) as exc:
            del self._waiting[waiting.token]
            raise UnreachableError(f"NATS refused the request: {exc}") from None
        return waiting

    async def serve(
        self,
        subject: str,
        handler: Callable[[Msg], Awaitable[None]],
        *,
        pending_bytes: int = REMOTE_PENDING_BYTES_PER_ORIGIN,
    ) -> Subscription:
        """Take every message on ``subject``, in its own queue of at most ``pending_bytes`` (the
        client drops what does not fit, and counts it): one origin's flood fills its own.

        The client hands a queue's messages to its callback one after the other without giving
        the loop a pass, so a flooded queue would keep every other subscription waiting: while
        messages wait behind the current one, each takes its turn with the other queues first.
        """
        nc = self._require()
        queue: list[Subscription] = []

        async def in_turn(msg: Msg) -> None:
            if queue and queue[0].pending_msgs:
                await anyio.lowlevel.checkpoint()
            await handler(msg)

        subscription = await nc.subscribe(subject, cb=in_turn, pending_bytes_limit=pending_bytes)
        queue.append(subscription)
        return subscription

    @staticmethod
    async def respond(msg: Msg, payload: bytes) -> None:
        """Answer a request (best effort: the requester may be gone)."""
        try:
            await msg.respond(payload)
        except Exception as exc:
            logger.info("could not answer a request: %s", exc)

    # -- the bucket --------------------------------------------------------------------------------

    async def _api(self, subject: str, body: bytes = b"") -> dict[str, Any]:
        """One JetStream API request; its JSON answer."""

        def parse(data: bytes) -> dict[str, Any] | None:
            # The server's answers are small; on a deployment without permissions anyone who
            # saw the request could answer it, so nothing larger is parsed.
            if len(data) > MAX_API_ANSWER_BYTES:
                return None
            try:
                value = json.loads(data)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None

        try:
            return await self.request(subject, body, BUCKET_OPERATION_TIMEOUT_S, parse)
        except UnreachableError as exc:
            if "no gateway" in str(exc):
                raise BucketError("JetStream is not enabled on this NATS server") from None
            raise

    async def push_account(self, account_jwt: str) -> None:
        """Hand a changed account JWT to the servers (a system-account connection): every server
        of the cluster applies it, and a revoked user's connections close."""
        answer = await self._api("$SYS.REQ.CLAIMS.UPDATE", account_jwt.encode())
        error = answer.get("error")
        if isinstance(error, dict):
            raise RefusedError(f"the servers refused the account: {error.get('description')}")

    async def put(self, subject: str, payload: bytes) -> None:
        """Store a record (or tombstone) and wait for the stream's acknowledgement."""
        try:
            answer = await self._api(subject, payload)
        except BucketError:
            raise BucketError("no bucket stores records", missing=True) from None
        except HopTimeoutError:
            # Subscribers on the subject (every gateway's) keep NATS from saying "no responders"
            # when the stream is gone: silence is how a missing bucket shows then.
            raise BucketError("the bucket did not acknowledge a record") from None
        error = answer.get("error")
        if isinstance(error, dict):
            raise BucketError(f"the bucket refused a record: {error.get('description')}")

    async def bucket_config(self) -> dict[str, Any] | None:
        """The bucket's stream configuration, or ``None`` when there is no bucket."""
        answer = await self._api(f"$JS.API.STREAM.INFO.{env.KV_STREAM}")
        error = answer.get("error")
        if isinstance(error, dict):
            if error.get("code") == 404:
                return None
            raise BucketError(f"cannot read the bucket: {error.get('description')}")
        config = answer.get("config")
        if not isinstance(config, dict):
            raise BucketError("the bucket's configuration did not come back")
        return config

    async def make_bucket(self, *, update: bool) -> None:
        """Create the bucket as :mod:`.bucket` says (or put its configuration back)."""
        action = "UPDATE" if update else "CREATE"
        body = json.dumps(self._config.bucket.stream_config()).encode()
        deadline = anyio.current_time() + JETSTREAM_READY_S
        while True:
            answer = await self._api(f"$JS.API.STREAM.{action}.{env.KV_STREAM}", body)
            error = answer.get("error")
            if not isinstance(error, dict):
                return
            # A cluster that has just started elects its JetStream leader within seconds.
            if error.get("code") != 503 or anyio.current_time() >= deadline:
                raise BucketError(f"cannot {action.lower()} the bucket: {error.get('description')}")
            logger.info("JetStream not ready (%s); trying again", error.get("description"))
            await anyio.sleep(0.5)

    async def read_records(self, subjects: str, limit: int, max_bytes: int) -> list[Record]:
        """The current record of every key under ``subjects`` (at most ``limit`` of them and
        ``max_bytes`` in all), through the stream's direct get: no consumer, nothing left behind
        on the server."""
        body = json.dumps(
            {"multi_last": [subjects], "batch": limit, "max_bytes": max_bytes}
        ).encode()
        waiting = await self._send(f"$JS.API.DIRECT.GET.{env.KV_STREAM}", body, limit + 1)
        found: list[Record] = []
        try:
            with anyio.fail_after(BUCKET_OPERATION_TIMEOUT_S):
                while True:
                    msg = await waiting.next("this machine may not read the bucket")
                    status = _status(msg)
                    if status == "503":
                        raise BucketError("no bucket to read", missing=True)
                    if status is not None:
                        return found  # 204: the end of the batch; 404: nothing in it
                    found.append(_record(msg))
        except TimeoutError:
            raise BucketError("the bucket did not answer a read in time") from None
        finally:
            self._waiting.pop(waiting.token, None)


def _status(msg: Msg) -> str | None:
    headers = msg.headers
    if headers and not msg.data:
        return headers.get(_STATUS)
    return None


def _record(msg: Msg) -> Record:
    headers = msg.headers or {}
    subject = headers.get("Nats-Subject", msg.subject)
    operation = headers.get("KV-Operation")
    return Record(subject, bytes(msg.data), operation)
