"""The gateway's inbound side: other machines' requests, delivered to local sessions.

A verified request from another machine is delivered to the real session with the ordinary
exchange, under a local identity for that remote sender — its proxy's when it has one here, else
a send-only registration of its own — within that machine's bounds and the session's door
(docs/remote.md, "Delivery on the receiving machine").
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.abc
from nats.aio.msg import Msg

from pi_cross_session._internal.plugin.remote import identities
from pi_cross_session._internal.plugin.remote.gateway_common import (
    GATEWAY_LOGGER,
    GatewayParts,
    carried,
)
from pi_cross_session._internal.plugin.remote.outbound import (
    Outbound,
    remove_registration,
    write_registration,
)
from pi_cross_session._internal.protocol.codes import Code, SenderState
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.frames import WIRE_VERSION, Message, Sender
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig, ExchangeError, Exchanger
from pi_cross_session._internal.protocol.io.offload import Offload
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.protocol.remote.envelope import (
    REQUEST_KINDS,
    Envelope,
    EnvelopeError,
    Kind,
    Outcome,
    RemoteSender,
    ReplyBody,
    SendBody,
    StatusBody,
)
from pi_cross_session._internal.protocol.remote.settings import VERIFY_ON_LOOP_BYTES
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote.senders import (
    Claim,
    MachineFlow,
    SenderTable,
    SessionDoors,
)
from pi_cross_session._internal.security.remote.trust import Cause, Rejected
from pi_cross_session._internal.security.tokens import new_token

logger = logging.getLogger(GATEWAY_LOGGER)


@dataclass(slots=True)
class _SenderIdentity:
    machine: str
    registration: Registration
    token: str


class Inbound:
    """Other machines' requests, screened, judged and delivered to local sessions.

    ``parts`` are what the gateway hands both its sides (:class:`~.gateway_common.GatewayParts`).
    ``proxies`` are the outbound side's: a remote sender with a proxy here sends as its proxy,
    and the local ids of both come from it. ``accepting()`` says whether remote inbound is on now;
    ``refused(origin, cause)`` is told of every request of ``origin`` that failed its MAC or
    signature, ``heard(origin)`` of every one that passed. Deliveries run in the gateway's task
    group (:meth:`start`).
    """

    def __init__(
        self,
        parts: GatewayParts,
        *,
        session_wait_s: float,
        delivery_deadline_s: float,
        proxies: Outbound,
        accepting: Callable[[], bool],
        refused: Callable[[str, Cause], None],
        heard: Callable[[str], None],
    ) -> None:
        self._parts = parts
        self._session_wait_s = session_wait_s
        self._delivery_deadline_s = delivery_deadline_s
        self._proxies = proxies
        self._accepting = accepting
        self._refused = refused
        self._heard = heard
        self._senders: dict[str, _SenderIdentity] = {}
        self._making_identity = anyio.Lock()
        self._sender_table = SenderTable()
        self._flow = MachineFlow()
        self._doors = SessionDoors()
        self._slots: dict[str, anyio.Semaphore] = {}
        self._handled_since_sweep = False
        self._exchangers: dict[tuple[str, ...], Exchanger] = {}
        # Inline on a local filesystem, in a worker thread elsewhere (as sessions read files).
        self._peers_dir = Offload(fs, parts.locations.peers_dir)
        self._group: anyio.abc.TaskGroup | None = None

    def start(self, group: anyio.abc.TaskGroup) -> None:
        """Deliver in ``group`` from now on."""
        self._group = group

    # -- what the gateway and the outbound side ask --------------------------------------------

    @property
    def senders(self) -> int:
        """The send-only local identities of remote senders."""
        return len(self._senders)

    @property
    def refused_by_machine_bounds(self) -> int:
        """Requests refused because their machine had its share of deliveries."""
        return self._flow.refused

    @property
    def refused_by_session_bounds(self) -> int:
        """Requests refused at the door of the session they were for."""
        return self._doors.refused

    def adopt(self, local_id: str) -> str | None:
        """The token of the send-only identity ``local_id``, which a proxy takes over from now
        on (``None``: there is none)."""
        known = self._senders.pop(local_id, None)
        return None if known is None else known.token

    def release(self, machine: str, local_id: str) -> None:
        """The local identity ``local_id`` of a sender of ``machine`` is gone (its proxy closed)."""
        self._sender_table.release(machine, local_id)

    def handled_since_sweep(self) -> bool:
        """Whether a request came since this was last asked."""
        handled, self._handled_since_sweep = self._handled_since_sweep, False
        return handled

    async def remove_all(self) -> None:
        """Remove every send-only identity (the gateway stops)."""
        for local_id in list(self._senders):
            await self._remove_sender(local_id)

    # -- requests from other machines ------------------------------------------------------------

    async def on_request(self, origin: str, msg: Msg) -> None:
        """NATS calls this for every request from ``origin`` (the subject names it), one at a
        time per origin: checks here are bounded and nothing is parsed before the signature
        verifies; the delivery runs in its own task, within the machine's bounds."""
        self._handled_since_sweep = True
        kinds = REQUEST_KINDS
        screened = self._parts.verifier.screen(msg.data, origin=origin, kinds=kinds)
        if isinstance(screened, Rejected):
            self._refused(origin, screened.cause)
            return
        if len(screened.data) > VERIFY_ON_LOOP_BYTES:
            # Verifying a signature hashes every byte: a large payload (honest ones are rare;
            # a flood of junk is not) is verified in a worker thread, so that other origins'
            # requests and the proxies are not held up meanwhile.
            signed = await anyio.to_thread.run_sync(screened.verify)
        else:
            signed = screened.verify()
        verdict = self._parts.verifier.judge(
            signed, self._parts.wall_ms(), origin=origin, kinds=kinds
        )
        if isinstance(verdict, Rejected):
            self._refused(origin, verdict.cause)
            self._parts.warnings.why_refused(verdict, origin, "a message", msg.data)
            if verdict.answer is not None and verdict.envelope is not None:
                await self._answer(msg, verdict.envelope, Outcome.REFUSED, verdict.answer)
            return
        envelope = verdict.envelope
        self._heard(origin)
        if not self._accepting():
            # The machine refuses, not the session: said so, so that nobody blames the session.
            await self._answer(msg, envelope, Outcome.REFUSED, Code.REMOTE_INBOUND_OFF)
            return
        refused = self._flow.start(envelope.origin, anyio.current_time())
        if refused is not None:
            await self._answer(msg, envelope, Outcome.REFUSED, refused)
            return
        assert self._group is not None
        self._group.start_soon(self._deliver, msg, envelope)

    async def _deliver(self, msg: Msg, envelope: Envelope) -> None:
        outcome: Outcome = Outcome.UNKNOWN
        status: str = Code.CANCELLED
        try:
            outcome, status = await self._deliver_locally(envelope)
        finally:
            self._flow.finish(envelope.origin)
            self._parts.stats.count(self._parts.stats.delivered, f"{outcome.value}:{status}")
            with anyio.CancelScope(shield=True):
                await self._answer(msg, envelope, outcome, status)

    async def _deliver_locally(self, envelope: Envelope) -> tuple[Outcome, str]:
        try:
            body = envelope.read_body()
        except EnvelopeError:
            return Outcome.REFUSED, Code.INVALID_FRAME
        assert isinstance(body, SendBody | StatusBody)
        # The session's door admits MAX_CONNECTIONS at once: every machine together gets a part
        # of it, a short line, and beyond that a refusal that says nothing reached the session.
        session = body.target
        if not self._doors.arrive(session):
            return Outcome.REFUSED, Code.RATE_LIMITED
        try:
            slots = self._slots.get(session)
            if slots is None:
                slots = self._slots[session] = anyio.Semaphore(self._doors.open_at_once)
            try:
                # A free slot is taken at once: ``acquire`` would first give the loop a pass.
                slots.acquire_nowait()
            except anyio.WouldBlock:
                entered = False
                with anyio.move_on_after(self._session_wait_s):
                    await slots.acquire()
                    entered = True
                if not entered:
                    return Outcome.REFUSED, Code.RATE_LIMITED  # waited its time in line
            try:
                return await self._deliver_to(envelope, body)
            finally:
                slots.release()
        finally:
            if self._doors.leave(session):
                self._slots.pop(session, None)

    async def _deliver_to(
        self, envelope: Envelope, body: SendBody | StatusBody
    ) -> tuple[Outcome, str]:
        target = await self._target(body.target)
        if target is None:
            return Outcome.REFUSED, Code.NOT_FOUND
        identity = await self._sender_identity(envelope.origin, body.sender)
        if identity is None:
            return Outcome.REFUSED, Code.RATE_LIMITED
        registration, token = identity
        sender = Sender(id=registration.id, instance_id=registration.instance_id, token=token)
        exchanger = self._exchanger(carried(body.sender.capabilities))
        try:
            if isinstance(body, SendBody):
                message = Message.model_validate(
                    {
                        "v": WIRE_VERSION,
                        "type": "message",
                        "request_id": str(uuid.uuid4()),
                        "message_id": body.message.message_id,
                        "text": body.message.text,
                        "summary": body.message.summary,
                        "sent_at": body.message.sent_at,
                    }
                )
                receipt = await exchanger.send(target, sender=sender, message=message)
                return Outcome.RECEIPT, receipt.status
            receipt = await exchanger.query_status(
                target, sender=sender, message_id=body.message_id
            )
            return Outcome.ANSWER, receipt.status
        except ExchangeError as exc:
            if exc.verdict.state is SenderState.RECEIPT_UNKNOWN:
                return Outcome.UNKNOWN, exc.code
            return Outcome.REFUSED, exc.code

    async def _target(self, instance_id: str) -> Registration | None:
        """The real local session ``instance_id`` (never one of the gateway's own)."""
        try:
            path = self._parts.locations.registration_path(instance_id)
            raw = await self._peers_dir.run(fs.read_registration_bytes, path)
            registration = parse_registration(
                raw,
                file_stem=instance_id,
                expected_socket_path=self._parts.locations.socket_path(instance_id),
            )
        except (CrossSessionError, ValueError):
            return None
        return None if registration.pid == self._parts.pid else registration

    def _exchanger(self, capabilities: tuple[str, ...]) -> Exchanger:
        exchanger = self._exchangers.get(capabilities)
        if exchanger is None:
            config = ExchangeConfig(
                send_deadline_s=self._delivery_deadline_s, capabilities=capabilities
            )
            exchanger = self._exchangers[capabilities] = Exchanger(
                self._parts.locations, fs, config=config
            )
        return exchanger

    async def _sender_identity(
        self, machine: str, remote: RemoteSender
    ) -> tuple[Registration, str] | None:
        """The local identity of a remote sender: its proxy, or a send-only registration."""
        local_id = self._proxies.local_id(machine, remote.instance_id)
        claimed = self._sender_table.claim(machine, local_id, anyio.current_time())
        if claimed.claim is Claim.FULL:
            return None
        if claimed.evicted is not None and self._proxies.identity(claimed.evicted) is None:
            await self._remove_sender(claimed.evicted)
        existing = self._existing_identity(local_id)
        if existing is not None:
            return existing
        # Made under a lock: a sender's first messages often arrive together, and two
        # identities made at once would each write the registration with its own token, so
        # the deliveries holding the token that lost would fail authentication, then and later.
        async with self._making_identity:
            return await self._new_identity(machine, local_id, remote)

    def _existing_identity(self, local_id: str) -> tuple[Registration, str] | None:
        """The local identity ``local_id`` has already: its proxy's, else a send-only one."""
        proxy = self._proxies.identity(local_id)
        if proxy is not None:
            return proxy
        known = self._senders.get(local_id)
        return None if known is None else (known.registration, known.token)

    async def _new_identity(
        self, machine: str, local_id: str, remote: RemoteSender
    ) -> tuple[Registration, str] | None:
        # Asked again: another delivery may have made it, or a proxy opened, during the wait.
        existing = self._existing_identity(local_id)
        if existing is not None:
            return existing
        token = new_token()
        now = self._parts.wall_ms()
        try:
            registration = identities.build(
                self._parts.locations,
                local_id=local_id,
                machine=machine,
                remote_id=remote.id,
                name=remote.name,
                cwd="",
                status="idle",
                inbound="refuse",
                started_at=now,
                updated_at=now,
                token=token,
            )
            await write_registration(self._parts.locations, registration, machine)
        except CrossSessionError as exc:
            logger.warning("cannot write the identity of a sender of %s: %s", machine, exc)
            self._sender_table.release(machine, local_id)
            return None
        self._senders[local_id] = _SenderIdentity(machine, registration, token)
        self._parts.stats.senders_made += 1
        return registration, token

    async def _remove_sender(self, local_id: str) -> None:
        known = self._senders.pop(local_id, None)
        if known is not None:
            self._sender_table.release(known.machine, local_id)
            await remove_registration(self._parts.locations, local_id)

    async def _answer(self, msg: Msg, request: Envelope, outcome: Outcome, status: str) -> None:
        reply = env.build(
            kind=Kind.REPLY,
            account=self._parts.account,
            origin=self._parts.machine,
            to=request.origin,
            nonce=secrets.token_hex(16),
            at_ms=self._parts.wall_ms(),
            body=ReplyBody(outcome=outcome, status=status),
            re=request.id,
        )
        payload = self._parts.seal(request.origin, env.encode(reply))
        if payload is not None:  # None: no longer trusted since its request came; it learns nothing
            await self._parts.link.respond(msg, payload)
