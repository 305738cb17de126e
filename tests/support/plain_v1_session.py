"""A session that speaks only the contract's plain v1, in a process of its own.

``python -m tests.support.plain_v1_session --name NAME`` (in the agent dir ``PI_CODING_AGENT_DIR``
names) plays what a Node session of the reference (2.2.1) does on the wire, with none of our
capabilities: it publishes a registration, answers a hello with ``ready`` advertising
``cancel-safe-queue-v1`` alone, takes a message with ``submitted``, and sends to the session
registered under a name in its peers dir. Frames are built and read with the stdlib ``json``
module and asyncio's Unix sockets, never with the package's codec or endpoint: a remote peer's
proxy must look, to such a session, like any local session. Only the registration is written
with the package (its shape is the contract's; a Node session writes the same).

Like the reference, it authenticates a sender before a message: the hello's token and target are
its own, the sender's registration is in the peers dir with the token the hello names, and the
kernel's pid of the connecting process is the one that registration names.

stdout (one JSON object per line): ``{"event": "ready", "instanceId"}``, ``{"event": "message",
"messageId", "text", "from"}`` (the sender's registered name), ``{"event": "refused", "status"}``
and ``{"event": "sent", "replies": [...]}``. stdin: ``{"send": NAME, "text": TEXT, "messageId":
ID}`` per line. It removes its registration and socket on SIGTERM, SIGINT or the end of stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Final

from pi_cross_session._internal.protocol.io import environment
from tests.support.socket_peers import make_registration, publish

#: The one capability the reference advertises; ours (goal scope, delivery receipts) are absent.
REFERENCE_CAPABILITIES: Final = ["cancel-safe-queue-v1"]
#: How long one exchange this session makes may take (the contract's send deadline).
SEND_DEADLINE_S: Final = 5.0


def announce(event: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


def frame(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class PlainSession:
    def __init__(self, name: str) -> None:
        self.locations = environment.resolve()
        self.peers_dir = Path(self.locations.peers_dir)
        os.makedirs(self.locations.runtime_dir, mode=0o700, exist_ok=True)
        self.registration = make_registration(self.locations, name)

    def reply(self, request: Any, ok: bool, status: str) -> bytes:
        body: dict[str, Any] = {
            "v": 1,
            "type": "response",
            "requestId": request.get("requestId", "unknown")
            if isinstance(request, dict)
            else "unknown",
            "ok": ok,
            "status": status,
            "capabilities": REFERENCE_CAPABILITIES,
            "code": status,
            "state": status,
            "retryable": False,
            "next": "plain v1 session",
        }
        if ok:
            reg = self.registration
            body["peer"] = {"id": reg.id, "instanceId": reg.instance_id, "pid": os.getpid()}
        else:
            body["error"] = status
        return frame(body)

    def registered(self, instance_id: str) -> dict[str, Any] | None:
        try:
            body = json.loads((self.peers_dir / f"{instance_id}.json").read_bytes())
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def authenticated(self, hello: Any, writer: asyncio.StreamWriter) -> dict[str, Any] | None:
        """The sender's registration when the hello is one this session accepts a message on."""
        reg = self.registration
        target = hello.get("target") or {}
        sender = hello.get("from")
        if (
            hello.get("token") != reg.token
            or target.get("instanceId") != reg.instance_id
            or not isinstance(sender, dict)
        ):
            return None
        found = self.registered(str(sender.get("instanceId")))
        if found is None or found.get("token") != sender.get("token"):
            return None
        sock = writer.get_extra_info("socket")
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid = struct.unpack("3i", credentials)[0]
        return found if found.get("pid") == pid else None

    async def serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = json.loads(await reader.readline())
            if not isinstance(hello, dict) or hello.get("type") != "hello":
                writer.write(self.reply({}, False, "authentication_failed"))
                return
            if hello.get("token") != self.registration.token:
                writer.write(self.reply(hello, False, "authentication_failed"))
                return
            sender = self.authenticated(hello, writer)
            writer.write(self.reply(hello, True, "ready"))
            await writer.drain()
            line = await reader.readline()
            if not line:
                return  # a probe
            message = json.loads(line)
            if sender is None:
                announce("refused", status="authentication_failed")
                writer.write(self.reply(message, False, "authentication_failed"))
                return
            writer.write(self.reply(message, True, "submitted"))
            announce(
                "message",
                messageId=message.get("messageId"),
                text=message.get("text"),
                **{"from": sender.get("name")},
            )
        except (ValueError, OSError, AttributeError):
            return
        finally:
            writer.close()

    async def send(self, name: str, text: str, message_id: str) -> list[Any]:
        """One exchange with the session registered as ``name``: every reply it gave."""
        target = None
        for path in sorted(self.peers_dir.glob("*.json")):
            body = self.registered(path.stem)
            if body is not None and body.get("name") == name:
                target = body
        if target is None:
            return [{"error": f"no session named {name}"}]
        reg = self.registration
        hello = {
            "v": 1,
            "type": "hello",
            "capabilities": REFERENCE_CAPABILITIES,
            "requestId": str(uuid.uuid4()),
            "token": target["token"],
            "target": {"id": target["id"], "instanceId": target["instanceId"]},
            "from": {"id": reg.id, "instanceId": reg.instance_id, "token": reg.token},
        }
        message = {
            "v": 1,
            "type": "message",
            "requestId": str(uuid.uuid4()),
            "messageId": message_id,
            "text": text,
            "summary": text[:50],
            "sentAt": int(time.time() * 1000),
        }
        replies: list[Any] = []
        try:
            async with asyncio.timeout(SEND_DEADLINE_S):
                reader, writer = await asyncio.open_unix_connection(target["socketPath"])
                try:
                    writer.write(frame(hello))
                    replies.append(json.loads(await reader.readline()))
                    if replies[-1].get("ok"):
                        writer.write(frame(message))
                        replies.append(json.loads(await reader.readline()))
                finally:
                    writer.close()
        except (TimeoutError, OSError, ValueError) as exc:
            replies.append({"error": repr(exc)})
        return replies

    async def commands(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            replies = await self.send(command["send"], command["text"], command["messageId"])
            announce("sent", messageId=command["messageId"], replies=replies)

    async def run(self) -> None:
        path = self.registration.socket_path
        server = await asyncio.start_unix_server(self.serve_one, path)
        os.chmod(path, 0o600)
        publish(self.locations, self.registration)
        announce("ready", instanceId=self.registration.instance_id)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stop.set)
        commands = asyncio.ensure_future(self.commands())
        try:
            await asyncio.wait(
                [commands, asyncio.ensure_future(stop.wait())], return_when="FIRST_COMPLETED"
            )
        finally:
            os.unlink(self.locations.registration_path(self.registration.instance_id))
            server.close()
            os.unlink(path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    asyncio.run(PlainSession(parser.parse_args().name).run())
    # The stdin reader thread may still wait for a line; nothing is left to do.
    os._exit(0)


if __name__ == "__main__":
    main()
