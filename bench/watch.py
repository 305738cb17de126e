"""Memory and latency of ``pi-cross-session watch``, in the terminal and as JSON lines.

Issue 25's figures: a watch's resident memory at most 20 MiB over an idle watch while messages flow
and with a 100 MiB hostile journal in the agent dir; an event on screen within 1 s (median). They
are bench figures, not tests: the machine is shared, so every sample is reported.

Each run has a fresh temporary agent dir with two inboxes (``inbox --busy 0 --json``, named
``bench-a`` and ``bench-b``) and two watches of it side by side:

* **json**: ``watch --json``. This process reads its stdout and stamps each line (wall clock, ms)
  as it arrives;
* **screen**: ``watch`` full screen in a 160×50 terminal of a private tmux server (``tmux -L
  <unique>``, with our own two-line configuration, never the user's). Its screen is read with
  ``capture-pane`` every ``--capture-every`` s, and the first time each 8-hex token (a message id
  as the feed shows it) appears is noted.

Phases: **idle** (``--idle-s``, after ``--settle-s``), then **flow** (``--flow-s``: ``pi-cross-
session send --json`` to ``bench-a`` and ``bench-b`` in turn, one started every ``--send-every`` s
and each waited for; under the receivers' token bucket: 30 burst, 0.5/s), then ``--tail-s`` for
the last events to be shown. Two kinds of run, alternated ``--repeat`` times:

* **plain**;
* **hostile**: before the watches start, a ``--hostile-mib`` MiB journal file is written in the
  private journal dir of a session that never lived. It holds lines that are no events (invalid
  UTF-8, lines over the line bound, deep nesting, wrong types, terminal escapes), forged events
  now and then, and it ends inside a 3 MiB line with no newline. During the flow phase more of
  the same is appended (``--hostile-append-kib`` every 0.5 s).

**Memory**: VmRSS of both watches sampled every 0.1 s. Reported per phase: the median and the
maximum, and VmHWM (the kernel's peak) at the end of each phase. The target's figure is the
flow phase's peak over the idle median of the plain run of the same round, for each watch
(for the hostile run also over its own idle). **Latency**:

* json: from each receipt a sender journaled (its event's ``at``, wall clock, ms) to that event's
  line arriving on watch's stdout; every other event's delay is reported too;
* screen: to the end of the first capture showing the start of a message's id (an upper bound:
  the screen may have shown it up to one capture period earlier), from the sender's receipt and
  from the first event journaled for the message (its ``sent``, stamped before the exchange).

Sends are started at jittered times (``--send-every`` × 0.5–1.5, seeded): at a steady pace they
would meet watch's polling at the same point of its period every time.

The events come from the journals themselves, read at the end of the run. Each watch's CPU per
phase is reported as a share of one core.

Run ``python bench/watch.py`` (``--json`` for machine-readable output). It needs tmux and rich (the
``watch`` extra); ``--no-screen`` measures only the JSON watch. Everything it creates (the
temporary dirs, the runtime dir, the inboxes, the watches, the tmux servers and their sockets) is
removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import bench_support
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.security.io.journal import (
    Direction,
    Event,
    EventKind,
    Party,
    encode_event,
    journal_dir,
)
from pi_cross_session._internal.security.io.journal_network import read_network

CLI: Final = [sys.executable, "-m", "pi_cross_session"]
TARGET_RSS_OVER_IDLE_MIB: Final = 20.0
TARGET_LATENCY_S: Final = 1.0
#: How often the watches' memory is sampled.
SAMPLE_S: Final = 0.1
#: How long a started process may take to say it is ready, and to stop once asked.
START_TIMEOUT_S: Final = 20.0
STOP_TIMEOUT_S: Final = 10.0
#: How long one send may take before it is given up (it never should).
SEND_TIMEOUT_S: Final = 30.0
#: The terminal the screen watch runs in.
SCREEN_WIDTH: Final = 160
SCREEN_HEIGHT: Final = 50
#: Our whole tmux configuration: no status line, and a pane that outlives its command (so the last
#: screen of a watch that failed can still be read).
TMUX_CONFIG: Final = "set -g status off\nset -g remain-on-exit on\n"
#: A receipt a sender journals (``accepted`` is journaled as ``admitted``).
RECEIPTS: Final = frozenset({EventKind.SUBMITTED, EventKind.QUEUED, EventKind.ADMITTED})
#: How a message id shows on the screen: its first 8 characters (a UUID's first group).
SCREEN_ID: Final = re.compile(r"(?<![0-9a-f])[0-9a-f]{8}(?![0-9a-f])")
#: Variables that would make the screen watch's terminal something else than the pane.
_DROPPED_ENV: Final = frozenset({"TMUX", "TMUX_PANE", "COLUMNS", "LINES"})


def now_ms() -> float:
    """Wall clock in milliseconds: the journals' events carry wall-clock times."""
    return time.time_ns() / 1_000_000


# -- processes -------------------------------------------------------------------------------------


@dataclass
class Child:
    """A process started by the bench, its output going to a log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        """SIGINT, then SIGKILL if it does not end within :data:`STOP_TIMEOUT_S`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()


def start_inbox(name: str, env: dict[str, str], root: Path) -> Child:
    """``inbox --busy 0 --json --name NAME``, once it printed its ``ready`` event."""
    log_path = root / f"inbox-{name}.log"
    argv = [*CLI, "inbox", "--busy", "0", "--json", "--name", name]
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    child = Child(name, process, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and json.loads(line).get("event") == "ready":
                return child
        if process.poll() is not None:
            break
        time.sleep(0.05)  # set-up only: nothing here is timed
    child.stop()
    raise SystemExit(f"inbox {name} did not start:\n{log_path.read_text(errors='replace')}")


class JsonWatch:
    """``watch --json``, each line of its stdout stamped as it arrives."""

    def __init__(self, env: dict[str, str], root: Path) -> None:
        self.log_path = root / "watch-json.stderr"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*CLI, "watch", "--json"],
                env=env,
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.pid = self.process.pid
        #: (arrival, wall clock ms; the line) for every line.
        self.lines: list[tuple[float, bytes]] = []
        self._reader = threading.Thread(target=self._read, name="json-watch", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append((now_ms(), raw))

    def events(self) -> list[tuple[float, dict[str, Any]]]:
        """The event objects printed, with their arrival times."""
        found = []
        for arrived, raw in self.lines:
            with contextlib.suppress(ValueError):
                data = json.loads(raw)
                if isinstance(data, dict) and data.get("type") == "event":
                    found.append((arrived, data))
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=STOP_TIMEOUT_S)


class ScreenWatch:
    """``watch`` full screen in a terminal of a private tmux server; its screen read every
    ``capture_every`` s on a thread, noting when each 8-hex token first shows."""

    def __init__(self, env: dict[str, str], root: Path, capture_every: float, tmux: str) -> None:
        self.tmux = tmux
        self.socket = f"pcs-bench-{uuid.uuid4().hex[:12]}"
        self.config = root / "tmux.conf"
        self.config.write_text(TMUX_CONFIG, encoding="utf-8")
        self.env = {key: value for key, value in env.items() if key not in _DROPPED_ENV}
        self.env["TERM"] = "xterm-256color"
        self.capture_every = capture_every
        self.socket_path: str | None = None
        self.first_seen: dict[str, float] = {}
        self.captures = 0
        self.capture_ms: list[float] = []
        self.last_screen = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._capture, name="screen-watch", daemon=True)
        size = ["-x", str(SCREEN_WIDTH), "-y", str(SCREEN_HEIGHT)]
        self._run("new-session", "-d", "-s", "bench", *size, *CLI, "watch", cwd=root)
        self.socket_path = self._run("display-message", "-p", "#{socket_path}").strip()
        self.pid = int(self._run("display-message", "-p", "-t", "bench", "#{pane_pid}"))

    def _run(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            [self.tmux, "-L", self.socket, "-f", str(self.config), *args],
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def screen(self) -> str:
        """What the terminal shows now."""
        return self._run("capture-pane", "-p", "-t", "bench")

    def wait_for(self, text: str) -> None:
        """Set-up only: until the screen shows ``text``."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if text in self.screen():
                return
            time.sleep(0.1)
        raise SystemExit(f"the screen watch never showed {text!r}:\n{self.screen()}")

    def start_capturing(self) -> None:
        self._thread.start()

    def _capture(self) -> None:
        while not self._stop.is_set():
            before = now_ms()
            try:
                screen = self.screen()
            except (RuntimeError, subprocess.TimeoutExpired):
                break  # the server is gone (the watch failed): the report says what was seen
            seen = now_ms()
            self.captures += 1
            self.capture_ms.append(seen - before)
            self.last_screen = screen
            for token in SCREEN_ID.findall(screen):
                self.first_seen.setdefault(token, seen)
            self._stop.wait(max(0.0, self.capture_every - (now_ms() - before) / 1000))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.last_screen = self.screen()
        # The pane's watch gets SIGHUP with the server and ends; the pid is ours, checked below.
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("kill-server")
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self.socket_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie of the tmux server's is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- memory ----------------------------------------------------------------------------------------


def vm_hwm_mib(pid: int) -> float | None:
    """The peak resident memory of ``pid`` so far (VmHWM), in MiB."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


class Sampler:
    """VmRSS of each watch every :data:`SAMPLE_S`, labelled with the phase it was taken in."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.phase = "settle"
        self.samples: dict[str, dict[str, list[float]]] = {name: {} for name in pids}
        self.hwm: dict[str, dict[str, float | None]] = {name: {} for name in pids}
        self.cpu: dict[str, dict[str, float]] = {name: {} for name in pids}
        self._phase_started = (time.monotonic(), self._cpu_now())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _cpu_now(self) -> dict[str, float]:
        spent = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                spent[name] = bench_support.cpu_s(pid)
        return spent

    def start(self) -> None:
        self._thread.start()

    def enter(self, phase: str) -> None:
        """Close the current phase (its peak and CPU) and start ``phase``."""
        started, cpu_before = self._phase_started
        cpu_after = self._cpu_now()
        elapsed = time.monotonic() - started
        for name, pid in self.pids.items():
            self.hwm[name][self.phase] = vm_hwm_mib(pid)
            if name in cpu_before and name in cpu_after and elapsed > 0:
                self.cpu[name][self.phase] = (cpu_after[name] - cpu_before[name]) / elapsed
        self.phase = phase
        self._phase_started = (time.monotonic(), cpu_after)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                with contextlib.suppress(OSError, RuntimeError):
                    rss = bench_support.rss_mib(pid)
                    self.samples[name].setdefault(self.phase, []).append(rss)
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=STOP_TIMEOUT_S)


# -- the hostile journal ---------------------------------------------------------------------------


def hostile_block(serial: int) -> bytes:
    """About 64 KiB of what a hostile writer may put in a journal: lines that are no events,
    and one forged event whose names carry terminal escapes."""
    forged = Event(
        int(now_ms()),
        EventKind.ADMITTED,
        f"forged-{serial}",
        Party("\x1b[2J\x1b[31mforged\x1b]0;title\x07", uuid.uuid4().hex),
        Party("[bold]x[/bold]\u202e", uuid.uuid4().hex),
        direction=Direction.IN,
    )
    lines = [
        encode_event(forged) or b"\n",
        b"\xff\xfe\xfd not utf-8 \xc3\x28\n",
        b"[" * 4000 + b"]" * 4000 + b"\n",
        b'{"v":1,"at":"soon","kind":["admitted"],"messageId":{},"session":null}\n',
        b'{"v":1,"at":1,"kind":"admitted","direction":"in","messageId":"' + b"a" * 9000 + b'"}\n',
        b"\x1b[2J\x1b[H" * 500 + b"\n",
        b"x" * 20_000 + b"\n",  # over the line bound
        b"\n" * 64,
    ]
    block = b"".join(lines)
    return (block * (65_536 // len(block) + 1))[:65_535] + b"\n"


def write_hostile_journal(agent_dir: str, mib: int) -> str:
    """A ``mib`` MiB journal file of hostile lines, ending inside a 3 MiB line with no newline,
    in the private journal dir of a session that never lived; its path."""
    directory = journal_dir(agent_dir, uuid.uuid4().hex)
    os.makedirs(directory, mode=0o700)
    for parent in (os.path.dirname(directory), os.path.dirname(os.path.dirname(directory))):
        os.chmod(parent, 0o700)
    path = os.path.join(directory, "journal.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        tail = 3 * 1024 * 1024
        written = 0
        serial = 0
        while written < mib * 1024 * 1024 - tail:
            serial += 1
            written += os.write(fd, hostile_block(serial))
        os.write(fd, b'{"v":1,"at":1,"text":"' + b"y" * (tail - 23))
    finally:
        os.close(fd)
    return path


class HostileAppender:
    """Appends ``kib`` KiB of hostile lines to the hostile journal every 0.5 s (the flow phase)."""

    def __init__(self, path: str, kib: int) -> None:
        self.path = path
        self.kib = kib
        self.appended = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hostile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        serial = 1_000_000
        while not self._stop.wait(0.5):
            # A newline first: the file was left inside a line that never ends.
            data = b"\n" + b"".join(
                hostile_block(serial + n) for n in range(max(1, self.kib // 64))
            )
            serial += self.kib
            with open(self.path, "ab") as file:
                file.write(data)
            self.appended += len(data)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=STOP_TIMEOUT_S)


# -- one run ---------------------------------------------------------------------------------------


@dataclass
class Sent:
    """One ``send --json``: when it ran, and what it answered."""

    started: float
    ended: float
    target: str
    message_id: str | None
    status: str


def send(env: dict[str, str], root: Path, target: str, serial: int) -> Sent:
    """One ``pi-cross-session send --json`` to ``target``, waited for."""
    text = f"bench message {serial}: the parser change is merged; please rebase onto main."
    started = now_ms()
    done = subprocess.run(
        [*CLI, "send", "--json", target, text],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=SEND_TIMEOUT_S,
        check=False,
    )
    ended = now_ms()
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return Sent(started, ended, target, None, f"exit {done.returncode}")
    return Sent(started, ended, target, data.get("messageId"), str(data.get("status")))


def summary(values: list[float]) -> dict[str, Any]:
    """n, median, p90, min and max of ``values`` (rounded); empty when there are none."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered), max(1, math.ceil(0.9 * len(ordered)))) - 1]
    return {
        "n": len(values),
        "median": round(statistics.median(values), 1),
        "p90": round(p90, 1),
        "min": round(ordered[0], 1),
        "max": round(ordered[-1], 1),
    }


def run_once(kind: str, args: argparse.Namespace, tmux: str | None) -> dict[str, Any]:
    """One run (``plain`` or ``hostile``): its memory, CPU and latency figures."""
    root = Path(tempfile.mkdtemp(prefix=f"pi-bench-watch-{kind}-"))
    agent_dir = str(root / "agent")
    os.mkdir(agent_dir, 0o700)
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: agent_dir})
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "PI_CROSS_SESSION_JOURNAL"  # the default: journaling on
    }
    env.update({paths.AGENT_DIR_ENV: agent_dir, "PYTHONUNBUFFERED": "1"})
    inboxes: list[Child] = []
    watches: dict[str, JsonWatch | ScreenWatch] = {}
    sampler: Sampler | None = None
    appender: HostileAppender | None = None
    sends: list[Sent] = []
    try:
        hostile = write_hostile_journal(agent_dir, args.hostile_mib) if kind == "hostile" else None
        for name in ("bench-a", "bench-b"):
            inboxes.append(start_inbox(name, env, root))
        watches["json"] = JsonWatch(env, root)
        if tmux is not None:
            screen = ScreenWatch(env, root, args.capture_every, tmux)
            watches["screen"] = screen
            screen.wait_for("bench-b")  # both inboxes listed: the view is up
        sampler = Sampler({name: watch.pid for name, watch in watches.items()})
        sampler.start()
        time.sleep(args.settle_s)
        sampler.enter("idle")
        time.sleep(args.idle_s)
        if isinstance(watches.get("screen"), ScreenWatch):
            watches["screen"].start_capturing()  # type: ignore[union-attr]
        sampler.enter("flow")
        if hostile is not None:
            appender = HostileAppender(hostile, args.hostile_append_kib)
            appender.start()
        flow_ends = time.monotonic() + args.flow_s
        serial = 0
        # Sends at jittered times: at a steady pace they would fall at the same point of watch's
        # polling period every time, and the delays would show that point, not the spread.
        rng = random.Random(20261206)
        while time.monotonic() < flow_ends:
            started = time.monotonic()
            serial += 1
            target = ("bench-a", "bench-b")[serial % 2]
            sends.append(send(env, root, target, serial))
            pause = args.send_every * rng.uniform(0.5, 1.5)
            time.sleep(max(0.0, pause - (time.monotonic() - started)))
        if appender is not None:
            appender.stop()
        sampler.enter("tail")
        time.sleep(args.tail_s)
        sampler.enter("end")
        sampler.stop()
        network = read_network(agent_dir)
    finally:
        if sampler is not None:
            sampler.stop()
        if appender is not None:
            appender.stop()
        for watch in watches.values():
            watch.stop()
        for inbox in inboxes:
            inbox.stop()
        stderr = {}
        json_watch = watches.get("json")
        if isinstance(json_watch, JsonWatch):
            stderr["json"] = json_watch.log_path.read_text(errors="replace")[-2000:]
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)

    ours = {sent.message_id for sent in sends if sent.message_id}
    events = [event for event in network.events if event.message_id in ours]
    first_event: dict[str, int] = {}
    receipt_at: dict[str, int] = {}
    for event in events:
        first_event[event.message_id] = min(first_event.get(event.message_id, event.at), event.at)
        if event.direction is Direction.OUT and event.kind in RECEIPTS:
            receipt_at[event.message_id] = event.at
    result: dict[str, Any] = {
        "kind": kind,
        "sends": len(sends),
        "send_statuses": dict(Counter(sent.status for sent in sends)),
        "send_s": summary([(sent.ended - sent.started) / 1000 for sent in sends]),
        "events_journaled": len(events),
        "hostile_appended_mib": round(appender.appended / 2**20, 1) if appender else 0,
        "watches": {},
    }
    for name, watch in watches.items():
        assert sampler is not None
        samples = sampler.samples[name]
        figures: dict[str, Any] = {
            "rss_mib": {
                phase: {
                    "median": round(statistics.median(values), 1),
                    "max": round(max(values), 1),
                    "n": len(values),
                }
                for phase, values in samples.items()
                if values
            },
            "hwm_mib": {
                phase: None if value is None else round(value, 1)
                for phase, value in sampler.hwm[name].items()
            },
            "cpu_share": {phase: round(share, 3) for phase, share in sampler.cpu[name].items()},
        }
        if isinstance(watch, JsonWatch):
            printed = watch.events()
            receipts: list[float] = []
            every: list[float] = []
            shown = 0
            for arrived, data in printed:
                if data.get("messageId") not in ours:
                    continue
                shown += 1
                delay = arrived - data["at"]
                every.append(delay)
                if data.get("direction") == "out" and data.get("kind") in RECEIPTS:
                    receipts.append(delay)
            figures["events_printed"] = shown
            figures["lines_printed"] = len(watch.lines)
            figures["receipt_to_line_ms"] = summary(receipts)
            figures["receipt_to_line_samples_ms"] = [round(v, 1) for v in receipts]
            figures["event_to_line_ms"] = summary(every)
            figures["stderr_tail"] = stderr.get("json", "")
        else:
            seen = sorted(m for m in ours if m[:8] in watch.first_seen and m in first_event)
            delays = [watch.first_seen[m[:8]] - first_event[m] for m in seen]
            # The id may show before the receipt (from the sender's ``sent``): then below 0.
            after_receipt = [
                watch.first_seen[m[:8]] - receipt_at[m] for m in seen if m in receipt_at
            ]
            figures["messages_seen"] = len(delays)
            figures["first_event_to_screen_ms"] = summary(delays)
            figures["first_event_to_screen_samples_ms"] = [round(v, 1) for v in delays]
            figures["receipt_to_screen_ms"] = summary(after_receipt)
            figures["receipt_to_screen_samples_ms"] = [round(v, 1) for v in after_receipt]
            figures["captures"] = watch.captures
            figures["capture_ms"] = summary(watch.capture_ms)
            figures["last_screen"] = watch.last_screen
        result["watches"][name] = figures
    return result


# -- the whole bench -------------------------------------------------------------------------------


def over_idle(runs: list[dict[str, Any]]) -> None:
    """Add each run's peak (flow and tail) over the idle medians, per watch."""
    plain_idle: dict[tuple[int, str], float] = {}
    for run in runs:
        if run["kind"] == "plain":
            for name, figures in run["watches"].items():
                plain_idle[(run["round"], name)] = figures["rss_mib"]["idle"]["median"]
    for run in runs:
        for name, figures in run["watches"].items():
            rss = figures["rss_mib"]
            peak = max(rss[phase]["max"] for phase in ("flow", "tail") if phase in rss)
            hwm = figures["hwm_mib"].get("tail")
            figures["peak_mib"] = peak
            figures["peak_over_own_idle_mib"] = round(peak - rss["idle"]["median"], 1)
            baseline = plain_idle.get((run["round"], name))
            if baseline is not None:
                figures["peak_over_plain_idle_mib"] = round(peak - baseline, 1)
                if hwm is not None:
                    figures["hwm_over_plain_idle_mib"] = round(hwm - baseline, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of a plain and a hostile run")
    parser.add_argument("--settle-s", type=float, default=3.0, help="after start, unmeasured")
    parser.add_argument("--idle-s", type=float, default=10.0, help="the idle phase")
    parser.add_argument("--flow-s", type=float, default=30.0, help="the phase of sends")
    parser.add_argument("--tail-s", type=float, default=3.0, help="after the last send")
    parser.add_argument("--send-every", type=float, default=0.5, help="a send started every S s")
    parser.add_argument("--capture-every", type=float, default=0.05, help="screen captures, s")
    parser.add_argument("--hostile-mib", type=int, default=100, help="the hostile journal's size")
    parser.add_argument(
        "--hostile-append-kib", type=int, default=512, help="appended to it every 0.5 s"
    )
    parser.add_argument("--no-screen", action="store_true", help="only the JSON watch")
    args = parser.parse_args(argv)
    if args.hostile_mib < 4:
        parser.error("--hostile-mib must be at least 4 (it ends inside a 3 MiB line)")
    tmux = None if args.no_screen else shutil.which("tmux")
    if not args.no_screen:
        if tmux is None:
            parser.error("tmux is not installed (--no-screen measures the JSON watch only)")
        try:
            import rich  # noqa: F401  (the full view's one extra)
        except ImportError:
            parser.error("the full view needs rich, the 'watch' extra (or --no-screen)")
    runs = []
    started = time.monotonic()
    for round_index in range(args.repeat):
        # Alternated: which kind goes first changes every round.
        kinds = ("plain", "hostile") if round_index % 2 == 0 else ("hostile", "plain")
        for kind in kinds:
            run = run_once(kind, args, tmux)
            run["round"] = round_index + 1
            runs.append(run)
            if not args.json:
                print(f"round {round_index + 1}, {kind}: done", file=sys.stderr, flush=True)
    over_idle(runs)
    result = {
        "runs": runs,
        "settings": {
            key: getattr(args, key)
            for key in (
                "repeat",
                "settle_s",
                "idle_s",
                "flow_s",
                "tail_s",
                "send_every",
                "capture_every",
                "hostile_mib",
                "hostile_append_kib",
            )
        },
        "targets": {
            "rss_over_idle_mib": TARGET_RSS_OVER_IDLE_MIB,
            "latency_median_s": TARGET_LATENCY_S,
        },
        "run_s": round(time.monotonic() - started, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 0


def print_report(result: dict[str, Any]) -> None:
    settings = result["settings"]
    print(
        f"{settings['repeat']} rounds of a plain and a hostile run "
        f"({settings['hostile_mib']} MiB hostile journal, {settings['hostile_append_kib']} KiB "
        f"appended every 0.5 s while messages flow); idle {settings['idle_s']:g} s, flow "
        f"{settings['flow_s']:g} s (a send every {settings['send_every']:g} s), tail "
        f"{settings['tail_s']:g} s; {result['run_s']} s in all"
    )
    target_mib = result["targets"]["rss_over_idle_mib"]
    target_ms = result["targets"]["latency_median_s"] * 1000
    for run in result["runs"]:
        print(
            f"\nround {run['round']}, {run['kind']}: {run['sends']} sends "
            f"{run['send_statuses']}, {run['events_journaled']} events journaled; send took "
            f"{run['send_s'].get('median')} s (median)"
        )
        for name, figures in run["watches"].items():
            rss = figures["rss_mib"]
            phases = ", ".join(
                f"{phase} {row['median']}/{row['max']}" for phase, row in rss.items()
            )
            cpu = ", ".join(
                f"{phase} {share * 100:.1f} %" for phase, share in figures["cpu_share"].items()
            )
            print(f"  {name}: RSS MiB median/max by phase: {phases}")
            print(f"  {name}: VmHWM MiB by phase end: {figures['hwm_mib']}; CPU: {cpu}")
            over = figures.get("peak_over_plain_idle_mib")
            verdict = "" if over is None else (" ok" if over <= target_mib else " OVER")
            print(
                f"  {name}: peak {figures['peak_mib']} MiB, over its own idle "
                f"+{figures['peak_over_own_idle_mib']}, over the plain idle "
                f"+{over} (target +{target_mib:g}){verdict}"
            )
            if "receipt_to_line_ms" in figures:
                row = figures["receipt_to_line_ms"]
                verdict = "ok" if row.get("median", math.inf) <= target_ms else "OVER"
                print(
                    f"  {name}: receipt -> line ms {row} ({verdict}); every event "
                    f"{figures['event_to_line_ms']}; {figures['events_printed']} of our events "
                    f"printed, {figures['lines_printed']} lines in all"
                )
                print(f"  {name}: samples {figures['receipt_to_line_samples_ms']}")
            else:
                row = figures["first_event_to_screen_ms"]
                verdict = "ok" if row.get("median", math.inf) <= target_ms else "OVER"
                print(
                    f"  {name}: first event -> on screen ms {row} ({verdict}); "
                    f"{figures['messages_seen']} messages seen in {figures['captures']} "
                    f"captures (each {figures['capture_ms'].get('median')} ms)"
                )
                print(f"  {name}: samples {figures['first_event_to_screen_samples_ms']}")
                print(f"  {name}: receipt -> on screen ms {figures['receipt_to_screen_ms']}")
                print(f"  {name}: samples {figures['receipt_to_screen_samples_ms']}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
