"""A proxy's socket: a remote session's door on this machine (docs/remote.md, "Proxies").

It is an endpoint of ours like a session's
(:class:`~pi_cross_session._internal.protocol.io.endpoint. Endpoint`), with every door rule that
comes with one: another uid closed before a byte, 64 connections at most and who gives way at
capacity, each process's read budget, frames bounded and refused unparsed when too costly, one hello
then at most one message or status query, 30 s from accept, 5 s idle and 5 s from ``ready`` to the
end of the second frame. Besides its own 64, the connections of all of a gateway's proxies share one
cap (:class:`~pi_cross_session._internal.protocol. fairness.SharedCap`). The hello is judged by the
same :class:`~pi_cross_session._internal.security.auth. Authenticator` a session uses (our token and
target; the sender's registration, token and kernel-checked pid).

What a proxy cannot do in-line is answer a message: the answer comes from another machine. So its
handler hands an authenticated request to ``forward``, whose reply the endpoint writes when it
comes; ``None`` means nobody knows what became of the message, and the connection is closed
without a receipt, which every sender files as ``connection_closed`` — ``receipt_unknown``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.fairness import SharedCap
from pi_cross_session._internal.protocol.frames import (
    UNKNOWN_REQUEST_ID,
    Hello,
    Message,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.protocol.io.endpoint import (
    Endpoint,
    EndpointConfig,
    EndpointStatistics,
    RequestAnswer,
)
from pi_cross_session._internal.protocol.limits import MAX_CONNECTIONS
from pi_cross_session._internal.security.auth import Authenticator, Caller
from pi_cross_session._internal.security.io import fs

logger = logging.getLogger(__name__)

#: ``forward(caller, request)``: the reply, or ``None`` for "unknown" (close without a receipt).
Forward = Callable[[Caller, Message | StatusQuery], Awaitable[Response | None]]


class ProxyHandler:
    """A proxy's decisions: the hello as a session judges it; an authenticated request goes to
    ``forward``, a probe-only connection's request is refused here as a session refuses it."""

    def __init__(
        self, authenticator: Authenticator, forward: Forward, capabilities: tuple[str, ...]
    ) -> None:
        self._auth = authenticator
        self._forward = forward
        self._capabilities = capabilities
        #: Requests handed to ``forward``.
        self.forwarded = 0

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, Caller | None]:
        """The session's own check of a hello (token, target, sender and its pid)."""
        return await self._auth.on_hello(hello, peer=peer)

    def on_request(self, session: Caller, request: Message | StatusQuery) -> RequestAnswer:
        """The remote session's answer, later; a probe-only connection's request at once."""
        if session.sender is None:
            # A message needs a sender, and a status query is not a probe's (as in a session).
            if isinstance(request, Message):
                return self._refusal(request.request_id, Code.AUTHENTICATION_FAILED)
            return self._refusal(UNKNOWN_REQUEST_ID, Code.INVALID_FRAME)
        self.forwarded += 1
        return self._forward(session, request)

    def _refusal(self, request_id: str, code: Code) -> Response:
        return Response.build(
            request_id=request_id,
            ok=False,
            status=code,
            error=refusal_text(code),
            capabilities=self._capabilities,
        )


class ProxySocket:
    """Serves one proxy's Unix socket until cancelled, and removes it on the way out."""

    def __init__(
        self,
        path: str,
        authenticator: Authenticator,
        forward: Forward,
        *,
        shared: SharedCap,
        capabilities: tuple[str, ...],
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.path = path
        self.handler = ProxyHandler(authenticator, forward, capabilities)
        self._endpoint: Endpoint[Caller] = Endpoint(
            path,
            self.handler,
            files=fs,
            config=EndpointConfig(max_connections=max_connections, capabilities=capabilities),
            shared=shared,
        )

    def statistics(self) -> EndpointStatistics:
        """The door's counters since it opened."""
        return self._endpoint.statistics()

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen (the socket private before anyone may use it) and serve until cancelled."""
        try:
            await self._endpoint.serve(task_status=task_status)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(fs.remove_file, self.path)
                except fs.FileSystemError as exc:
                    logger.info("could not remove proxy socket %s: %s", self.path, exc)
