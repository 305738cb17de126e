"""Probe and send latency between two Python processes, against a raw-socket floor.

Three processes take part:

* the **receiver** — a real :class:`SessionRuntime` inbox on the headless host with turns of 0 s
  (what ``pi-cross-session inbox --busy 0`` runs), every contract limit at its default. By default
  it is this file's own ``--serve-receiver`` mode, which is the inbox without its per-message
  printing; ``--receiver cli`` runs the command line's ``inbox --busy 0 --json`` itself instead
  (its JSON lines go to a log file);
* the **raw server** — this file's ``--serve-raw`` mode: an asyncio Unix server that answers the
  first line of a connection with a fixed ready line and the second with a fixed receipt line,
  without looking at them;
* this process, which measures, interleaved in a shuffled order each round:

  - **probe**: :meth:`Exchanger.probe` (vetting, hello without ``from``, ``ready``);
  - **send**: :meth:`Exchanger.send` with a published sender registration (the receiver reads that
    file to authenticate the hello, admits the message and submits it to its host);
  - **raw probe / raw send**: a raw asyncio client writing the same bytes to the raw server
    (hello line → ready line; hello line → ready line, message line → receipt line) with no
    validation at all. The bytes are copied from a real exchange with the receiver first.

How the receiver's limits are respected (they are the contract's, and not raised for the bench):
every sender identity (a published registration) sends at most ``--per-sender`` messages (25,
below the token bucket's burst of 30, so no message waits for a refill or is refused
``rate_limited``), and the receiver is restarted — a new process, a new incarnation with a fresh
budget — before its lifetime budget of 256 admissions runs out (at most ``--per-receiver``, 250,
sends each). Restarts happen between rounds and are not timed. Every message has its own text and
messageId, so none is a duplicate; with turns of 0 s the receiver is idle again long before the
next send, so receipts are ``submitted`` (the counts of every status are reported).

After the timed run, ``--phase-sends`` more probes and sends (and raw ones) are made with a
timestamp at each step — taken through the Exchanger's own seams (its vetting and connector
arguments), no change to the package, by one exchanger that vets on the loop as the timed one does
— to show where their time goes. They go to a new incarnation of the script receiver, started for
this part only, which times its two handlers (hello, and message or status) through the endpoint's
handler interface and stamps each connection's steps (accepted, its task running, hello read,
handed to the handler, reply written) by wrapping its listener, connection task, stream and
handler (:func:`mark_receiver`). The timed run's receivers carry no such wrapping.

CPU per send is measured the same way, in blocks of ``--cpu-sends`` sends (ours then raw, each
send followed by a 2 ms pause so the receiver's 0 s turns end between them), each of our blocks
to a new incarnation from identities published before it starts.

Two more figures come from the same run. The timed probes are also reported by what the client
did just before each (our send, a raw send, our probe, a raw probe): a process that has not run
for a while meets its own code cold. And ``--cpu-blocks`` blocks of ``--cpu-probes`` probes back
to back, ours then raw, give the CPU each side spends per probe: the client's own thread time and
the serving process's run time from the kernel's scheduler statistics (``/proc/<pid>/task/*/
schedstat``), which move far less with the machine's load than latency does.

``--journal`` measures only what the event journal adds per send, on both sides, in the same run:
blocks of ``--cpu-sends`` sends (paced as above), each to a new receiver incarnation started with
``RuntimeOptions(journal=...)`` off or on (``--journal-text``: also on with text). The sender
(``--journal-sender``) is by default a sender of ours: ``outbound.send`` from the text, as the
model's tool and the command line send (checks, the message built and its size checked, the
exchange, the report, and with the journal on its lines), from a listing made once per block as
the command line's is; ``bare`` is the exchange of a prepared message and what outbound does after
it (a ``SendReport``, and ``SessionJournal.send_ended``), the journal's cost against the least a
send can cost. A sender's journal is kept open for the run, as a session's is.
``--journal-blocks`` rounds, each one block per setting in a seeded shuffled order, after one
untimed round; every block's figures, the medians, and the ratios over off (of the medians, and
the median of each round's own ratio) are reported, with the events each side journaled per send.

Run ``python bench/exchange.py`` (``--json`` for machine-readable output; ``--profile`` adds a
cProfile of both sides of the send path, untimed). Everything it creates — the temporary agent
dir, the runtime dir ``/tmp/pi-peers-<uid>-<ns>``, the processes — is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import cProfile
import io
import json
import math
import os
import pstats
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

import bench_support
from pi_cross_session._internal.plugin import outbound
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.journaling import JOURNAL_ENV, SessionJournal
from pi_cross_session._internal.plugin.outbound import Outbox
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.frames import Hello, Message, Sender
from pi_cross_session._internal.protocol.io import endpoint, environment, sockets
from pi_cross_session._internal.protocol.io.discovery import Listing
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    PublicPeer,
    Registration,
    parse_registration,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.journal import (
    JournalPolicy,
    journal_dir,
    journal_files,
)
from pi_cross_session._internal.security.receiver import SessionReceiver

TARGET_SEND_RATIO: Final = 3.0
#: How long a started process may take to say it is ready.
START_TIMEOUT_S: Final = 20.0
#: How long a process gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S: Final = 10.0
#: Rounds run before timing starts (imports, caches, first connections).
WARMUP_ROUNDS: Final = 20
THIS_FILE: Final = os.path.abspath(__file__)
#: Set in a receiver's environment to make it profile itself into that file.
PROFILE_ENV: Final = "PI_BENCH_RECEIVER_PROFILE"
#: Set in a receiver's environment to make it time its handlers and write them there at exit.
TIMINGS_ENV: Final = "PI_BENCH_RECEIVER_TIMINGS"
#: Set in a script receiver's environment: its journal setting, a key of
#: :data:`JOURNAL_SETTINGS` given to its ``RuntimeOptions`` (unset: what the user's
#: ``PI_CROSS_SESSION_JOURNAL`` says, as a session that ships reads it).
JOURNAL_SETTING_ENV: Final = "PI_BENCH_RECEIVER_JOURNAL"
#: The journal settings ``--journal`` compares, named as ``PI_CROSS_SESSION_JOURNAL`` names them.
JOURNAL_SETTINGS: Final = {
    "off": JournalPolicy(enabled=False, keep_text=False),
    "on": JournalPolicy(),  # the default: events without message text
    "text": JournalPolicy(enabled=True, keep_text=True),
}


# -- the receiver process (--serve-receiver) -------------------------------------------------------


def time_handlers(timings: dict[str, list[int]]) -> None:
    """Time the receiver's two decisions, through the endpoint's public handler interface: the
    hello (split: probe, or authenticated, which reads the sender's registration file) and the
    second frame (admission or a status query). About a microsecond of overhead per call."""
    on_hello = SessionReceiver.on_hello
    on_request = SessionReceiver.on_request

    async def timed_hello(self: SessionReceiver, hello: Hello, **kwargs: Any) -> Any:
        before = time.perf_counter_ns()
        try:
            return await on_hello(self, hello, **kwargs)  # kwargs: the kernel's peer credentials
        finally:
            kind = "hello_probe" if hello.sender is None else "hello_authenticated"
            timings[kind].append(time.perf_counter_ns() - before)

    def timed_request(self: SessionReceiver, session: Any, request: Any) -> Any:
        before = time.perf_counter_ns()
        try:
            return on_request(self, session, request)
        finally:
            timings["second_frame"].append(time.perf_counter_ns() - before)

    SessionReceiver.on_hello = timed_hello  # type: ignore[method-assign]
    SessionReceiver.on_request = timed_request  # type: ignore[method-assign]


#: The marks of the connection a receiver task is serving (see :func:`mark_receiver`).
_CONNECTION_MARKS: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
    "bench_connection_marks", default=None
)


def mark_receiver(timings: dict[str, list[int]]) -> None:
    """Timestamp each connection's steps in the receiver (:data:`RECEIVER_PHASES`) by wrapping
    the listener's accept, the endpoint's serving of each connection, the stream's first read and
    first write, and the handler's hello; at its end a connection adds its step durations to
    ``timings`` under ``"probe: <step>"`` or ``"send: <step>"``. Bench-only wrapping, a few
    hundred nanoseconds per mark; nothing in the package changes."""
    accept = sockets.UnixListener.accept
    serve = endpoint.Endpoint._serve
    receive = sockets.UnixStream.receive
    send = sockets.UnixStream.send
    on_hello = SessionReceiver.on_hello
    now = time.perf_counter_ns

    async def marked_accept(self: sockets.UnixListener) -> sockets.UnixStream:
        stream = await accept(self)
        stream.bench_marks = {"accepted": now()}  # type: ignore[attr-defined]
        return stream

    async def marked_serve(self: Any, conn: Any) -> None:
        marks = getattr(conn.stream, "bench_marks", None)
        if marks is not None:
            marks["task_start"] = now()
            _CONNECTION_MARKS.set(marks)
        try:
            await serve(self, conn)
        finally:
            if marks is not None and "kind" in marks:
                kind = marks["kind"]
                for label, a, b in RECEIVER_PHASES:
                    if a in marks and b in marks:
                        timings.setdefault(f"{kind}: {label}", []).append(marks[b] - marks[a])

    async def marked_receive(self: sockets.UnixStream, max_bytes: int = 65536) -> bytes:
        data = await receive(self, max_bytes)
        marks = getattr(self, "bench_marks", None)
        if marks is not None:
            marks.setdefault("first_data", now())
        return data

    async def marked_send(self: sockets.UnixStream, item: bytes) -> None:
        await send(self, item)
        marks = getattr(self, "bench_marks", None)
        if marks is not None:
            marks.setdefault("reply_written", now())

    async def marked_hello(self: SessionReceiver, hello: Hello, **kwargs: Any) -> Any:
        marks = _CONNECTION_MARKS.get()
        if marks is not None:
            marks["hello_start"] = now()
            marks["kind"] = "probe" if hello.sender is None else "send"  # type: ignore[assignment]
        try:
            return await on_hello(self, hello, **kwargs)
        finally:
            if marks is not None:
                marks["hello_end"] = now()

    sockets.UnixListener.accept = marked_accept  # type: ignore[method-assign]
    endpoint.Endpoint._serve = marked_serve  # type: ignore[method-assign]
    sockets.UnixStream.receive = marked_receive  # type: ignore[method-assign]
    sockets.UnixStream.send = marked_send  # type: ignore[method-assign]
    SessionReceiver.on_hello = marked_hello  # type: ignore[method-assign]


async def serve_receiver(
    name: str, profile_out: str | None, timings_out: str | None
) -> dict[str, list[int]]:
    """A headless SessionRuntime inbox with 0 s turns and every default limit; no printing."""
    profiler = cProfile.Profile() if profile_out else None
    timings: dict[str, list[int]] = {
        "hello_probe": [],
        "hello_authenticated": [],
        "second_frame": [],
    }
    if timings_out:
        time_handlers(timings)
        mark_receiver(timings)
    host = HeadlessHost(name=name, busy_s=0.0)
    setting = os.environ.get(JOURNAL_SETTING_ENV)
    journal = JOURNAL_SETTINGS[setting] if setting else None
    runtime = SessionRuntime(host, options=RuntimeOptions(with_git=False, journal=journal))
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:
            await group.start(serve_inbox, host, runtime)
            registration = runtime.registration()
            assert registration is not None
            line = {"event": "ready", "instanceId": registration.instance_id, "pid": os.getpid()}
            print(json.dumps(line), flush=True)
            if profiler is not None:
                profiler.enable()
            async for _ in signals:
                break
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(profile_out)
            await runtime.stop()
            group.cancel_scope.cancel()
    return timings


# -- the raw server process (--serve-raw) ----------------------------------------------------------


async def serve_raw(socket_path: str, ready: bytes, receipt: bytes) -> None:
    """Answer line 1 with the ready bytes and line 2 with the receipt bytes; nothing else."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if await reader.readline():
                writer.write(ready)
                await writer.drain()
                if await reader.readline():
                    writer.write(receipt)
                    await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(handle, path=socket_path)
    os.chmod(socket_path, 0o600)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
    async with server:
        await stop.wait()


# -- processes -------------------------------------------------------------------------------------


@dataclass
class Child:
    """A process started by the bench, its output going to a log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ready: dict[str, Any] = field(default_factory=dict)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def start_child(name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> Child:
    """Start ``argv`` with its output in a log file, and wait for its JSON ``ready`` line
    (blocking: the async side calls it in a worker thread)."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    child = Child(name, process, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == "ready":
                    child.ready = event
                    return child
        if process.poll() is not None:
            break
        time.sleep(0.02)  # set-up only: nothing here is timed
    child.stop()
    raise SystemExit(f"{name} did not start:\n{log_path.read_text(errors='replace')}")


# -- the measuring side ----------------------------------------------------------------------------


class RecordingStream(anyio.abc.ByteStream):
    """A byte stream that records what crosses it (to copy real frames for the raw floor)."""

    def __init__(self, inner: anyio.abc.ByteStream, written: list[bytes], read: list[bytes]):
        self._inner = inner
        self._written = written
        self._read = read

    async def send(self, item: bytes) -> None:
        self._written.append(bytes(item))
        await self._inner.send(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._inner.receive(max_bytes)
        self._read.append(data)
        return data

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()


class PhaseClock:
    """Timestamps (perf_counter_ns) of one exchange's steps, taken through the Exchanger's seams:
    the vetting call, the connector and the stream it returns.

    It answers the locality question as the real file layer does (``on_local_filesystem``), so
    the instrumented exchange vets on the loop exactly when the timed one does (an object without
    that answer is vetted in a worker thread: see ``protocol/io/offload.py``), and it connects
    with the package's own connector."""

    def __init__(self) -> None:
        self.marks: dict[str, int] = {}

    def restart(self) -> dict[str, int]:
        """Marks of the next exchange go to a new dict (returned) — one clock, and one
        instrumented exchanger, serve every run, as one exchanger serves the timed ones."""
        self.marks = {}
        return self.marks

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.perf_counter_ns())

    def on_local_filesystem(self, path: str) -> bool:
        return fs.on_local_filesystem(path)

    def vet_socket(self, path: str) -> str | None:
        self.mark("vet_start")
        try:
            return fs.vet_socket(path)
        finally:
            self.mark("vet_end")

    async def connect(self, path: str) -> anyio.abc.ByteStream:
        self.mark("connect_start")
        stream = await sockets.connect_unix(path)
        self.mark("connect_end")
        return TimedStream(stream, self)


class TimedStream(sockets.UnixStream):
    """The package's own socket stream (so the exchange closes it as it closes a real one),
    marking when each frame is written and each reply line arrives."""

    def __init__(self, inner: sockets.UnixStream, clock: PhaseClock) -> None:
        super().__init__(inner.socket)
        self._clock = clock
        self._sent = 0
        self._lines = 0

    async def send(self, item: bytes) -> None:
        await super().send(item)
        self._sent += 1
        self._clock.mark(f"sent_{self._sent}")

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await super().receive(max_bytes)
        for _ in range(data.count(b"\n")):
            self._lines += 1
            self._clock.mark(f"reply_{self._lines}")
        return data

    def close(self) -> None:
        self._clock.mark("close_start")
        super().close()
        self._clock.mark("closed")


#: The steps of a send, as (label, from mark, to mark); "start"/"end" bracket the whole call.
OUR_PHASES: Final = (
    ("encode, conversation, deadline", "start", "vet_start"),
    ("vet socket (lstat)", "vet_start", "vet_end"),
    ("vetted -> connecting", "vet_end", "connect_start"),
    ("connect", "connect_start", "connect_end"),
    ("write hello", "connect_end", "sent_1"),
    ("hello -> ready (receiver)", "sent_1", "reply_1"),
    # One step: anyio's send yields to the loop, so where "message written" falls between
    # parsing the ready and receiving the receipt is scheduling noise.
    ("ready -> receipt (both sides)", "reply_1", "reply_2"),
    ("parse receipt", "reply_2", "close_start"),
    # The close wakes the receiver (its read sees EOF), which on two busy cores may take the CPU.
    ("close", "close_start", "closed"),
    ("closed -> returned", "closed", "end"),
)
#: The steps of a probe: as a send's, up to the ready.
OUR_PROBE_PHASES: Final = (
    *OUR_PHASES[:6],
    ("parse ready", "reply_1", "close_start"),
    *OUR_PHASES[-2:],
)
RAW_PROBE_PHASES: Final = (
    ("connect", "start", "connect_end"),
    ("write hello, hello -> ready", "connect_end", "reply_1"),
    ("close", "reply_1", "end"),
)
#: The receiver's steps of one connection (marks taken in the receiver, see ``mark_receiver``).
RECEIVER_PHASES: Final = (
    ("accepted -> served (credentials, slot, deadline)", "accepted", "task_start"),
    ("served -> hello read", "task_start", "first_data"),
    ("hello read -> handed to the handler (parse)", "first_data", "hello_start"),
    ("handler: on_hello", "hello_start", "hello_end"),
    ("reply encoded -> written", "hello_end", "reply_written"),
)
RAW_PHASES: Final = (
    ("connect", "start", "connect_end"),
    ("write hello, hello -> ready", "connect_end", "reply_1"),
    ("ready -> receipt", "reply_1", "reply_2"),
    ("close", "reply_2", "end"),
)


async def timed_raw_send(
    path: str, frames: Frames, clock: PhaseClock, *, probe: bool = False
) -> None:
    """:func:`raw_exchange` with the same marks as :class:`PhaseClock` takes for ours."""
    clock.mark("start")
    reader, writer = await asyncio.open_unix_connection(path)
    clock.mark("connect_end")
    try:
        writer.write(frames.probe_hello if probe else frames.send_hello)
        await reader.readline()
        clock.mark("reply_1")
        if not probe:
            writer.write(frames.message)
            await reader.readline()
            clock.mark("reply_2")
    finally:
        writer.close()
    clock.mark("end")


def phase_medians(
    runs: list[dict[str, int]], phases: tuple[tuple[str, str, str], ...]
) -> dict[str, float]:
    runs = [run for run in runs if all(a in run and b in run for _, a, b in phases)]
    if not runs:
        return {}
    return {
        label: round(statistics.median(run[b] - run[a] for run in runs) / 1000, 1)
        for label, a, b in phases
    }


@dataclass
class Frames:
    """Real bytes of one probe and one send, as our client wrote them and our receiver replied."""

    probe_hello: bytes = b""
    send_hello: bytes = b""
    message: bytes = b""
    ready: bytes = b""
    receipt: bytes = b""


def publish_sender(locations: Locations, number: int) -> Sender:
    """A new sender identity: a registration in the peers dir that a receiver can authenticate."""
    return bench_support.publish_sender(locations, f"bench-sender-{number}")[1]


def read_registration(locations: Locations, instance_id: str) -> Registration:
    raw = fs.read_registration_bytes(locations.registration_path(instance_id))
    return parse_registration(
        raw, file_stem=instance_id, expected_socket_path=locations.socket_path(instance_id)
    )


def new_message(serial: int) -> Message:
    """A message like a model's: a few lines, its own text (so never a duplicate) and id."""
    text = (
        f"Status update {serial}: the parser change is merged and the tests pass.\n"
        "Please rebase your branch onto main before you continue, and tell me if it conflicts."
    )
    return Message(
        v=1,
        type="message",
        request_id=str(uuid.uuid4()),
        message_id=str(uuid.uuid4()),
        text=text,
        summary=f"Status update {serial}",
        sent_at=time.time_ns() // 1_000_000,
    )


class Senders:
    """Sender identities and receiver incarnations, rotated so no contract limit is reached."""

    def __init__(
        self,
        locations: Locations,
        start_receiver: Callable[[], Awaitable[Child]],
        per_sender: int,
        per_receiver: int,
    ) -> None:
        self.locations = locations
        self._start_receiver = start_receiver
        self.per_sender = per_sender
        self.per_receiver = per_receiver
        self.receiver: Child | None = None
        self.target: Registration | None = None
        self.sender: Sender | None = None
        self.senders = 0
        self.receivers = 0
        self._sent_by_sender = 0
        self._sent_to_receiver = 0
        self._serial = 0

    async def restart_receiver(self) -> Registration:
        if self.receiver is not None:
            await anyio.to_thread.run_sync(self.receiver.stop)
        self.receiver = await self._start_receiver()
        self.receivers += 1
        self.target = read_registration(self.locations, self.receiver.ready["instanceId"])
        self._sent_to_receiver = 0
        self.sender = None
        return self.target

    async def next_send(self) -> tuple[Registration, Sender, Message]:
        """Where the next send goes, from whom, and what (rotating before any limit is hit)."""
        if self.target is None or self._sent_to_receiver >= self.per_receiver:
            await self.restart_receiver()
        if self.sender is None or self._sent_by_sender >= self.per_sender:
            self.senders += 1
            self.sender = publish_sender(self.locations, self.senders)
            self._sent_by_sender = 0
        self._sent_by_sender += 1
        self._sent_to_receiver += 1
        self._serial += 1
        assert self.target is not None
        return self.target, self.sender, new_message(self._serial)

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.stop()
            self.receiver = None


async def capture_frames(locations: Locations, senders: Senders) -> Frames:
    """One real probe and one real send, recording the bytes on the wire."""
    written: list[bytes] = []
    read: list[bytes] = []

    async def connect(path: str) -> anyio.abc.ByteStream:
        return RecordingStream(await anyio.connect_unix(path), written, read)

    recorder = Exchanger(locations, fs, connect=connect)
    target, sender, message = await senders.next_send()
    await recorder.probe(target)
    probe_written, probe_read = list(written), list(read)
    written.clear()
    read.clear()
    receipt = await recorder.send(target, sender=sender, message=message)
    if receipt.status != "submitted" or len(written) != 2 or len(read) != 2:
        raise SystemExit(f"unexpected capture: {receipt!r} {written!r} {read!r}")
    # The probe's ready differs from the send's only in its requestId (a UUID, same length), so
    # the raw server answers both kinds of hello with the send's.
    if len(probe_written) != 1 or [len(chunk) for chunk in probe_read] != [len(read[0])]:
        raise SystemExit(f"unexpected probe capture: {probe_written!r} {probe_read!r}")
    return Frames(
        probe_hello=probe_written[0],
        send_hello=written[0],
        message=written[1],
        ready=read[0],
        receipt=read[1],
    )


async def raw_exchange(path: str, first: bytes, second: bytes | None) -> None:
    """The floor: write the bytes, read the reply line(s), validate nothing, close."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        writer.write(first)
        if not await reader.readline():
            raise ConnectionError("the raw server closed early")
        if second is not None:
            writer.write(second)
            if not await reader.readline():
                raise ConnectionError("the raw server closed early")
    finally:
        writer.close()


def process_cpu_ns(pid: int) -> int:
    """CPU time a process's threads have run, from the kernel's scheduler statistics (ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total


#: After a block of sends, how long the receiver gets to finish the turns its last receipts
#: started before its CPU is read (the raw server, which starts nothing, waits as long).
SETTLE_S: Final = 0.05
#: The pause after each send of a CPU block, ours and raw alike: a receiver whose 0 s turn has
#: not ended yet queues the next message, and enough of those are refused ``busy``. It is spent
#: asleep, so it adds little CPU to either side and the same to both.
SEND_PACE_S: Final = 0.002


async def cpu_per_call(
    blocks: int,
    per_block: int,
    ours: Callable[[], Awaitable[None]],
    raw: Callable[[], Awaitable[None]],
    receiver_pid: Callable[[], int],
    raw_pid: int,
    *,
    before_block: Callable[[], Awaitable[None]] | None = None,
    settle_s: float = 0.0,
) -> dict[str, Any]:
    """CPU each side spends per call (a probe, or a send), ours against the floor: blocks of
    back-to-back calls, alternating ours and raw, timing the client's own thread and the serving
    process (all its threads). ``before_block`` runs untimed before each of our blocks (a send
    needs a fresh incarnation and identities). CPU per call moves far less with the machine's
    load than latency does."""
    kinds = {"ours": (ours, receiver_pid), "raw": (raw, lambda: raw_pid)}
    spent: dict[str, dict[str, list[float]]] = {
        kind: {"client_us": [], "server_us": [], "latency_p50_us": []} for kind in kinds
    }
    for _ in range(blocks):
        for kind, (call, pid_of) in kinds.items():
            if kind == "ours" and before_block is not None:
                await before_block()
            pid = pid_of()
            server_before = process_cpu_ns(pid)
            client_before = time.thread_time_ns()
            latencies = []
            for _ in range(per_block):
                before = time.perf_counter_ns()
                await call()
                latencies.append(time.perf_counter_ns() - before)
            client = time.thread_time_ns() - client_before
            if settle_s:
                await anyio.sleep(settle_s)
            server = process_cpu_ns(pid) - server_before
            spent[kind]["client_us"].append(client / per_block / 1000)
            spent[kind]["server_us"].append(server / per_block / 1000)
            spent[kind]["latency_p50_us"].append(percentile(latencies, 0.50))
    medians = {
        kind: {name: round(statistics.median(values), 1) for name, values in figures.items()}
        for kind, figures in spent.items()
    }
    return {
        "blocks": blocks,
        "per_block": per_block,
        **medians,
        "server_over_raw_us": round(medians["ours"]["server_us"] - medians["raw"]["server_us"], 1),
        "client_over_raw_us": round(medians["ours"]["client_us"] - medians["raw"]["client_us"], 1),
        "latency_p50_ratio": round(
            medians["ours"]["latency_p50_us"] / medians["raw"]["latency_p50_us"], 2
        ),
    }


def exchanger_vets_inline(exchanger: Exchanger) -> bool | None:
    """Whether the timed exchanger vetted sockets on the loop (its runtime dir known local) rather
    than in a worker thread: read from its vetting runner, for the report."""
    runner = getattr(exchanger, "_vet_runner", None)
    return None if runner is None else runner.inline


def percentile(values: list[int], fraction: float) -> float:
    """Nearest-rank percentile of nanosecond samples, in microseconds."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered))))
    return ordered[rank - 1] / 1000


def profile_text(stats: pstats.Stats, limit: int) -> str:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def receiver_handler_medians(root: Path) -> dict[str, float]:
    """Medians of the receiver's handler timings, over every incarnation of this run."""
    merged: dict[str, list[int]] = {}
    for path in sorted(root.glob("receiver-timings.*.json")):
        for kind, values in json.loads(path.read_text()).items():
            merged.setdefault(kind, []).extend(values)
    return {
        kind: round(statistics.median(values) / 1000, 1)
        for kind, values in merged.items()
        if values
    }


def receiver_profile_text(path: str, limit: int) -> str:
    if not os.path.exists(path):
        return "(the receiver wrote no profile)"
    return profile_text(pstats.Stats(path), limit)


# -- what the journal adds per send (--journal) ----------------------------------------------------

#: The ratio of CPU per send with the journal on over off that the issue allows, on either side.
TARGET_JOURNAL_RATIO: Final = 1.05
#: Before a journal block is timed, how long its new receiver gets for what it does once at start
#: (its first listing and maintenance pass, its live state, the pruning of old journals).
START_SETTLE_S: Final = 0.3
#: Untimed rounds (one block of each setting) before the timed ones: the client's code warms up.
JOURNAL_WARMUP_ROUNDS: Final = 1


def journal_lines(directory: str) -> int:
    """The lines of a journal dir's files (0 when it has none)."""
    total = 0
    for path in journal_files(directory):
        with open(path, "rb") as file:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 16), b""))
    return total


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def sender_journal(agent_dir: str, setting: str) -> SessionJournal | None:
    """What a sender of ours journals with under ``setting``: a session's journal, open for the
    whole run as a session's is; ``None`` when off (an outbox without a journal)."""
    policy = JOURNAL_SETTINGS[setting]
    if not policy.enabled:
        return None
    instance_id = uuid.uuid4().hex
    return SessionJournal.open(
        agent_dir,
        instance_id,
        policy,
        name=lambda: f"bench-sender-{setting}",
        wall_ms=lambda: time.time_ns() // 1_000_000,
    )


async def run_journal(args: argparse.Namespace) -> dict[str, Any]:
    """CPU per send of the receiver and of the sender, the journal off against on (and text),
    in blocks alternated round by round in a seeded shuffled order.

    Each block: a new receiver incarnation started with that setting's ``RuntimeOptions(journal=
    ...)``, ``--cpu-sends`` sends from identities published before the block, each followed by
    what our outbound does after a receipt (a :class:`SendReport`, and with the journal on
    :meth:`SessionJournal.send_ended`), paced as the CPU blocks of the default run are."""
    root = Path(tempfile.mkdtemp(prefix="pi-bench-journal-"))
    agent_dir = str(root / "agent")
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: agent_dir})
    env = {**os.environ, paths.AGENT_DIR_ENV: agent_dir, "PYTHONUNBUFFERED": "1"}
    settings = ["off", "on", *(["text"] if args.journal_text else [])]
    current = {"setting": "off"}

    async def start_receiver() -> Child:
        setting = current["setting"]
        child_env = dict(env)
        if args.receiver == "cli":
            argv = [sys.executable, "-m", "pi_cross_session", "inbox", "--busy", "0", "--json"]
            argv += ["--name", "bench-receiver"]
            child_env[JOURNAL_ENV] = setting
        else:
            argv = [sys.executable, THIS_FILE, "--serve-receiver", "bench-receiver"]
            child_env[JOURNAL_SETTING_ENV] = setting
        return await anyio.to_thread.run_sync(start_child, "receiver", argv, child_env, root)

    senders = Senders(locations, start_receiver, args.per_sender, args.per_receiver)
    journals = {setting: sender_journal(agent_dir, setting) for setting in settings}
    exchanger = Exchanger(locations, fs)
    statuses: Counter[str] = Counter()
    runs: list[dict[str, Any]] = []
    rng = random.Random(20261206)
    started = time.perf_counter()

    async def block(setting: str) -> dict[str, Any]:
        current["setting"] = setting
        receiver = await senders.restart_receiver()
        assert senders.receiver is not None
        pid = senders.receiver.process.pid
        prepared = [await senders.next_send() for _ in range(args.cpu_sends)]
        # The listing a real sender resolved its target from is the same on and off: built here.
        peer = PublicPeer.from_registration(receiver)
        journal = journals[setting]
        receiver_dir = journal_dir(agent_dir, receiver.instance_id)
        await anyio.sleep(START_SETTLE_S)
        sender_written = 0 if journal is None else journal.writer.written
        receiver_written = await anyio.to_thread.run_sync(journal_lines, receiver_dir)
        block_statuses: Counter[str] = Counter()
        latencies: list[int] = []
        server_before = process_cpu_ns(pid)
        client_before = time.thread_time_ns()
        listing = Listing(peers=[peer], registrations={receiver.instance_id: receiver})

        async def same_listing() -> Listing:
            return listing

        for target, sender, message in prepared:
            before = time.perf_counter_ns()
            if args.journal_sender == "outbound":
                outbox = Outbox(
                    sender=sender,
                    exchanger=exchanger,
                    list_peers=same_listing,
                    wall_ms=wall_ms,
                    journal=journal,
                )
                report = await outbound.send(outbox, receiver.instance_id, message.text)
                status = report.status
            else:
                receipt = await exchanger.send(target, sender=sender, message=message)
                # What outbound does after a receipt (``_exchange``, then ``_ended``).
                report = SendReport(
                    ok=True,
                    status=receipt.status,
                    message_id=message.message_id,
                    target=peer,
                    message_written=True,
                )
                if journal is not None:
                    journal.send_ended(report, message)
                status = receipt.status
            latencies.append(time.perf_counter_ns() - before)
            # Back to back, a send can meet the previous message's turn: queued is admitted.
            if status not in ("submitted", "queued"):
                raise SystemExit(f"a journal block's send ended {status}")
            block_statuses[status] += 1
            await anyio.sleep(SEND_PACE_S)
        client = time.thread_time_ns() - client_before
        await anyio.sleep(SETTLE_S)
        server = process_cpu_ns(pid) - server_before
        receiver_written = (
            await anyio.to_thread.run_sync(journal_lines, receiver_dir) - receiver_written
        )
        if journal is not None:
            sender_written = journal.writer.written - sender_written
        # The block's sender identities are not needed again: the peers dir stays as small.
        for _, sender, _ in prepared:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(locations.registration_path(sender.instance_id))
        sends = len(prepared)
        return {
            "setting": setting,
            "client_us": round(client / sends / 1000, 1),
            "server_us": round(server / sends / 1000, 1),
            "latency_p50_us": round(percentile(latencies, 0.50), 1),
            "receiver_events_per_send": round(receiver_written / sends, 2),
            "sender_events_per_send": round(sender_written / sends, 2),
            "statuses": dict(block_statuses),
        }

    try:
        for round_index in range(JOURNAL_WARMUP_ROUNDS + args.journal_blocks):
            order = list(settings)
            rng.shuffle(order)
            for setting in order:
                result = await block(setting)
                if round_index >= JOURNAL_WARMUP_ROUNDS:
                    runs.append({"round": round_index - JOURNAL_WARMUP_ROUNDS + 1, **result})
                    statuses.update(result["statuses"])
        run_s = time.perf_counter() - started
    finally:
        senders.stop()
        for journal in journals.values():
            if journal is not None:
                journal.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)

    figures = ("client_us", "server_us", "latency_p50_us")
    counts = ("receiver_events_per_send", "sender_events_per_send")
    medians = {
        setting: {
            name: round(
                statistics.median(run[name] for run in runs if run["setting"] == setting), 2
            )
            for name in (*figures, *counts)
        }
        for setting in settings
    }
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["setting"]] = run
    ratios = {}
    for setting in settings[1:]:
        ratios[setting] = {
            side: {
                # The ratio of the medians, and the median of each round's own ratio.
                "of_medians": round(medians[setting][name] / medians["off"][name], 3),
                "paired": round(
                    statistics.median(
                        pair[setting][name] / pair["off"][name] for pair in by_round.values()
                    ),
                    3,
                ),
            }
            for side, name in (("sender", "client_us"), ("receiver", "server_us"))
        }
    return {
        "mode": "journal",
        "receiver": args.receiver,
        "sender": args.journal_sender,
        "settings": settings,
        "blocks": args.journal_blocks,
        "per_block": args.cpu_sends,
        "warmup_rounds": JOURNAL_WARMUP_ROUNDS,
        "send_pace_ms": SEND_PACE_S * 1000,
        "runs": runs,
        "medians": medians,
        "ratios": ratios,
        "target_ratio": TARGET_JOURNAL_RATIO,
        "statuses": dict(statuses),
        "receiver_incarnations": senders.receivers,
        "sender_identities": senders.senders,
        "run_s": round(run_s, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def print_journal_report(result: dict[str, Any]) -> None:
    receiver = (
        "pi-cross-session inbox --busy 0 --json"
        if result["receiver"] == "cli"
        else "SessionRuntime on the headless host, 0 s turns (the inbox without its printing)"
    )
    print(f"receiver: {receiver}, one new incarnation per block with that journal setting")
    if result["sender"] == "outbound":
        print("sender: outbound.send from the text, from a listing made once per block")
    else:
        print(
            "sender: Exchanger.send of a prepared message, then what outbound does after a "
            "receipt (a SendReport; with the journal on, SessionJournal.send_ended)"
        )
    print(
        f"{result['blocks']} rounds of one block per setting ({', '.join(result['settings'])}), "
        f"in a shuffled order each round, after {result['warmup_rounds']} untimed round; "
        f"{result['per_block']} sends per block, {result['send_pace_ms']:g} ms apart; "
        f"{result['receiver_incarnations']} receiver incarnations, "
        f"{result['sender_identities']} sender identities; {result['run_s']} s"
    )
    print(f"receipts: {result['statuses']}")
    print("\nevery block (CPU per send, µs; events journaled per send):")
    print(
        f"{'round':>5}  {'setting':<8}{'sender':>9}{'receiver':>10}{'lat p50':>10}"
        f"{'ev snd':>8}{'ev rcv':>8}"
    )
    for run in result["runs"]:
        print(
            f"{run['round']:>5}  {run['setting']:<8}{run['client_us']:>9.1f}"
            f"{run['server_us']:>10.1f}{run['latency_p50_us']:>10.1f}"
            f"{run['sender_events_per_send']:>8.2f}{run['receiver_events_per_send']:>8.2f}"
        )
    print(f"\nmedians over {result['blocks']} blocks each:")
    print(f"  {'setting':<8}{'sender':>9}{'receiver':>10}{'lat p50':>10}{'ev snd':>8}{'ev rcv':>8}")
    for setting, row in result["medians"].items():
        print(
            f"  {setting:<8}{row['client_us']:>9.1f}{row['server_us']:>10.1f}"
            f"{row['latency_p50_us']:>10.1f}{row['sender_events_per_send']:>8.2f}"
            f"{row['receiver_events_per_send']:>8.2f}"
        )
    target = result["target_ratio"]
    print(f"\nCPU per send, setting over off (target <= {target:g}; median of the rounds' own):")
    for setting, sides in result["ratios"].items():
        for side, ratio in sides.items():
            verdict = "ok" if ratio["of_medians"] <= target else "OVER"
            print(
                f"  {setting:<5} {side:<9} {ratio['of_medians']:.3f}  "
                f"(paired {ratio['paired']:.3f})  {verdict}"
            )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pi-bench-exchange-"))
    agent_dir = str(root / "agent")
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: agent_dir})
    timings_prefix = str(root / "receiver-timings")
    env = {**os.environ, paths.AGENT_DIR_ENV: agent_dir, "PYTHONUNBUFFERED": "1"}
    raw_socket = str(root / "raw.sock")
    children: list[Child] = []
    receiver_profile = str(root / "receiver.prof")
    profiling = False
    # Only the receivers of the step breakdown stamp their steps: the timed run measures the
    # receiver as it ships, not wrapped by the instrument.
    instrumenting = False

    async def start_receiver() -> Child:
        if args.receiver == "cli":
            argv = [sys.executable, "-m", "pi_cross_session", "inbox", "--busy", "0", "--json"]
            argv += ["--name", "bench-receiver"]
        else:
            argv = [sys.executable, THIS_FILE, "--serve-receiver", "bench-receiver"]
        child_env = dict(env)
        if profiling:
            child_env[PROFILE_ENV] = receiver_profile
        if instrumenting:
            child_env[TIMINGS_ENV] = timings_prefix
        return await anyio.to_thread.run_sync(start_child, "receiver", argv, child_env, root)

    senders = Senders(locations, start_receiver, args.per_sender, args.per_receiver)
    try:
        started = time.perf_counter()
        await senders.restart_receiver()
        frames = await capture_frames(locations, senders)
        replies = json.dumps({"ready": frames.ready.decode(), "receipt": frames.receipt.decode()})
        argv = [sys.executable, THIS_FILE, "--serve-raw", raw_socket, replies]
        raw = await anyio.to_thread.run_sync(start_child, "raw-server", argv, env, root)
        children.append(raw)
        setup_s = time.perf_counter() - started

        exchanger = Exchanger(locations, fs)
        samples: dict[str, list[int]] = {"probe": [], "send": [], "raw_probe": [], "raw_send": []}
        statuses: Counter[str] = Counter()
        failures: Counter[str] = Counter()
        probe_failures: Counter[str] = Counter()

        async def ours_probe() -> None:
            assert senders.target is not None
            await exchanger.probe(senders.target)

        async def raw_probe() -> None:
            await raw_exchange(raw_socket, frames.probe_hello, None)

        async def raw_send() -> None:
            await raw_exchange(raw_socket, frames.send_hello, frames.message)

        # Each probe by what the client did just before (a send, or a probe), ours and raw: a
        # receiver's work after a send (its turn, its registration) can meet the next probe.
        probes_after: dict[str, list[int]] = {
            f"{case} after {before}": []
            for case in ("probe", "raw_probe")
            for before in ("send", "raw_send", "probe", "raw_probe")
        }
        previous = ""
        rng = random.Random(20261129)
        rounds = max(args.probes, args.sends)
        run_started = time.perf_counter()
        for round_index in range(WARMUP_ROUNDS + rounds):
            timed = round_index >= WARMUP_ROUNDS
            index = round_index - WARMUP_ROUNDS
            cases: list[str] = []
            if not timed or index < args.probes:
                cases += ["probe", "raw_probe"]
            if not timed or index < args.sends:
                cases += ["send", "raw_send"]
            rng.shuffle(cases)
            # Whatever a send needs (a new identity, a new receiver) is prepared before any
            # timing of this round starts.
            prepared = await senders.next_send() if "send" in cases else None
            for case in cases:
                if case == "send":
                    assert prepared is not None
                    target, sender, message = prepared
                    before = time.perf_counter_ns()
                    try:
                        receipt = await exchanger.send(target, sender=sender, message=message)
                    except ExchangeError as exc:
                        failures[exc.code] += 1
                        continue
                    elapsed = time.perf_counter_ns() - before
                    if timed:
                        statuses[receipt.status] += 1
                elif case == "probe":
                    before = time.perf_counter_ns()
                    try:
                        await ours_probe()
                    except ExchangeError as exc:
                        # Counted, and timed: the caller waited that long (a timeout on a
                        # stalled machine is the probe's 350 ms).
                        if timed:
                            probe_failures[exc.code] += 1
                    elapsed = time.perf_counter_ns() - before
                else:
                    call = {"raw_probe": raw_probe, "raw_send": raw_send}[case]
                    before = time.perf_counter_ns()
                    await call()
                    elapsed = time.perf_counter_ns() - before
                if timed:
                    samples[case].append(elapsed)
                    if case in ("probe", "raw_probe") and previous:
                        probes_after[f"{case} after {previous}"].append(elapsed)
                previous = case
        run_s = time.perf_counter() - run_started

        cpu: dict[str, Any] = {}
        if args.cpu_blocks:
            assert senders.receiver is not None
            receiver = senders.receiver
            cpu = await cpu_per_call(
                args.cpu_blocks,
                args.cpu_probes,
                ours_probe,
                raw_probe,
                lambda: receiver.process.pid,
                raw.process.pid,
            )

        # The same for sends: each block goes to a new incarnation, from identities published
        # before it starts, so no block meets a contract limit or a restart.
        cpu_send: dict[str, Any] = {}
        if args.cpu_blocks and args.cpu_sends:
            prepared: list[tuple[Registration, Sender, Message]] = []
            cpu_send_statuses: Counter[str] = Counter()

            async def prepare_sends() -> None:
                await senders.restart_receiver()
                prepared[:] = [await senders.next_send() for _ in range(args.cpu_sends)]
                prepared.reverse()

            async def ours_send() -> None:
                target, sender, message = prepared.pop()
                receipt = await exchanger.send(target, sender=sender, message=message)
                # Back to back, a send can meet the previous message's turn: queued is admitted.
                if receipt.status not in ("submitted", "queued"):
                    raise SystemExit(f"a CPU block's send ended {receipt.status}")
                cpu_send_statuses[receipt.status] += 1
                await anyio.sleep(SEND_PACE_S)

            async def paced_raw_send() -> None:
                await raw_send()
                await anyio.sleep(SEND_PACE_S)

            def receiver_pid() -> int:
                assert senders.receiver is not None
                return senders.receiver.process.pid

            cpu_send = await cpu_per_call(
                args.cpu_blocks,
                args.cpu_sends,
                ours_send,
                paced_raw_send,
                receiver_pid,
                raw.process.pid,
                before_block=prepare_sends,
                settle_s=SETTLE_S,
            )
            cpu_send["statuses"] = dict(cpu_send_statuses)

        # Where a send's time goes: the same exchanges again, untimed as a whole, with a mark at
        # every step (ours through the Exchanger's seams, the floor the same way), interleaved.
        ours_runs: list[dict[str, int]] = []
        raw_runs: list[dict[str, int]] = []
        probe_runs: list[dict[str, int]] = []
        raw_probe_runs: list[dict[str, int]] = []
        clock = PhaseClock()
        instrumented = Exchanger(locations, clock, connect=clock.connect)
        instrumenting = True
        await senders.restart_receiver()  # a new incarnation that stamps its steps
        instrumenting = False
        assert senders.target is not None
        await instrumented.probe(senders.target)  # it learns, once, that the dir is local
        for _ in range(args.phase_sends):
            assert senders.target is not None
            marks = clock.restart()
            clock.mark("start")
            with contextlib.suppress(ExchangeError):  # a failed one lacks its "end" mark
                await instrumented.probe(senders.target)
                clock.mark("end")
            probe_runs.append(marks)
            raw_clock = PhaseClock()
            await timed_raw_send(raw_socket, frames, raw_clock, probe=True)
            raw_probe_runs.append(raw_clock.marks)
            target, sender, message = await senders.next_send()
            marks = clock.restart()
            clock.mark("start")
            with contextlib.suppress(ExchangeError):
                await instrumented.send(target, sender=sender, message=message)
                clock.mark("end")
            ours_runs.append(marks)
            raw_clock = PhaseClock()
            await timed_raw_send(raw_socket, frames, raw_clock)
            raw_runs.append(raw_clock.marks)
        # The receiver writes its handler timings as it stops.
        assert senders.receiver is not None
        await anyio.to_thread.run_sync(senders.receiver.stop)
        senders.receiver = None
        handlers = await anyio.to_thread.run_sync(receiver_handler_medians, root)
        phases = {
            "ours_us": phase_medians(ours_runs, OUR_PHASES),
            "raw_us": phase_medians(raw_runs, RAW_PHASES),
            "probe_ours_us": phase_medians(probe_runs, OUR_PROBE_PHASES),
            "probe_raw_us": phase_medians(raw_probe_runs, RAW_PROBE_PHASES),
            "receiver_handlers_us": {k: v for k, v in handlers.items() if ":" not in k},
            "receiver_steps_us": {k: v for k, v in handlers.items() if ":" in k},
            "vetting_inline": exchanger_vets_inline(exchanger),
            "n": args.phase_sends,
        }

        profile: dict[str, str] = {}
        if args.profile:
            # Untimed, on a fresh receiver that profiles itself from its ready line to its stop.
            profiling = True
            await senders.restart_receiver()
            client = cProfile.Profile()
            for _ in range(min(200, args.per_receiver)):
                target, sender, message = await senders.next_send()
                client.enable()
                with contextlib.suppress(ExchangeError):  # a refusal (busy) is profiled too
                    await exchanger.send(target, sender=sender, message=message)
                client.disable()
            assert senders.receiver is not None
            # The receiver writes its profile as it stops.
            await anyio.to_thread.run_sync(senders.receiver.stop)
            senders.receiver = None
            profile["client"] = profile_text(pstats.Stats(client), args.profile_lines)
            profile["receiver"] = await anyio.to_thread.run_sync(
                receiver_profile_text, receiver_profile, args.profile_lines
            )

        figures = {
            name: {
                "n": len(values),
                "p50_us": round(percentile(values, 0.50), 1),
                "p99_us": round(percentile(values, 0.99), 1),
            }
            for name, values in samples.items()
        }
        ratios = {
            kind: {
                "p50": round(figures[kind]["p50_us"] / figures[f"raw_{kind}"]["p50_us"], 2),
                "p99": round(figures[kind]["p99_us"] / figures[f"raw_{kind}"]["p99_us"], 2),
            }
            for kind in ("probe", "send")
        }
        return {
            "figures": figures,
            "ratios": ratios,
            "target_send_p50_ratio": TARGET_SEND_RATIO,
            "send_phases_p50": phases,
            "cpu_per_probe": cpu,
            "cpu_per_send": cpu_send,
            "probe_p50_us_by_previous": {
                name: {"n": len(values), "p50_us": round(percentile(values, 0.50), 1)}
                for name, values in probes_after.items()
                if values
            },
            "send_statuses": dict(statuses),
            "send_failures": dict(failures),
            "probe_failures": dict(probe_failures),
            "receiver": args.receiver,
            "receiver_incarnations": senders.receivers,
            "sender_identities": senders.senders,
            "per_sender": args.per_sender,
            "per_receiver": args.per_receiver,
            "frame_bytes": {
                "probe_hello": len(frames.probe_hello),
                "send_hello": len(frames.send_hello),
                "message": len(frames.message),
                "ready": len(frames.ready),
                "receipt": len(frames.receipt),
            },
            "setup_s": round(setup_s, 2),
            "run_s": round(run_s, 2),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "profile": profile,
        }
    finally:
        senders.stop()
        for child in children:
            child.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


LIMITS_NOTE: Final = (
    "limits: each sender identity sends at most {per_sender} messages (token bucket burst 30), "
    "and the receiver is restarted (new incarnation, fresh budget of 256) every {per_receiver} "
    "sends; restarts are not timed"
)


def print_report(result: dict[str, Any]) -> None:
    figures = result["figures"]
    ratios = result["ratios"]
    receiver = (
        "pi-cross-session inbox --busy 0 --json"
        if result["receiver"] == "cli"
        else "SessionRuntime on the headless host, 0 s turns (the inbox without its printing)"
    )
    print(f"receiver: {receiver}; floor: raw asyncio client and server, no validation")
    print(LIMITS_NOTE.format(**result))
    print(
        f"{result['receiver_incarnations']} receiver incarnations, "
        f"{result['sender_identities']} sender identities; set-up {result['setup_s']} s, "
        f"timed run {result['run_s']} s"
    )
    print(f"{'':<10}{'n':>6}{'p50 µs':>10}{'p99 µs':>10}")
    for name in ("probe", "raw_probe", "send", "raw_send"):
        row = figures[name]
        print(f"{name:<10}{row['n']:>6}{row['p50_us']:>10.1f}{row['p99_us']:>10.1f}")
    for kind in ("probe", "send"):
        print(f"{kind} ours/raw: p50 {ratios[kind]['p50']:.2f}, p99 {ratios[kind]['p99']:.2f}")
    target = result["target_send_p50_ratio"]
    verdict = "ok" if ratios["send"]["p50"] <= target else "OVER"
    print(f"send p50 ratio target <= {target:g}: {verdict}")
    failures = result["send_failures"] or 0
    print(f"timed send receipts: {result['send_statuses']}; failed sends (any): {failures}")
    print(f"failed probes (timed, counted in the figures): {result['probe_failures'] or 0}")
    phases = result["send_phases_p50"]
    print(f"\nwhere a send's time goes (median of {phases['n']} instrumented sends each, µs):")
    for label, value in phases["ours_us"].items():
        print(f"  ours {label:<32}{value:>8.1f}")
    for label, value in phases["raw_us"].items():
        print(f"  raw  {label:<32}{value:>8.1f}")
    print(f"\nwhere a probe's time goes (median of {phases['n']} instrumented probes each, µs):")
    for label, value in phases["probe_ours_us"].items():
        print(f"  ours {label:<32}{value:>8.1f}")
    for label, value in phases["probe_raw_us"].items():
        print(f"  raw  {label:<32}{value:>8.1f}")
    print("\nprobe p50 by what the client did just before (timed run, µs):")
    for name, row in result["probe_p50_us_by_previous"].items():
        print(f"  {name:<26}{row['p50_us']:>8.1f}  (n {row['n']})")
    for kind, cpu in (("probe", result["cpu_per_probe"]), ("send", result["cpu_per_send"])):
        if not cpu:
            continue
        calls = (
            "back-to-back probes" if kind == "probe" else f"sends {SEND_PACE_S * 1000:g} ms apart"
        )
        print(
            f"\nCPU per {kind}, µs (median of {cpu['blocks']} blocks of {cpu['per_block']} "
            f"{calls}, alternating):"
        )
        for side in ("ours", "raw"):
            row = cpu[side]
            print(
                f"  {side:<5} client {row['client_us']:>7.1f}  server {row['server_us']:>7.1f}"
                f"  latency p50 {row['latency_p50_us']:>7.1f}"
            )
        print(
            f"  ours over raw: client +{cpu['client_over_raw_us']}, server "
            f"+{cpu['server_over_raw_us']}; latency p50 ratio {cpu['latency_p50_ratio']}"
        )
    inline = phases["vetting_inline"]
    print(f"  socket vetted on the event loop (runtime dir known local): {inline}")
    if phases["receiver_steps_us"]:
        print("  the receiver's steps per connection, whole run (µs):")
        for label, value in sorted(phases["receiver_steps_us"].items()):
            print(f"    {label:<60}{value:>8.1f}")
    handlers = phases["receiver_handlers_us"]
    if handlers:  # only the script receiver times its handlers
        print(
            "  receiver handlers, whole run: probe hello {hello_probe} µs, authenticated hello "
            "(reads the sender's registration) {hello_authenticated} µs, message or status "
            "{second_frame} µs".format(**handlers)
        )
    for side, text in result["profile"].items():
        print(f"\n-- cProfile, {side} side of the send path (by own time) --\n{text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--probes", type=int, default=600, help="timed probes (and raw probes)")
    parser.add_argument("--sends", type=int, default=600, help="timed sends (and raw sends)")
    parser.add_argument(
        "--receiver",
        choices=("script", "cli"),
        default="script",
        help="script: the headless inbox without printing (default); cli: the inbox command",
    )
    parser.add_argument("--per-sender", type=int, default=25, help="sends per sender identity")
    parser.add_argument("--per-receiver", type=int, default=250, help="sends per receiver")
    parser.add_argument(
        "--phase-sends", type=int, default=100, help="instrumented sends for the phase breakdown"
    )
    parser.add_argument(
        "--cpu-blocks", type=int, default=5, help="blocks of back-to-back probes timed for CPU"
    )
    parser.add_argument("--cpu-probes", type=int, default=300, help="probes per CPU block")
    parser.add_argument(
        "--cpu-sends", type=int, default=200, help="sends per CPU block (0: no send blocks)"
    )
    parser.add_argument(
        "--journal",
        action="store_true",
        help="only CPU per send of both sides with the event journal off and on, alternated",
    )
    parser.add_argument(
        "--journal-text", action="store_true", help="with --journal: also the journal with text"
    )
    parser.add_argument(
        "--journal-blocks", type=int, default=20, help="with --journal: blocks per setting"
    )
    parser.add_argument(
        "--journal-sender",
        choices=("outbound", "bare"),
        default="outbound",
        help="with --journal: a sender of ours (outbound.send), or the bare exchange",
    )
    parser.add_argument("--profile", action="store_true", help="add an untimed cProfile run")
    parser.add_argument("--profile-lines", type=int, default=25, help=argparse.SUPPRESS)
    parser.add_argument("--serve-receiver", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument(
        "--serve-raw", nargs=2, metavar=("SOCKET", "REPLIES_JSON"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve_receiver:
        profile_out = os.environ.get(PROFILE_ENV)
        timings_out = os.environ.get(TIMINGS_ENV)
        timings = anyio.run(serve_receiver, args.serve_receiver, profile_out, timings_out)
        if timings_out:
            Path(f"{timings_out}.{os.getpid()}.json").write_text(json.dumps(timings))
        return 0
    if args.serve_raw:
        socket_path, replies = args.serve_raw
        data = json.loads(replies)
        asyncio.run(serve_raw(socket_path, data["ready"].encode(), data["receipt"].encode()))
        return 0
    if not 0 <= args.cpu_sends <= args.per_receiver:
        parser.error("--cpu-sends must be 0 to --per-receiver (one incarnation per block)")
    if not 1 <= args.per_sender <= 30 or not 1 <= args.per_receiver <= 255:
        parser.error("--per-sender must be 1-30 and --per-receiver 1-255 (the contract's limits)")
    if args.profile and args.receiver == "cli":
        parser.error("--profile profiles the script receiver only")
    if args.journal:
        if args.cpu_sends < 1 or args.journal_blocks < 1:
            parser.error("--journal needs --cpu-sends and --journal-blocks of at least 1")
        journal_result = anyio.run(run_journal, args)
        if args.json:
            print(json.dumps(journal_result, indent=2))
        else:
            print_journal_report(journal_result)
        return 0
    result = anyio.run(run, args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
