"""The endpoint's handler for a session: hello authentication, then admission or status.

This joins :class:`~pi_cross_session._internal.security.auth.Authenticator` (who is calling) and
:class:`~pi_cross_session._internal.security.admission.Admission` (what is let in) behind the two
calls the endpoint makes. The routing rules of the contract live here:

* a message on a probe-only connection is refused ``authentication_failed`` (with the message's
  requestId), because only an authenticated sender can deliver;
* a status query on a probe-only connection is not recognised: ``invalid_frame``, requestId
  ``unknown``;
* everything else goes to admission, which never awaits.
"""

from __future__ import annotations

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

    def __init__(self, authenticator: Authenticator, admission: Admission) -> None:
        self.authenticator = authenticator
        self.admission = admission

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, Caller | None]:
        """Authenticate the caller (reads the sender's registration when it claims one, and holds
        it to the connecting pid when ``peer`` carries one)."""
        return await self.authenticator.on_hello(hello, peer=peer)

    def on_request(self, session: Caller, request: Message | StatusQuery) -> Response:
        """Route the second frame; synchronous, so admission stays atomic."""
        if isinstance(request, StatusQuery):
            if not session.authenticated:
                return Response.build(
                    request_id=UNKNOWN_REQUEST_ID,
                    ok=False,
                    status=Code.INVALID_FRAME,
                    error=refusal_text(Code.INVALID_FRAME),
                )
            return self.admission.status(session, request)
        return self.admission.admit(session, request)
