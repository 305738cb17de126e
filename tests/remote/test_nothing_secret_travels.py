"""No token ever leaves a machine (docs/remote.md, "What travels"): a plain subscriber on every
subject of the account, and a reader of the whole bucket, see the traffic of two machines
messaging each other both ways, and find no token, no machine key, no socket path and no pid
field in any of it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.protocol.codes import OK_RECEIPTS
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.security.io import fs
from tests.support.remote import Fleet, Machine, Tap, connect_as
from tests.support.socket_peers import as_sender, make_message, published_sender


def _registration(machine: Machine, name: str) -> Registration:
    body = next(r for r in machine.registrations() if r["name"] == name)
    iid = body["instanceId"]
    raw = (machine.agent_dir / "peers" / f"{iid}.json").read_bytes()
    return parse_registration(
        raw, file_stem=iid, expected_socket_path=machine.locations.socket_path(iid)
    )


def _secrets_of(machine: Machine) -> list[bytes]:
    """Every token of every registration on ``machine`` (sessions, proxies, remote senders'
    identities), its socket paths, and its machine key in every form it has."""
    found: list[bytes] = []
    for body in machine.registrations():
        found += [body["token"].encode(), body["socketPath"].encode()]
    pem = (Path(files.remote_dir(machine.locations)) / files.KEY_FILE).read_bytes()
    key = load_pem_private_key(pem, password=None)
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    found += [raw, raw.hex().encode(), base64.b64encode(raw).rstrip(b"=")]
    found += [line for line in pem.splitlines() if line and not line.startswith(b"-----")]
    # Its NATS seed too: only its public key and the JWT made from it may ever be seen.
    found.append((Path(files.remote_dir(machine.locations)) / files.NATS_SEED_FILE).read_bytes())
    return found


async def _bucket(url: str, creds: str | None) -> list[bytes]:
    """Every value the bucket holds, with its history (read as the deployment's administrator)."""
    nc = await connect_as(url, creds)
    try:
        kv = await nc.jetstream().key_value(env.KV_BUCKET)
        values = []
        for key in await kv.keys():
            values += [entry.value or b"" for entry in await kv.history(key)]
        return values
    finally:
        await nc.close()


def test_no_token_key_or_socket_path_travels(fleet: Fleet) -> None:
    fleet.start_server()
    laptop, buildbox = fleet.pair("laptop", "buildbox")
    with Tap(fleet.url, [">", "$KV.>"], creds=fleet.admin_creds) as tap:
        bob = buildbox.inbox("bob", "--busy", "0")
        alice = laptop.inbox("alice", "--busy", "0")
        laptop.start_gateway()
        buildbox.start_gateway()
        laptop.wait_peer("bob@buildbox")
        buildbox.wait_peer("alice@laptop")
        # A send and a status query each way, from senders whose tokens we hold.
        carol = published_sender(laptop.locations, "carol")
        dave = published_sender(buildbox.locations, "dave")

        async def traffic() -> list[str]:
            ids = []
            for machine, sender, proxy in (
                (laptop, carol, _registration(laptop, "bob@buildbox")),
                (buildbox, dave, _registration(buildbox, "alice@laptop")),
            ):
                exchanger = Exchanger(machine.locations, fs)
                message = make_message(f"from {sender.name}")
                receipt = await exchanger.send(proxy, sender=as_sender(sender), message=message)
                assert receipt.status in OK_RECEIPTS, receipt.status
                # A refusal would raise: an answer at all is the status row, found remotely.
                await exchanger.query_status(
                    proxy, sender=as_sender(sender), message_id=message.message_id
                )
                ids.append(message.message_id)
            return ids

        to_bob, to_alice = anyio.run(traffic)
        bob.wait_event("message", messageId=to_bob)
        alice.wait_event("message", messageId=to_alice)
        secrets = _secrets_of(laptop) + _secrets_of(buildbox)
        stored = anyio.run(_bucket, fleet.url, fleet.admin_creds)
    seen = tap.seen()
    subjects = {subject for subject, _ in seen}
    # The tap saw what we mean to check: requests both ways, replies, and the bucket's puts.
    assert {
        env.request_subject("laptop", "buildbox"),
        env.request_subject("buildbox", "laptop"),
    } <= subjects
    assert any(s.startswith(env.inbox_prefix("laptop") + ".") for s in subjects), subjects
    assert any(s.startswith(f"$KV.{env.KV_BUCKET}.") for s in subjects), subjects
    assert len(stored) >= 2, stored  # bob and alice (the senders here are not live sessions)
    everything = b"\n".join([s.encode() + b" " + data for s, data in seen] + stored)
    assert carol.token.encode() in b"".join(secrets)  # the senders' own tokens are checked too
    leaked = [secret for secret in secrets if secret in everything]
    assert leaked == [], leaked
    # And the records carry none of a registration's private fields, by name.
    for value in stored:
        if value:
            record: dict[str, Any] = json.loads(value[64:])["body"]
            assert not {"token", "socketPath", "pid"} & set(record), record
