"""The endpoint's handler for a session: hello authentication, then admission or status.

This joins :class:`~pi_cross_session._internal.security.auth.Authenticator` (who is calling) and
:class:`~pi_cross_session._internal.security.admission.Admission` (what is let in) behind the two
calls the endpoint makes. The routing rules of the contract live here:

* a message on a probe-only connection is refused ``authentication_failed`` (with the message's
  requestId), because only an authenticated sender can deliver;
* a status query on a probe-only connection is not recognised: ``invalid_frame``, requestId
  ``unknown``;
* everything else goes to admission, which never awaits. A host that hands a message over after
  its submission call returned (the MCP host in push mode) may hold the ``submitted`` receipt until
  the hand-over is done (``hold``): the receipt then never runs ahead of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.frames import (
    UNKNOWN_REQUEST_ID,
    Hello,
    Message,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.security.admission import Admission
from pi_cross_session._internal.security.auth import Authenticator, Caller


class SessionReceiver:
    """An :class:`~pi_cross_session._internal.protocol.io.endpoint.InboundHandler` for one
    incarnation."""

    def __init__(
        self,
        authenticator: Authenticator,
        admission: Admission,
        *,
        hold: Callable[[str, str], Awaitable[bool] | None] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.admission = admission
        self._hold = hold

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, Caller | None]:
        """Authenticate the caller (reads the sender's registration when it claims one, and holds
        it to the connecting pid when ``peer`` carries one)."""
        return await self.authenticator.on_hello(hello, peer=peer)

    def on_request(
        self, session: Caller, request: Message | StatusQuery
    ) -> Response | Awaitable[Response | None]:
        """Route the second frame; synchronous, so admission stays atomic (a held receipt is
        awaited after admission decided)."""
        if isinstance(request, StatusQuery):
            if not session.authenticated:
                return Response.build(
                    request_id=UNKNOWN_REQUEST_ID,
                    ok=False,
                    status=Code.INVALID_FRAME,
                    error=refusal_text(Code.INVALID_FRAME),
                )
            return self.admission.status(session, request)
        response = self.admission.admit(session, request)
        if self._hold is None or session.sender is None or response.status != Code.SUBMITTED:
            return response
        pending = self._hold(session.sender.instance_id, request.message_id)
        return response if pending is None else _after(pending, response)


async def _after(pending: Awaitable[bool], response: Response) -> Response | None:
    # A hand-over that failed gets no receipt: the sender learns the outcome is unknown.
    return response if await pending else None
