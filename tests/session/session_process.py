"""A receiving session in its own OS process, with a heartbeat of the test's choosing.

``python session_process.py --name N --heartbeat S`` runs a :class:`SessionRuntime` on the headless
host (turns of ``--busy`` seconds) in the agent dir of ``PI_CODING_AGENT_DIR`` and prints JSON
lines:

  ``{"event": "ready", "instanceId", "pid", "registrationPath", "socketPath"}``
  ``{"event": "stopped", "reason", "error", "code", "rows": [[messageId, state], ...]}``

It stops on ``{"exit": true}``, at the end of stdin, on SIGTERM/SIGINT, or by itself when its
registration cannot be kept (the heartbeat fails); it exits 1 when the runtime reports an error.
It imports only the package, so it runs as any user from any directory.

Three more commands play a process that runs out of file descriptors:

  ``{"hog": true}``      open ``/dev/null`` until ``EMFILE`` (every descriptor in use), then
                         ``{"event": "hogged", "held": n}``
  ``{"release": true}``  close them again, then ``{"event": "released"}``
  ``{"stats": true}``    ``{"event": "stats", "registered": bool, "peerChecks": {...}}``, the
                         status the session shows (``/cross-session-status --json``'s part)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

import anyio

from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.render import host_status
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime


def emit(event: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


def hog() -> list[int]:
    """Every free descriptor, held."""
    held: list[int] = []
    while True:
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            return held


def answer(runtime: SessionRuntime, command: dict[str, Any], held: list[int]) -> None:
    if command.get("hog"):
        held.extend(hog())
        emit("hogged", held=len(held))
    elif command.get("release"):
        while held:
            os.close(held.pop())
        emit("released")
    elif command.get("stats"):
        registration = runtime.registration()
        registered = registration is not None and os.path.exists(
            runtime.locations.registration_path(registration.instance_id)
        )
        emit("stats", registered=registered, **host_status.peer_check_data(runtime.peer_checks()))


async def follow_stdin(runtime: SessionRuntime) -> str:
    """Answer commands until ``exit`` or the end of stdin; the reason."""
    fd = sys.stdin.fileno()
    os.set_blocking(fd, False)
    buffer = b""
    held: list[int] = []
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65_536)
        except BlockingIOError:
            continue
        if not chunk:
            return "eof"
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not line.strip():
                continue
            command = json.loads(line)
            if command.get("exit"):
                return "exit"
            answer(runtime, command, held)


async def main(name: str, heartbeat_s: float, busy_s: float) -> int:
    host = HeadlessHost(name=name, busy_s=busy_s)
    options = RuntimeOptions(with_git=False, heartbeat_interval_s=heartbeat_s)
    runtime = SessionRuntime(host, options=options)
    reason = "runtime ended"
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:
            await group.start(serve_inbox, host, runtime)
            registration = runtime.registration()
            assert registration is not None
            emit(
                "ready",
                instanceId=registration.instance_id,
                pid=os.getpid(),
                registrationPath=runtime.locations.registration_path(registration.instance_id),
                socketPath=registration.socket_path,
            )

            async def stop_on_stdin() -> None:
                nonlocal reason
                reason = await follow_stdin(runtime)
                runtime.request_stop()

            async def stop_on_signal() -> None:
                nonlocal reason
                async for number in signals:
                    reason = f"signal {signal.Signals(number).name}"
                    runtime.request_stop()
                    return

            group.start_soon(stop_on_stdin)
            group.start_soon(stop_on_signal)
            await runtime.wait_finished()
            group.cancel_scope.cancel()
    failure = runtime.last_error
    snapshot = runtime.snapshot()
    rows = [] if snapshot is None else [[row.message_id, row.state] for row in snapshot.rows]
    emit(
        "stopped",
        reason=reason,
        error=None if failure is None else str(failure),
        code=None if failure is None else getattr(failure, "code", None),
        rows=rows,
    )
    return 0 if failure is None else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--heartbeat", type=float, required=True, help="heartbeat interval, s")
    parser.add_argument("--busy", type=float, default=0.05, help="seconds a delivered turn lasts")
    arguments = parser.parse_args()
    raise SystemExit(anyio.run(main, arguments.name, arguments.heartbeat, arguments.busy))
