"""Who is on the other end of a connection: the receiver's hello authentication (spec §3.3).

A hello opens one of two kinds of connection:

* a **probe** (no ``from``): it proves we are alive and learns our identity; it can never deliver;
* an **authenticated** connection: the caller names its own registration, and we check the token
  it presents against the token in that registration, read from the peers dir with every file
  check of :mod:`pi_cross_session.security.fs`.

Both kinds must present *our* token and name *this* incarnation exactly. The cheap checks (token,
target) run first, so a caller without our token never makes us read a file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import anyio

from pi_cross_session.protocol.capabilities import ADVERTISED, can_queue
from pi_cross_session.protocol.codes import Code
from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.protocol.frames import Hello, PeerIdentity, Response
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.protocol.registration import Registration, parse_registration
from pi_cross_session.security import fs
from pi_cross_session.security.tokens import tokens_match

logger = logging.getLogger(__name__)

#: The text of every authentication refusal: deliberately the same for every cause, so a caller
#: cannot learn which part of its claim was wrong.
AUTH_FAILED_TEXT = "Authentication failed: token, target or sender registration did not match"


@dataclass(frozen=True, slots=True)
class LocalIdentity:
    """This incarnation as peers must name it, and the secret they must present."""

    session_id: str
    instance_id: str
    token: str
    pid: int

    def peer_identity(self) -> PeerIdentity:
        """What every ``ok`` reply states about us."""
        return PeerIdentity(id=self.session_id, instance_id=self.instance_id, pid=self.pid)


@dataclass(frozen=True, slots=True)
class Caller:
    """The far end of one accepted connection.

    ``sender`` is the caller's verified registration, or ``None`` for a probe-only connection.
    ``capabilities`` are what its hello advertised.
    """

    request_id: str
    sender: Registration | None
    capabilities: tuple[str, ...]

    @property
    def authenticated(self) -> bool:
        """True when the caller proved which registered session it is."""
        return self.sender is not None

    @property
    def can_queue(self) -> bool:
        """The caller understands ``queued`` (it advertised ``cancel-safe-queue-v1``)."""
        return can_queue(self.capabilities)


class RegistrationReader(Protocol):
    """Reads a registration file with every safety check (see :mod:`security.fs`)."""

    def read_registration_bytes(self, path: str) -> bytes:
        """The file's bytes, or a :class:`CrossSessionError` when it cannot be trusted."""
        ...


class Authenticator:
    """Judges hellos for one incarnation."""

    def __init__(
        self,
        identity: LocalIdentity,
        locations: Locations,
        *,
        files: RegistrationReader = fs,
        capabilities: tuple[str, ...] = ADVERTISED,
    ) -> None:
        self._identity = identity
        self._locations = locations
        self._files = files
        self._capabilities = capabilities

    @property
    def identity(self) -> LocalIdentity:
        """The incarnation this authenticator speaks for."""
        return self._identity

    def _reply(self, request_id: str, *, ok: bool) -> Response:
        if ok:
            return Response.build(
                request_id=request_id,
                ok=True,
                status=Code.READY,
                peer=self._identity.peer_identity(),
                capabilities=self._capabilities,
            )
        return Response.build(
            request_id=request_id,
            ok=False,
            status=Code.AUTHENTICATION_FAILED,
            error=AUTH_FAILED_TEXT,
            capabilities=self._capabilities,
        )

    async def on_hello(self, hello: Hello) -> tuple[Response, Caller | None]:
        """``ready`` and the caller, or ``authentication_failed`` and ``None``."""
        me = self._identity
        claims_us = (
            tokens_match(hello.token, me.token)
            and hello.target.id == me.session_id
            and hello.target.instance_id == me.instance_id
        )
        if not claims_us:
            return self._reply(hello.request_id, ok=False), None
        sender: Registration | None = None
        if hello.sender is not None:
            sender = await self._verify_sender(hello)
            if sender is None:
                return self._reply(hello.request_id, ok=False), None
        caller = Caller(
            request_id=hello.request_id,
            sender=sender,
            capabilities=tuple(hello.capabilities or ()),
        )
        return self._reply(hello.request_id, ok=True), caller

    async def _verify_sender(self, hello: Hello) -> Registration | None:
        claim = hello.sender
        assert claim is not None
        if claim.instance_id == self._identity.instance_id:
            return None  # a session never talks to itself through its own socket
        try:
            path = self._locations.registration_path(claim.instance_id)
            expected_socket = self._locations.socket_path(claim.instance_id)
            raw = await anyio.to_thread.run_sync(self._files.read_registration_bytes, path)
            registration = parse_registration(
                raw, file_stem=claim.instance_id, expected_socket_path=expected_socket
            )
        except (CrossSessionError, ValueError) as exc:
            logger.info("hello from %s refused: %s", claim.instance_id, exc)
            return None
        if registration.id != claim.id or not tokens_match(claim.token, registration.token):
            return None
        return registration
