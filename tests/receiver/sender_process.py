"""A sender in its own OS process that stops in the middle of an exchange, to be killed there.

``python sender_process.py --target JSON --mode MODE`` publishes its own registration (its pid,
in the agent dir of ``PI_CODING_AGENT_DIR``), connects to the target's socket, writes an
authenticated hello and reads the reply, then:

* ``--mode hello``: writes nothing more;
* ``--mode mid-frame``: writes the first ``--partial`` bytes of a message frame of almost 1 MiB
  (no LF among them), all of them accepted by the kernel.

Either way it prints what it did and waits, holding the connection, until it is killed. The
target is ``{"id", "instanceId", "token", "socketPath"}``. stdout, one JSON object per line:

  ``{"event": "answered", "pid", "instanceId", "registrationPath", "reply": {...}}``
  ``{"event": "partial", "bytes", "frameBytes"}`` (mid-frame only)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import uuid
from typing import Any

from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.registration import build_registration, serialize
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.tokens import new_instance_id, new_token

#: Text length of the message whose frame is cut: the frame stays under the 1 MiB cap.
TEXT_CHARS = 1_000_000


def emit(event: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


def line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def main(target: dict[str, str], mode: str, partial: int) -> None:
    locations = environment.resolve()
    instance_id = new_instance_id()
    now = int(time.time() * 1000)
    registration = build_registration(
        session_id=f"doomed-{uuid.uuid4()}",
        session_name="doomed",
        instance_id=instance_id,
        cwd=os.getcwd(),
        pid=os.getpid(),
        started_at=now,
        updated_at=now,
        status="idle",
        inbound="accept",
        socket_path=locations.socket_path(instance_id),
        token=new_token(),
    )
    fs.ensure_private_dir(locations.peers_dir)
    fs.write_registration(
        locations.peers_dir, instance_id, serialize(registration), still_current=lambda: True
    )
    hello = {
        "v": 1,
        "type": "hello",
        "capabilities": ["cancel-safe-queue-v1"],
        "requestId": "doomed-hello",
        "token": target["token"],
        "target": {"id": target["id"], "instanceId": target["instanceId"]},
        "from": {"id": registration.id, "instanceId": instance_id, "token": registration.token},
    }
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(target["socketPath"])
    sock.sendall(line(hello))
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(65_536)
        if not chunk:
            break
        reply += chunk
    emit(
        "answered",
        pid=os.getpid(),
        instanceId=instance_id,
        registrationPath=locations.registration_path(instance_id),
        reply=json.loads(reply) if reply else None,
    )
    if mode == "mid-frame":
        frame = line(
            {
                "v": 1,
                "type": "message",
                "requestId": "doomed-request",
                "messageId": "doomed-message",
                "text": "x" * TEXT_CHARS,
                "summary": "never complete",
                "sentAt": int(time.time() * 1000),
            }
        )
        assert partial < len(frame) - 1
        sock.sendall(frame[:partial])
        emit("partial", bytes=partial, frameBytes=len(frame))
    while True:  # hold the connection until killed
        time.sleep(3600)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="the target as JSON")
    parser.add_argument("--mode", choices=("hello", "mid-frame"), required=True)
    parser.add_argument("--partial", type=int, default=600_000, help="bytes of the frame")
    arguments = parser.parse_args()
    main(json.loads(arguments.target), arguments.mode, arguments.partial)
