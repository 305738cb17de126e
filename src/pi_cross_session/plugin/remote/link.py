"""The gateway's one connection to NATS: requests, the request subscription, the KV bucket.

The only module that imports ``nats``; everything above it sees our exceptions:
:class:`UnreachableError` (the payload certainly did not leave: no connection, nobody serving the
subject, too large for the server) and :class:`HopTimeoutError` (it may have left; no reply came).

Reconnects are the client's: it tries for as long as the gateway runs. A request while the
connection is down is refused at once (:class:`UnreachableError`) instead of being buffered for
a later flush, so that "not sent" is true when we say it.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.remote.envelope import KV_BUCKET, QUEUE_GROUP
from pi_cross_session.protocol.remote.settings import (
    JETSTREAM_READY_S,
    NATS_CONNECT_TIMEOUT_S,
    NATS_RECONNECT_WAIT_S,
    REMOTE_RECORD_TTL_S,
)

logger = logging.getLogger(__name__)


class UnreachableError(CrossSessionError):
    """The payload was not handed to NATS: certainly not delivered."""

    code = "unreachable"


class HopTimeoutError(CrossSessionError):
    """A request went out and no reply came in time: nobody knows what happened."""

    code = "timeout"


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """How to reach NATS: URLs, TLS, credentials."""

    servers: tuple[str, ...]
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    user: str | None = None
    password: str | None = None
    name: str = "pi-cross-session gateway"
    kv_replicas: int = 1
    #: The bucket's ``max_age`` when this gateway creates it.
    record_ttl_s: float = REMOTE_RECORD_TTL_S


@dataclass(frozen=True, slots=True)
class Change:
    """One KV update: a key put (``value``) or gone (``value`` is ``None``)."""

    key: str
    value: bytes | None


def _tls_context(config: LinkConfig) -> ssl.SSLContext | None:
    wants_tls = config.tls_ca is not None or any(s.startswith("tls://") for s in config.servers)
    if not wants_tls:
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.tls_ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.tls_cert is not None:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


class Link:
    """One NATS connection (and its JetStream context and bucket)."""

    def __init__(self, config: LinkConfig) -> None:
        self._config = config
        self._nc: Client | None = None
        self._kv: KeyValue | None = None
        self.disconnects = 0
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def max_payload(self) -> int:
        return 0 if self._nc is None else self._nc.max_payload

    async def connect(self) -> None:
        """Connect (bounded by :data:`NATS_CONNECT_TIMEOUT_S`) and open the bucket."""

        async def on_error(exc: Exception) -> None:
            logger.info("NATS: %s", exc)

        async def on_disconnect() -> None:
            self.disconnects += 1
            logger.warning("NATS connection lost; reconnecting")

        async def on_reconnect() -> None:
            self.reconnects += 1
            logger.warning("NATS connection back")

        options: dict[str, Any] = {
            "servers": list(self._config.servers),
            "name": self._config.name,
            "connect_timeout": NATS_CONNECT_TIMEOUT_S,
            "reconnect_time_wait": NATS_RECONNECT_WAIT_S,
            "max_reconnect_attempts": -1,
            "allow_reconnect": True,
            # Servers in the order given: a gateway lists its nearest node first.
            "dont_randomize": True,
            "error_cb": on_error,
            "disconnected_cb": on_disconnect,
            "reconnected_cb": on_reconnect,
            # A publish during a reconnect must fail, not wait for a later flush (module doc).
            "pending_size": 0,
        }
        context = _tls_context(self._config)
        if context is not None:
            options["tls"] = context
        if self._config.user is not None:
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
        self._kv = await self._bucket()

    async def _bucket(self) -> KeyValue:
        """Open the bucket, creating it if this is the first gateway; a cluster that has just
        started may need a few seconds to elect its JetStream leader, so this tries again."""
        assert self._nc is not None
        js = self._nc.jetstream()
        deadline = anyio.current_time() + JETSTREAM_READY_S
        while True:
            try:
                try:
                    return await js.key_value(KV_BUCKET)
                except nats.js.errors.BucketNotFoundError:
                    return await js.create_key_value(
                        bucket=KV_BUCKET,
                        ttl=self._config.record_ttl_s,
                        history=1,
                        replicas=self._config.kv_replicas,
                    )
            except Exception as exc:
                if anyio.current_time() >= deadline:
                    raise UnreachableError(
                        f"the JetStream bucket is not available: {exc}"
                    ) from None
                logger.info("JetStream not ready (%s); trying again", exc)
                await anyio.sleep(0.5)

    async def close(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None:
            try:
                await nc.close()
            except Exception as exc:  # closing is best effort
                logger.info("closing NATS: %s", exc)

    # -- requests ----------------------------------------------------------------------------------

    async def request(self, subject: str, payload: bytes, timeout_s: float) -> bytes:
        """Send one request and return the one reply's payload."""
        nc = self._nc
        if nc is None or not nc.is_connected:
            raise UnreachableError("no NATS connection")
        if len(payload) > nc.max_payload:
            raise UnreachableError("larger than the NATS server's max_payload")
        try:
            msg = await nc.request(subject, payload, timeout=timeout_s)
        except nats.errors.NoRespondersError:
            raise UnreachableError("no gateway serves that machine") from None
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError) as exc:
            raise UnreachableError(f"NATS refused the request: {exc}") from None
        except nats.errors.TimeoutError:
            raise HopTimeoutError("no reply in time") from None
        return bytes(msg.data)

    async def serve(self, subject: str, handler: Callable[[Msg], Awaitable[None]]) -> None:
        """Take requests on ``subject`` (queue group: one gateway takes each)."""
        assert self._nc is not None
        await self._nc.subscribe(subject, queue=QUEUE_GROUP, cb=handler)

    @staticmethod
    async def respond(msg: Msg, payload: bytes) -> None:
        """Answer a request (best effort: the requester may be gone)."""
        try:
            await msg.respond(payload)
        except Exception as exc:
            logger.info("could not answer a request: %s", exc)

    # -- the bucket ---------------------------------------------------------------------------

    async def put(self, key: str, value: bytes) -> None:
        if self._kv is None or not self.connected:
            raise UnreachableError("no NATS connection")
        try:
            await self._kv.put(key, value)
        except Exception as exc:
            raise UnreachableError(f"the bucket refused a record: {exc}") from None

    async def delete(self, key: str) -> None:
        if self._kv is None or not self.connected:
            raise UnreachableError("no NATS connection")
        try:
            await self._kv.delete(key)
        except Exception as exc:
            raise UnreachableError(f"the bucket refused a delete: {exc}") from None

    async def watch(self) -> AsyncGenerator[Change, None]:
        """Every record now in the bucket, then every change; ends when the watch breaks."""
        if self._kv is None:
            raise UnreachableError("no bucket")
        try:
            watcher = await self._kv.watchall()
        except Exception as exc:
            raise UnreachableError(f"cannot watch the bucket: {exc}") from None
        try:
            async for entry in watcher:
                if entry is None:
                    continue  # the end of what was there at the start
                gone = entry.operation in ("DEL", "PURGE")
                yield Change(entry.key, None if gone else bytes(entry.value or b""))
        finally:
            try:
                await watcher.stop()  # type: ignore[no-untyped-call]
            except Exception as exc:
                logger.info("stopping the bucket watch: %s", exc)
