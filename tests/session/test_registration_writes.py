"""Registration writes that fail: disk full (ENOSPC) and permission denied (EACCES).

Injected at the file layer the runtime gives its registrar (:mod:`tests.session.injection`, the
system call itself failing), at four moments:

* the first registration, at start-up: :meth:`SessionRuntime.run` ends by raising the file
  layer's error (a start-up failure is the caller's to report: the command line prints it and
  exits 1, the pi-python host notifies the user); nothing is left on disk, and
  ``TaskGroup.start(runtime.run)`` raises that error (it is never reported as started);
* a later heartbeat: the incarnation tears itself down (spec §1.4: a heartbeat failure is a full
  cleanup): ``last_error`` and a notice report it, pending messages end ``dropped_shutdown``, the
  registration and the socket are removed, and ``run`` returns normally — nothing raises;
* a refresh (a status change): logged and survived; the old registration stays published and the
  next write that succeeds brings it up to date;
* a reload's first registration: :meth:`SessionRuntime.reload` raises ``NotReadyError`` (chained
  to the failure, which ``last_error`` keeps) instead of waiting for an incarnation that never
  comes.

Then the same without injection, with real permissions (as an unprivileged uid when the tests run
as root): the command line's inbox refused at start-up, and a session whose peers dir turns
read-only under it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.provenance import Provenance
from pi_cross_session._internal.security.turns import TurnEnding, TurnStarted
from tests.session.conftest import Unprivileged
from tests.session.injection import FaultyFiles, leaf, temp_files
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.clocks import FakeClock
from tests.support.processes import ProcessExitedError, WatchedProcess
from tests.support.scripted_host import ScriptedHost
from tests.support.waiting import eventually
from tests.support.wire_session import assert_accounted, on_disk, running_receiver, runtime_options

pytestmark = [pytest.mark.anyio, pytest.mark.faults]

SESSION_SCRIPT = str(Path(__file__).with_name("session_process.py"))
CLI = (sys.executable, "-m", "pi_cross_session")
#: A heartbeat short enough that a test waits for it in a fraction of a second.
FAST_HEARTBEAT_S = 0.1
#: A heartbeat that never comes during a test.
NO_HEARTBEAT_S = 3600.0
#: How long a test waits for a runtime to tear itself down (a hang guard, not a measurement).
TEARDOWN_LIMIT_S = MUST_HAPPEN_S
#: How long a reload may take before the test calls it hung (a guard, not a measurement).
RELOAD_LIMIT_S = MUST_HAPPEN_S
FAULTS = [pytest.param(errno.ENOSPC, id="ENOSPC"), pytest.param(errno.EACCES, id="EACCES")]


def mode_of(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def read(path: str) -> bytes:
    """A file's bytes (a helper, so that async tests do not call pathlib themselves)."""
    with open(path, "rb") as file:
        return file.read()


def end(process: WatchedProcess) -> None:
    """Make sure ``process`` is gone and its pipes are closed, whatever the test did."""
    if process.process.poll() is None:
        process.process.kill()
    process.process.wait()
    process._join()


def make_read_only_until_stopped(session: WatchedProcess, peers_dir: str) -> dict[str, object]:
    """chmod 0500 ``peers_dir`` until ``session`` stops; its ``stopped`` event.

    Repeated because the session's own start-up listing, which runs concurrently with its first
    heartbeats, repairs the dir to 0700 (spec §1.2) if it gets there after the first chmod.
    """
    for _ in range(30):
        if mode_of(peers_dir) != 0o500:
            os.chmod(peers_dir, 0o500)
        try:
            return session.wait_event("stopped", timeout=1.0)
        except ProcessExitedError:
            raise
        except AssertionError:
            continue
    raise AssertionError(f"the session kept running in a read-only peers dir:\n{session.output()}")


async def run_until_it_fails(runtime: SessionRuntime) -> BaseException:
    """Run ``runtime`` to its end; the exception it ended with (the test fails if none)."""
    try:
        with anyio.fail_after(TEARDOWN_LIMIT_S):
            await runtime.run()
    except BaseException as exc:  # an error or a group holding it
        return leaf(exc)
    raise AssertionError("run() returned although the registration could not be written")


@pytest.mark.parametrize("code", FAULTS)
async def test_the_first_registration_failing_ends_run_with_the_error_and_leaves_nothing(
    locations: Locations, faulty_files: FaultyFiles, code: int
) -> None:
    faulty_files.arm(code)
    host = ScriptedHost()
    runtime = SessionRuntime(host, locations=locations, options=runtime_options(FakeClock()))

    error = await run_until_it_fails(runtime)

    assert isinstance(error, fs.FileOperationError), error
    assert error.code == errno.errorcode[code]
    assert faulty_files.outcomes() == [errno.errorcode[code]]
    (attempt,) = faulty_files.writes
    # Nothing was published, nothing listens, the temp file was removed.
    assert not on_disk(locations.registration_path(attempt.instance_id))
    assert not on_disk(locations.socket_path(attempt.instance_id))
    assert temp_files(locations) == []
    # The incarnation was closed: no registration, nothing pending, never counted as started.
    assert runtime.registration() is None
    assert runtime.incarnations == 0
    snapshot = runtime.snapshot()
    assert snapshot is not None
    assert (snapshot.shut_down, snapshot.admitted, snapshot.rows) == (True, 0, ())
    assert host.calls == []
    await runtime.stop()  # stopping a runtime that already ended is harmless


async def test_starting_a_runtime_whose_first_registration_fails_raises_from_start(
    locations: Locations, faulty_files: FaultyFiles
) -> None:
    """How every host starts a runtime (``await group.start(runtime.run)``): a start-up that
    failed must raise there, not report ready and leave the starter with no registration (the
    command line's inbox then trips over its own ``assert registration is not None``, and only
    its exception-group handler hides that)."""
    faulty_files.arm(errno.ENOSPC)
    runtime = SessionRuntime(ScriptedHost(), locations=locations, options=runtime_options())
    seen_after_start: list[object] = []
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as group:
            await group.start(runtime.run)
            seen_after_start.append(runtime.registration())
    except BaseException as exc:  # the start-up failure, possibly in a group
        error = leaf(exc)

    assert isinstance(error, fs.FileOperationError)  # holds: the error does come out, later
    assert error.code == "ENOSPC"
    assert seen_after_start == []  # fails: start() returned, with no registration to show


async def test_a_reload_whose_registration_fails_raises_instead_of_waiting_forever(
    locations: Locations, faulty_files: FaultyFiles
) -> None:
    host = ScriptedHost()
    runtime = SessionRuntime(host, locations=locations, options=runtime_options(FakeClock()))
    ended: list[BaseException] = []

    async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await runtime.run(task_status=task_status)
        except BaseException as exc:  # what run() ends with is what this test looks at
            ended.append(leaf(exc))

    reload_error: BaseException | None = None
    async with anyio.create_task_group() as group:
        await group.start(run)
        old = runtime.registration()
        assert old is not None
        old_id = old.instance_id
        faulty_files.arm(errno.ENOSPC)
        with anyio.move_on_after(RELOAD_LIMIT_S) as guard:
            try:
                await runtime.reload()
            except CrossSessionError as exc:
                reload_error = exc
        group.cancel_scope.cancel()

    # What already holds: both incarnations are gone without a trace, and run() ended with the
    # error of the write that failed.
    (attempt,) = [w for w in faulty_files.writes if w.instance_id != old_id]
    for instance_id in (old_id, attempt.instance_id):
        assert not on_disk(locations.registration_path(instance_id))
        assert not on_disk(locations.socket_path(instance_id))
    assert [getattr(exc, "code", None) for exc in ended] == ["ENOSPC"]
    # What does not: reload() never returns (it waits for a ready event that never comes), and
    # the failure is not in last_error for a host that polls it.
    assert not guard.cancelled_caught, "reload() did not return"
    assert isinstance(reload_error, CrossSessionError)
    assert runtime.last_error is not None
    assert getattr(runtime.last_error, "code", None) == "ENOSPC"


@pytest.mark.parametrize("code", FAULTS)
async def test_a_heartbeat_failing_tears_the_inbox_down_and_settles_every_message(
    locations: Locations, faulty_files: FaultyFiles, code: int
) -> None:
    async with running_receiver(locations, heartbeat_interval_s=FAST_HEARTBEAT_S) as rx:
        alpha = rx.sender("alpha")
        assert (await alpha.send(message_id="first")).status == "submitted"
        rx.turns.settle_submissions()
        rx.turns.user_turn()
        assert (await alpha.send(message_id="waiting-1")).status == "queued"
        assert (await alpha.send(message_id="waiting-2")).status == "queued"
        registration = rx.registration
        await rx.endpoint_idle()

        faulty_files.arm(code)
        with anyio.fail_after(TEARDOWN_LIMIT_S):
            await rx.runtime.wait_finished()

        # Reported, once, through last_error and a notice; run() itself ended without raising.
        error = rx.runtime.last_error
        assert isinstance(error, fs.FileOperationError), error
        assert error.code == errno.errorcode[code]
        assert len([n for n in rx.host.notices if "registration could not be kept" in n]) == 1
        assert faulty_files.outcomes()[-1] == errno.errorcode[code]
        # Nothing is left behind: no registration, no socket, no temp file.
        assert not on_disk(locations.registration_path(registration.instance_id))
        assert not on_disk(registration.socket_path)
        assert temp_files(locations) == []
        with pytest.raises(FileNotFoundError):
            await anyio.connect_unix(registration.socket_path)
        # Every message is in a final state: the queued ones were dropped at shutdown.
        states = {row.message_id: row.state for row in rx.snapshot().rows}
        assert states == {
            "first": Code.SUBMITTED,
            "waiting-1": Code.DROPPED_SHUTDOWN,
            "waiting-2": Code.DROPPED_SHUTDOWN,
        }
        assert rx.snapshot().shut_down
        assert rx.runtime.registration() is None
        assert [call.delivery.message_id for call in rx.host.calls] == ["first"]
        assert_accounted(rx, all_final=True)
        # A host keeps calling into a stopped runtime without anything raising.
        rx.turns.end(TurnEnding.STOP)
        rx.runtime.on_turn(TurnStarted(Provenance.USER))
        assert rx.runtime.outbox() is None


@pytest.mark.parametrize("code", FAULTS)
async def test_a_refresh_failing_is_survived_and_the_next_write_catches_up(
    locations: Locations, faulty_files: FaultyFiles, code: int
) -> None:
    async with running_receiver(locations, heartbeat_interval_s=NO_HEARTBEAT_S) as rx:
        alpha = rx.sender("alpha")
        path = locations.registration_path(rx.registration.instance_id)
        published = read(path)
        assert b'"status":"idle"' in published

        faulty_files.arm(code)
        failed_before = faulty_files.outcomes().count(errno.errorcode[code])
        rx.turns.user_turn()  # the status becomes busy: a refresh
        await eventually(
            lambda: faulty_files.outcomes().count(errno.errorcode[code]) > failed_before
        )

        # Survived: still running and serving, the old record still published, nothing leaked.
        assert rx.runtime.last_error is None
        assert read(path) == published
        assert temp_files(locations) == []
        assert (await alpha.send(message_id="while-stale")).status == "queued"

        faulty_files.disarm()
        rx.turns.end(TurnEnding.STOP)  # idle again: a refresh that succeeds
        await eventually(lambda: faulty_files.outcomes()[-1] == "ok")
        await rx.wait_state(alpha, "while-stale", Code.SUBMITTED)
        rx.turns.settle_submissions()
        await rx.maintenance_pass()
        assert b'"status":"idle"' in read(path)
        assert mode_of(path) == 0o600
        assert_accounted(rx, all_final=True)


# -- real permissions, no injection ---------------------------------------------------------------


def test_the_command_line_inbox_refused_at_start_up_exits_1_with_one_line_and_no_files(
    unprivileged: Unprivileged,
) -> None:
    """The agent dir is not writable, so the peers dir cannot be created: a real EACCES."""
    unprivileged.agent_dir.chmod(0o555)
    inbox = WatchedProcess(
        [*unprivileged.prefix, *CLI, "inbox", "--json", "--name", "refused"],
        env=unprivileged.env(),
        label="inbox",
    )
    try:
        stopped = inbox.wait_event("stopped")
        code = inbox.process.wait(timeout=30)
    finally:
        end(inbox)
    assert (code, stopped["code"]) == (1, "EACCES"), inbox.output()
    errors = "\n".join(inbox.err_lines)
    assert "Traceback" not in errors, errors
    assert errors.startswith("pi-cross-session: EACCES: "), errors
    assert not os.path.lexists(unprivileged.locations.peers_dir)
    # The endpoint had been listening; its socket was removed with the failed incarnation.
    runtime_dir = unprivileged.locations.runtime_dir
    assert [name for name in os.listdir(runtime_dir) if name.endswith(".sock")] == []


def cli(unprivileged: Unprivileged, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line as the unprivileged user, to completion."""
    return subprocess.run(
        [*unprivileged.prefix, *CLI, *args],
        env=unprivileged.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_peers_dir_turned_read_only_ends_the_session_and_the_leftover_is_reaped_later(
    unprivileged: Unprivileged,
) -> None:
    """chmod 0500 of the peers dir under a running session (a real EACCES at its heartbeat).

    What the code promises: the heartbeat fails, the incarnation tears itself down and reports
    the error, pending messages end ``dropped_shutdown``, the socket is removed. Its registration
    file is *not* removed — unlinking needs write permission on the dir — so the registrar logs
    that and keeps the error. The file then advertises a socket that is gone: the next listing by
    a session of the same user repairs the dir to 0700 first (spec §1.2), finds the probe failing
    and the pid dead, and reaps it.
    """
    locations = unprivileged.locations
    session = WatchedProcess(
        [
            *unprivileged.prefix,
            *(sys.executable, SESSION_SCRIPT, "--name", "victim"),
            # Long turns: the first message keeps the session busy, so the second one queues.
            *("--heartbeat", f"{FAST_HEARTBEAT_S:g}", "--busy", "60"),
        ],
        env=unprivileged.env(),
        label="victim",
        with_stdin=True,
    )
    try:
        ready = session.wait_event("ready")
        registration_path = ready["registrationPath"]
        assert os.path.lexists(registration_path)
        # Two real messages from the command line, as the same user: one submitted, one queued.
        receipts = [cli(unprivileged, "send", "victim", text, "--json") for text in ("one", "two")]
        sent = [json.loads(receipt.stdout) for receipt in receipts]
        assert [(r["ok"], r["status"]) for r in sent] == [(True, "submitted"), (True, "queued")]

        stopped = make_read_only_until_stopped(session, locations.peers_dir)
        code = session.process.wait(timeout=30)
    finally:
        end(session)

    assert (code, stopped["reason"], stopped["code"]) == (1, "runtime ended", "EACCES")
    assert "Traceback" not in "\n".join(session.err_lines), session.output()
    # Every message is in a final state: the queued one was dropped when the inbox went down.
    assert stopped["rows"] == [
        [sent[0]["messageId"], Code.SUBMITTED],
        [sent[1]["messageId"], Code.DROPPED_SHUTDOWN],
    ]
    assert not os.path.lexists(ready["socketPath"])
    assert os.path.lexists(registration_path)  # could not be unlinked from a 0500 dir
    assert mode_of(locations.peers_dir) == 0o500
    assert [n for n in os.listdir(locations.peers_dir) if n.endswith(".tmp")] == []
    assert "could not remove our registration" in "\n".join(session.err_lines)

    listing = cli(unprivileged, "peers", "--json")
    assert listing.returncode == 0, listing
    assert json.loads(listing.stdout) == {"peers": [], "unread": 0, "unchecked": 0, "capped": []}
    assert not os.path.lexists(registration_path)  # reaped: the pid is gone
    assert mode_of(locations.peers_dir) == 0o700  # repaired by the listing
