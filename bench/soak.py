"""Soak: a live inbox under a flood, slowlorises, a parse-cost flood and descriptor pressure.

Several processes take part, all on this machine (Unix sockets in a temporary agent dir):

* the **receiver** — this file's ``--serve-receiver`` mode: a real :class:`SessionRuntime` inbox on
  the headless host with turns of 0 s (what ``pi-cross-session inbox --busy 0`` runs, without its
  printing), every contract limit at its default unless ``--deadline`` / ``--idle`` say otherwise
  (the report then says so). It answers ``stats`` on its stdin with its endpoint's counters
  (open and peak connections, refusals over capacity, deadline and idle cuts, faults, sheds,
  request-deadline cuts, costly frames, throttled reads, accept failures, the descriptor cap) and
  its admission snapshot (admitted count, refusals, the senders of its rows). It runs with its
  open-file limit lowered to ``--nofile`` (64 by default: fewer descriptors than 64 connections
  need), so the attack also exhausts its descriptors;
* the **attacker** — this file's ``--attack`` mode: on ``go`` it makes ``--flood`` connection
  attempts spread over ``--flood-seconds`` (connect and close; connect, write garbage, close;
  half a hello; hellos with a wrong token, with a legitimate sender's stolen identity and token
  from the wrong pid, or a probe followed by a message — each of the last three followed by a
  message frame whose reply it reads), opens ``--slow`` connections that never finish a line
  (one byte every ``--trickle`` seconds, no LF), and ``--trickle-ready`` connections that finish a
  valid probe hello, read ``ready``, then send one byte of a second frame every ``--trickle``
  seconds (never idle for the 5 s bound); it holds both kinds until the receiver cuts them;
* the **parse-cost flood** — this file's ``--parse-flood`` mode, ``--parse-procs`` processes of
  ``--parse-threads`` threads each: for ``--parse-seconds`` every thread sends 1 MiB first frames
  in a loop, built to be expensive to parse (an array of ~350,000 empty objects, of ~520,000
  zeros, ~520,000 empty strings) and, one in four, the valid space-padded 1 MiB probe hello,
  reading each reply;
* this process: the **legitimate sender** (a published registration, so the receiver can
  authenticate it) and the measurements.

Phases, in one run, so that the ratios compare like with like on a shared machine:

1. **at rest** — rounds on a fixed cadence, each a probe and a status query (neither costs the
   receiver budget), timed; a few real messages are sent too.
2. **under attack** — the same rounds and a few more messages while the attacker runs, until every
   slow connection has been cut (or the attacker gives up on them).
3. **after** — once the receiver has no connection left open: its RSS again, a final probe, status
   query and message (it still serves), then a clean stop (registration and socket removed).

Meanwhile the receiver's VmRSS (``/proc/<pid>/status``) and its socket descriptors
(``/proc/<pid>/fd``) are sampled every ``--sample-ms``, by this process, in both phases.

Reading it: with the contract's limits alone (64 connections; before a hello only the 30 s
connection deadline; after it a 5 s idle bound that every byte resets) the slow and the trickling
connections would hold every slot until that deadline, and the legitimate sender would be refused
for most of the attack. The receiver's answers — a connection of the process holding the most
gives way to a newcomer from another, a second frame must be complete 5 s after ``ready``, frames
too costly to parse are refused unparsed, each process's reads draw on a byte budget, and out of
descriptors the connections are held to what leaves some free — show in its counters.

Reported: the legitimate p50/p99 at rest and under attack and their ratio (target ≤ 5×), how many
legitimate rounds were answered under attack (target: all), the peak of open connections (the
endpoint's own counter and the descriptor count), RSS before / during / after (target: after
within ±5 MiB of before), the receiver's defences (sheds, cuts, costly frames, throttled reads,
accept failures, the descriptor cap) and the attackers' view. Timing targets are reported, never
enforced. Invariants make the exit status non-zero: the endpoint never held more than its 64
connections (nor the process more socket descriptors than those, its listener and one being
refused), the receiver never crashed and still serves, it stopped cleanly, and nothing was
admitted that the legitimate sender was not told was admitted (a receipt lost in the attack is
settled with a status query, as the contract says).

Run ``.venv/bin/python bench/soak.py`` (``--json`` for machine-readable output), or ``make soak``.
With the contract's 30 s connection deadline a run takes about a minute; ``--deadline 5`` gives a
quicker, clearly labelled run. Everything it creates — the temporary agent dir, the runtime dir
``/tmp/pi-peers-<uid>-<ns>``, every process — is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

import bench_support
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.frames import Message, Sender
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.limits import (
    CONNECTION_DEADLINE_S,
    IDLE_AFTER_HELLO_S,
    MAX_CONNECTIONS,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    parse_registration,
)
from pi_cross_session._internal.security.io import fs

THIS_FILE: Final = os.path.abspath(__file__)
#: Target: the legitimate p99 under attack is at most this many times the p99 at rest.
TARGET_P99_RATIO: Final = 5.0
#: Target: RSS after the attack within this many KiB of RSS before it.
TARGET_RSS_DRIFT_KIB: Final = 5 * 1024
#: The whole run must end within this (a guard; a normal run takes about 50 s).
RUN_LIMIT_S: Final = 115.0
#: How long a started process may take to say it is ready, and to stop once asked.
START_TIMEOUT_S: Final = 20.0
STOP_TIMEOUT_S: Final = 10.0
#: Kept beyond the connection deadline before the attacker stops waiting for a cut.
HOLD_GRACE_S: Final = 10.0
#: A wait for the receiver's connections to drain after the attack, at most.
DRAIN_LIMIT_S: Final = 15.0
#: Rounds made and thrown away before phase 1 (imports, caches, first connections).
WARMUP_ROUNDS: Final = 30
#: Legitimate messages sent in each phase (25 in all: under the token bucket's burst of 30).
SENDS_AT_REST: Final = 10
SENDS_UNDER_ATTACK: Final = 10
SENDS_AFTER: Final = 5
#: Receipts that mean the receiver committed the message (``injection_failed`` was committed too).
ADMITTED_RECEIPTS: Final = frozenset({"submitted", "queued", "accepted", "injection_failed"})
#: What a status query answers for a message the receiver has no row for (never admitted).
ROW_UNKNOWN: Final = "unknown"
#: Tries of a status query that settles a lost receipt (after the attack, at rest).
SETTLE_TRIES: Final = 3
#: Flood kinds, taken in turn: (name, whether a message frame follows and its reply is read).
FLOOD_KINDS: Final = (
    ("connect_close", False),
    ("garbage_line", False),
    ("half_hello", False),
    ("wrong_token_message", True),
    ("stolen_identity_message", True),
    ("probe_then_message", True),
)
#: How long an attacker waits for the replies to one of its message attempts.
ATTACK_REPLY_LIMIT_S: Final = 3.0
#: The parse-cost frames, in turn (each 1 MiB with its LF), and how long a flood thread waits for
#: one reply before it gives up on that connection.
PARSE_KINDS: Final = ("objects", "zeros", "strings", "padded_hello")
PARSE_REPLY_LIMIT_S: Final = 10.0


# -- shared helpers -------------------------------------------------------------------------------


def emit(event: str, **data: Any) -> None:
    """One JSON line on stdout (the control channel of the child modes)."""
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


async def stdin_lines() -> AsyncIterator[bytes]:
    """Lines of stdin as they arrive, watched by the loop (no thread)."""
    fd = sys.stdin.fileno()
    os.set_blocking(fd, False)
    buffer = b""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65_536)
        except BlockingIOError:
            continue
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line.strip()


def percentile_us(values: list[int], fraction: float) -> float | None:
    """Nearest-rank percentile of nanosecond samples, in microseconds (None without samples)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered))))
    return ordered[rank - 1] / 1000


def percentile_all_us(values: list[int], failed: int, fraction: float) -> float | None:
    """The percentile over every attempt, a failed one counting as never answered: ``None`` when
    that percentile falls on a failure (or there was no attempt)."""
    ordered = sorted(values)
    total = len(ordered) + failed
    if not total:
        return None
    rank = min(total, max(1, math.ceil(fraction * total)))
    return ordered[rank - 1] / 1000 if rank <= len(ordered) else None


# -- the receiver process (--serve-receiver) ------------------------------------------------------


def receiver_stats(runtime: SessionRuntime) -> dict[str, Any]:
    """The endpoint's counters and the admission snapshot of the running incarnation."""
    current = runtime._current  # the runtime offers no public handle on its endpoint's counters
    endpoint = None if current is None else current.endpoint.statistics()
    snapshot = runtime.snapshot()
    data: dict[str, Any] = {"running": current is not None}
    if endpoint is not None:
        data["endpoint"] = {
            "open": endpoint.open_connections,
            "peak": endpoint.peak_connections,
            "accepted": endpoint.accepted,
            "refused_over_capacity": endpoint.refused_over_capacity,
            "deadline_cuts": endpoint.deadline_cuts,
            "idle_cuts": endpoint.idle_cuts,
            "faults": endpoint.faults,
            # Read with defaults, so the same soak can measure a receiver from before these
            # counters existed (``PYTHONPATH=<old checkout>/src``).
            "shed": getattr(endpoint, "shed", getattr(endpoint, "shed_waiting", 0)),
            "shed_for_descriptors": getattr(endpoint, "shed_for_descriptors", 0),
            "request_deadline_cuts": getattr(endpoint, "request_deadline_cuts", 0),
            "costly_frames": getattr(endpoint, "costly_frames", 0),
            "throttled_reads": getattr(endpoint, "throttled_reads", 0),
            "accept_failures": dict(getattr(endpoint, "accept_failures", {})),
            "descriptor_cap": getattr(endpoint, "descriptor_cap", None),
            "memory_given_back": getattr(endpoint, "memory_given_back", 0),
        }
    if snapshot is not None:
        data["admission"] = {
            "admitted": snapshot.admitted,
            "refusals": snapshot.refusals,
            "remaining_budget": snapshot.remaining_budget,
            "queued": snapshot.queued,
            "row_senders": dict(Counter(row.sender_instance_id for row in snapshot.rows)),
            "row_states": dict(Counter(row.state for row in snapshot.rows)),
        }
    checks = runtime.peer_checks()
    if checks is not None:
        data["hello_refusals"] = dict(checks.auth.refusals)
    return data


def lower_open_files(limit: int) -> None:
    """Lower this process's open-file limit (soft and hard) to ``limit``; 0 leaves it alone."""
    if limit > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, min(limit, hard)))


async def serve_receiver(name: str, deadline_s: float, idle_s: float, nofile: int) -> int:
    """A headless inbox with 0 s turns; ``stats`` and ``stop`` on stdin, JSON lines on stdout."""
    lower_open_files(nofile)
    host = HeadlessHost(name=name, busy_s=0.0)
    endpoint = EndpointConfig(connection_deadline_s=deadline_s, idle_after_hello_s=idle_s)
    runtime = SessionRuntime(host, options=RuntimeOptions(with_git=False, endpoint=endpoint))
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:
            await group.start(serve_inbox, host, runtime)
            registration = runtime.registration()
            assert registration is not None
            emit("ready", instanceId=registration.instance_id, pid=os.getpid())

            async def commands() -> None:
                async for line in stdin_lines():
                    if line == b"stats":
                        emit("stats", **receiver_stats(runtime))
                    elif line == b"stop":
                        break
                runtime.request_stop()

            async def on_signal() -> None:
                async for _ in signals:
                    runtime.request_stop()
                    return

            group.start_soon(commands)
            group.start_soon(on_signal)
            await runtime.wait_finished()
            emit("stopped", error=None if runtime.last_error is None else str(runtime.last_error))
            group.cancel_scope.cancel()
    return 0 if runtime.last_error is None else 1


# -- the attacker process (--attack) --------------------------------------------------------------


@dataclass
class AttackPlan:
    """What the attacker does; passed as JSON on its command line."""

    socket_path: str
    target_id: str
    target_instance_id: str
    target_token: str
    stolen_id: str
    stolen_instance_id: str
    stolen_token: str
    flood: int
    flood_s: float
    slow: int
    trickle_s: float
    max_hold_s: float
    trickle_ready: int = 0


@dataclass
class AttackTally:
    """What the attacker saw."""

    attempts: Counter[str] = field(default_factory=Counter)
    connect_errors: Counter[str] = field(default_factory=Counter)
    replies: Counter[str] = field(default_factory=Counter)
    #: Message frames of the attacker answered with an admission receipt (must stay 0).
    admitted: int = 0
    flood_s: float = 0.0
    slow_opened: int = 0
    slow_connect_errors: int = 0
    #: Seconds from connect to the receiver's close, per slow connection it cut.
    slow_cut_after_s: list[float] = field(default_factory=list)
    slow_not_cut: int = 0
    #: Connections that got ``ready`` and then trickled a second frame: opened, the replies
    #: their hellos got, and seconds from ``ready`` to the receiver's close for each one it cut.
    ready_opened: int = 0
    ready_replies: Counter[str] = field(default_factory=Counter)
    ready_cut_after_s: list[float] = field(default_factory=list)
    ready_not_cut: int = 0


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def attack_bytes(plan: AttackPlan, kind: str, serial: int) -> bytes:
    """The bytes one flood attempt writes (``b""``: nothing)."""
    target = {"id": plan.target_id, "instanceId": plan.target_instance_id}
    hello: dict[str, Any] = {
        "v": 1,
        "type": "hello",
        "capabilities": ["cancel-safe-queue-v1"],
        "requestId": f"attack-h{serial}",
        "token": plan.target_token,
        "target": target,
    }
    message = {
        "v": 1,
        "type": "message",
        "requestId": f"attack-r{serial}",
        "messageId": f"attack-m{serial}",
        "text": f"forged message {serial}",
        "summary": "forged",
        "sentAt": time.time_ns() // 1_000_000,
    }
    if kind == "connect_close":
        return b""
    if kind == "garbage_line":
        return os.urandom(48).replace(b"\n", b"?") + b"\n"
    if kind == "half_hello":
        return _line(hello)[:40]
    if kind == "wrong_token_message":
        hello["token"] = "0" * 64
        hello["from"] = {
            "id": plan.stolen_id,
            "instanceId": plan.stolen_instance_id,
            "token": "1" * 64,
        }
        return _line(hello) + _line(message)
    if kind == "stolen_identity_message":
        # A same-uid attacker can read the legitimate sender's registration, token included; the
        # receiver must still refuse it, since the connecting pid is not the registered one.
        hello["from"] = {
            "id": plan.stolen_id,
            "instanceId": plan.stolen_instance_id,
            "token": plan.stolen_token,
        }
        return _line(hello) + _line(message)
    if kind == "probe_then_message":
        return _line(hello) + _line(message)
    raise ValueError(kind)


async def flood_attempt(plan: AttackPlan, tally: AttackTally, kind: str, serial: int) -> None:
    """One connection of the flood: connect, write this kind's bytes, maybe read, close."""
    tally.attempts[kind] += 1
    reads = dict(FLOOD_KINDS)[kind]
    try:
        stream = await anyio.connect_unix(plan.socket_path)
    except OSError as exc:
        tally.connect_errors[type(exc).__name__] += 1
        return
    try:
        data = attack_bytes(plan, kind, serial)
        if data:
            await stream.send(data)
        if not reads:
            return
        received = b""
        with anyio.move_on_after(ATTACK_REPLY_LIMIT_S):
            while True:
                try:
                    chunk = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    break
                received += chunk
        if not received:
            tally.replies["(closed without a reply)"] += 1
        for raw in received.splitlines():
            try:
                reply = json.loads(raw)
            except ValueError:
                tally.replies["unparsable"] += 1
                continue
            status = str(reply.get("status"))
            tally.replies[status] += 1
            if reply.get("ok") is True and status in ADMITTED_RECEIPTS:
                tally.admitted += 1
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        tally.replies["(closed before the write)"] += 1
    finally:
        await anyio.aclose_forcefully(stream)


async def trickle_until_cut(
    stream: anyio.abc.ByteStream, payload: bytes, plan: AttackPlan, *, first_byte_at_once: bool
) -> bool:
    """Send ``payload`` one byte every ``plan.trickle_s`` (the first at once, or after a pause)
    until the receiver closes the connection or ``plan.max_hold_s`` passes; True if it closed."""
    cut = False
    async with anyio.create_task_group() as group:

        async def trickle() -> None:
            for index, byte in enumerate(payload):
                if index or not first_byte_at_once:
                    await anyio.sleep(plan.trickle_s)
                try:
                    await stream.send(bytes([byte]))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return

        async def watch() -> None:
            nonlocal cut
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                while await stream.receive():
                    pass
            cut = True
            group.cancel_scope.cancel()

        group.start_soon(trickle)
        group.start_soon(watch)
        await anyio.sleep(plan.max_hold_s)
        group.cancel_scope.cancel()
    return cut


async def slow_connection(plan: AttackPlan, tally: AttackTally) -> None:
    """Connect, then trickle bytes without ever an LF, until the receiver closes or we give up."""
    try:
        stream = await anyio.connect_unix(plan.socket_path)
    except OSError:
        tally.slow_connect_errors += 1
        return
    tally.slow_opened += 1
    opened = time.monotonic()
    cut = False
    try:
        payload = b'{"v":1,"type":"hello","requestId":"' + b"s" * 10_000
        cut = await trickle_until_cut(stream, payload, plan, first_byte_at_once=True)
    finally:
        await anyio.aclose_forcefully(stream)
    if cut:
        tally.slow_cut_after_s.append(time.monotonic() - opened)
    else:
        tally.slow_not_cut += 1


async def ready_trickle_connection(plan: AttackPlan, tally: AttackTally) -> None:
    """Connect, send a valid probe hello, read ``ready``, then trickle a second frame one byte
    every ``trickle_s`` (never idle long enough for the idle bound) until the receiver closes."""
    try:
        stream = await anyio.connect_unix(plan.socket_path)
    except OSError:
        tally.slow_connect_errors += 1
        return
    tally.ready_opened += 1
    cut = False
    ready_at: float | None = None
    try:
        hello = attack_bytes(plan, "probe_then_message", tally.ready_opened).split(b"\n")[0]
        received = b""
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            await stream.send(hello + b"\n")
            with anyio.move_on_after(ATTACK_REPLY_LIMIT_S):
                while b"\n" not in received:
                    received += await stream.receive()
        try:
            status = str(json.loads(received.split(b"\n")[0]).get("status"))
        except ValueError:
            status = "(no reply)"
        tally.ready_replies[status] += 1
        if status != "ready":
            return
        ready_at = time.monotonic()
        payload = b'{"v":1,"type":"message","requestId":"r","text":"' + b"t" * 10_000
        cut = await trickle_until_cut(stream, payload, plan, first_byte_at_once=False)
    finally:
        await anyio.aclose_forcefully(stream)
    if ready_at is not None:
        if cut:
            tally.ready_cut_after_s.append(time.monotonic() - ready_at)
        else:
            tally.ready_not_cut += 1


async def run_attack(plan: AttackPlan) -> int:
    """Wait for ``go`` on stdin, attack, print the tally."""
    tally = AttackTally()
    emit("ready", pid=os.getpid())
    async for line in stdin_lines():
        if line == b"go":
            break
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        # The slow connections are opened among the first flood attempts, all within the
        # flood's first half: they compete with it (and with the legitimate sender) for slots.
        slow_every = plan.flood_s / 2 / max(1, plan.slow)
        spacing = plan.flood_s / max(1, plan.flood)
        next_slow = 0
        for _ in range(plan.trickle_ready):
            group.start_soon(ready_trickle_connection, plan, tally)
        for serial in range(plan.flood):
            at = started + serial * spacing
            while next_slow < plan.slow and started + next_slow * slow_every <= at:
                group.start_soon(slow_connection, plan, tally)
                next_slow += 1
            await anyio.sleep(max(0.0, at - time.monotonic()))
            kind = FLOOD_KINDS[serial % len(FLOOD_KINDS)][0]
            group.start_soon(flood_attempt, plan, tally, kind, serial)
        while next_slow < plan.slow:
            group.start_soon(slow_connection, plan, tally)
            next_slow += 1
        tally.flood_s = time.monotonic() - started
    cuts = tally.slow_cut_after_s
    emit(
        "result",
        attempts=dict(tally.attempts),
        connectErrors=dict(tally.connect_errors),
        replies=dict(tally.replies),
        admitted=tally.admitted,
        floodSeconds=round(tally.flood_s, 3),
        slowOpened=tally.slow_opened,
        slowConnectErrors=tally.slow_connect_errors,
        slowCutAtOnce=sum(1 for s in cuts if s < 1.0),
        slowCutLater=sum(1 for s in cuts if s >= 1.0),
        slowCutLaterMin=round(min((s for s in cuts if s >= 1.0), default=0.0), 2),
        slowCutLaterMax=round(max((s for s in cuts if s >= 1.0), default=0.0), 2),
        slowNotCut=tally.slow_not_cut,
        readyOpened=tally.ready_opened,
        readyReplies=dict(tally.ready_replies),
        readyCut=len(tally.ready_cut_after_s),
        readyCutMaxAfterReady=round(max(tally.ready_cut_after_s, default=0.0), 2),
        readyNotCut=tally.ready_not_cut,
    )
    return 0


# -- the parse-cost flood (--parse-flood) ---------------------------------------------------------


@dataclass
class ParsePlan:
    """What one parse-flood process does; passed as JSON on its command line."""

    socket_path: str
    target_id: str
    target_instance_id: str
    target_token: str
    threads: int
    seconds: float


def parse_frames(plan: ParsePlan) -> dict[str, bytes]:
    """The frames of the flood by kind, each exactly 1 MiB with its LF (space-padded)."""
    cap = 1_048_576
    hello = _line(
        {
            "v": 1,
            "type": "hello",
            "requestId": "parse-flood",
            "token": plan.target_token,
            "target": {"id": plan.target_id, "instanceId": plan.target_instance_id},
        }
    )[:-1]
    items = (cap - 8) // 3
    bodies = {
        "objects": b"[" + b"{}," * items + b"{}]",
        "zeros": b"[" + b"0," * ((cap - 8) // 2) + b"0]",
        "strings": b"[" + b'"",' * items + b'""]',
        "padded_hello": hello,
    }
    return {kind: body.ljust(cap - 1) + b"\n" for kind, body in bodies.items()}


def parse_thread(
    plan: ParsePlan, frames: dict[str, bytes], until: float, tally: Counter[str]
) -> None:
    """Send the frames in turn, one connection each, until ``until``; count replies and bytes."""
    serial = 0
    while time.monotonic() < until:
        kind = PARSE_KINDS[serial % len(PARSE_KINDS)]
        serial += 1
        frame = frames[kind]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(PARSE_REPLY_LIMIT_S)
                sock.connect(plan.socket_path)
                sock.sendall(frame)
                tally["bytes"] += len(frame)
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = sock.recv(65_536)
                    if not chunk:
                        break
                    reply += chunk
            status = str(json.loads(reply).get("status")) if reply else "(closed)"
        except (OSError, ValueError) as exc:
            status = type(exc).__name__
        tally[f"{kind}:{status}"] += 1
        tally["frames"] += 1


async def run_parse_flood(plan: ParsePlan) -> int:
    """Wait for ``go`` on stdin, flood from ``threads`` threads, print the tally."""
    frames = parse_frames(plan)
    emit("ready", pid=os.getpid())
    async for line in stdin_lines():
        if line == b"go":
            break
    tallies: list[Counter[str]] = [Counter() for _ in range(plan.threads)]
    started = time.monotonic()
    until = started + plan.seconds
    async with anyio.create_task_group() as group:
        for tally in tallies:
            group.start_soon(
                partial(anyio.to_thread.run_sync, parse_thread, plan, frames, until, tally)
            )
    total: Counter[str] = sum(tallies, Counter())
    elapsed = time.monotonic() - started
    emit(
        "result",
        frames=total.pop("frames", 0),
        mib=round(total.pop("bytes", 0) / 1_048_576, 1),
        seconds=round(elapsed, 2),
        replies=dict(total),
    )
    return 0


# -- the measuring side ---------------------------------------------------------------------------


class Child:
    """A child process with a JSON-lines control channel on its stdin and stdout."""

    def __init__(self, name: str, process: anyio.abc.Process, log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        assert process.stdout is not None
        self._reader = BufferedByteReceiveStream(process.stdout)
        self._lock = anyio.Lock()
        self.ready: dict[str, Any] = {}

    @classmethod
    async def start(cls, name: str, argv: list[str], env: dict[str, str], root: Path) -> Child:
        log_path = root / f"{name}.log"
        with log_path.open("wb") as log:
            process = await anyio.open_process(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env
            )
        child = cls(name, process, log_path)
        with anyio.fail_after(START_TIMEOUT_S):
            child.ready = await child.next_event("ready")
        return child

    @property
    def pid(self) -> int:
        return self.process.pid

    async def next_event(self, event: str) -> dict[str, Any]:
        """The next JSON line of this kind (other lines are skipped)."""
        while True:
            try:
                raw = await self._reader.receive_until(b"\n", 1 << 20)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                log = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"{self.name} ended before {event!r}:\n{log}") from None
            data = json.loads(raw)
            if data.get("event") == event:
                return data  # type: ignore[no-any-return]

    async def command(self, line: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line.encode() + b"\n")

    async def ask(self, line: str, event: str) -> dict[str, Any]:
        """Send a command and wait for its answer (one question at a time)."""
        async with self._lock:
            await self.command(line)
            return await self.next_event(event)

    async def stop(self) -> int | None:
        """Ask it to end (stdin closed, then SIGTERM, then SIGKILL); its exit status."""
        if self.process.returncode is None:
            with contextlib.suppress(Exception):
                assert self.process.stdin is not None
                await self.process.stdin.aclose()
            with anyio.move_on_after(STOP_TIMEOUT_S):
                return await self.process.wait()
            self.process.terminate()
            with anyio.move_on_after(STOP_TIMEOUT_S):
                return await self.process.wait()
            self.process.kill()
        return await self.process.wait()


def proc_sample(pid: int) -> tuple[int, int] | None:
    """``(VmRSS KiB, socket descriptors)`` of a process, from /proc; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")
        )
        sockets = 0
        for name in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    sockets += 1
    except (OSError, StopIteration, ValueError):
        return None
    return rss, sockets


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Sampler:
    """Samples the receiver's RSS and socket descriptors, tagged with the phase."""

    pid: int
    interval_s: float
    phase: str = "rest"
    samples: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            sample = await anyio.to_thread.run_sync(proc_sample, self.pid)
            if sample is not None:
                self.samples.setdefault(self.phase, []).append(sample)
            await anyio.sleep(self.interval_s)

    def rss(self, phase: str) -> list[int]:
        return [rss for rss, _ in self.samples.get(phase, [])]

    def sockets(self, phase: str) -> list[int]:
        return [sockets for _, sockets in self.samples.get(phase, [])]


@dataclass
class Phase:
    """Timed legitimate rounds of one phase."""

    probe_ns: list[int] = field(default_factory=list)
    status_ns: list[int] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    #: perf_counter_ns when the phase began, and when each answered probe ended.
    started_ns: int = field(default_factory=time.perf_counter_ns)
    answered_at_ns: list[int] = field(default_factory=list)
    ended_ns: int | None = None
    #: When (seconds into the phase) each failed probe or status query began.
    failed_at_s: list[float] = field(default_factory=list)

    def longest_silence(self) -> tuple[float, float]:
        """The longest stretch of the phase with no answered probe, and when it began (both in
        seconds, the second from the start of the phase)."""
        marks = [self.started_ns, *self.answered_at_ns, self.ended_ns or time.perf_counter_ns()]
        gap, begun = max((b - a, a) for a, b in itertools.pairwise(marks))
        return gap / 1e9, (begun - self.started_ns) / 1e9

    def longest_silence_s(self) -> float:
        """The longest stretch of the phase with no answered probe."""
        return self.longest_silence()[0]

    def figures(self) -> dict[str, Any]:
        probe_failed = sum(n for k, n in self.failures.items() if k.startswith("probe "))
        status_failed = sum(n for k, n in self.failures.items() if k.startswith("status "))
        return {
            "rounds": self.rounds,
            "probes_ok": len(self.probe_ns),
            "status_ok": len(self.status_ns),
            "probe_p50_us": percentile_us(self.probe_ns, 0.50),
            "probe_p99_us": percentile_us(self.probe_ns, 0.99),
            "probe_p99_all_us": percentile_all_us(self.probe_ns, probe_failed, 0.99),
            "status_p50_us": percentile_us(self.status_ns, 0.50),
            "status_p99_us": percentile_us(self.status_ns, 0.99),
            "status_p99_all_us": percentile_all_us(self.status_ns, status_failed, 0.99),
            "failures": dict(self.failures),
            "longest_silence_s": round(self.longest_silence()[0], 2),
            "longest_silence_from_s": round(self.longest_silence()[1], 2),
            "failed_at_s": self.failed_at_s,
        }


class Legit:
    """The legitimate sender: probes, status queries and messages, with a ledger of receipts."""

    def __init__(self, locations: Locations, target: Registration, sender: Sender) -> None:
        self.exchanger = Exchanger(locations, fs)
        self.target = target
        self.sender = sender
        self.serial = 0
        #: message id -> the receipt status, ``refused:<code>`` or ``unknown:<code>``.
        self.ledger: dict[str, str] = {}
        self.known_id: str | None = None

    async def probe(self, phase: Phase) -> None:
        before = time.perf_counter_ns()
        try:
            await self.exchanger.probe(self.target)
        except ExchangeError as exc:
            phase.failures[f"probe {exc.code}"] += 1
            phase.failed_at_s.append(round((before - phase.started_ns) / 1e9, 2))
            return
        now = time.perf_counter_ns()
        phase.probe_ns.append(now - before)
        phase.answered_at_ns.append(now)

    async def status(self, phase: Phase) -> None:
        assert self.known_id is not None
        before = time.perf_counter_ns()
        try:
            await self.exchanger.query_status(
                self.target, sender=self.sender, message_id=self.known_id
            )
        except ExchangeError as exc:
            phase.failures[f"status {exc.code}"] += 1
            phase.failed_at_s.append(round((before - phase.started_ns) / 1e9, 2))
            return
        phase.status_ns.append(time.perf_counter_ns() - before)

    async def send(self) -> str:
        """One message; records and returns its outcome."""
        self.serial += 1
        message_id = f"soak-{self.serial}-{uuid.uuid4().hex[:8]}"
        message = Message(
            v=1,
            type="message",
            request_id=str(uuid.uuid4()),
            message_id=message_id,
            text=f"Soak message {self.serial}: the build is green; please rebase when you can.",
            summary=f"Soak message {self.serial}",
            sent_at=time.time_ns() // 1_000_000,
        )
        try:
            receipt = await self.exchanger.send(self.target, sender=self.sender, message=message)
            outcome = receipt.status
        except ExchangeError as exc:
            if exc.verdict.state == "refused":
                outcome = f"refused:{exc.code}"
            elif exc.message_written:
                outcome = f"unknown:{exc.code}"  # settled by a status query after the attack
            else:
                outcome = f"not_sent:{exc.code}"  # the message frame never left: not delivered
        self.ledger[message_id] = outcome
        if outcome in ADMITTED_RECEIPTS and self.known_id is None:
            self.known_id = message_id
        return outcome

    async def settle_unknown(self) -> dict[str, str]:
        """Ask the receiver about every message whose receipt was lost: its row state or
        ``unknown`` (no row: not admitted)."""
        settled: dict[str, str] = {}
        for message_id, outcome in self.ledger.items():
            if not outcome.startswith("unknown:"):
                continue
            settled[message_id] = "unanswered"
            for _ in range(SETTLE_TRIES):
                try:
                    receipt = await self.exchanger.query_status(
                        self.target, sender=self.sender, message_id=message_id
                    )
                except ExchangeError:
                    await anyio.sleep(0.2)
                    continue
                settled[message_id] = receipt.status
                break
        return settled


async def rounds(
    legit: Legit,
    phase: Phase,
    *,
    interval_s: float,
    count: int | None = None,
    until: Callable[[], bool] | None = None,
    sends: int = 0,
) -> None:
    """Rounds (a probe, then a status query) every ``interval_s``; ``sends`` messages spread
    evenly over the first ``count`` rounds, or one every 100 rounds when open-ended."""
    every = max(1, (count or 100 * sends) // max(1, sends)) if sends else 0
    sent = 0
    next_at = time.monotonic()
    while (count is None or phase.rounds < count) and not (until is not None and until()):
        phase.rounds += 1
        await legit.probe(phase)
        await legit.status(phase)
        if sends and sent < sends and phase.rounds % every == 0:
            await legit.send()
            sent += 1
        next_at += interval_s
        now = time.monotonic()
        if next_at < now:
            next_at = now  # an overrun round is not made up by bunching the next ones
        await anyio.sleep(next_at - now)
    phase.ended_ns = time.perf_counter_ns()
    while sent < sends:
        await legit.send()
        sent += 1


def publish_sender(locations: Locations) -> tuple[Registration, Sender]:
    """The legitimate sender's registration (this process's pid), published."""
    return bench_support.publish_sender(locations, f"soak-sender-{uuid.uuid4()}")


def read_registration(locations: Locations, instance_id: str) -> Registration:
    raw = fs.read_registration_bytes(locations.registration_path(instance_id))
    return parse_registration(
        raw, file_stem=instance_id, expected_socket_path=locations.socket_path(instance_id)
    )


async def final_send(legit: Legit) -> str:
    """A message after the attack; ``busy`` (a 0 s turn still settling) is retried a few times."""
    outcome = ""
    for _ in range(5):
        outcome = await legit.send()
        if outcome != "refused:busy":
            break
        await anyio.sleep(0.2)
    return outcome


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pi-bench-soak-"))
    agent_dir = str(root / "agent")
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: agent_dir})
    env = {**os.environ, paths.AGENT_DIR_ENV: agent_dir, "PYTHONUNBUFFERED": "1"}
    receiver: Child | None = None
    attacker: Child | None = None
    parsers: list[Child] = []
    try:
        started = time.monotonic()
        argv = [sys.executable, THIS_FILE, "--serve-receiver", "soak-receiver"]
        argv += ["--deadline", f"{args.deadline}", "--idle", f"{args.idle}"]
        argv += ["--nofile", f"{args.nofile}"]
        receiver = await Child.start("receiver", argv, env, root)
        target = read_registration(locations, receiver.ready["instanceId"])
        sender_registration, sender = publish_sender(locations)
        legit = Legit(locations, target, sender)
        sampler = Sampler(receiver.pid, args.sample_ms / 1000)
        async with anyio.create_task_group() as group:
            group.start_soon(sampler.run)

            # Warm-up, untimed; the first message gives the status queries a row to ask about.
            sampler.phase = "warmup"
            if await legit.send() not in ADMITTED_RECEIPTS:
                raise SystemExit(f"the first legitimate message was refused: {legit.ledger}")
            await rounds(legit, Phase(), interval_s=0, count=WARMUP_ROUNDS)

            # Phase 1: at rest.
            sampler.phase = "rest"
            cpu_rest = (cpu_seconds(receiver.pid), time.monotonic())
            rest = Phase()
            await rounds(
                legit,
                rest,
                interval_s=args.interval_ms / 1000,
                count=args.rounds,
                sends=SENDS_AT_REST - 1,  # the first was sent during the warm-up
            )
            stats_rest = await receiver.ask("stats", "stats")
            cpu_rest_share = (cpu_seconds(receiver.pid) - cpu_rest[0]) / (
                time.monotonic() - cpu_rest[1]
            )

            # Phase 2: under attack.
            plan = AttackPlan(
                socket_path=target.socket_path,
                target_id=target.id,
                target_instance_id=target.instance_id,
                target_token=target.token,
                stolen_id=sender_registration.id,
                stolen_instance_id=sender_registration.instance_id,
                stolen_token=sender_registration.token,
                flood=args.flood,
                flood_s=args.flood_seconds,
                slow=args.slow,
                trickle_s=args.trickle,
                max_hold_s=args.deadline + HOLD_GRACE_S,
                trickle_ready=args.trickle_ready,
            )
            attack_argv = [sys.executable, THIS_FILE, "--attack", json.dumps(plan.__dict__)]
            attacker = await Child.start("attacker", attack_argv, env, root)
            parse_plan = ParsePlan(
                socket_path=target.socket_path,
                target_id=target.id,
                target_instance_id=target.instance_id,
                target_token=target.token,
                threads=args.parse_threads,
                seconds=args.parse_seconds,
            )
            parse_argv = [
                sys.executable,
                THIS_FILE,
                "--parse-flood",
                json.dumps(parse_plan.__dict__),
            ]
            for number in range(args.parse_procs):
                parsers.append(await Child.start(f"parser-{number}", parse_argv, env, root))
            parse_results: list[dict[str, Any]] = []
            attack_result: dict[str, Any] = {}
            attack = Phase()
            open_during: list[int] = []

            async def watch_attacker() -> None:
                assert attacker is not None
                attack_result.update(await attacker.next_event("result"))

            async def watch_parser(parser: Child) -> None:
                parse_results.append(await parser.next_event("result"))

            def attack_over() -> bool:
                return bool(attack_result) and len(parse_results) == len(parsers)

            async def watch_endpoint() -> None:
                assert receiver is not None
                while not attack_over():
                    stats = await receiver.ask("stats", "stats")
                    open_during.append(stats["endpoint"]["open"])
                    await anyio.sleep(0.25)

            sampler.phase = "attack"
            attack_started = time.monotonic()
            cpu_attack_started = cpu_seconds(receiver.pid)
            await attacker.command("go")
            for parser in parsers:
                await parser.command("go")
            async with anyio.create_task_group() as attack_group:
                attack_group.start_soon(watch_attacker)
                for parser in parsers:
                    attack_group.start_soon(watch_parser, parser)
                attack_group.start_soon(watch_endpoint)
                await rounds(
                    legit,
                    attack,
                    interval_s=args.interval_ms / 1000,
                    until=attack_over,
                    sends=SENDS_UNDER_ATTACK,
                )
            attack_s = time.monotonic() - attack_started
            cpu_attack_share = (cpu_seconds(receiver.pid) - cpu_attack_started) / attack_s
            attacker_exit = await attacker.stop()
            parser_exits = [await parser.stop() for parser in parsers]

            # Phase 3: after. The receiver must drain, then serve as before.
            sampler.phase = "drain"
            with anyio.move_on_after(DRAIN_LIMIT_S):
                # Polling a counter in another process: there is no event to wait on.
                while (await receiver.ask("stats", "stats"))["endpoint"]["open"]:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # let the allocator settle before the "after" readings
            sampler.phase = "after"
            await anyio.sleep(max(1.0, 5 * args.sample_ms / 1000))
            after = Phase()
            await rounds(legit, after, interval_s=args.interval_ms / 1000, count=20)
            finals = [await final_send(legit) for _ in range(SENDS_AFTER)]
            settled = await legit.settle_unknown()
            stats_after = await receiver.ask("stats", "stats")
            group.cancel_scope.cancel()

        alive_before_stop = receiver.process.returncode is None
        await receiver.command("stop")
        with anyio.fail_after(STOP_TIMEOUT_S):
            stopped = await receiver.next_event("stopped")
        receiver_exit = await receiver.stop()
        receiver = None
        files_left = [
            path
            for path in (locations.registration_path(target.instance_id), target.socket_path)
            if await anyio.Path(path).exists() or await anyio.Path(path).is_symlink()
        ]
        return {
            "limits": {
                "max_connections": MAX_CONNECTIONS,
                "deadline_s": args.deadline,
                "idle_s": args.idle,
                "contract_defaults": args.deadline == CONNECTION_DEADLINE_S
                and args.idle == IDLE_AFTER_HELLO_S,
            },
            "plan": {
                "flood": args.flood,
                "flood_s": args.flood_seconds,
                "slow": args.slow,
                "trickle_s": args.trickle,
                "trickle_ready": args.trickle_ready,
                "parse_procs": args.parse_procs,
                "parse_threads": args.parse_threads,
                "parse_s": args.parse_seconds,
                "nofile": args.nofile,
                "interval_ms": args.interval_ms,
            },
            "rest": rest.figures(),
            "attack": attack.figures(),
            "after": after.figures(),
            "attack_s": round(attack_s, 2),
            "receiver_cpu_share": {
                "rest": round(cpu_rest_share, 3),
                "attack": round(cpu_attack_share, 3),
            },
            "attacker": attack_result,
            "attacker_exit": attacker_exit,
            "parsers": parse_results,
            "parser_exits": parser_exits,
            "open_during": open_during,
            "stats_rest": stats_rest,
            "stats_after": stats_after,
            "rss_kib": {
                "rest": sampler.rss("rest"),
                "attack": sampler.rss("attack"),
                "after": sampler.rss("after"),
            },
            "sockets": {
                "rest": sampler.sockets("rest"),
                "attack": sampler.sockets("attack"),
                "drain": sampler.sockets("drain"),
                "after": sampler.sockets("after"),
            },
            "legit": sender.instance_id,
            "ledger": legit.ledger,
            "settled": settled,
            "finals": finals,
            "alive_before_stop": alive_before_stop,
            "stopped": stopped,
            "receiver_exit": receiver_exit,
            "files_left": files_left,
            "run_s": round(time.monotonic() - started, 1),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
        }
    finally:
        with anyio.CancelScope(shield=True):
            for child in (attacker, *parsers, receiver):
                if child is not None:
                    await child.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


# -- judging and reporting ------------------------------------------------------------------------


def judge(result: dict[str, Any]) -> dict[str, Any]:
    """Invariants (failures make the exit status non-zero) and targets (reported only)."""
    rest, attack = result["rest"], result["attack"]
    endpoint = result["stats_after"]["endpoint"]
    admission = result["stats_after"]["admission"]
    sockets = result["sockets"]
    # At rest, between rounds, the process holds its listener and the event loop's own socket
    # pair; anything above the lowest count sampled at rest is a connection.
    baseline = min(sockets["rest"], default=0)
    peak_sockets = max(sockets["attack"] + sockets["drain"], default=baseline)
    peak_fd_connections = peak_sockets - baseline
    ledger: dict[str, str] = result["ledger"]
    told = sum(1 for outcome in ledger.values() if outcome in ADMITTED_RECEIPTS)
    resolved = sum(
        1 for state in result["settled"].values() if state not in (ROW_UNKNOWN, "unanswered")
    )
    unsettled = sum(1 for state in result["settled"].values() if state == "unanswered")
    legit_id_rows = admission["row_senders"]
    foreign_rows = sum(
        count for sender, count in legit_id_rows.items() if sender != result["legit"]
    )
    rss_rest = result["rss_kib"]["rest"]
    rss_after = result["rss_kib"]["after"]
    before = statistics.median(rss_rest[-10:]) if rss_rest else 0
    after = statistics.median(rss_after) if rss_after else 0
    during = max(result["rss_kib"]["attack"], default=0)
    # The target is judged over every round: a probe that got no answer counts as never
    # answered, so a p99 that falls on a failure has no finite ratio (and misses the target).
    p99_rest = rest["probe_p99_all_us"]
    p99_attack = attack["probe_p99_all_us"]
    ratio = None if not (p99_rest and p99_attack) else p99_attack / p99_rest
    answered_ratio = None
    if rest["probe_p99_us"] and attack["probe_p99_us"]:
        answered_ratio = attack["probe_p99_us"] / rest["probe_p99_us"]
    after_round = result["after"]
    # Serving: it answers probes and status queries and admits a message again. (Not every
    # round must succeed: on a loaded machine a probe may overrun its 350 ms deadline.)
    still_serving = (
        result["alive_before_stop"]
        and after_round["probes_ok"] > 0
        and after_round["status_ok"] > 0
        and any(outcome in ADMITTED_RECEIPTS for outcome in result["finals"])
    )
    invariants = {
        f"endpoint peak connections <= {MAX_CONNECTIONS}": endpoint["peak"] <= MAX_CONNECTIONS,
        f"socket fds above rest <= {MAX_CONNECTIONS} + 1 being refused": peak_fd_connections
        <= MAX_CONNECTIONS + 1,
        "receiver alive and still serving afterwards": bool(still_serving),
        "receiver stopped cleanly, files removed": result["receiver_exit"] == 0
        and not result["files_left"]
        and result["stopped"].get("error") is None,
        "no unauthorized admission": unsettled == 0
        and admission["admitted"] == told + resolved
        and foreign_rows == 0
        and result["attacker"].get("admitted", 0) == 0,
        "attack ran to the end": result["attacker_exit"] == 0
        and bool(result["attacker"])
        and all(code == 0 for code in result["parser_exits"])
        and len(result["parsers"]) == result["plan"]["parse_procs"],
    }
    answered = attack["probes_ok"] == attack["status_ok"] == attack["rounds"]
    targets = {
        f"probe p99 under attack / at rest <= {TARGET_P99_RATIO:g}": ratio is not None
        and ratio <= TARGET_P99_RATIO,
        "every legitimate round answered under attack": answered,
        "RSS after within ±5 MiB of before": abs(after - before) <= TARGET_RSS_DRIFT_KIB,
    }
    return {
        "invariants": invariants,
        "targets": targets,
        "probe_p99_ratio": None if ratio is None else round(ratio, 2),
        "probe_p99_answered_ratio": None if answered_ratio is None else round(answered_ratio, 2),
        "rss_before_kib": before,
        "rss_during_max_kib": during,
        "rss_after_kib": after,
        "peak_fd_connections": peak_fd_connections,
        "peak_sockets": peak_sockets,
        "baseline_sockets": baseline,
        "told_admitted": told,
        "resolved_admitted": resolved,
        "receiver_admitted": admission["admitted"],
        "foreign_rows": foreign_rows,
    }


def _us(value: float | None) -> str:
    return "no answer" if value is None else f"{value:,.0f}"


def print_report(result: dict[str, Any], verdict: dict[str, Any]) -> None:
    limits = result["limits"]
    plan = result["plan"]
    rest, attack = result["rest"], result["attack"]
    att = result["attacker"]
    endpoint = result["stats_after"]["endpoint"]
    label = "contract defaults" if limits["contract_defaults"] else "CONFIGURED, not the contract's"
    print(
        "receiver: SessionRuntime inbox on the headless host (0 s turns), own process; "
        f"limits: {limits['max_connections']} connections, {limits['deadline_s']:g} s connection "
        f"deadline, {limits['idle_s']:g} s idle after hello ({label})"
    )
    print(
        f"attack: {plan['flood']:,} connection attempts over {plan['flood_s']:g} s "
        f"(kinds in turn: {', '.join(kind for kind, _ in FLOOD_KINDS)}), {plan['slow']} slow "
        f"connections (1 byte per {plan['trickle_s']:g} s, no LF), {plan['trickle_ready']} "
        f"connections trickling a second frame after ready (1 byte per {plan['trickle_s']:g} s), "
        f"a parse-cost flood of 1 MiB frames from {plan['parse_procs']} processes x "
        f"{plan['parse_threads']} threads for {plan['parse_s']:g} s; receiver open-file limit "
        f"{plan['nofile'] or 'unchanged'}; legitimate rounds (a probe and a status query) every "
        f"{plan['interval_ms']:g} ms"
    )
    print(
        f"run {result['run_s']} s (attack phase {result['attack_s']} s), {result['cpus']} cpus, "
        f"load {result['load'][0]:.2f}"
    )
    print()
    print(f"{'legitimate sender':<38}{'at rest':>14}{'under attack':>16}{'ratio':>8}")
    for name, key in (("probe", "probe"), ("status query", "status")):
        for pct, label in (
            ("p50", "p50, answered"),
            ("p99", "p99, answered"),
            ("p99_all", "p99, every round"),
        ):
            a = rest[f"{key}_{pct}_us"]
            b = attack[f"{key}_{pct}_us"]
            ratio = "-" if not (a and b) else f"{b / a:.2f}"
            row = f"{name} {label} (µs)"
            print(f"{row:<38}{_us(a):>14}{_us(b):>16}{ratio:>8}")
    for key in ("probes_ok", "status_ok"):
        print(
            f"{key.replace('_', ' ') + ' / rounds':<38}{rest[key]:>8} / {rest['rounds']:<4}"
            f"{attack[key]:>10} / {attack['rounds']:<4}"
        )
    print(
        f"{'longest stretch without an answer (s)':<38}{rest['longest_silence_s']:>14.2f}"
        f"{attack['longest_silence_s']:>16.2f}"
    )
    after = result["after"]
    after_ratio = "-"
    if after["probe_p99_us"] and rest["probe_p99_us"]:
        after_ratio = f"{after['probe_p99_us'] / rest['probe_p99_us']:.2f}"
    print(
        f"{'after the attack':<38}probes {after['probes_ok']}/{after['rounds']} answered, "
        f"p50 {_us(after['probe_p50_us'])} µs, p99 {_us(after['probe_p99_us'])} µs "
        f"({after_ratio} × at rest)"
    )
    print("(answered: rounds that got their reply; every round: a round without one counts as")
    print(" never answered, so a p99 that falls on such a round is 'no answer')")
    failures = ", ".join(f"{k} {v}" for k, v in sorted(attack["failures"].items())) or "none"
    print(f"{'failures under attack':<38}{failures}")
    print()
    print(f"{'receiver':<38}{'value':>14}")
    cpu = result.get("receiver_cpu_share", {})
    print(
        f"{'CPU, share of one core: rest / attack':<38}"
        f"{cpu.get('rest', 0) * 100:>13.1f}% / {cpu.get('attack', 0) * 100:.1f}%"
    )
    print(f"{'RSS before (KiB)':<38}{verdict['rss_before_kib']:>14,.0f}")
    print(f"{'RSS during, max (KiB)':<38}{verdict['rss_during_max_kib']:>14,.0f}")
    drift = verdict["rss_after_kib"] - verdict["rss_before_kib"]
    print(
        f"{'RSS after (KiB)':<38}{verdict['rss_after_kib']:>14,.0f}   ({drift:+,.0f} KiB; freed "
        f"heap given back to the OS {endpoint['memory_given_back']} times)"
    )
    print(
        f"{'peak open connections (endpoint)':<38}{endpoint['peak']:>14}   (max {MAX_CONNECTIONS})"
    )
    print(
        f"{'peak socket fds (process)':<38}{verdict['peak_sockets']:>14}   "
        f"({verdict['baseline_sockets']} at rest incl. the listener → "
        f"{verdict['peak_fd_connections']} connections)"
    )
    print(
        f"{'accepted / refused over capacity':<38}{endpoint['accepted']:>14,} / "
        f"{endpoint['refused_over_capacity']:,}"
    )
    print(
        f"{'cuts: deadline / idle / request; faults':<38}{endpoint['deadline_cuts']:>14} / "
        f"{endpoint['idle_cuts']} / {endpoint['request_deadline_cuts']}; {endpoint['faults']:,}"
    )
    print(
        f"{'shed for newcomers / for descriptors':<38}{endpoint['shed']:>14,} / "
        f"{endpoint['shed_for_descriptors']:,}"
    )
    print(
        f"{'costly frames refused unparsed':<38}{endpoint['costly_frames']:>14,}   "
        f"(reads slowed for a process over its share: {endpoint['throttled_reads']:,})"
    )
    print(
        f"{'accept failures (kept serving)':<38}{endpoint['accept_failures'] or '-'!s:>14}   "
        f"(descriptor cap now: {endpoint['descriptor_cap']})"
    )
    print(
        f"{'admitted (receiver) / told (legit)':<38}{verdict['receiver_admitted']:>14} / "
        f"{verdict['told_admitted']} (+{verdict['resolved_admitted']} settled by status query)"
    )
    outcomes = Counter(result["ledger"].values())
    print(f"{'legitimate message outcomes':<38}{dict(outcomes)}")
    print()
    print(
        f"attacker: {sum(att.get('attempts', {}).values()):,} attempts in "
        f"{att.get('floodSeconds', 0):g} s, connect errors {att.get('connectErrors', {})}, "
        f"replies {att.get('replies', {})}, admitted {att.get('admitted')}"
    )
    print(
        f"slow connections: {att.get('slowOpened')} opened, {att.get('slowCutAtOnce')} closed at "
        f"once (over capacity), {att.get('slowCutLater')} held until cut after "
        f"{att.get('slowCutLaterMin')}–{att.get('slowCutLaterMax')} s, "
        f"{att.get('slowNotCut')} never cut"
    )
    print(
        f"trickling after ready: {att.get('readyOpened')} opened, hellos answered "
        f"{att.get('readyReplies')}, {att.get('readyCut')} cut at most "
        f"{att.get('readyCutMaxAfterReady')} s after ready, {att.get('readyNotCut')} never cut"
    )
    replies: Counter[str] = Counter()
    for parsed in result["parsers"]:
        replies.update(parsed.get("replies", {}))
    frames = sum(parsed.get("frames", 0) for parsed in result["parsers"])
    mib = sum(parsed.get("mib", 0.0) for parsed in result["parsers"])
    print(
        f"parse-cost flood: {frames:,} frames, {mib:,.0f} MiB sent in "
        f"{max((p.get('seconds', 0) for p in result['parsers']), default=0):g} s; "
        f"replies {dict(sorted(replies.items()))}"
    )
    print()
    for name, ok in verdict["targets"].items():
        print(f"target     {'ok  ' if ok else 'OVER'}  {name}")
    for name, ok in verdict["invariants"].items():
        print(f"invariant  {'ok  ' if ok else 'FAIL'}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--rounds", type=int, default=300, help="timed rounds at rest")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="cadence of the rounds")
    parser.add_argument("--flood", type=int, default=1000, help="connection attempts")
    parser.add_argument("--flood-seconds", type=float, default=1.0, help="spread over this long")
    parser.add_argument("--slow", type=int, default=200, help="slow connections")
    parser.add_argument("--trickle", type=float, default=1.0, help="seconds between slow bytes")
    parser.add_argument(
        "--trickle-ready",
        type=int,
        default=64,
        help="connections trickling a second frame after a valid probe hello",
    )
    parser.add_argument("--parse-procs", type=int, default=3, help="parse-cost flood processes")
    parser.add_argument("--parse-threads", type=int, default=2, help="threads per such process")
    parser.add_argument(
        "--parse-seconds", type=float, default=20.0, help="how long the parse-cost flood runs"
    )
    parser.add_argument(
        "--nofile",
        type=int,
        default=64,
        help="the receiver's open-file limit (0: unchanged); 64 cannot hold 64 connections",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=CONNECTION_DEADLINE_S,
        help="the receiver's connection deadline (default: the contract's; reported if changed)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=IDLE_AFTER_HELLO_S,
        help="the receiver's idle limit after a hello (default: the contract's)",
    )
    parser.add_argument("--sample-ms", type=float, default=50.0, help="RSS/fd sampling period")
    parser.add_argument("--serve-receiver", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--attack", metavar="PLAN_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--parse-flood", metavar="PLAN_JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_receiver:
        return anyio.run(serve_receiver, args.serve_receiver, args.deadline, args.idle, args.nofile)
    if args.attack:
        return anyio.run(run_attack, AttackPlan(**json.loads(args.attack)))
    if args.parse_flood:
        return anyio.run(run_parse_flood, ParsePlan(**json.loads(args.parse_flood)))

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(RUN_LIMIT_S):
            return await run(args)

    try:
        result = anyio.run(bounded)
    except TimeoutError:
        print(f"soak: the run overran its bound of {RUN_LIMIT_S:g} s", file=sys.stderr)
        return 1
    verdict = judge(result)
    if args.json:
        print(json.dumps({**result, "verdict": verdict}, indent=2))
    else:
        print_report(result, verdict)
    return 0 if all(verdict["invariants"].values()) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
