"""Who is on the other end of a connection: the receiver's hello authentication (spec §3.3).

A hello opens one of two kinds of connection:

* a **probe** (no ``from``): it proves we are alive and learns our identity; it can never deliver;
* an **authenticated** connection: the caller names its own registration, and we check the token
  it presents against the token in that registration, read from the peers dir with every file
  check of :mod:`pi_cross_session._internal.security.io.fs`.

Both kinds must present *our* token and name *this* incarnation exactly. The cheap checks (token,
target) run first, so a caller without our token never makes us read a file.

When the endpoint knows the connecting pid (kernel peer credentials), an authenticated hello must
also come from the pid the sender's registration names: a token copied by another process of the
same user is then worthless on its own. Probes are not held to a pid, because any process of ours
that has our token may ask who we are (the reference's listing probes from whatever process runs
it).

That check trusts the registration's pid, and a process of the same user that can write the peers
dir can rewrite a live session's registration with its own pid. So each sender session is also
*pinned* to the pid it first authenticated with (:class:`SenderPins`): a session's registration
names one pid for its whole incarnation (the instance id is new for each), so a later hello whose
registration names another pid is refused as a possible impersonation. A sender with no socket at
its path is not a session but a send-only identity, which may move between processes by design
(the command line keeps one across invocations); it is re-pinned instead.

Every refusal is counted by cause and the most recent ones are kept as one-line diagnostics for our
status (:meth:`Authenticator.diagnostics`); the caller only ever sees :data:`AUTH_FAILED_TEXT`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.capabilities import (
    ADVERTISED,
    can_queue,
    can_report_delivery,
)
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.frames import Hello, PeerIdentity, ReplyTemplates, Response
from pi_cross_session._internal.protocol.limits import AUTH_DIAGNOSTICS_KEPT, MAX_PINNED_SENDERS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.security.tokens import tokens_match

logger = logging.getLogger(__name__)

#: The text of every authentication refusal: deliberately the same for every cause, so a caller
#: cannot learn which part of its claim was wrong.
AUTH_FAILED_TEXT = "Authentication failed: token, target or sender registration did not match"


class RefusalCause(StrEnum):
    """Why a hello was refused; for our own status only, never told to the caller."""

    #: The token is not ours, or the target is not this incarnation.
    CLAIM = "token_or_target"
    #: The hello names our own instance as its sender.
    OWN_INSTANCE = "own_instance"
    #: The sender's registration is missing, unsafe or malformed.
    REGISTRATION = "registration_unreadable"
    #: The registration exists but its session id or token differs from the claim.
    SENDER = "sender_mismatch"
    #: The kernel says another process connected than the one the registration names.
    PID = "pid_mismatch"
    #: The session first authenticated with another pid than its registration names now.
    PID_CHANGED = "pid_changed"


@dataclass(frozen=True, slots=True)
class AuthDiagnostics:
    """A snapshot of the refusals an authenticator has made, for status displays.

    ``refusals`` counts every refusal since start by :class:`RefusalCause` value (causes never
    seen are absent); ``recent`` holds the last few as one-line texts, oldest first.
    """

    refusals: Mapping[str, int]
    recent: tuple[str, ...]


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
    def wants_delivery(self) -> bool:
        """The caller understands ``delivered`` (it advertised ``delivery-receipts-v1``)."""
        return can_report_delivery(self.capabilities)

    @property
    def can_queue(self) -> bool:
        """The caller understands ``queued`` (it advertised ``cancel-safe-queue-v1``)."""
        return can_queue(self.capabilities)


class SenderFiles(Protocol):
    """What authentication reads about a sender, with every safety check of the file layer
    (:mod:`pi_cross_session._internal.security.io.sender_files` reads the real peers dir)."""

    async def registration_bytes(self, instance_id: str) -> bytes:
        """The bytes of the sender's registration, or a :class:`CrossSessionError` when it
        cannot be trusted."""
        ...

    async def has_endpoint(self, instance_id: str) -> bool:
        """Whether anything is at the sender's socket path: a session, not a send-only
        identity. Anything but a plain "no such file" counts as a session (fail closed)."""
        ...


class SenderPins:
    """The pid each sender session first authenticated with, for at most ``capacity`` senders.

    Pure and bounded: the least recently used pin is forgotten first (that sender is then pinned
    afresh at its next hello, so forgetting never refuses anyone, it only loses protection).
    """

    def __init__(self, capacity: int = MAX_PINNED_SENDERS) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._pins: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pins)

    def pinned(self, instance_id: str) -> int | None:
        """The pid ``instance_id`` is pinned to, if any."""
        return self._pins.get(instance_id)

    def pin(self, instance_id: str, pid: int) -> None:
        """Pin ``instance_id`` to ``pid`` (again), forgetting the oldest pin when full."""
        self._pins[instance_id] = pid
        self._pins.move_to_end(instance_id)
        while len(self._pins) > self._capacity:
            self._pins.popitem(last=False)


class Authenticator:
    """Judges hellos for one incarnation."""

    def __init__(
        self,
        identity: LocalIdentity,
        locations: Locations,
        *,
        files: SenderFiles,
        capabilities: tuple[str, ...] = ADVERTISED,
        diagnostics_kept: int = AUTH_DIAGNOSTICS_KEPT,
        pinned_senders: int = MAX_PINNED_SENDERS,
    ) -> None:
        self._identity = identity
        # Built once: every ``ready`` states it (the identity is frozen).
        self._peer_identity = identity.peer_identity()
        self._locations = locations
        self._files = files
        self._pins = SenderPins(pinned_senders)
        self._capabilities = capabilities
        # Every ``ready`` and refusal differs only in its id: validated once each.
        self._replies = ReplyTemplates()
        # Bounded by construction: the keys are RefusalCause values, the texts a fixed-size deque.
        self._refusals: dict[str, int] = {}
        self._recent: deque[str] = deque(maxlen=diagnostics_kept)

    @property
    def identity(self) -> LocalIdentity:
        """The incarnation this authenticator speaks for."""
        return self._identity

    def diagnostics(self) -> AuthDiagnostics:
        """Refusals so far: counts by cause and the most recent diagnostics (read-only copy)."""
        return AuthDiagnostics(
            refusals=MappingProxyType(dict(self._refusals)), recent=tuple(self._recent)
        )

    def _refuse(self, hello: Hello, cause: RefusalCause, detail: str) -> tuple[Response, None]:
        self._refusals[cause.value] = self._refusals.get(cause.value, 0) + 1
        who = f"hello from {hello.sender.instance_id}" if hello.sender is not None else "probe"
        text = f"{who} refused: {detail}"
        self._recent.append(text)
        # A pid mismatch or change means someone holds a real sender token: worth a warning. The
        # rest is the ordinary noise of stale registrations and confused clients.
        serious = cause in (RefusalCause.PID, RefusalCause.PID_CHANGED)
        logger.log(logging.WARNING if serious else logging.INFO, "%s", sanitize.line(text))
        return self._reply(hello.request_id, ok=False), None

    def _reply(self, request_id: str, *, ok: bool) -> Response:
        if ok:
            return self._replies.build(
                request_id=request_id,
                ok=True,
                status=Code.READY,
                peer=self._peer_identity,
                capabilities=self._capabilities,
            )
        return self._replies.build(
            request_id=request_id,
            ok=False,
            status=Code.AUTHENTICATION_FAILED,
            error=AUTH_FAILED_TEXT,
            capabilities=self._capabilities,
        )

    async def on_hello(
        self, hello: Hello, *, peer: PeerCredentials | None = None
    ) -> tuple[Response, Caller | None]:
        """``ready`` and the caller, or ``authentication_failed`` and ``None``.

        ``peer`` is the kernel's word on who connected; when it carries a pid, an authenticated
        hello must come from the pid in the sender's registration. Without it (or without a pid)
        that check is skipped: the platform gives us nothing to check against.
        """
        me = self._identity
        claims_us = (
            tokens_match(hello.token, me.token)
            and hello.target.id == me.session_id
            and hello.target.instance_id == me.instance_id
        )
        if not claims_us:
            return self._refuse(hello, RefusalCause.CLAIM, "token or target did not match")
        sender: Registration | None = None
        if hello.sender is not None:
            verified = await self._verify_sender(hello, peer)
            if isinstance(verified, tuple):
                return self._refuse(hello, *verified)
            sender = verified
        caller = Caller(
            request_id=hello.request_id,
            sender=sender,
            capabilities=tuple(hello.capabilities or ()),
        )
        return self._reply(hello.request_id, ok=True), caller

    async def _verify_sender(
        self, hello: Hello, peer: PeerCredentials | None
    ) -> Registration | tuple[RefusalCause, str]:
        """The sender's verified registration, or why it is refused."""
        claim = hello.sender
        assert claim is not None
        if claim.instance_id == self._identity.instance_id:
            # A session never talks to itself through its own socket.
            return RefusalCause.OWN_INSTANCE, "it names this instance as its sender"
        try:
            expected_socket = self._locations.socket_path(claim.instance_id)
            raw = await self._files.registration_bytes(claim.instance_id)
            registration = parse_registration(
                raw, file_stem=claim.instance_id, expected_socket_path=expected_socket
            )
        except (CrossSessionError, ValueError) as exc:
            return RefusalCause.REGISTRATION, f"its registration cannot be used ({exc})"
        if registration.id != claim.id or not tokens_match(claim.token, registration.token):
            return RefusalCause.SENDER, "session id or token differs from its registration"
        if peer is not None and peer.pid is not None and peer.pid != registration.pid:
            # Every other check passed, so the caller holds the sender's real token: it is either
            # the registered session connecting from another process, or someone who read its file.
            return (
                RefusalCause.PID,
                f"connecting pid {peer.pid} is not the registered pid {registration.pid}",
            )
        pinned = self._pins.pinned(claim.instance_id)
        if (
            pinned is not None
            and pinned != registration.pid
            and await self._files.has_endpoint(claim.instance_id)
        ):
            # A session's pid never changes during its incarnation: whoever rewrote the
            # registration is not the session we first heard from, or that one is.
            return (
                RefusalCause.PID_CHANGED,
                f"possible impersonation: it first authenticated with pid {pinned}, and its "
                f"registration now names pid {registration.pid}",
            )
        self._pins.pin(claim.instance_id, registration.pid)
        return registration
