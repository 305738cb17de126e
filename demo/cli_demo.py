"""A tour of pi-cross-session with real processes: two inboxes, the command line, real sockets.

Everything runs in a private, temporary agent dir (never ``~/.pi``) that is removed at the end.
Each step prints the command it runs and what came back; the inboxes' own logs follow at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import anyio

from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.protocol.io import environment

CLI = [sys.executable, "-m", "pi_cross_session"]
BOLD = "\033[1m" if sys.stdout.isatty() else ""
PLAIN = "\033[0m" if sys.stdout.isatty() else ""


def step(title: str) -> None:
    print(f"\n{BOLD}== {title}{PLAIN}", flush=True)


def run(
    *args: str, env: dict[str, str], keys: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run the command line; with ``keys``, it prints JSON and only those keys are shown."""
    shown = " ".join(a if " " not in a else repr(a) for a in args)
    print(f"$ pi-cross-session {shown}", flush=True)
    done = subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    output = done.stdout + done.stderr
    if keys and done.stdout.strip():
        data = json.loads(done.stdout)
        output = json.dumps({key: data.get(key) for key in keys})
    for line in output.rstrip().splitlines():
        print(f"  {line}")
    print(f"  (exit {done.returncode})", flush=True)
    return done


class Inbox:
    """A ``pi-cross-session inbox --json`` process and the events it printed."""

    def __init__(self, name: str, busy: float, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.jsonl"
        self._log: IO[str] = self.log_path.open("w")
        self.process = subprocess.Popen(
            [*CLI, "inbox", "--name", name, "--busy", str(busy), "--json"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log_path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                events.append({"event": "output", "line": line})
        return events

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if predicate(event):
                    return event
            if self.process.poll() is not None:
                raise RuntimeError(f"inbox {self.name} exited early:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        raise TimeoutError(f"inbox {self.name}: the expected event did not come")

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._log.close()
        return code


async def burst(agent_dir: str, target: str, count: int) -> Counter[str]:
    """Send ``count`` different messages as fast as possible with the command line's identity."""
    tally: Counter[str] = Counter()
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": agent_dir})
    async with cli_identity.publishing(locations) as outbox:
        for number in range(count):
            report = await outbound.send(outbox, target, f"burst message {number}")
            tally[report.status] += 1
    return tally


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="xs-demo-"))
    agent_dir = str(root / "agent")
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir, "PYTHONUNBUFFERED": "1"}
    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": agent_dir}).runtime_dir
    inboxes: list[Inbox] = []
    try:
        step("Two sessions start: 'alpha' (quick) and 'beta' (each message keeps it busy 2 s)")
        alpha = Inbox("alpha", 0.2, env, root)
        beta = Inbox("beta", 2.0, env, root)
        inboxes = [alpha, beta]
        for inbox in inboxes:
            ready = inbox.wait_for(lambda e: e.get("event") == "ready")
            print(f"  {inbox.name} is live as [{ready['ref']}], pid {ready['pid']}")

        step("Where they meet, and who is there")
        run("paths", env=env)
        run("peers", env=env)

        step("A message to an idle session is submitted at once")
        first = run("send", "beta", "The parser change is merged; please rebase.", env=env)

        step("While beta is busy with it, a second message is queued, not refused")
        queued = run(
            "send",
            "beta",
            "Also: the CI config moved to .ci/run",
            "--json",
            env=env,
            keys=("ok", "status", "messageId"),
        )
        queued_id = json.loads(queued.stdout)["messageId"]
        beta.wait_for(
            lambda e: e.get("messageId") == queued_id and e.get("state") == "delivered", 10
        )
        print("  beta's first turn settled, and the queued message was delivered next")
        run("status", "beta", queued_id, env=env)

        step("The same text again within 30 s is a duplicate")
        run("send", "beta", "The parser change is merged; please rebase.", env=env)

        step("An unknown target is refused, naming the sessions that exist")
        run("send", "gamma", "anyone there?", env=env)

        step("A burst of 40 messages at alpha: 30 go through, then the rate limit answers")
        tally = anyio.run(burst, agent_dir, "alpha", 40)
        for status, count in sorted(tally.items()):
            print(f"  {status:<14}{count}")

        step("Beta's own figures (SIGUSR1)")
        beta.signal(signal.SIGUSR1)
        status = beta.wait_for(lambda e: e.get("event") == "status")
        print(f"  phase {status['phase']}, budget left {status['remainingBudget']}, ", end="")
        print(f"queue {status['pending']}, refusals {status['refusals']}")
        for message in status["messages"]:
            # The latest state, as a sender asking about it hears it: a row the host confirmed
            # stays "submitted" at the receiver, with "delivered" set.
            latest = "delivered" if message.get("delivered") else message["state"]
            print(f"  {latest:<12}{message['messageId']}")

        step("Both stop; their registrations and sockets are removed")
        for inbox in inboxes:
            print(f"  {inbox.name} exited with {inbox.stop()}")
        left = sorted(p.name for p in (root / "agent" / "peers").glob("*.json"))
        sockets = sorted(p.name for p in Path(runtime_dir).glob("*.sock"))
        print(f"  registrations left: {left or 'none'}; sockets left: {sockets or 'none'}")

        step("Beta's log (one JSON event per line)")
        for event in beta.events():
            if event.get("event") in ("message", "state", "ready", "stopped"):
                shown = {k: v for k, v in event.items() if k in ("event", "messageId", "state")}
                if event.get("event") == "message":
                    shown["text"] = event["text"]
                print(f"  {json.dumps(shown)}")
        ok = first.returncode == 0 and tally.get("rate_limited", 0) > 0 and not left
        print(f"\n{BOLD}demo {'finished' if ok else 'FAILED'}{PLAIN}")
        return 0 if ok else 1
    finally:
        for inbox in inboxes:
            inbox.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runtime_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
