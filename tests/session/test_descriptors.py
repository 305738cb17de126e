"""Out of file descriptors, for real: the receiver, the heartbeat and the sender.

A same-user process can exhaust a session's descriptors by opening connections to it and saying
nothing, and a session can run short by itself. Regressions, each failing on the code before:

* an inbox under ``RLIMIT_NOFILE`` 64 met ``EMFILE`` from ``accept`` (raised by anyio as
  ``BrokenResourceError``), its endpoint's task group died and the inbox exited; now it holds its
  connections from the start to what leaves descriptors free for the rest of the session, keeps
  serving — probes and authenticated messages from other processes alike, while another process
  holds twice as many connections as it could — and says so in its status;
* a session whose every descriptor is taken (by itself) sees ``accept`` fail with ``EMFILE`` and
  its heartbeat write fail too: both used to end it; now the endpoint pauses and the write is
  retried, both counted, the session stays registered, and the connection waiting meanwhile is
  served once descriptors are free (``tests/receiver/test_accept_failures.py`` injects the same
  failures in front of a real listener, shedding and the cap included);
* a sender out of descriptors crashed on its listing; now it reports, with a code, that nothing
  was sent.
"""

from __future__ import annotations

import errno
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from pi_cross_session._internal.plugin import commands
from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.limits import DESCRIPTOR_RESERVE
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration, parse_registration
from pi_cross_session._internal.security.io import fs
from tests.receiver.test_shedding import HOLDER
from tests.session.injection import FaultyFiles
from tests.support.processes import WatchedProcess, cli_env, run_cli
from tests.support.raw_client import hello, line
from tests.support.socket_peers import running_peer
from tests.support.waiting import eventually
from tests.support.wire_session import on_disk, running_receiver

pytestmark = pytest.mark.faults

HERE: Final = Path(__file__).parent
SESSION_SCRIPT: Final = str(HERE / "session_process.py")
SENDER_SCRIPT: Final = str(HERE / "exhausted_sender.py")
#: The open-file limit the inbox runs under: well below what 64 connections need.
LIMIT: Final = 64
#: Runs the command line with ``RLIMIT_NOFILE`` lowered to ``argv[1]`` (soft and hard).
LAUNCH: Final = (
    "import resource, runpy, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))\n"
    "sys.argv = ['pi-cross-session', *sys.argv[2:]]\n"
    "runpy.run_module('pi_cross_session', run_name='__main__')\n"
)
#: How long a test waits for something that must happen (a hang guard, not a measurement).
WAIT_S: Final = 15.0
#: A heartbeat short enough to fail several times within a test.
FAST_HEARTBEAT_S: Final = 0.1


def registration_of(locations: Locations, instance_id: str) -> Registration:
    raw = fs.read_registration_bytes(locations.registration_path(instance_id))
    return parse_registration(
        raw, file_stem=instance_id, expected_socket_path=locations.socket_path(instance_id)
    )


def probe(registration: Registration) -> str:
    """A probe from this process, by hand (no 350 ms deadline: the inbox may be pausing)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT_S)
        sock.connect(registration.socket_path)
        sock.sendall(line(hello(registration, request_id="probe-1")))
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(65_536)
            if not chunk:
                return "(closed)"
            reply += chunk
    return str(json.loads(reply)["status"])


@contextmanager
def holding(path: str, count: int) -> Iterator[None]:
    """Another process holding ``count`` silent connections to ``path``."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path, str(count), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield
    finally:
        process.kill()
        process.communicate()


class LimitedInbox(WatchedProcess):
    """``pi-cross-session inbox --json`` under a lowered ``RLIMIT_NOFILE``."""

    def __init__(self, agent_dir: Path, limit: int, *args: str) -> None:
        argv = [sys.executable, "-c", LAUNCH, str(limit), "inbox", *args, "--json"]
        super().__init__(argv, env=cli_env(agent_dir), label="inbox")

    def status(self) -> dict[str, Any]:
        """Ask for the status (SIGUSR1) and return the status event it prints."""
        seen = sum(1 for event in self.events() if event.get("event") == "status")
        self.process.send_signal(signal.SIGUSR1)

        def newer() -> dict[str, Any] | None:
            found = [e for e in self.events() if e.get("event") == "status"]
            return found[seen] if len(found) > seen else None

        found: dict[str, Any] = self._wait(newer, "a new status event", WAIT_S)
        return found

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._join()


def test_an_inbox_out_of_file_descriptors_keeps_serving_and_says_so(
    private_agent_dir: Path, locations: Locations
) -> None:
    inbox = LimitedInbox(private_agent_dir, LIMIT, "--name", "crowded", "--busy", "0")
    try:
        target = registration_of(locations, inbox.wait_event("ready")["instanceId"])
        # 64 connections and the reserve cannot fit under this limit: held from the start.
        cap = inbox.status()["peerChecks"]["pressure"]["descriptorCap"]
        assert cap is not None
        assert cap <= LIMIT - DESCRIPTOR_RESERVE
        with holding(target.socket_path, 2 * LIMIT):
            # Another process holds far more connections than there are descriptors.
            assert probe(target) == "ready"
            # An authenticated sender needs a descriptor more (its registration is read):
            # the reserve kept it free.
            sent = run_cli(private_agent_dir, "send", "crowded", "through the crowd", "--json")
            assert sent.returncode == 0, sent
            assert sent.json()["status"] == Code.SUBMITTED
            checks = inbox.status()["peerChecks"]
            assert checks["shed"] >= 1  # the holder's connections gave way to ours
            assert checks["pressure"]["descriptorCap"] == cap
        # The holder is gone; the cap stays what the limit allows, and all is served.
        assert probe(target) == "ready"
        again = run_cli(private_agent_dir, "send", "crowded", "after the crowd", "--json")
        assert again.json()["status"] == Code.SUBMITTED, again
        cap = inbox.status()["peerChecks"]["pressure"]["descriptorCap"]
        assert cap is not None
        assert cap <= LIMIT - DESCRIPTOR_RESERVE
        inbox.process.send_signal(signal.SIGTERM)
        assert inbox.process.wait(timeout=WAIT_S) == 0, inbox.output()
        assert inbox.wait_event("stopped")["error"] is None
        assert not on_disk(locations.registration_path(target.instance_id))
        assert not on_disk(target.socket_path)
    finally:
        inbox.close()


def test_a_session_whose_own_descriptors_run_out_stays_registered_and_recovers(
    private_agent_dir: Path, locations: Locations
) -> None:
    session = WatchedProcess(
        [sys.executable, SESSION_SCRIPT, "--name", "hog", "--heartbeat", f"{FAST_HEARTBEAT_S}"],
        env=cli_env(private_agent_dir),
        label="session",
        with_stdin=True,
    )

    def command(**body: Any) -> None:
        assert session.process.stdin is not None
        session.process.stdin.write(json.dumps(body) + "\n")
        session.process.stdin.flush()

    def stats() -> dict[str, Any]:
        seen = sum(1 for event in session.events() if event.get("event") == "stats")
        command(stats=True)

        def newer() -> dict[str, Any] | None:
            found = [e for e in session.events() if e.get("event") == "stats"]
            return found[seen] if len(found) > seen else None

        found: dict[str, Any] = session._wait(newer, "a new stats event", WAIT_S)
        return found

    try:
        target = registration_of(locations, session.wait_event("ready")["instanceId"])
        command(hog=True)
        assert session.wait_event("hogged")["held"] > 0
        with ThreadPoolExecutor(max_workers=1) as pool:
            # A probe arrives meanwhile: it waits in the kernel's queue, accept cannot take it.
            waiting = pool.submit(probe, target)

            def pressed() -> bool:
                pressure = stats()["peerChecks"]["pressure"]
                return (
                    pressure["registrationRetries"].get("EMFILE", 0) >= 3
                    and pressure["acceptFailures"].get("EMFILE", 0) >= 1
                )

            deadline = time.monotonic() + WAIT_S
            while not pressed():
                assert time.monotonic() < deadline, session.output()
                time.sleep(FAST_HEARTBEAT_S)
            assert stats()["registered"] is True  # still in the network, not torn down
            command(release=True)
            session.wait_event("released")
            assert waiting.result(timeout=WAIT_S) == "ready"  # served once they were back
        assert probe(target) == "ready"
        command(exit=True)
        stopped = session.wait_event("stopped")
        assert (stopped["reason"], stopped["error"]) == ("exit", None), session.output()
    finally:
        if session.process.poll() is None:
            session.process.kill()
        session.process.wait()
        session._join()


@pytest.mark.anyio
async def test_a_heartbeat_out_of_descriptors_is_retried_and_shown(
    locations: Locations, faulty_files: FaultyFiles
) -> None:
    async with running_receiver(locations, heartbeat_interval_s=FAST_HEARTBEAT_S) as rx:
        alpha = rx.sender("alpha")
        faulty_files.arm(errno.EMFILE)
        await eventually(lambda: faulty_files.outcomes().count("EMFILE") >= 3)
        assert rx.runtime.last_error is None
        assert fs.read_registration_bytes(locations.registration_path(rx.registration.instance_id))
        assert (await alpha.send(message_id="still-here")).status == Code.SUBMITTED
        checks = rx.runtime.peer_checks()
        assert checks is not None
        assert checks.pressure.registration_retries["EMFILE"] >= 3
        text = commands.status(rx.runtime, "", commands.HostReport())
        assert "registration writes retried EMFILE" in text
        faulty_files.disarm()
        written = faulty_files.outcomes().count("ok")
        await eventually(lambda: faulty_files.outcomes().count("ok") > written)
        assert rx.runtime.last_error is None


@pytest.mark.anyio
async def test_a_sender_out_of_descriptors_reports_that_nothing_was_sent(
    locations: Locations, private_agent_dir: Path
) -> None:
    async with running_peer(locations, "beta") as beta:
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, SENDER_SCRIPT, "beta", "never written"],
                env=cli_env(private_agent_dir),
                capture_output=True,
                text=True,
                timeout=WAIT_S * 2,
                check=False,
            )
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["held"] > 0
        details = result["details"]
        assert (details["ok"], details["status"], details["messageWritten"]) == (
            False,
            Code.TRANSPORT_ERROR,
            False,
        )
        assert details["next"] == sending.NEXT_SHORT_OF_RESOURCES
        assert "it was not delivered" in result["text"]
        assert beta.inbox.entries == []
        assert beta.endpoint.statistics().accepted == 0
