"""A minimal receiver for socket tests: authenticated messages kept in memory, with their states.

The endpoint tests need a handler that is not the full admission pipeline, so that what they
check is the endpoint alone. This one answers probes, refuses messages on probe-only connections,
refuses blank texts and repeated message ids, and keeps every admitted message with a state a
status query can read; after ``LIFETIME_BUDGET`` admissions it refuses with ``budget_exhausted``.
Production sessions always run
:class:`~pi_cross_session._internal.security.receiver.SessionReceiver`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pi_cross_session._internal.protocol.codes import Code, refusal_text
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.frames import (
    UNKNOWN_REQUEST_ID,
    Hello,
    Message,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.protocol.limits import LIFETIME_BUDGET
from pi_cross_session._internal.security.auth import Authenticator, Caller


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One admitted message, as the receiver keeps it."""

    sender_instance_id: str
    sender_session_id: str
    sender_name: str
    message_id: str
    text: str
    summary: str
    sent_at: int
    goal_id: str | None


class MemoryInbox:
    """An :class:`~pi_cross_session._internal.protocol.io.endpoint.InboundHandler` keeping messages
    in
    memory."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        budget: int = LIFETIME_BUDGET,
        on_message: Callable[[InboxEntry], None] | None = None,
    ) -> None:
        self._auth = authenticator
        self._budget = budget
        self._on_message = on_message
        self.entries: list[InboxEntry] = []
        self._states: dict[tuple[str, str], str] = {}

    @property
    def remaining_budget(self) -> int:
        """Admissions left before every message is refused."""
        return self._budget - len(self.entries)

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, Caller | None]:
        """Delegate to the authenticator, with what the kernel said about the caller."""
        return await self._auth.on_hello(hello, peer=peer)

    def on_request(self, session: Caller, request: Message | StatusQuery) -> Response:
        """Admit a message or answer a status query; never awaits, so it is atomic."""
        sender = session.sender
        if isinstance(request, StatusQuery):
            if sender is None:
                return self._refuse(UNKNOWN_REQUEST_ID, Code.INVALID_FRAME)
            state = self._states.get((sender.instance_id, request.message_id), Code.UNKNOWN)
            return self._ok(request.request_id, state)
        if sender is None:
            return self._refuse(request.request_id, Code.AUTHENTICATION_FAILED)
        if request.text_is_blank:
            return self._refuse(request.request_id, Code.INVALID_MESSAGE)
        key = (sender.instance_id, request.message_id)
        if key in self._states:
            return self._refuse(request.request_id, Code.DUPLICATE)
        if self.remaining_budget <= 0:
            return self._refuse(request.request_id, Code.BUDGET_EXHAUSTED)
        entry = InboxEntry(
            sender_instance_id=sender.instance_id,
            sender_session_id=sender.id,
            sender_name=sender.name,
            message_id=request.message_id,
            text=request.text,
            summary=request.summary,
            sent_at=request.sent_at,
            goal_id=request.goal_id,
        )
        self.entries.append(entry)
        self._states[key] = Code.SUBMITTED
        if self._on_message is not None:
            self._on_message(entry)
        return self._ok(request.request_id, Code.SUBMITTED)

    def _ok(self, request_id: str, status: str) -> Response:
        return Response.build(
            request_id=request_id,
            ok=True,
            status=status,
            peer=self._auth.identity.peer_identity(),
        )

    @staticmethod
    def _refuse(request_id: str, code: Code) -> Response:
        return Response.build(
            request_id=request_id, ok=False, status=code, error=refusal_text(code)
        )
