"""A real session in its own OS process, driven through stdin.

``python peer_session_script.py --name N`` runs a :class:`SessionRuntime` on the headless host
(simulated turns of ``--busy`` seconds) in the agent dir of ``PI_CODING_AGENT_DIR``, and speaks
JSON lines:

stdout (one object per line, flushed):
  ``{"event": "ready", "name", "sessionId", "instanceId", "pid", "registrationPath", "socketPath"}``
  ``{"event": "message", "messageId", "text", "summary", "from": {"name", "sessionId", ...}}``
  ``{"event": "notice", "text"}``
  ``{"event": "sent", "id", "report": <send details, as a tool result has them>}``
  ``{"event": "peers", "id", "peers": [...], "hidden", "reaped", "reapDeferred"}``
  ``{"event": "error", "id", "error"}`` (a command it could not understand)
  ``{"event": "stopped", "reason": "exit" | "eof" | "signal SIGTERM" | ..., "error"}``

stdin (one object per line):
  ``{"id": 1, "send": "<target>", "text": "...", "summary": "..."}`` — send and report;
  ``{"id": 2, "peers": true}`` — list the live peers (probing, hiding, reaping as a listing does);
  ``{"exit": true}`` — stop.

It stops cleanly — registration file, then socket, removed — on ``exit``, at the end of stdin, and
on SIGTERM or SIGINT. It imports only the package, so it runs from any directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, HostEvent, serve_inbox
from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime


def emit(event: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **data}, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def on_host_event(event: HostEvent) -> None:
    delivery = event.delivery
    if delivery is None:
        emit("notice", text=event.text)
        return
    sender = delivery.sender
    emit(
        "message",
        messageId=delivery.message_id,
        text=delivery.text,
        summary=delivery.summary,
        sentAt=delivery.sent_at,
        **{
            "from": {
                "name": sender.name,
                "sessionId": sender.id,
                "instanceId": sender.instance_id,
                "pid": sender.pid,
            }
        },
    )


async def stdin_lines(fd: int) -> AsyncIterator[bytes]:
    """Lines of ``fd`` as they arrive, without a thread (the loop watches the descriptor)."""
    buffer = b""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65_536)
        except BlockingIOError:
            continue
        if not chunk:
            if buffer.strip():
                yield buffer
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line


async def run_command(runtime: SessionRuntime, command: dict[str, Any]) -> None:
    ident = command.get("id")
    if "send" in command:
        report = await runtime.send(
            str(command["send"]), str(command.get("text", "")), summary=command.get("summary")
        )
        emit("sent", id=ident, report=sending.send_details(report))
    elif command.get("peers"):
        listing = await runtime.list_peers()
        emit(
            "peers",
            id=ident,
            peers=[peer.to_dict() for peer in listing.peers],
            hidden=listing.hidden,
            reaped=listing.reaped,
            reapDeferred=listing.reap_deferred,
        )
    else:
        emit("error", id=ident, error=f"unknown command {command!r}")


async def main(name: str, busy_s: float) -> int:
    host = HeadlessHost(name=name, busy_s=busy_s, on_event=on_host_event)
    runtime = SessionRuntime(host, options=RuntimeOptions(with_git=False))
    reason = "runtime ended"
    stdin_fd = sys.stdin.fileno()
    was_blocking = os.get_blocking(stdin_fd)
    os.set_blocking(stdin_fd, False)
    try:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as group:
                await group.start(serve_inbox, host, runtime)
                registration = runtime.registration()
                assert registration is not None
                emit(
                    "ready",
                    name=registration.name,
                    sessionId=registration.id,
                    instanceId=registration.instance_id,
                    pid=os.getpid(),
                    registrationPath=runtime.locations.registration_path(registration.instance_id),
                    socketPath=registration.socket_path,
                )

                async def watch_signals() -> None:
                    nonlocal reason
                    async for number in signals:
                        reason = f"signal {signal.Signals(number).name}"
                        runtime.request_stop()
                        return

                async def follow_commands() -> None:
                    nonlocal reason
                    async for line in stdin_lines(stdin_fd):
                        try:
                            command = json.loads(line)
                        except ValueError:
                            emit("error", id=None, error=f"not JSON: {line!r}")
                            continue
                        if not isinstance(command, dict):
                            emit("error", id=None, error=f"not an object: {command!r}")
                        elif command.get("exit"):
                            reason = "exit"
                            runtime.request_stop()
                            return
                        else:
                            await run_command(runtime, command)
                    reason = "eof"
                    runtime.request_stop()

                group.start_soon(watch_signals)
                group.start_soon(follow_commands)
                await runtime.wait_finished()
                group.cancel_scope.cancel()
    finally:
        os.set_blocking(stdin_fd, was_blocking)
    failure = runtime.last_error
    emit("stopped", reason=reason, error=None if failure is None else str(failure))
    return 0 if failure is None else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--busy", type=float, default=0.05, help="seconds a delivered turn lasts")
    arguments = parser.parse_args()
    raise SystemExit(anyio.run(main, arguments.name, arguments.busy))
