"""The gateway's outbound side: proxies of other machines' sessions, and what goes through them.

Every verified record of another machine (:mod:`.mirror`) gets a local **proxy** — a registration
and a socket (:mod:`.proxy`) — within the cap, shared fairly between the machines
(:mod:`~pi_cross_session._internal.security.remote.proxy_shares`). A message or status query a
local session sends to a proxy goes, MACed, to the remote machine's gateway (NATS request/reply,
one attempt, ``hop_deadline_s``) and its reply comes back as the proxy's answer — or as no answer
at all when nobody knows the outcome (docs/remote.md, "Proxies").
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import anyio
import anyio.abc

from pi_cross_session._internal.plugin.remote import identities
from pi_cross_session._internal.plugin.remote.gateway_common import (
    CARRIED_CAPABILITIES,
    GATEWAY_LOGGER,
    GatewayParts,
    carried,
)
from pi_cross_session._internal.plugin.remote.link import (
    HopTimeoutError,
    NoRespondersError,
    PermissionDeniedError,
    UnreachableError,
)
from pi_cross_session._internal.plugin.remote.proxy import ProxySocket
from pi_cross_session._internal.protocol.codes import (
    OK_RECEIPTS,
    STATUS_ANSWERS,
    Code,
    SenderState,
    classify,
    refusal_text,
    sender_code,
)
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.fairness import SharedCap
from pi_cross_session._internal.protocol.frames import (
    Message,
    PeerIdentity,
    Response,
    StatusQuery,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    EnvelopeError,
    Kind,
    Outcome,
    PeerRecord,
    RemoteMessage,
    RemoteSender,
    ReplyBody,
    SendBody,
    StatusBody,
)
from pi_cross_session._internal.protocol.remote.settings import MAX_GATEWAY_CONNECTIONS
from pi_cross_session._internal.security.auth import Authenticator, Caller, LocalIdentity
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from pi_cross_session._internal.security.remote.proxy_shares import ProxyShares, Verdict
from pi_cross_session._internal.security.remote.records import Key, RecordBook
from pi_cross_session._internal.security.remote.senders import derive_instance_id
from pi_cross_session._internal.security.remote.trust import Verified
from pi_cross_session._internal.security.tokens import new_token

logger = logging.getLogger(GATEWAY_LOGGER)


async def write_registration(
    locations: Locations, registration: Registration, machine: str
) -> None:
    """Write the registration of a local identity of ``machine``'s session (a proxy's or a
    sender's)."""
    await anyio.to_thread.run_sync(identities.write, locations, registration, machine)


async def remove_registration(locations: Locations, local_id: str) -> None:
    """Remove the registration of the local identity ``local_id``, saying so if it cannot."""
    try:
        await anyio.to_thread.run_sync(identities.remove, locations, local_id)
    except CrossSessionError as exc:
        logger.warning("could not remove registration %s: %s", local_id, exc)


@dataclass(slots=True)
class _Proxy:
    machine: str
    record: PeerRecord
    registration: Registration
    token: str
    capabilities: tuple[str, ...]
    scope: anyio.CancelScope
    socket: ProxySocket
    #: Which proxy this gateway opened when (the newest gives way first to a fair share).
    opened: int


class Outbound:
    """The proxies of other machines' sessions, kept to their records within the fair cap, and
    the forwarding of what local sessions send them.

    ``parts`` are what the gateway hands both its sides (:class:`~.gateway_common.GatewayParts`).
    The proxies run in the gateway's task group (:meth:`start`). A remote session that sent to
    this machine before its proxy opened has a local identity of the inbound side already:
    ``adopt(local_id)`` hands its token over (``None``: it had none), and ``closed(machine,
    local_id)`` says that a proxy's local identity is gone. ``on_change()`` is told whenever what
    the status snapshot shows of the proxies changed.
    """

    def __init__(
        self,
        parts: GatewayParts,
        *,
        max_proxies: int,
        machines: int,
        hop_deadline_s: float,
        book: RecordBook,
        adopt: Callable[[str], str | None],
        closed: Callable[[str, str], None],
        on_change: Callable[[], None],
    ) -> None:
        self._parts = parts
        self._max_proxies = max_proxies
        self._hop_deadline_s = hop_deadline_s
        self._book = book
        self._adopt = adopt
        self._closed = closed
        self._on_change = on_change
        self._secret = secrets.token_bytes(32)
        self._shares = ProxyShares(cap=max_proxies, machines=machines)
        #: Sessions whose machine had its share of the cap when they came: listed as such.
        self._capped: set[Key] = set()
        self._opened = 0
        self._proxies: dict[str, _Proxy] = {}
        #: Deciding on a proxy and opening it are one step: two records heard at once (the
        #: watch and the sweep) must not both take the last free slot (the cap was overrun by
        #: up to 6 of 128 in bench/remote_scale.py before).
        self._opening = anyio.Lock()
        self._connections = SharedCap(cap=MAX_GATEWAY_CONNECTIONS)
        self._group: anyio.abc.TaskGroup | None = None

    def start(self, group: anyio.abc.TaskGroup) -> None:
        """Serve proxies in ``group`` from now on."""
        self._group = group

    # -- what the gateway and the inbound side ask ---------------------------------------------

    def local_id(self, machine: str, remote_id: str) -> str:
        """The local instance id that stands for ``machine``'s session ``remote_id`` here."""
        return derive_instance_id(self._secret, machine, remote_id)

    def identity(self, local_id: str) -> tuple[Registration, str] | None:
        """The registration and token of the proxy ``local_id`` (``None``: no proxy)."""
        proxy = self._proxies.get(local_id)
        return None if proxy is None else (proxy.registration, proxy.token)

    def registration(self, key: Key) -> Registration | None:
        """The registration of session ``key``'s proxy (``None``: no proxy)."""
        proxy = self._proxies.get(self.local_id(*key))
        return None if proxy is None else proxy.registration

    @property
    def held(self) -> int:
        """The proxies open."""
        return len(self._proxies)

    @property
    def capped(self) -> int:
        """The sessions left without a proxy because of the cap."""
        return len(self._capped)

    @property
    def share(self) -> int:
        """The proxies each trusted machine is guaranteed."""
        return self._shares.share

    def is_capped(self, key: Key) -> bool:
        """Whether session ``key`` was left without a proxy because of the cap."""
        return key in self._capped

    def capped_per_machine(self) -> dict[str, int]:
        """The sessions of each machine left without a proxy because of the cap."""
        capped: dict[str, int] = {}
        for machine, _ in self._capped:
            capped[machine] = capped.get(machine, 0) + 1
        return capped

    def held_per_machine(self) -> dict[str, int]:
        """The proxies each machine holds."""
        held: dict[str, int] = {}
        for proxy in self._proxies.values():
            held[proxy.machine] = held.get(proxy.machine, 0) + 1
        return held

    def share_among(self, machines: int) -> None:
        """Share the cap between ``machines`` trusted machines from now on."""
        self._shares = ProxyShares(cap=self._max_proxies, machines=machines)

    # -- proxies of other machines' sessions -----------------------------------------------------

    async def fill_free_slots(self) -> None:
        """Give proxies to sessions that have none, machines furthest below their share first."""
        held = self.held_per_machine()
        waiting = sorted(
            (key for key, _ in self._book.items() if self.local_id(*key) not in self._proxies),
            key=lambda k: (held.get(k[0], 0), self._book.seen(k) or 0.0),
        )
        for key in waiting:
            if len(self._proxies) >= self._max_proxies and not self._capped:
                break
            await self.reconcile(key)

    async def forget(self, key: Key) -> None:
        """Session ``key`` is no longer of a trusted machine (or its key): close its proxy."""
        self._capped.discard(key)
        await self.reconcile(key)

    async def reconcile(self, key: Key) -> None:
        """Make the proxy of ``key`` match its record (open, update, close)."""
        self._on_change()
        machine, remote_id = key
        local_id = self.local_id(machine, remote_id)
        record = self._book.get(key)
        proxy = self._proxies.get(local_id)
        if record is None:
            self._capped.discard(key)
            if proxy is not None:
                await self._close_proxy(local_id)
            return
        if proxy is None:
            await self._maybe_open(machine, local_id, record, key)
            return
        if proxy.record == record:
            return
        if carried(record.capabilities) != proxy.capabilities:
            await self._close_proxy(local_id)
            await self._open_proxy(machine, local_id, record)
            return
        proxy.record = record
        registration = self._proxy_registration(machine, local_id, record, proxy.token)
        # A refresh that changes nothing a listing shows writes nothing (every record is put
        # again every third of its TTL: rewriting each proxy's file was most of an idle
        # gateway's cost in bench/remote_scale.py).
        if registration != proxy.registration:
            proxy.registration = registration
            await write_registration(self._parts.locations, registration, machine)

    async def close_all(self) -> None:
        """Close every proxy (the gateway stops)."""
        for local_id in list(self._proxies):
            await self._close_proxy(local_id)

    async def _maybe_open(self, machine: str, local_id: str, record: PeerRecord, key: Key) -> None:
        async with self._opening:
            if local_id not in self._proxies:  # another task may have opened it meanwhile
                await self._open_within_cap(machine, local_id, record, key)

    async def _open_within_cap(
        self, machine: str, local_id: str, record: PeerRecord, key: Key
    ) -> None:
        decision = self._shares.decide(machine, self.held_per_machine())
        if decision.verdict is Verdict.FULL:
            if key not in self._capped:
                self._capped.add(key)
                self._parts.stats.proxies_refused += 1
            return
        if decision.verdict is Verdict.EVICT:
            assert decision.victim is not None
            newest = max(
                (p for p in self._proxies.values() if p.machine == decision.victim),
                key=lambda p: p.opened,
            )
            self._parts.stats.proxies_evicted += 1
            await self._close_proxy(newest.registration.instance_id)
            self._capped.add((newest.machine, newest.record.instance_id))
        self._capped.discard(key)
        await self._open_proxy(machine, local_id, record)

    def _proxy_registration(
        self, machine: str, local_id: str, record: PeerRecord, token: str
    ) -> Registration:
        return identities.build(
            self._parts.locations,
            local_id=local_id,
            machine=machine,
            remote_id=record.id,
            name=record.name,
            cwd=record.cwd,
            status=record.status,
            inbound=record.inbound,
            started_at=record.started_at,
            updated_at=record.updated_at,
            token=token,
        )

    async def _open_proxy(self, machine: str, local_id: str, record: PeerRecord) -> None:
        assert self._group is not None
        adopted = self._adopt(local_id)
        token = new_token() if adopted is None else adopted
        try:
            registration = self._proxy_registration(machine, local_id, record, token)
        except CrossSessionError as exc:
            logger.info("cannot make a proxy for %s on %s: %s", record.instance_id, machine, exc)
            return
        capabilities = carried(record.capabilities)
        identity = LocalIdentity(
            session_id=registration.id, instance_id=local_id, token=token, pid=self._parts.pid
        )
        authenticator = Authenticator(
            identity,
            self._parts.locations,
            files=PeersDirFiles(self._parts.locations),
            capabilities=capabilities,
        )
        socket = ProxySocket(
            registration.socket_path,
            authenticator,
            partial(self._forward, local_id),
            shared=self._connections,
            capabilities=capabilities,
        )
        scope = anyio.CancelScope()
        self._opened += 1
        self._proxies[local_id] = _Proxy(
            machine, record, registration, token, capabilities, scope, socket, self._opened
        )
        try:
            await self._group.start(self._serve_proxy, socket, scope)
            await write_registration(self._parts.locations, registration, machine)
        except (OSError, CrossSessionError) as exc:
            logger.warning("proxy for %s on %s failed to start: %s", record.name, machine, exc)
            await self._close_proxy(local_id)
            return
        self._parts.stats.proxies_opened += 1
        self._on_change()

    @staticmethod
    async def _serve_proxy(
        socket: ProxySocket,
        scope: anyio.CancelScope,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        with scope:
            await socket.serve(task_status=task_status)

    async def _close_proxy(self, local_id: str) -> None:
        proxy = self._proxies.pop(local_id, None)
        if proxy is None:
            return
        # The registration goes first, so no lister finds a registration without its socket.
        await remove_registration(self._parts.locations, local_id)
        proxy.scope.cancel()
        self._closed(proxy.machine, local_id)
        self._parts.stats.proxies_closed += 1
        self._on_change()

    # -- a proxy's second frame, carried to the remote machine -----------------------------------

    def _proxy_reply(self, proxy: _Proxy, request_id: str, *, ok: bool, status: str) -> Response:
        peer = PeerIdentity(
            id=proxy.registration.id,
            instance_id=proxy.registration.instance_id,
            pid=self._parts.pid,
        )
        return Response.build(
            request_id=request_id,
            ok=ok,
            status=status,
            error=None if ok else refusal_text(status),
            peer=peer if ok else None,
            capabilities=proxy.capabilities,
        )

    async def _forward(
        self, local_id: str, caller: Caller, request: Message | StatusQuery
    ) -> Response | None:
        proxy = self._proxies.get(local_id)
        sender = caller.sender
        assert sender is not None  # the proxy forwards authenticated requests only
        if proxy is None:
            # Closed while the sender connected: its remote session went (or lost its slot).
            return Response.build(
                request_id=request.request_id,
                ok=False,
                status=Code.NOT_FOUND,
                error=refusal_text(Code.NOT_FOUND),
                capabilities=CARRIED_CAPABILITIES,
            )
        if isinstance(request, Message) and request.goal_id is not None:
            # Goal grants are local: no proxy advertises goal scope, and none carries it.
            return self._refuse(proxy, request, Code.UNSUPPORTED)
        remote_sender = RemoteSender(
            id=sender.id,
            instance_id=sender.instance_id,
            name=sender.name,
            capabilities=list(carried(caller.capabilities)),
        )
        body: SendBody | StatusBody
        if isinstance(request, Message):
            body = SendBody(
                target=proxy.record.instance_id,
                sender=remote_sender,
                message=RemoteMessage(
                    message_id=request.message_id,
                    text=request.text,
                    summary=request.summary,
                    sent_at=request.sent_at,
                ),
            )
            kind = Kind.SEND
        else:
            body = StatusBody(
                target=proxy.record.instance_id, sender=remote_sender, message_id=request.message_id
            )
            kind = Kind.STATUS
        nonce = secrets.token_hex(16)
        envelope = env.build(
            kind=kind,
            account=self._parts.account,
            origin=self._parts.machine,
            to=proxy.machine,
            nonce=nonce,
            at_ms=self._parts.wall_ms(),
            body=body,
        )
        payload = self._parts.seal(proxy.machine, env.encode(envelope))
        if payload is None:
            # No longer trusted (its proxy is closing), or a key that cannot pair.
            self._count_forwarded(Code.NOT_FOUND)
            return self._refuse(proxy, request, Code.NOT_FOUND)
        try:
            reply = await self._parts.link.request(
                env.request_subject(proxy.machine, self._parts.machine),
                payload,
                self._hop_deadline_s,
                partial(self._read_reply, nonce=nonce, machine=proxy.machine),
            )
        except NoRespondersError:
            # NATS took it and nobody serves that machine's subject from us, while its records
            # are fresh (the proxy exists): it has not trusted this machine, or its gateway
            # stopped or lost NATS within a TTL. Which of the two, nothing here can tell.
            self._count_forwarded(Code.NOT_LISTENING)
            self._parts.warnings.not_listening(proxy.machine)
            return self._refuse(proxy, request, Code.NOT_LISTENING)
        except UnreachableError as exc:
            too_large = "max_payload" in str(exc)
            code = Code.MESSAGE_TOO_LARGE if too_large else Code.UNREACHABLE
            self._count_forwarded(code)
            return self._refuse(proxy, request, code)
        except PermissionDeniedError:
            self._count_forwarded(Code.PERMISSION_DENIED)
            return self._refuse(proxy, request, Code.PERMISSION_DENIED)
        except HopTimeoutError:
            self._count_forwarded("hop_timeout")
            return None
        outcome, status = reply.outcome, reply.status
        self._count_forwarded(f"{outcome.value}:{status}")
        if outcome is Outcome.RECEIPT and isinstance(request, Message) and status in OK_RECEIPTS:
            return self._proxy_reply(proxy, request.request_id, ok=True, status=status)
        if outcome is Outcome.ANSWER and isinstance(request, StatusQuery):
            if status in STATUS_ANSWERS:
                return self._proxy_reply(proxy, request.request_id, ok=True, status=status)
            return None
        if outcome is Outcome.REFUSED:
            word = sender_code(status)
            if classify(word).state is SenderState.RECEIPT_UNKNOWN:
                return None  # a "refusal" that is no refusal: say nothing rather than lie
            return self._refuse(proxy, request, word)
        return None  # unknown, or an outcome that does not fit the request

    def _count_forwarded(self, how: str) -> None:
        """One more request carried to another machine (or not) that ended as ``how``."""
        self._parts.stats.count(self._parts.stats.forwarded, how)

    def _refuse(self, proxy: _Proxy, request: Message | StatusQuery, code: str) -> Response:
        return self._proxy_reply(proxy, request.request_id, ok=False, status=code)

    def _read_reply(self, payload: bytes, *, nonce: str, machine: str) -> ReplyBody | None:
        """The reply body, when ``payload`` is ``machine``'s MACed answer to ``nonce``."""
        verdict = self._parts.verifier.check(
            payload, self._parts.wall_ms(), origin=machine, kinds={Kind.REPLY}, reply_to=nonce
        )
        if not isinstance(verdict, Verified):
            self._count_forwarded("bad_reply")
            self._parts.warnings.why_refused(verdict, machine, "a reply", payload)
            return None
        self._parts.warnings.heard(machine)
        try:
            body = verdict.envelope.read_body()
        except EnvelopeError:
            return None
        return body if isinstance(body, ReplyBody) else None
