"""Who may do what on a deployment's NATS (docs/remote.md, "Who may do what"): each row of
:mod:`pi_cross_session._internal.security.remote.permissions`, tried over a real nats-server by a
machine holding its own valid credentials, is refused by the server, while the same act by the
machine it belongs to works (so no test passes because nothing works at all). Revocation cuts a
machine off
within seconds, and a gateway reports a send NATS refused as ``permission_denied``, at once."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final

import anyio
import nats
import nats.errors
import pytest
from nats.aio.client import Client, RawCredentials

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.bucket import BucketSpec, problems
from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig
from pi_cross_session._internal.protocol.codes import OK_RECEIPTS
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.protocol.remote.envelope import (
    KV_STREAM,
    inbox_prefix,
    record_subject,
    request_subject,
    requests_from,
    requests_to,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.remote import nats_jwt
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Permissions, Role
from pi_cross_session._internal.security.remote.permissions import (
    BUCKET_INFO_SUBJECT,
    BUCKET_READ_SUBJECT,
    machine_permissions,
)
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.remote import Fleet, Machine, RawMachine
from tests.support.socket_peers import as_sender, make_message, published_sender
from tests.support.waiting import eventually

#: How nats-py words a refusal the server reports (the whole text lowercased).
VIOLATION: Final = "permissions violation for "
#: Concurrent sends while a machine tries to take their requests.
SENDS: Final = 12


def _violation(what: str, subject: str, *, queue: str | None = None) -> str:
    """The refusal of a ``publish`` or ``subscription`` to ``subject``, as a client reads it."""
    text = f'{VIOLATION}{what} to "{subject.lower()}"'
    return text if queue is None else f'{text} using queue "{queue}"'


class _Watched:
    """Something callbacks add to; a test waits (bounded) until it holds what must come."""

    def __init__(self) -> None:
        self._news = anyio.Event()

    def _changed(self) -> None:
        self._news.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        with anyio.fail_after(MUST_HAPPEN_S):
            while not condition():
                self._news = anyio.Event()
                await self._news.wait()


class _Conn(_Watched):
    """One NATS connection with someone's credentials, and every permission violation the server
    reported on it (nats-py hands those to the error callback only)."""

    def __init__(self) -> None:
        super().__init__()
        self.nc: Any = None
        self.violations: list[str] = []

    async def on_error(self, exc: Exception) -> None:
        text = str(exc).lower()
        if VIOLATION in text:
            self.violations.append(text[text.index(VIOLATION) :])
            self._changed()

    async def refused(
        self, what: str, subject: str, *, queue: str | None = None, times: int = 1
    ) -> None:
        """Wait until the server has refused this connection ``what`` on ``subject`` (``times``
        times)."""
        wanted = _violation(what, subject, queue=queue)
        await self.until(lambda: self.violations.count(wanted) >= times)


class _Heard(_Watched):
    """What one subscription received, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[tuple[str, bytes]] = []
        self.sub: Any = None

    async def add(self, msg: Any) -> None:
        """The subscription's callback."""
        self.messages.append((msg.subject, bytes(msg.data)))
        self._changed()

    def subjects(self) -> list[str]:
        return [subject for subject, _ in self.messages]

    async def heard(self, subject: str) -> None:
        await self.until(lambda: subject in self.subjects())

    def nothing(self) -> bool:
        """Nothing arrived, and nothing waits for the callback either (the client queues each
        subscription's messages for its own task)."""
        return not self.messages and self.sub.pending_msgs == 0


def _options(creds: str | None, machine: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {"allow_reconnect": False, "max_reconnect_attempts": 0}
    if creds is not None:
        options["user_credentials"] = RawCredentials(creds)
    if machine is not None:
        options["inbox_prefix"] = inbox_prefix(machine)
    return options


@asynccontextmanager
async def _connected(url: str, creds: str | None, *, machine: str | None) -> AsyncIterator[_Conn]:
    """A connection as ``machine`` (its credentials, its inbox), or as the administrator."""
    conn = _Conn()
    conn.nc = await nats.connect(url, error_cb=conn.on_error, **_options(creds, machine))
    try:
        yield conn
    finally:
        await conn.nc.close()


async def _as(stack: AsyncExitStack, url: str, who: RawMachine) -> _Conn:
    return await stack.enter_async_context(_connected(url, who.creds, machine=who.name))


async def _admin(stack: AsyncExitStack, fleet: Fleet) -> _Conn:
    return await stack.enter_async_context(_connected(fleet.url, fleet.admin_creds, machine=None))


async def _refused_connection(url: str, creds: str | None) -> str:
    """The server's answer to a connection with ``creds``, which it must refuse."""

    async def quiet(exc: Exception) -> None:
        """The refusal is raised too; nothing to log."""

    client = Client()
    try:
        await client.connect(url, error_cb=quiet, **_options(creds, None))
    except nats.errors.Error as exc:
        return str(exc)
    finally:
        await client.close()  # a refused client keeps its socket until it is closed
    raise AssertionError("the server let the connection in")


async def _subscribe(conn: _Conn, subject: str, *, queue: str = "") -> _Heard:
    heard = _Heard()
    heard.sub = await conn.nc.subscribe(subject, queue=queue, cb=heard.add)
    await conn.nc.flush()
    return heard


def _registration(machine: Machine, name: str) -> Registration:
    """The registration named ``name`` in ``machine``'s peers dir (a proxy, for a remote one)."""
    body = next(r for r in machine.registrations() if r["name"] == name)
    iid = body["instanceId"]
    return parse_registration(
        (machine.agent_dir / "peers" / f"{iid}.json").read_bytes(),
        file_stem=iid,
        expected_socket_path=machine.locations.socket_path(iid),
    )


async def _json(conn: _Conn, subject: str, body: bytes = b"", **headers: str) -> dict[str, Any]:
    """A request whose answer is JSON (a JetStream API call, a put's acknowledgement)."""
    msg = await conn.nc.request(subject, body, timeout=MUST_HAPPEN_S, headers=headers or None)
    answer: dict[str, Any] = json.loads(msg.data)
    return answer


async def _put(conn: _Conn, subject: str, data: bytes, **headers: str) -> dict[str, Any]:
    """A record put; the bucket's acknowledgement (``error`` when it refused the record)."""
    return await _json(conn, subject, data, **headers)


async def _record(conn: _Conn, subject: str) -> tuple[bytes, dict[str, str]] | None:
    """The bucket's current message on ``subject`` and its headers (through the stream's direct
    get, which every machine may use), or ``None`` when it has none."""
    body = json.dumps({"last_by_subj": subject}).encode()
    msg = await conn.nc.request(BUCKET_READ_SUBJECT, body, timeout=MUST_HAPPEN_S)
    headers = dict(msg.headers or {})
    if "Status" in headers and not msg.data:
        return None
    return bytes(msg.data), headers


def _key(machine: str) -> str:
    """The subject of a new record of ``machine``."""
    return record_subject(machine, secrets.token_hex(16))


# -- requests --------------------------------------------------------------------------------------


def test_a_machine_cannot_publish_requests_as_another(fleet: Fleet) -> None:
    fleet.start_server()
    buildbox = RawMachine("buildbox", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    forged, honest = request_subject("buildbox", "laptop"), request_subject("buildbox", "rogue")

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            receiver = await _as(stack, fleet.url, buildbox)
            heard = await _subscribe(receiver, requests_to("buildbox"))
            conn = await _as(stack, fleet.url, rogue)
            await conn.nc.publish(forged, b"as laptop")
            await conn.refused("publish", forged)
            # The same request under its own name goes through; it was published after the
            # forged one, so anything of the forged one would have come first.
            await conn.nc.publish(honest, b"as rogue")
            await heard.heard(honest)
            assert heard.messages == [(honest, b"as rogue")]
            assert conn.violations == [_violation("publish", forged)]

    anyio.run(scenario)


def test_a_machine_cannot_take_another_machines_requests_plain_or_in_a_queue_group(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    # bob stays in its turn for the whole test: every send after the first waits in its queue
    # (a session between turns may answer a crowd "busy", which is no receipt).
    bob = buildbox.inbox("bob", "--busy", str(MUST_HAPPEN_S))
    laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")
    rogue = RawMachine("rogue", fleet=fleet)
    theirs = requests_to("buildbox")
    proxy = _registration(laptop, "bob@buildbox")
    carol = published_sender(laptop.locations, "carol")
    exchanger = Exchanger(laptop.locations, fs)
    receipts: dict[str, str] = {}

    async def send(index: int) -> None:
        message = make_message(f"request {index}")
        receipt = await exchanger.send(proxy, sender=as_sender(carol), message=message)
        receipts[message.message_id] = receipt.status

    anyio.run(send, -1)
    (first,) = receipts
    bob.wait_event("message", messageId=first)

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            conn = await _as(stack, fleet.url, rogue)
            async with anyio.create_task_group() as sends:
                for index in range(SENDS):
                    sends.start_soon(send, index)
                # While the sends are on their way: rogue subscribes to buildbox's requests,
                # as a listener and as a member of the queue group a gateway could use.
                plain = await _subscribe(conn, theirs)
                grouped = await _subscribe(conn, theirs, queue="gw")
                await conn.refused("subscription", theirs)
                await conn.refused("subscription", theirs, queue="gw")
            # Every request reached buildbox before its receipt came back; a flush after that
            # brings rogue anything the server had for it.
            await conn.nc.flush()
            assert plain.nothing()
            assert grouped.nothing()
            assert sorted(conn.violations) == sorted(
                [_violation("subscription", theirs), _violation("subscription", theirs, queue="gw")]
            )

    anyio.run(scenario)
    assert len(receipts) == 1 + SENDS
    assert set(receipts.values()) <= OK_RECEIPTS, receipts


# -- inboxes ---------------------------------------------------------------------------------------


def test_a_machine_cannot_read_another_machines_inbox(fleet: Fleet) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    buildbox = RawMachine("buildbox", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    theirs = f"{inbox_prefix('laptop')}.>"

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            server = await _as(stack, fleet.url, buildbox)

            async def answer(msg: Any) -> None:
                await msg.respond(b"reply to " + msg.subject.rpartition(".")[2].encode())

            await server.nc.subscribe(requests_to("buildbox"), cb=answer)
            conn = await _as(stack, fleet.url, rogue)
            peeked = await _subscribe(conn, theirs)
            await conn.refused("subscription", theirs)
            # A real exchange: laptop asks buildbox and reads the reply in its inbox...
            asker = await _as(stack, fleet.url, laptop)
            reply = await asker.nc.request(
                request_subject("buildbox", "laptop"), b"?", timeout=MUST_HAPPEN_S
            )
            assert reply.data == b"reply to laptop"
            # ...then rogue asks too: buildbox answered laptop first, so a copy of laptop's
            # reply would have reached rogue before its own.
            own = await conn.nc.request(
                request_subject("buildbox", "rogue"), b"?", timeout=MUST_HAPPEN_S
            )
            assert own.data == b"reply to rogue"
            assert peeked.nothing()
            assert conn.violations == [_violation("subscription", theirs)]

    anyio.run(scenario)


def test_a_machine_answers_a_request_once_and_never_writes_into_an_inbox_unasked(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    unasked = f"{inbox_prefix('laptop')}.r.unasked"
    first, second = f"{inbox_prefix('laptop')}.r.first", f"{inbox_prefix('laptop')}.r.second"

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            victim = await _as(stack, fleet.url, laptop)
            inbox = await _subscribe(victim, f"{inbox_prefix('laptop')}.>")
            conn = await _as(stack, fleet.url, rogue)

            async def answer(msg: Any) -> None:
                await msg.respond(b"once")
                if msg.reply == first:
                    await msg.respond(b"twice")  # one reply per request: refused

            await conn.nc.subscribe(requests_to("rogue"), cb=answer)
            await conn.nc.publish(unasked, b"out of the blue")
            await conn.refused("publish", unasked)
            asked = request_subject("rogue", "laptop")
            await victim.nc.publish(asked, b"?", reply=first)
            await inbox.heard(first)
            await conn.refused("publish", first)
            # rogue's next answer comes after the refused ones: they would have come first.
            await victim.nc.publish(asked, b"?", reply=second)
            await inbox.heard(second)
            assert inbox.messages == [(first, b"once"), (second, b"once")]
            assert conn.violations == [_violation("publish", unasked), _violation("publish", first)]

    anyio.run(scenario)


# -- the bucket ------------------------------------------------------------------------------------


def test_a_machine_cannot_put_or_delete_another_machines_record(fleet: Fleet) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    theirs, mine = _key("laptop"), _key("rogue")

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            owner = await _as(stack, fleet.url, laptop)
            assert "error" not in await _put(owner, theirs, b"laptop's record")
            conn = await _as(stack, fleet.url, rogue)
            # A put, then a delete marker as a KV tool writes one.
            for times, headers in enumerate(({}, {"KV-Operation": "DEL"}), start=1):
                reply = f"{inbox_prefix('rogue')}.r.{secrets.token_hex(8)}"
                await conn.nc.publish(theirs, b"rogue's", reply=reply, headers=headers or None)
                await conn.refused("publish", theirs, times=times)
            assert conn.violations == [_violation("publish", theirs)] * 2
            # Its own key takes a record, and a delete marker.
            assert "error" not in await _put(conn, mine, b"rogue's record")
            assert "error" not in await _put(conn, mine, b"", **{"KV-Operation": "DEL"})
            assert conn.violations == [_violation("publish", theirs)] * 2
            found = await _record(conn, theirs)
            assert found is not None
            assert found[0] == b"laptop's record", found
            assert "KV-Operation" not in found[1]

    anyio.run(scenario)


#: The JetStream API calls no machine may make, each with a body that would do harm if it were
#: taken (the stream's own name, its configuration loosened, a consumer delivering into another
#: machine's inbox).
def _forbidden_calls(record: str) -> list[tuple[str, dict[str, Any]]]:
    loosened = BucketSpec().stream_config() | {
        "allow_rollup_hdrs": True,
        "deny_delete": False,
        "deny_purge": False,
    }
    consumer = {
        "stream_name": KV_STREAM,
        "config": {
            "name": "evil",
            "durable_name": "evil",
            "deliver_subject": f"{inbox_prefix('laptop')}.r.evil",
            "deliver_policy": "all",
            "ack_policy": "none",
        },
    }
    api = "$JS.API"
    return [
        (f"{api}.STREAM.DELETE.{KV_STREAM}", {}),
        (f"{api}.STREAM.PURGE.{KV_STREAM}", {}),
        (f"{api}.STREAM.UPDATE.{KV_STREAM}", loosened),
        (f"{api}.STREAM.MSG.DELETE.{KV_STREAM}", {"seq": 1}),
        (f"{api}.STREAM.CREATE.{KV_STREAM}", loosened),
        (
            f"{api}.STREAM.CREATE.evil",
            {"name": "evil", "subjects": [f"{inbox_prefix('laptop')}.>"]},
        ),
        (f"{api}.CONSUMER.CREATE.{KV_STREAM}", consumer),
        (f"{api}.CONSUMER.CREATE.{KV_STREAM}.evil", consumer),
        (f"{api}.CONSUMER.CREATE.{KV_STREAM}.evil.{record}", consumer),
        (f"{api}.CONSUMER.DURABLE.CREATE.{KV_STREAM}.evil", consumer),
    ]


def test_a_machine_cannot_delete_purge_change_or_consume_the_bucket(fleet: Fleet) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    record = _key("laptop")

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            owner = await _as(stack, fleet.url, laptop)
            assert "error" not in await _put(owner, record, b"laptop's record")
            admin = await _admin(stack, fleet)
            before = await _json(admin, BUCKET_INFO_SUBJECT)
            conn = await _as(stack, fleet.url, rogue)
            # What a machine may ask of the bucket, it gets.
            assert (await _json(conn, BUCKET_INFO_SUBJECT))["config"] == before["config"]
            calls = _forbidden_calls(record)
            for index, (subject, body) in enumerate(calls):
                reply = f"{inbox_prefix('rogue')}.r.{index}"
                await conn.nc.publish(subject, json.dumps(body).encode(), reply=reply)
                await conn.refused("publish", subject)
            assert conn.violations == [_violation("publish", s) for s, _ in calls]
            after = await _json(admin, BUCKET_INFO_SUBJECT)
            assert after["config"] == before["config"]
            assert after["state"] == before["state"]
            assert after["state"]["consumer_count"] == 0
            assert problems(after["config"], BucketSpec()) == []
            names = await _json(admin, "$JS.API.STREAM.NAMES")
            assert names["streams"] == [KV_STREAM]
            found = await _record(conn, record)
            assert found is not None
            assert found[0] == b"laptop's record", found

    anyio.run(scenario)


@pytest.mark.parametrize("rollup", ["all", "sub"])
def test_a_rollup_on_a_machines_own_key_is_refused_by_the_bucket(fleet: Fleet, rollup: str) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    theirs, mine = _key("laptop"), _key("rogue")

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            owner = await _as(stack, fleet.url, laptop)
            assert "error" not in await _put(owner, theirs, b"laptop's record")
            conn = await _as(stack, fleet.url, rogue)
            assert "error" not in await _put(conn, mine, b"rogue's record")
            answer = await _put(conn, mine, b"wipe", **{"Nats-Rollup": rollup})
            # NATS let the put through (its own key); the stream refused it.
            assert "rollup" in answer.get("error", {}).get("description", ""), answer
            assert conn.violations == []
            for subject, data in ((theirs, b"laptop's record"), (mine, b"rogue's record")):
                found = await _record(conn, subject)
                assert found is not None, subject
                assert found[0] == data, (subject, found)
            admin = await _admin(stack, fleet)
            assert (await _json(admin, BUCKET_INFO_SUBJECT))["state"]["messages"] == 2

    anyio.run(scenario)


# -- everything else -------------------------------------------------------------------------------


def test_a_machine_can_publish_or_subscribe_nothing_outside_its_list(fleet: Fleet) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    outside = ["pi-xs.v1.anything", "foo"]
    allowed = request_subject("buildbox", "rogue")

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            admin = await _admin(stack, fleet)
            seen = _Heard()
            for subject in ("foo", "pi-xs.v1.>"):
                await admin.nc.subscribe(subject, cb=seen.add)
            await admin.nc.flush()
            conn = await _as(stack, fleet.url, rogue)
            for subject in outside:
                await conn.nc.publish(subject, b"outside")
                await conn.refused("publish", subject)
            await conn.nc.publish(allowed, b"inside")
            await seen.heard(allowed)
            assert seen.messages == [(allowed, b"inside")]
            # Everything, refused; its own requests, allowed: laptop's request to buildbox
            # (published first) would reach "everything" before laptop's request to rogue.
            everything = await _subscribe(conn, ">")
            await conn.refused("subscription", ">")
            own = await _subscribe(conn, requests_to("rogue"))
            sender = await _as(stack, fleet.url, laptop)
            await sender.nc.publish(request_subject("buildbox", "laptop"), b"not for rogue")
            await sender.nc.publish(request_subject("rogue", "laptop"), b"for rogue")
            await own.heard(request_subject("rogue", "laptop"))
            assert everything.nothing()
            assert conn.violations == [
                *(_violation("publish", subject) for subject in outside),
                _violation("subscription", ">"),
            ]

    anyio.run(scenario)


def test_no_credentials_another_accounts_jwt_or_a_jwt_without_its_seed_cannot_connect(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    rogue = RawMachine("rogue", fleet=fleet)
    assert rogue.creds is not None
    foreign = nats_jwt.user_jwt(
        NKey.generate(Role.ACCOUNT),
        rogue.nats.public_key,
        name="rogue",
        issued_at=int(time.time()),
        permissions=machine_permissions("rogue"),
    )
    # The machine's JWT is no secret (the deployment keeps a copy): alone, it lets nobody in.
    jwt = nats_jwt.decode(rogue.creds.split("\n")[1]).text
    another_seed = NKey.generate(Role.USER).seed

    async def scenario() -> None:
        for creds in (
            None,
            nats_jwt.creds_text(foreign, rogue.nats.seed),
            nats_jwt.creds_text(jwt, another_seed),
        ):
            answer = await _refused_connection(fleet.url, creds)
            assert "authorization violation" in answer.lower(), (creds, answer)
        async with AsyncExitStack() as stack:
            conn = await _as(stack, fleet.url, rogue)
            await conn.nc.flush()
            assert conn.nc.is_connected

    anyio.run(scenario)


def test_a_revoked_machine_is_cut_off_within_seconds_and_cannot_come_back(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop = RawMachine("laptop", fleet=fleet)
    rogue = RawMachine("rogue", fleet=fleet)
    deployment = fleet.deployment
    assert deployment is not None

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            revoked = await _as(stack, fleet.url, rogue)
            staying = await _as(stack, fleet.url, laptop)
            for conn in (revoked, staying):
                assert "config" in await _json(conn, BUCKET_INFO_SUBJECT)
            now = int(time.time())
            deployment.revoke("rogue", now=now)
            deployment.save(now=now)
            system = Link(
                LinkConfig(
                    servers=(fleet.url,),
                    machine=None,
                    credentials=deployment.system_creds.read_text(),
                )
            )
            await system.connect()
            try:
                await system.push_account(deployment.account_jwt(now=now))
            finally:
                await system.close()
            await eventually(lambda: not revoked.nc.is_connected, limit_s=5.0)
            refused = await _refused_connection(fleet.url, rogue.creds)
            assert "authorization violation" in refused.lower()
            # laptop's connection never dropped (it does not reconnect here), and still works.
            assert staying.nc.is_connected
            assert "config" in await _json(staying, BUCKET_INFO_SUBJECT)
            assert staying.violations == []

    anyio.run(scenario)


# -- what a gateway says of a send NATS refused ----------------------------------------------------


def test_a_send_nats_refuses_is_permission_denied_at_once_never_receipt_unknown(
    fleet: Fleet,
) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    bob = buildbox.inbox("bob", "--busy", "0")
    deployment = fleet.deployment
    assert deployment is not None
    granted = machine_permissions("laptop")
    assert granted.publish[0] == requests_from("laptop")  # the right taken away: its requests
    lacking = Permissions(
        publish=granted.publish[1:], subscribe=granted.subscribe, responses=granted.responses
    )
    nats_key = files.load_identity(laptop.locations).nats.public_key
    jwt = nats_jwt.user_jwt(
        deployment.account,
        nats_key,
        name="laptop",
        issued_at=int(time.time()),
        permissions=lacking,
    )
    files.install_nats_jwt(laptop.locations, jwt)
    gateway = laptop.start_gateway()
    buildbox.start_gateway()
    laptop.wait_peer("bob@buildbox")  # it still reads the bucket
    sent = laptop.cli("send", "bob@buildbox", "x", "--json")
    report = sent.json()
    assert sent.returncode == exits.EXIT_REFUSED, sent
    # Refused, certainly not sent: neither a receipt_unknown after the hop's deadline (4 s),
    # nor "unreachable".
    assert (report["status"], report["state"]) == ("permission_denied", "refused"), report
    # The same send with the deployment's own JWT back goes through: only the right was missing.
    full = deployment.machine_jwt("laptop", now=int(time.time())).decode()
    files.install_nats_jwt(laptop.locations, full)
    gateway.stop()
    laptop.start_gateway()
    laptop.wait_peer("bob@buildbox")
    again = laptop.cli("send", "bob@buildbox", "x again", "--json")
    assert again.returncode == exits.EXIT_OK, again
    bob.wait_event("message", messageId=again.json()["messageId"])
    delivered = [e.get("messageId") for e in bob.events() if e.get("event") == "message"]
    assert delivered == [again.json()["messageId"]]
