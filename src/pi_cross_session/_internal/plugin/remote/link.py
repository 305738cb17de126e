"""The gateway's one connection to NATS: requests, the subjects it serves, the bucket.

The only module that talks to the NATS client; everything above it sees our exceptions:

* :class:`UnreachableError` — the payload certainly did not leave this machine (no connection,
  too large for the server); :class:`NoRespondersError`, one of them, when NATS took it and found
  nobody serving the subject; :class:`ConnectError`, one of them, when connecting failed, with
  the cause (:class:`NatsProblem`) a person is told;
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

Reconnects are the client's: it tries for as long as the gateway runs, and what stops it from
coming back (the server unreachable, TLS or credentials refused) is said at the default
verbosity when it changes and again every :data:`NATS_PROBLEM_REMINDER_S`. A request while the
connection is down is refused at once (:class:`UnreachableError`) instead of being buffered for
a later flush, so that "not sent" is true when we say it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar

import anyio
import anyio.lowlevel
import nats.errors
from nats.aio.client import Client, RawCredentials
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
from pi_cross_session._internal.plugin.render import remote_plane
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.settings import (
    BUCKET_OPERATION_TIMEOUT_S,
    JETSTREAM_READY_S,
    JETSTREAM_RETRY_S,
    MAX_API_ANSWER_BYTES,
    NATS_CONNECT_TIMEOUT_S,
    NATS_PROBLEM_REMINDER_S,
    NATS_RECONNECT_WAIT_S,
    NATS_START_FAILURES_PER_SERVER,
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


class NoRespondersError(UnreachableError):
    """NATS took the request and found nobody serving its subject: no gateway of that machine
    takes requests from this one. Certainly not delivered."""


class NatsProblem(StrEnum):
    """Why a connection to NATS failed, as a person is told it
    (:data:`~pi_cross_session._internal.plugin.render.remote_plane.NATS_PROBLEMS`)."""

    #: No answer, connection refused, an unknown host name: the server is not there for us.
    UNREACHABLE = "unreachable"
    #: The TLS handshake failed: the server's certificate is not trusted, or ours was refused.
    TLS = "tls"
    #: TLS was asked for and the server does not use it.
    NOT_TLS = "not_tls"
    #: The server waits for the TLS handshake before anything (a hub's) and we did not open so.
    TLS_FIRST = "tls_first"
    #: The server refused the credentials: missing, revoked or expired.
    AUTH = "auth"
    OTHER = "other"


#: When several attempts failed differently, the most telling cause is the one said: a reset
#: that follows an authorization violation is no network fault.
_PROBLEM_RANK: Final = (
    NatsProblem.UNREACHABLE,
    NatsProblem.OTHER,
    NatsProblem.TLS,
    NatsProblem.NOT_TLS,
    NatsProblem.TLS_FIRST,
    NatsProblem.AUTH,
)


def nats_problem(exc: BaseException) -> tuple[NatsProblem, str]:
    """The cause of a failed connection attempt, and the client's own words for it."""
    text = str(exc)
    lowered = text.lower()
    if isinstance(exc, nats.errors.AuthorizationError) or (
        isinstance(exc, nats.errors.Error)
        and ("authorization violation" in lowered or "authentication" in lowered)
    ):
        return NatsProblem.AUTH, text.removeprefix("nats: ").strip("'").lower() or "refused"
    if isinstance(exc, ssl.SSLCertVerificationError):
        # Set by the ssl module when it raises; not when someone else made the error.
        verified = getattr(exc, "verify_message", None)
        return NatsProblem.TLS, str(verified or "certificate verify failed")
    if "expecting info" in lowered:
        # The server waits for a TLS handshake before saying anything: a hub's server, which
        # only machines that joined with 'remote join' (they know to open with TLS) reach.
        return NatsProblem.TLS_FIRST, "it said nothing before a TLS handshake"
    if isinstance(exc, ssl.SSLError) or "tls handshake" in lowered:
        return NatsProblem.TLS, str(getattr(exc, "reason", None) or text or "handshake failed")
    if isinstance(exc, ConnectionRefusedError):
        return NatsProblem.UNREACHABLE, "connection refused"
    if isinstance(exc, socket.gaierror):
        return NatsProblem.UNREACHABLE, "the host name is not known"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | nats.errors.TimeoutError):
        return NatsProblem.UNREACHABLE, "no answer in time"
    if isinstance(exc, OSError) and exc.strerror:
        return NatsProblem.UNREACHABLE, exc.strerror.lower()
    if isinstance(exc, OSError | nats.errors.NoServersError | nats.errors.UnexpectedEOF):
        return NatsProblem.UNREACHABLE, text or type(exc).__name__
    return NatsProblem.OTHER, text or type(exc).__name__


class ConnectError(UnreachableError):
    """Connecting to NATS failed; ``problem`` says why, the message says it to a person with the
    fix (not how long until the next try: the caller decides that)."""

    def __init__(self, problem: NatsProblem, where: str, detail: str) -> None:
        super().__init__(remote_plane.nats_problem(problem.value, where, detail))
        self.problem = problem
        self.where = where
        self.detail = detail


class _Attempt:
    """The failures one first connection attempt met (the client reports them only through its
    error callback), and whether there were enough to tell why."""

    def __init__(self, enough: int) -> None:
        self.failures: list[tuple[NatsProblem, str]] = []
        self.enough = enough
        self.told = anyio.Event()

    def add(self, exc: BaseException) -> None:
        self.failures.append(nats_problem(exc))
        if len(self.failures) >= self.enough:
            self.told.set()

    def failure(self, where: str, last: BaseException | None = None) -> ConnectError:
        seen = list(self.failures)
        if last is not None and not seen:
            seen.append(nats_problem(last))
        if not seen:
            seen.append((NatsProblem.UNREACHABLE, "no answer in time"))
        problem, detail = max(reversed(seen), key=lambda found: _PROBLEM_RANK.index(found[0]))
        return ConnectError(problem, where, detail)


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


class NoJetStreamError(BucketError):
    """Nobody answers the JetStream API: the server (or this account) runs without JetStream."""


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
    #: The server wants the TLS handshake first (a hub's does): nothing is said in the clear.
    tls_first: bool = False
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


def _wants_tls(config: LinkConfig) -> bool:
    return config.tls_ca is not None or any(s.startswith("tls://") for s in config.servers)


def _tls_context(config: LinkConfig) -> ssl.SSLContext | None:
    if not _wants_tls(config):
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
        #: Called when the client gives the connection up for good (the server refused it in a
        #: way the client does not try again, e.g. this machine's credentials were revoked).
        self.on_lost: Callable[[], Awaitable[None]] | None = None
        #: Whether the JetStream API answered this account (``None``: not asked yet); for the
        #: status, set by every JetStream request.
        self.jetstream: bool | None = None
        #: The first connection attempt under way (its failures are the caller's to say).
        self._attempt: _Attempt | None = None
        #: While the connection is lost: since when, what was last said of it, and when.
        self._down_since: float | None = None
        self._down_said: tuple[NatsProblem, str] | None = None
        self._down_said_at = 0.0
        self._closing_task: asyncio.Task[None] | None = None
        self._said_not_ready = False

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def where(self) -> str:
        """The servers, as they may be shown (without credentials)."""
        return ", ".join(_without_credentials(server) for server in self._config.servers)

    def status(self) -> dict[str, Any]:
        """The connection for ``remote status``: the servers configured (without credentials),
        the one connected to, TLS, JetStream, reconnects."""
        nc = self._nc
        # The server's INFO says whether it requires TLS (the client then upgrades even a
        # nats:// URL) and whether JetStream runs on it; an answer of the API says more.
        info: Any = getattr(nc, "_server_info", None) if nc is not None else None
        info = info if isinstance(info, dict) else {}
        url = nc.connected_url if nc is not None else None
        jetstream = self.jetstream
        if jetstream is None and isinstance(info.get("jetstream"), bool):
            jetstream = info["jetstream"]
        return {
            "urls": [_without_credentials(server) for server in self._config.servers],
            "connectedUrl": None
            if url is None
            else f"{url.scheme}://{url.hostname}" + (f":{url.port}" if url.port else ""),
            "connected": self.connected,
            "tls": bool(info.get("tls_required")) or _wants_tls(self._config),
            "jetstream": {None: "unknown", True: "available", False: "unavailable"}[jetstream],
            "disconnects": self.disconnects,
            "reconnects": self.reconnects,
        }

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
            "closed_cb": self._on_closed,
            # A publish during a reconnect must fail, not wait for a later flush (module doc).
            "pending_size": 0,
            "inbox_prefix": self._inbox,
        }
        context = _tls_context(self._config)
        if context is not None:
            options["tls"] = context
            # TLS before any byte of NATS's own: nothing (not even the server's INFO, which
            # says whether TLS is wanted) travels in the clear for someone in the middle to edit.
            options["tls_handshake_first"] = self._config.tls_first
        if self._config.credentials is not None:
            options["user_credentials"] = RawCredentials(self._config.credentials)
        elif self._config.user is not None:
            options["user"] = self._config.user
            options["password"] = self._config.password
        # The client would try the first connection for ever (it reconnects without end), so
        # the first one is bounded here, in time and in failures (enough of them to tell why);
        # reconnects later are unbounded, as they should be. Trying again is the caller's call.
        client = Client()
        servers = len(self._config.servers)
        attempt = _Attempt(max(1, servers) * NATS_START_FAILURES_PER_SERVER)
        self._attempt = attempt
        try:
            try:
                with anyio.fail_after(NATS_CONNECT_TIMEOUT_S * max(2, servers)):
                    async with anyio.create_task_group() as group:
                        group.start_soon(_cancel_when, attempt.told, group.cancel_scope)
                        await client.connect(**options)
                        group.cancel_scope.cancel()
            finally:
                self._attempt = None
            if not client.is_connected:
                raise attempt.failure(self.where)
            if _wants_tls(self._config) and not _uses_tls(client):
                # The client goes on in the clear when the server does not ask for TLS, whatever
                # it was told: refuse rather than send credentials and messages unprotected.
                raise ConnectError(NatsProblem.NOT_TLS, self.where, "")
        except Exception as exc:
            with anyio.CancelScope(shield=True):
                try:
                    await client.close()
                except Exception as close_exc:  # closing is best effort
                    logger.info("closing the failed NATS client: %s", close_exc)
            if isinstance(exc, ConnectError):
                raise
            raise attempt.failure(self.where, exc) from None
        self._nc = client
        await client.subscribe(f"{self._inbox}.r.*", cb=self._on_reply)

    async def _on_error(self, exc: Exception) -> None:
        text = str(exc)
        if isinstance(exc, nats.errors.SlowConsumerError):
            self.dropped += 1
            return
        if self._attempt is not None:
            self._attempt.add(exc)
            return
        at = text.lower().find(_PERMISSIONS)
        if at < 0:
            if self._down_since is not None and not self._closing:
                self._still_down(exc)
            else:
                logger.info("NATS: %s", text)
            return
        # nats: permissions violation for publish to "<subject>" / for subscription to "<…>"
        what = text[at + len(_PERMISSIONS) :]
        subject = what.split('"')[1].lower() if what.count('"') >= 2 else ""
        if what.startswith("subscription"):
            self._denied_subscriptions.add(subject)
            logger.warning("%s", remote_plane.nats_denied("subscription to", subject))
            return
        taken = False
        for waiting in self._waiting.values():
            if waiting.subject == subject:
                waiting.deny()  # its caller says what was refused, in its own words
                taken = True
        if not taken and subject != env.OPEN_PROBE_SUBJECT.lower():  # the probe: on purpose
            logger.warning("%s", remote_plane.nats_denied("publish to", subject))

    def jetstream_not_ready(self, why: object, deadline: float) -> None:
        """JetStream did not answer as ready (a cluster electing its leader), and is asked
        again until ``deadline``: said at the default verbosity the first time, with how long
        it is waited for; after that only with ``-v``."""
        if self._said_not_ready:
            logger.info("JetStream not ready (%s); trying again", why)
            return
        self._said_not_ready = True
        logger.warning(
            "JetStream at %s not ready (%s); trying again every %g s for up to %.0f s",
            self.where,
            why,
            JETSTREAM_RETRY_S,
            max(0.0, deadline - anyio.current_time()),
        )

    def _still_down(self, exc: BaseException) -> None:
        """A reconnect attempt failed: say why when the cause changes, and again now and then,
        never at every attempt (the client makes one every ``NATS_RECONNECT_WAIT_S``)."""
        said = nats_problem(exc)
        now = anyio.current_time()
        changed = self._down_said is None or said[0] != self._down_said[0]
        if not changed and now - self._down_said_at < NATS_PROBLEM_REMINDER_S:
            return
        self._down_said, self._down_said_at = said, now
        down_for = now - (self._down_since or now)
        logger.warning(
            "%s; reconnecting every %g s (down for %.0f s)",
            remote_plane.nats_problem(said[0].value, self.where, said[1]),
            NATS_RECONNECT_WAIT_S,
            down_for,
        )

    async def _on_disconnect(self) -> None:
        if self._closing:
            return
        self.disconnects += 1
        self._down_since = anyio.current_time()
        self._down_said = None
        logger.warning(
            "NATS connection lost; reconnecting to %s every %g s (sends to other machines are "
            "refused as not sent meanwhile)",
            self.where,
            NATS_RECONNECT_WAIT_S,
        )

    async def _on_closed(self) -> None:
        if self._closing or self._nc is None or not self._nc.is_closed:
            return  # ours, or a first attempt that failed (connect says so)
        # Not a loss the client reconnects after: say so, once, rather than wait in silence.
        logger.warning("%s", remote_plane.nats_lost(self.where))
        if self.on_lost is not None:
            await self.on_lost()

    async def _on_reconnect(self) -> None:
        self.reconnects += 1
        down_for = anyio.current_time() - (self._down_since or anyio.current_time())
        self._down_since = self._down_said = None
        nc = self._nc
        if nc is not None and _wants_tls(self._config) and not _uses_tls(nc):
            # The server (or whoever answered in its place) no longer asks for TLS: close rather
            # than go on in the clear; the gateway runs on without NATS until restarted.
            logger.error(
                "%s; this gateway closed its NATS connection (restart it once the server uses "
                "TLS again)",
                remote_plane.nats_problem(NatsProblem.NOT_TLS.value, self.where, ""),
            )
            self._closing_task = asyncio.get_running_loop().create_task(self.close())
            return
        logger.warning("NATS connection back (%s, after %.0f s)", self.where, down_for)
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
                        raise NoRespondersError("no gateway serves that machine")
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
    async def unserve(subscription: Subscription, what: str) -> None:
        """Stop taking ``what`` (a subscription :meth:`serve` made); best effort, within 2 s: a
        closed connection has no subscription left anyway."""
        with anyio.move_on_after(2):
            try:
                await subscription.unsubscribe()
            except Exception as exc:
                logger.info("unsubscribing from %s: %s", what, exc)

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

        # Only the JetStream API tells whether JetStream serves this account: a put with no
        # stream behind its subject finds nobody either, JetStream or not.
        api = subject.startswith("$JS.API.")
        try:
            answer = await self.request(subject, body, BUCKET_OPERATION_TIMEOUT_S, parse)
        except UnreachableError as exc:
            if isinstance(exc, NoRespondersError):
                if api:
                    self.jetstream = False
                    raise NoJetStreamError("JetStream is not enabled on this NATS server") from None
                raise BucketError("JetStream is not enabled on this NATS server") from None
            raise
        if api:
            self.jetstream = True
        return answer

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

    async def drop_bucket(self) -> None:
        """Delete the bucket (the administrator, before its server joins a cluster: a stream
        kept by a server alone does not move into the cluster, which would count it orphaned)."""
        answer = await self._api(f"$JS.API.STREAM.DELETE.{env.KV_STREAM}")
        error = answer.get("error")
        if isinstance(error, dict) and error.get("code") != 404:
            raise BucketError(f"cannot delete the bucket: {error.get('description')}")

    async def make_bucket(self, *, update: bool, spec: BucketSpec | None = None) -> None:
        """Create the bucket as :mod:`.bucket` says (or put its configuration back), with this
        link's bucket spec unless given another."""
        action = "UPDATE" if update else "CREATE"
        body = json.dumps((spec or self._config.bucket).stream_config()).encode()
        deadline = anyio.current_time() + JETSTREAM_READY_S
        while True:
            answer = await self._api(f"$JS.API.STREAM.{action}.{env.KV_STREAM}", body)
            error = answer.get("error")
            if not isinstance(error, dict):
                return
            # A cluster that has just started elects its JetStream leader within seconds.
            if error.get("code") != 503 or anyio.current_time() >= deadline:
                raise BucketError(f"cannot {action.lower()} the bucket: {error.get('description')}")
            self.jetstream_not_ready(error.get("description"), deadline)
            await anyio.sleep(JETSTREAM_RETRY_S)

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


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _uses_tls(client: Client) -> bool:
    """Whether the client's connection runs over TLS: it upgrades only when the server's INFO
    asks for TLS, so that is what tells."""
    info: Any = getattr(client, "_server_info", None)
    return isinstance(info, dict) and bool(info.get("tls_required"))


def _without_credentials(server: str) -> str:
    """A server URL as it may be shown: ``user:password@`` left out."""
    scheme, sep, rest = server.partition("://")
    if not sep:
        scheme, rest = "", server
    host = rest.rpartition("@")[2]
    return f"{scheme}{sep}{host}"


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
