"""What the receiver's admission costs: per decision, per exchange, and in memory under refusal.

Three measurements, all on this machine:

(a) **Pipeline decisions per second.** :meth:`Admission.admit` driven by a scripted mix of
    senders and host turns with a fake clock (5 ms of monotonic time per step): submitted,
    queued, duplicate (same id; same text), rate-limited and busy (legacy sender while busy)
    decisions, with peer turns, user turns and queue flushes in between. The floor runs the very
    same loop over the very same steps, but each decision only builds the :class:`Response` that
    admission returned for it (checked identical, byte for byte, before timing). Rounds are
    interleaved; the ratio of the medians is reported. The lifetime budget is lifted for this
    part only (the real 256 would turn everything after the 256th admission into
    ``budget_exhausted``).

(b) **End-to-end exchanges per second.** One headless :class:`SessionRuntime` inbox receives on
    its real Unix socket; 64 senders with published registrations (in a second process, so the
    receiver has a core of its own) run :meth:`Exchanger.send` concurrently, each waiting for
    its receipt before the next message. With the contract's 256-unit budget most exchanges are
    refused by design; admitted and refused exchanges are reported separately, with their codes.

(c) **Memory under refusal.** A receiving runtime, busy with a user turn, with 40 messages queued
    and one sender out of rate tokens, gets 100,000 refused frames, one connection each:
    malformed lines, hellos with a wrong token or from a sender that is not registered (a new one
    each time), duplicates (same id; same text), rate-limited, busy (200 distinct legacy senders)
    and expired messages. For speed the 100,000 go through the endpoint's own per-connection
    handler in process (decoding, authentication with its registration file read, admission and
    reply encoding as for a socket; only the accept loop is skipped); a further 4,000 come over
    real sockets from a second process. VmRSS is read from ``/proc/self/status`` after a warm-up
    and after each run (each after a full collection), with the sizes of admission's tables: none
    may grow.

Run ``.venv/bin/python bench/admission.py`` (``--json`` for machine-readable output; ``--quick``
for a smaller run). Everything it creates lives in a temporary agent dir, removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.capabilities import CANCEL_SAFE_QUEUE
from pi_cross_session._internal.protocol.codes import refusal_text
from pi_cross_session._internal.protocol.frames import WIRE_VERSION, Message, Response, Sender
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    build_registration,
    parse_registration,
    serialize,
)
from pi_cross_session._internal.security.admission import Admission, Clock, Delivery
from pi_cross_session._internal.security.auth import Caller, LocalIdentity
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.limits import LifetimeBudget
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.tokens import new_instance_id, new_token
from pi_cross_session._internal.security.turns import (
    TurnAborted,
    TurnEnded,
    TurnEnding,
    TurnPreparing,
    TurnStarted,
    TurnTracker,
)

WALL_MS = 1_700_000_000_000

# -- shared helpers --------------------------------------------------------------------------------


class BenchClock:
    """Wall time fixed unless told otherwise; monotonic seconds a plain attribute to bump."""

    def __init__(self, *, wall_ms: int = WALL_MS, monotonic: float = 1_000.0) -> None:
        self.wall = wall_ms
        self.t = monotonic

    def clock(self) -> Clock:
        return Clock(wall_ms=lambda: self.wall, monotonic=lambda: self.t)


def rss_kib() -> int:
    """This process's resident set size, from ``/proc/self/status``."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def sender_registration(locations: Locations, name: str, *, pid: int | None = None) -> Registration:
    instance_id = new_instance_id()
    now = int(time.time() * 1000)
    return build_registration(
        session_id=f"session-{name}",
        session_name=name,
        instance_id=instance_id,
        cwd="/bench",
        pid=pid or os.getpid(),
        started_at=now,
        updated_at=now,
        status="idle",
        inbound="accept",
        socket_path=locations.socket_path(instance_id),
        token=new_token(),
    )


def publish(locations: Locations, registration: Registration) -> Registration:
    fs.ensure_private_dir(locations.peers_dir)
    fs.write_registration(
        locations.peers_dir,
        registration.instance_id,
        serialize(registration),
        still_current=lambda: True,
    )
    return registration


def read_registration(locations: Locations, instance_id: str) -> Registration:
    raw = fs.read_registration_bytes(locations.registration_path(instance_id))
    return parse_registration(
        raw, file_stem=instance_id, expected_socket_path=locations.socket_path(instance_id)
    )


@contextmanager
def agent_dir() -> Iterator[Locations]:
    root = tempfile.mkdtemp(prefix="xs-bench-admission-")
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: root})
    try:
        yield locations
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


def spawn() -> multiprocessing.context.SpawnContext:
    return multiprocessing.get_context("spawn")


# -- (a) the pure pipeline -------------------------------------------------------------------------

Step = tuple[Callable[[Any, Any], object], Any, Any]
#: Senders the script rotates over, and fake monotonic time per step: enough that their buckets
#: (30 tokens, 0.5/s) keep up with 16 admissions per cycle, so rate limiting stays the hog's.
SENDERS = 128
STEP_S = 0.005
FIXTURE_LOCATIONS = environment.resolve(
    env={paths.AGENT_DIR_ENV: "/tmp/xs-bench-fixture/agent"}, uid=0
)
RECEIVER = LocalIdentity(
    session_id="bench-receiver", instance_id="0" * 31 + "1", token="ab" * 32, pid=4242
)


@dataclass
class Plan:
    """The abstract script: ("admit", caller, message) or ("event", name, None)."""

    ops: list[tuple[str, Any, Any]] = field(default_factory=list)
    prologue: list[tuple[Caller, Message]] = field(default_factory=list)

    @property
    def decisions(self) -> int:
        return sum(op[0] == "admit" for op in self.ops)


def _message(message_id: str, text: str) -> Message:
    return Message(
        v=WIRE_VERSION,
        type="message",
        request_id=f"r-{message_id}",
        message_id=message_id,
        text=text,
        summary="bench summary",
        sent_at=WALL_MS,
    )


def _caller(name: str, *, capable: bool = True) -> Caller:
    registration = sender_registration(FIXTURE_LOCATIONS, name)
    return Caller(
        request_id="hello",
        sender=registration,
        capabilities=(CANCEL_SAFE_QUEUE,) if capable else (),
    )


def make_plan(cycles: int) -> Plan:
    """38 decisions per cycle: 8 submitted, 10 duplicate, 8 queued, 6 busy, 6 rate-limited."""
    senders = [_caller(f"sender-{i}") for i in range(SENDERS)]
    legacy = [_caller(f"legacy-{i}", capable=False) for i in range(8)]
    hog = _caller("hog")
    plan = Plan()
    plan.prologue = [(hog, _message(f"hog-pre-{i}", f"hog prologue {i}")) for i in range(30)]
    rot = 0
    for c in range(cycles):
        submitted: list[tuple[Caller, str]] = []
        for i in range(8):
            who = senders[rot % SENDERS]
            rot += 1
            mid = f"c{c}-s{i}"
            plan.ops.append(("admit", who, _message(mid, f"submitted text {c} {i}")))
            plan.ops.append(("event", "peer_turn", None))
            submitted.append((who, mid))
        for i in range(6):
            who, mid = submitted[i]
            plan.ops.append(("admit", who, _message(mid, f"same id, other text {c} {i}")))
        plan.ops.append(("event", "user_turn", None))
        queued: list[tuple[Caller, str]] = []
        for i in range(8):
            who = senders[rot % SENDERS]
            rot += 1
            text = f"queued text {c} {i}"
            plan.ops.append(("admit", who, _message(f"c{c}-q{i}", text)))
            queued.append((who, text))
        for i in range(6):
            plan.ops.append(("admit", legacy[i], _message(f"c{c}-b{i}", f"legacy {c} {i}")))
        for i in range(6):
            plan.ops.append(("admit", hog, _message(f"c{c}-h{i}", f"hog text {c} {i}")))
        for i in range(4):
            who, text = queued[i]
            plan.ops.append(("admit", who, _message(f"c{c}-d{i}", text)))
        plan.ops.append(("event", "end_user_turn", None))
        plan.ops.append(("event", "drain", None))
    return plan


class PipelineRound:
    """A fresh admission (and its host) with the plan bound to it, ready to run."""

    def __init__(self, plan: Plan) -> None:
        self.clock = BenchClock()
        self.idle = True
        self.turns = TurnTracker()
        self.admission = Admission(
            RECEIVER,
            clock=self.clock.clock(),
            turns=self.turns,
            submit=self._submit,
            budget=LifetimeBudget(units=10**12),
            host_idle=lambda: self.idle,
        )
        self.turns.observe(self.admission)
        adm = self.admission
        turns = self.turns
        # Prologue (untimed): drain the hog's bucket, then latch and resume to empty the queue.
        turns.handle(TurnStarted(Provenance.USER))
        for who, message in plan.prologue:
            adm.admit(who, message)
        turns.handle(TurnAborted())
        turns.handle(TurnEnded(TurnEnding.ABORTED))
        assert adm.resume().reopened
        events: dict[str, Callable[[Any, Any], object]] = {
            "peer_turn": self._peer_turn,
            "user_turn": self._user_turn,
            "end_user_turn": self._end_user_turn,
            "drain": self._drain,
        }
        self.steps: list[Step] = [
            (adm.admit, a, b) if kind == "admit" else (events[a], None, None)
            for kind, a, b in plan.ops
        ]

    @staticmethod
    def _submit(delivery: Delivery) -> None:
        del delivery

    def _peer_turn(self, _a: Any, _b: Any) -> None:
        self.turns.handle(TurnStarted(Provenance.PEER))
        self.turns.handle(TurnEnded(TurnEnding.STOP))

    def _user_turn(self, _a: Any, _b: Any) -> None:
        self.idle = False
        self.turns.handle(TurnPreparing())
        self.turns.handle(TurnStarted(Provenance.USER))

    def _end_user_turn(self, _a: Any, _b: Any) -> None:
        self.idle = True
        self.turns.handle(TurnEnded(TurnEnding.STOP))

    def _drain(self, _a: Any, _b: Any) -> None:
        while self.admission.flush_one() is not None:
            self.turns.handle(TurnStarted(Provenance.PEER))
            self.turns.handle(TurnEnded(TurnEnding.STOP))


def _noop(_a: Any, _b: Any) -> None:
    return None


def floor_steps(pipeline: list[Step], replies: list[Response | None]) -> list[Step]:
    """The same steps; a decision only builds the response admission gave, events do nothing."""
    peer = RECEIVER.peer_identity()

    def build(expected: tuple[bool, str, str | None], message: Message) -> Response:
        ok, status, error = expected
        return Response.build(
            request_id=message.request_id,
            ok=ok,
            status=status,
            error=error,
            peer=peer if ok else None,
        )

    steps: list[Step] = []
    for (_fn, _a, b), reply in zip(pipeline, replies, strict=True):
        if reply is None:
            steps.append((_noop, None, None))
        else:
            expected = (reply.ok, reply.status, None if reply.ok else refusal_text(reply.status))
            steps.append((build, expected, b))
    return steps


def run_steps(steps: list[Step], clock: BenchClock) -> float:
    gc.disable()
    try:
        started = time.perf_counter()
        for fn, a, b in steps:
            clock.t += STEP_S
            fn(a, b)
        return time.perf_counter() - started
    finally:
        gc.enable()


def bench_pipeline(cycles: int, rounds: int) -> dict[str, Any]:
    plan = make_plan(cycles)
    # Reference pass: record every reply, check the floor builds identical ones.
    first = PipelineRound(plan)
    replies: list[Response | None] = []
    for fn, a, b in first.steps:
        first.clock.t += STEP_S
        result = fn(a, b)
        replies.append(result if isinstance(result, Response) else None)
    floor = floor_steps(first.steps, replies)
    for (fn, a, b), reply in zip(floor, replies, strict=True):
        if reply is not None:
            assert fn(a, b).to_wire() == reply.to_wire()  # type: ignore[attr-defined]
    mix = Counter(r.status for r in replies if r is not None)
    decisions = sum(mix.values())
    ours: list[float] = []
    floors: list[float] = []
    for _ in range(rounds):
        fresh = PipelineRound(plan)
        ours.append(run_steps(fresh.steps, fresh.clock))
        floors.append(run_steps(floor, BenchClock()))
        assert fresh.admission.snapshot().admitted == first.admission.snapshot().admitted
    ours_median = statistics.median(ours)
    floor_median = statistics.median(floors)
    return {
        "decisions": decisions,
        "mix": dict(sorted(mix.items())),
        "rounds": rounds,
        "decisions_per_s_median": decisions / ours_median,
        "decisions_per_s_best": decisions / min(ours),
        "floor_per_s_median": decisions / floor_median,
        "us_per_decision_median": ours_median / decisions * 1e6,
        "floor_us_per_decision_median": floor_median / decisions * 1e6,
        "ratio_median": ours_median / floor_median,
        "ratio_best": min(ours) / min(floors),
    }


# -- (b) end to end --------------------------------------------------------------------------------


def _e2e_child(
    agent: str, receiver_id: str, senders: int, per_sender: int, conn: Any
) -> None:  # runs in a child process
    conn.send(anyio.run(_e2e_senders, agent, receiver_id, senders, per_sender))


async def _e2e_senders(
    agent: str, receiver_id: str, senders: int, per_sender: int
) -> dict[str, Any]:
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: agent})
    target = read_registration(locations, receiver_id)
    registrations = [
        publish(locations, sender_registration(locations, f"bench-{i}")) for i in range(senders)
    ]
    exchanger = Exchanger(locations, fs)
    admitted: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    latencies: list[float] = []

    async def run(index: int, registration: Registration) -> None:
        sender = Sender(
            id=registration.id, instance_id=registration.instance_id, token=registration.token
        )
        for k in range(per_sender):
            message = Message(
                v=WIRE_VERSION,
                type="message",
                request_id=str(uuid.uuid4()),
                message_id=f"b{index}-{k}",
                text=f"bench message {k} from sender {index}",
                summary="bench",
                sent_at=int(time.time() * 1000),
            )
            started = time.perf_counter()
            try:
                receipt = await exchanger.send(target, sender=sender, message=message)
            except ExchangeError as exc:
                refused[exc.code] += 1
            else:
                admitted[receipt.status] += 1
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index, registration in enumerate(registrations):
            group.start_soon(run, index, registration)
    elapsed = time.perf_counter() - started
    for registration in registrations:
        fs.remove_file(locations.registration_path(registration.instance_id))
    latencies.sort()
    return {
        "elapsed_s": elapsed,
        "admitted": dict(admitted),
        "refused": dict(refused),
        "latency_ms_p50": latencies[len(latencies) // 2] * 1000,
        "latency_ms_p99": latencies[int(len(latencies) * 0.99)] * 1000,
    }


async def _wait_child(process: Any, conn: Any, limit_s: float) -> Any:
    """The child's next report, waited for in a worker thread (the loop keeps serving)."""

    def receive() -> Any:
        ready = multiprocessing.connection.wait([conn, process.sentinel], limit_s)
        if conn in ready:
            return conn.recv()
        if ready:
            raise RuntimeError(f"the child process died (exit code {process.exitcode})")
        raise TimeoutError("the child process did not report in time")

    return await anyio.to_thread.run_sync(receive)


async def bench_end_to_end(senders: int, per_sender: int, busy_s: float) -> dict[str, Any]:
    with agent_dir() as locations:
        host = HeadlessHost(name="bench-inbox", busy_s=busy_s)
        runtime = SessionRuntime(host, locations=locations, options=RuntimeOptions(with_git=False))
        async with anyio.create_task_group() as group:
            await group.start(serve_inbox, host, runtime)
            identity = runtime.identity
            assert identity is not None
            ctx = spawn()
            parent, child = ctx.Pipe()
            process = ctx.Process(
                target=_e2e_child,
                args=(locations.agent_dir, identity.instance_id, senders, per_sender, child),
            )
            process.start()
            try:
                result = await _wait_child(process, parent, 120)
            finally:
                process.join(10)
            current = runtime._current  # the endpoint's counters are not public
            stats = current.endpoint.statistics() if current is not None else None
            snapshot = runtime.snapshot()
            group.cancel_scope.cancel()
    total = sum(result["admitted"].values()) + sum(result["refused"].values())
    result.update(
        {
            "senders": senders,
            "turn_s": busy_s,
            "exchanges": total,
            "exchanges_per_s": total / result["elapsed_s"],
            "receiver_admitted": snapshot.admitted if snapshot else None,
            "receiver_refusals": dict(snapshot.refusals) if snapshot else None,
            "peak_connections": stats.peak_connections if stats else None,
            "refused_over_capacity": stats.refused_over_capacity if stats else None,
        }
    )
    return result


# -- (c) memory under refusal ----------------------------------------------------------------------

#: The order frames are sent in, 16 to a cycle: malformed 4, wrong token 3, duplicate id 2,
#: duplicate text 2, rate-limited 2, busy 1, expired 1, unregistered sender 1.
SCHEDULE = (
    "malformed",
    "duplicate-id",
    "auth-wrong-token",
    "rate_limited",
    "malformed",
    "busy-legacy",
    "auth-wrong-token",
    "duplicate-text",
    "malformed",
    "expired",
    "auth-wrong-token",
    "duplicate-id",
    "malformed",
    "auth-unregistered",
    "rate_limited",
    "duplicate-text",
)
EXPECTED = {
    "duplicate-id": "duplicate",
    "rate_limited": "rate_limited",
    "busy-legacy": "busy",
    "expired": "expired",
    "malformed": "invalid_frame",
    "auth-wrong-token": "authentication_failed",
    "auth-unregistered": "authentication_failed",
    "duplicate-text": "duplicate",
}


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def _flood_frames(plan: dict[str, Any], phase: str, index: int) -> tuple[str, bytes]:
    kind = SCHEDULE[index % len(SCHEDULE)]
    target = plan["target"]

    def hello(sender: dict[str, str] | None, *, capable: bool = True, token: str | None = None):
        body: dict[str, Any] = {"v": 1, "type": "hello"}
        if capable:
            body["capabilities"] = [CANCEL_SAFE_QUEUE]
        body["requestId"] = f"h{index}"
        body["token"] = token or target["token"]
        body["target"] = {"id": target["id"], "instanceId": target["instanceId"]}
        if sender is not None:
            body["from"] = sender
        return _line(body)

    def message(message_id: str, text: str, sent_at: int) -> bytes:
        return _line(
            {
                "v": 1,
                "type": "message",
                "requestId": f"r{index}",
                "messageId": message_id,
                "text": text,
                "summary": "flood",
                "sentAt": sent_at,
            }
        )

    wall = plan["wall_ms"]
    fresh = f"{phase}-{index}"
    if kind == "duplicate-id":
        data = hello(plan["y"]) + message(f"y-{index % 10}", f"other text {fresh}", wall)
    elif kind == "rate_limited":
        data = hello(plan["x"]) + message(f"x-{fresh}", f"fresh text {fresh}", wall)
    elif kind == "busy-legacy":
        crowd = plan["crowd"]
        data = hello(crowd[index % len(crowd)], capable=False) + message(
            f"l-{fresh}", f"legacy {fresh}", wall
        )
    elif kind == "expired":
        data = hello(plan["y"]) + message(f"e-{fresh}", f"late {fresh}", wall - 60_000)
    elif kind == "malformed":
        data = b"this is not json " + fresh.encode() + b"\n"
    elif kind == "auth-wrong-token":
        data = hello(plan["y"], token="0" * 64)
    elif kind == "auth-unregistered":
        ghost = {"id": f"ghost-{fresh}", "instanceId": uuid.uuid4().hex, "token": "1" * 64}
        data = hello(ghost)
    else:  # duplicate-text
        data = hello(plan["y"]) + message(f"t-{fresh}", "queued text 0", wall)
    return kind, data


def _exchange_blocking(path: str, data: bytes) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(data)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    lines = b"".join(chunks).splitlines()
    return json.loads(lines[-1])["status"] if lines else "<no reply>"


def _flood(plan: dict[str, Any], phase: str, count: int, threads: int) -> dict[str, Any]:
    seen: list[Counter[tuple[str, str]]] = [Counter() for _ in range(threads)]

    def worker(slot: int) -> None:
        for index in range(slot, count, threads):
            kind, data = _flood_frames(plan, phase, index)
            seen[slot][(kind, _exchange_blocking(plan["path"], data))] += 1

    started = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(slot,)) for slot in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - started
    total: Counter[tuple[str, str]] = Counter()
    for counter in seen:
        total.update(counter)
    return {
        "frames": count,
        "elapsed_s": elapsed,
        "outcomes": {f"{kind} -> {status}": n for (kind, status), n in sorted(total.items())},
        "unexpected": sum(n for (kind, status), n in total.items() if EXPECTED[kind] != status),
    }


def _flood_child(plan: dict[str, Any], conn: Any) -> None:  # runs in a child process
    # The receiver checks that an authenticated sender connects from its registered pid: wait
    # until the parent has republished the senders under this process's pid.
    if conn.recv() != "registered":
        return
    conn.send(_flood(plan, "warm", plan["warmup"], plan["threads"]))
    if conn.recv() != "go":
        return
    conn.send(_flood(plan, "main", plan["frames"], plan["threads"]))


class BenchHost:
    """A host whose submissions go nowhere; busy or idle as the bench sets it."""

    session_id = "bench-memory-receiver"
    session_name = "bench-memory"
    cwd = "/bench"

    def __init__(self) -> None:
        self.idle = True

    def is_idle(self) -> bool:
        return self.idle

    def submit(self, delivery: Delivery, content: str) -> None:
        del delivery, content

    def notify(self, text: str) -> None:
        del text


def _tables(runtime: SessionRuntime) -> dict[str, int]:
    current = runtime._current  # admission's tables have no public sizes but the snapshot's
    assert current is not None
    admission = current.admission
    snapshot = admission.snapshot()
    stats = current.endpoint.statistics()
    return {
        "status_rows": len(snapshot.rows),
        "queued": snapshot.queued,
        "message_id_ledger": len(admission._ids),
        "text_digests": len(admission._texts),
        "rate_buckets": len(admission._rate),
        "refusal_counters": len(snapshot.refusals),
        "admitted": snapshot.admitted,
        "remaining_budget": snapshot.remaining_budget,
        "endpoint_accepted": stats.accepted,
        "endpoint_faults": stats.faults,
    }


class ReplayStream(anyio.abc.ByteStream):
    """One connection played to the endpoint in memory: all its bytes in one read, then EOF."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.replies: list[bytes] = []

    async def receive(self, max_bytes: int = 65_536) -> bytes:
        if not self._data:
            raise anyio.EndOfStream
        data, self._data = self._data, b""
        return data

    async def send(self, item: bytes) -> None:
        self.replies.append(item)

    async def send_eof(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def status(self) -> str:
        lines = b"".join(self.replies).splitlines()
        return str(json.loads(lines[-1])["status"]) if lines else "<no reply>"


async def _flood_in_process(
    runtime: SessionRuntime, plan: dict[str, Any], phase: str, count: int, workers: int
) -> dict[str, Any]:
    """``count`` connections through the endpoint's own connection handler, no kernel socket.

    The endpoint's accept loop is the only step skipped (``Endpoint.serve_stream``); decoding,
    hello authentication (with its registration file read), admission and reply encoding all run
    as for a socket.
    """
    current = runtime._current  # the bench drives the endpoint's per-connection handler
    assert current is not None
    endpoint = current.endpoint
    seen: Counter[tuple[str, str]] = Counter()

    async def worker(slot: int) -> None:
        for index in range(slot, count, workers):
            kind, data = _flood_frames(plan, phase, index)
            stream = ReplayStream(data)
            await endpoint.serve_stream(stream)
            seen[(kind, stream.status())] += 1
            # A real connection waits on its socket, so the event loop turns between them and
            # drops the cancelled deadline timers; replayed bytes never wait, so let it turn here.
            await anyio.lowlevel.checkpoint()

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for slot in range(workers):
            group.start_soon(worker, slot)
    elapsed = time.perf_counter() - started
    return {
        "frames": count,
        "elapsed_s": elapsed,
        "outcomes": {f"{kind} -> {status}": n for (kind, status), n in sorted(seen.items())},
        "unexpected": sum(n for (kind, status), n in seen.items() if EXPECTED[kind] != status),
    }


def _measure(runtime: SessionRuntime) -> tuple[int, int, dict[str, int]]:
    gc.collect()
    return rss_kib(), len(gc.get_objects()), _tables(runtime)


def _memory_row(
    label: str,
    run: dict[str, Any],
    before: tuple[int, int, dict[str, int]],
    after: tuple[int, int, dict[str, int]],
) -> dict[str, Any]:
    return {
        "path": label,
        "frames": run["frames"],
        "frames_per_s": run["frames"] / run["elapsed_s"],
        "outcomes": run["outcomes"],
        "unexpected_outcomes": run["unexpected"],
        "rss_kib_before": before[0],
        "rss_kib_after": after[0],
        "rss_kib_delta": after[0] - before[0],
        "rss_bytes_per_frame": (after[0] - before[0]) * 1024 / run["frames"],
        "gc_objects_delta": after[1] - before[1],
        "tables_before": before[2],
        "tables_after": after[2],
    }


async def bench_memory(
    frames: int, socket_frames: int, warmup: int, threads: int
) -> dict[str, Any]:
    with agent_dir() as locations:
        host = BenchHost()
        wall = int(time.time() * 1000)
        clock = BenchClock(wall_ms=wall)  # frozen: no refill, no expiry, no text window ending
        runtime = SessionRuntime(
            host,  # type: ignore[arg-type]
            locations=locations,
            options=RuntimeOptions(with_git=False, clock=clock.clock()),
        )
        async with anyio.create_task_group() as group:
            await group.start(runtime.run)
            host.idle = False
            runtime.on_turn(TurnPreparing())
            runtime.on_turn(TurnStarted(Provenance.USER))
            target = runtime.registration()
            assert target is not None
            x = publish(locations, sender_registration(locations, "x"))
            y = publish(locations, sender_registration(locations, "y"))
            crowd = [
                publish(locations, sender_registration(locations, f"c{i}")) for i in range(200)
            ]
            exchanger = Exchanger(locations, fs)
            for name, who, count in (("x", x, 30), ("y", y, 10)):
                sender = Sender(id=who.id, instance_id=who.instance_id, token=who.token)
                for i in range(count):
                    text = f"queued text {i}" if name == "y" else f"x text {i}"
                    msg = Message(
                        v=WIRE_VERSION,
                        type="message",
                        request_id=f"pre-{name}-{i}",
                        message_id=f"{name}-{i}",
                        text=text,
                        summary="preload",
                        sent_at=wall,
                    )
                    receipt = await exchanger.send(target, sender=sender, message=msg)
                    assert receipt.status == "queued", receipt

            def who(registration: Registration) -> dict[str, str]:
                return {
                    "id": registration.id,
                    "instanceId": registration.instance_id,
                    "token": registration.token,
                }

            plan = {
                "path": target.socket_path,
                "target": {
                    "id": target.id,
                    "instanceId": target.instance_id,
                    "token": target.token,
                },
                "x": who(x),
                "y": who(y),
                "crowd": [who(c) for c in crowd],
                "wall_ms": wall,
                "frames": socket_frames,
                "warmup": warmup,
                "threads": threads,
            }
            rows = []
            # 1. Through the endpoint in process: the 100,000, with RSS at each quarter.
            warm = await _flood_in_process(runtime, plan, "warm", warmup, 8)
            assert warm["unexpected"] == 0, warm
            before = _measure(runtime)
            checkpoints = [before[0]]
            chunks = []
            for chunk in range(4):
                share = frames // 4 + (frames % 4 if chunk == 3 else 0)
                chunks.append(await _flood_in_process(runtime, plan, f"main{chunk}", share, 8))
                checkpoints.append(_measure(runtime)[0])
            run = {
                "frames": sum(c["frames"] for c in chunks),
                "elapsed_s": sum(c["elapsed_s"] for c in chunks),
                "outcomes": dict(
                    sum((Counter(c["outcomes"]) for c in chunks), Counter()).most_common()
                ),
                "unexpected": sum(c["unexpected"] for c in chunks),
            }
            row = _memory_row("endpoint, in process", run, before, _measure(runtime))
            row["rss_kib_checkpoints"] = checkpoints
            rows.append(row)
            # 2. Over real sockets, from a second process.
            ctx = spawn()
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_flood_child, args=(plan, child))
            process.start()
            try:
                for registration in (x, y, *crowd):
                    publish(locations, registration.model_copy(update={"pid": process.pid}))
                parent.send("registered")
                warm = await _wait_child(process, parent, 120)
                assert warm["unexpected"] == 0, warm
                before = _measure(runtime)
                parent.send("go")
                run = await _wait_child(process, parent, 300)
                rows.append(_memory_row("real sockets", run, before, _measure(runtime)))
            finally:
                process.join(10)
            await runtime.stop()
            group.cancel_scope.cancel()
    return {"warmup_frames": warmup, "client_threads": threads, "runs": rows}


# -- report ----------------------------------------------------------------------------------------


def print_report(results: dict[str, Any]) -> None:
    a = results.get("pipeline")
    if a:
        print("(a) admission pipeline (fake clock, lifted budget)")
        print(f"    decisions per round: {a['decisions']}  mix: {a['mix']}")
        print(f"    {'':24}{'median':>14}{'best':>14}")
        print(
            f"    {'admit() decisions/s':24}{a['decisions_per_s_median']:>14,.0f}"
            f"{a['decisions_per_s_best']:>14,.0f}"
        )
        print(f"    {'floor (Response only)/s':24}{a['floor_per_s_median']:>14,.0f}")
        print(
            f"    {'µs per decision':24}{a['us_per_decision_median']:>14.2f}"
            f"   floor {a['floor_us_per_decision_median']:.2f}"
        )
        print(f"    {'ratio ours / floor':24}{a['ratio_median']:>14.2f}{a['ratio_best']:>14.2f}")
    b = results.get("end_to_end")
    if b:
        print(
            f"(b) end to end: {b['senders']} concurrent senders, real sockets, headless inbox "
            f"(simulated turns of {b['turn_s']:g} s)"
        )
        print(
            f"    {b['exchanges']} exchanges in {b['elapsed_s']:.2f} s = "
            f"{b['exchanges_per_s']:,.0f} exchanges/s "
            f"(p50 {b['latency_ms_p50']:.1f} ms, p99 {b['latency_ms_p99']:.1f} ms)"
        )
        print(f"    admitted: {b['admitted']}")
        print(f"    refused:  {b['refused']}")
        print(
            f"    receiver: admitted {b['receiver_admitted']}, peak connections "
            f"{b['peak_connections']}, over capacity {b['refused_over_capacity']}"
        )
    c = results.get("memory")
    if c:
        print(f"(c) receiver memory under refused frames (after {c['warmup_frames']:,} warm-up)")
        for row in c["runs"]:
            print(
                f"    {row['path']}: {row['frames']:,} frames, {row['frames_per_s']:,.0f}/s; "
                f"VmRSS {row['rss_kib_before']:,} -> {row['rss_kib_after']:,} KiB "
                f"(delta {row['rss_kib_delta']:+,} KiB = {row['rss_bytes_per_frame']:.2f} "
                f"B/frame); gc objects {row['gc_objects_delta']:+,}; "
                f"unexpected outcomes {row['unexpected_outcomes']}"
            )
            if "rss_kib_checkpoints" in row:
                marks = " -> ".join(f"{kib:,}" for kib in row["rss_kib_checkpoints"])
                print(f"      VmRSS KiB every quarter: {marks}")
        first = c["runs"][0]
        for outcome, n in first["outcomes"].items():
            print(f"      {outcome:48}{n:>8,}")
        print(
            f"    {'table':22}{'before':>10}"
            + "".join(f"{'after ' + str(i + 1):>10}" for i in range(len(c["runs"])))
        )
        for key, before in first["tables_before"].items():
            afters = "".join(f"{row['tables_after'][key]:>10,}" for row in c["runs"])
            print(f"    {key:22}{before:>10,}{afters}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--quick", action="store_true", help="a smaller, faster run")
    parser.add_argument("--cycles", type=int, default=200, help="(a) plan cycles (38 decisions)")
    parser.add_argument("--rounds", type=int, default=5, help="(a) interleaved rounds")
    parser.add_argument("--senders", type=int, default=64, help="(b) concurrent senders")
    parser.add_argument("--per-sender", type=int, default=40, help="(b) messages per sender")
    parser.add_argument("--turn-s", type=float, default=0.0, help="(b) simulated turn length")
    parser.add_argument("--frames", type=int, default=100_000, help="(c) frames in process")
    parser.add_argument("--socket-frames", type=int, default=4_000, help="(c) over sockets")
    parser.add_argument("--threads", type=int, default=8, help="(c) socket client threads")
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.rounds, args.per_sender = 100, 3, 10
        args.frames, args.socket_frames = 10_000, 2_000
    started = time.perf_counter()
    results: dict[str, Any] = {"python": sys.version.split()[0], "cores": os.cpu_count()}
    seconds: dict[str, float] = {}
    mark = time.perf_counter()
    results["pipeline"] = bench_pipeline(args.cycles, args.rounds)
    seconds["pipeline"], mark = time.perf_counter() - mark, time.perf_counter()
    results["end_to_end"] = anyio.run(bench_end_to_end, args.senders, args.per_sender, args.turn_s)
    seconds["end_to_end"], mark = time.perf_counter() - mark, time.perf_counter()
    results["memory"] = anyio.run(
        bench_memory, args.frames, args.socket_frames, min(2_000, args.frames // 10), args.threads
    )
    seconds["memory"] = time.perf_counter() - mark
    results["seconds"] = seconds
    results["total_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_report(results)
        parts = ", ".join(f"{name} {value:.1f} s" for name, value in results["seconds"].items())
        print(f"total {results['total_s']:.1f} s ({parts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
