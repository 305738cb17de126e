"""The command line's pool of sender identities: first free one taken, holders named, released
by the kernel when their process dies, and ``status`` asking as the identity that sent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.plugin import cli_identity
from pi_cross_session._internal.plugin.cli_identity import (
    ALL_SLOTS,
    Holder,
    IdentityBusyError,
    IdentityUnusableError,
    LockProblem,
    SkippedSlot,
    read_holder,
)
from pi_cross_session._internal.plugin.cli_identity_settings import (
    CLI_IDENTITY_POOL,
    CLI_SENT_IDS_KEPT,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io.fs import NotedLock
from tests.support.processes import Inboxes, Result, cli_env, run_cli, run_with_tty_stderr

Cli = Callable[..., Result]


def lock_path(locations: Locations, slot: int) -> str:
    state = Path(cli_identity.state_dir(locations))
    state.mkdir(mode=0o700, exist_ok=True)
    return str(state / cli_identity.slot_files(slot).lock)


class Recorder:
    """A wait reporter that keeps what it was told."""

    def __init__(self) -> None:
        self.started: list[Sequence[tuple[int, Holder | None]]] = []
        self.ended: list[int] = []
        self.skipped: list[SkippedSlot] = []

    def started_wait(self, holders: Sequence[tuple[int, Holder | None]]) -> None:
        self.started.append(holders)


class Reporter:
    """:class:`cli_identity.WaitReporter`, into a :class:`Recorder`."""

    def __init__(self, record: Recorder) -> None:
        self.record = record

    def started(self, holders: Sequence[tuple[int, Holder | None]], timeout_s: float) -> None:
        self.record.started_wait(holders)

    def still_waiting(self, elapsed_s: float) -> None:
        pass

    def ended(self, slot: int, elapsed_s: float) -> None:
        self.record.ended.append(slot)

    def skipped(self, skipped: SkippedSlot) -> None:
        self.record.skipped.append(skipped)


def test_the_pool_size_and_file_names() -> None:
    assert len(ALL_SLOTS) == CLI_IDENTITY_POOL == 4
    assert cli_identity.slot_files(0).identity == "cli-identity.json"  # as before the pool
    assert cli_identity.slot_files(0).lock == "cli.lock"
    assert cli_identity.slot_files(2).identity == "cli-identity-2.json"
    with pytest.raises(ValueError, match="slot"):
        cli_identity.slot_files(CLI_IDENTITY_POOL)


@pytest.mark.anyio
async def test_an_invocation_takes_the_first_free_identity(locations: Locations) -> None:
    async with cli_identity.holding(locations, purpose="first") as first:
        assert first.slot == 0
        note = read_holder(lock_path(locations, 0))
        assert note is not None
        assert (note.pid, note.purpose) == (os.getpid(), "first")
        async with cli_identity.holding(locations) as second:
            assert second.slot == 1
            assert second.identity.instance_id != first.identity.instance_id
    assert read_holder(lock_path(locations, 0)) is None  # the note goes with the lock
    async with cli_identity.holding(locations) as again:
        assert again.slot == 0
        assert again.identity == first.identity  # the same sender, invocation after invocation


@pytest.mark.anyio
async def test_when_every_identity_stays_busy_the_wait_names_the_holders_and_ends(
    locations: Locations,
) -> None:
    locks = [NotedLock(lock_path(locations, slot)) for slot in ALL_SLOTS]
    for slot, lock in enumerate(locks):
        assert lock.try_acquire()
        lock.write_note(Holder(1000 + slot, f"holder {slot}", None).to_bytes())
    record = Recorder()
    try:
        with pytest.raises(IdentityBusyError) as caught:
            await cli_identity.acquire_slot(locations, timeout_s=0.3, reporter=Reporter(record))
    finally:
        for lock in locks:
            lock.release()
    [holders] = record.started  # told once, at once
    assert [(slot, h.pid if h else None) for slot, h in holders] == [
        (slot, 1000 + slot) for slot in ALL_SLOTS
    ]
    assert "0: pid 1000" in str(caught.value)
    assert record.ended == []


@pytest.mark.anyio
async def test_a_waiting_invocation_gets_the_identity_once_it_is_released(
    locations: Locations,
) -> None:
    lock = NotedLock(lock_path(locations, 2))
    assert lock.try_acquire()
    record = Recorder()
    async with anyio.create_task_group() as group:

        async def release_soon() -> None:
            await anyio.sleep(0.2)
            lock.release()

        group.start_soon(release_soon)
        slot, taken = await cli_identity.acquire_slot(
            locations, [2], timeout_s=10, reporter=Reporter(record)
        )
    taken.release()
    assert slot == 2
    assert len(record.started) == 1
    assert record.ended == [2]


HOLDER_SCRIPT = """
import sys, time
from pi_cross_session._internal.plugin.cli_identity import Holder
from pi_cross_session._internal.security.io.fs import NotedLock
lock = NotedLock(sys.argv[1])
assert lock.try_acquire()
lock.write_note(Holder(None, "a process about to be killed", None).to_bytes())
print("held", flush=True)
time.sleep(120)
"""


def test_the_kernel_releases_the_identity_of_a_killed_holder(
    locations: Locations, private_agent_dir: Path
) -> None:
    path = lock_path(locations, 0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SCRIPT, path],
        env=cli_env(private_agent_dir),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        mine = NotedLock(path)
        assert not mine.try_acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert mine.try_acquire()
        mine.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_each_identity_remembers_a_bounded_list_of_what_it_sent(locations: Locations) -> None:
    cli_identity.load_or_create(locations, 1)
    for number in range(CLI_SENT_IDS_KEPT + 5):
        cli_identity.remember_sent(locations, 1, f"m-{number}")
    assert cli_identity.senders_of(locations, f"m-{CLI_SENT_IDS_KEPT + 4}") == [1]
    assert cli_identity.senders_of(locations, "m-5") == [1]
    assert cli_identity.senders_of(locations, "m-4") == []  # the oldest are forgotten
    assert cli_identity.senders_of(locations, "never-sent") == []


@pytest.mark.anyio
async def test_status_asks_as_the_identity_that_sent_the_message(
    inboxes: Inboxes, locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    """While the first identity is busy, a send takes the second; later, with the first free
    again, status still asks as the second (a receiver keeps rows per sender), so it learns the
    message was delivered instead of hearing "unknown"."""
    inbox = inboxes.start("rows-per-sender", busy=0)
    run = partial(run_cli, private_agent_dir, cwd=tmp_path)
    async with cli_identity.holding(locations, [0]):
        sent = await anyio.to_thread.run_sync(run, "send", "rows-per-sender", "hi", "--json")
    assert sent.returncode == 0, sent
    message_id = sent.json()["messageId"]
    event = inbox.wait_event("state", messageId=message_id, state="delivered")
    second = cli_identity.load_existing(locations, 1)
    assert second is not None
    assert event["source"] == second.instance_id
    asked = await anyio.to_thread.run_sync(run, "status", "rows-per-sender", message_id, "--json")
    assert asked.returncode == 0, asked
    assert asked.json()["status"] == "delivered"


def test_a_wait_for_an_identity_shows_on_a_terminal(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    """All four identities are held: a status question says at once who holds them, shows the
    wait on its terminal while it lasts, and goes on once one is free."""
    locks = [NotedLock(lock_path(locations, slot)) for slot in ALL_SLOTS]
    for lock in locks:
        assert lock.try_acquire()
        lock.write_note(Holder(os.getpid(), "send to someone", None).to_bytes())
    released = False

    def release_once_the_wait_shows(terminal: str) -> None:
        # Released on what the command says, whenever a loaded machine lets it say it: its wait
        # notice, then its progress line after a second of waiting.
        nonlocal released
        if not released and "waiting for an identity… 1 s" in terminal:
            released = True
            for lock in locks:
                lock.release()

    try:
        # Its message id is remembered by no identity, so it asks as each stored one (none yet:
        # the first), and that is the one it waits for.
        code, out, terminal = run_with_tty_stderr(
            private_agent_dir,
            "status",
            "nobody",
            "0b7c6f1e-3d2a-4c1b-9e8f-5a6b7c8d9e0f",
            cwd=tmp_path,
            on_terminal=release_once_the_wait_shows,
        )
    finally:
        if not released:
            for lock in locks:
                lock.release()
    assert code == 4, (out, terminal)
    assert "waiting (up to 60 s) for the identity this needs:" in terminal
    assert f"identity 0: pid {os.getpid()}, send to someone" in terminal
    assert "waiting for an identity… 1 s" in terminal  # the progress line, while it lasts
    assert "got identity 0 after" in terminal


# -- an unsafe lock file costs one identity, not every send -----------------------------------


def unsafe_lock(locations: Locations, slot: int, elsewhere: Path) -> Path:
    """Slot ``slot``'s lock file made a symbolic link to a file of the test's."""
    path = Path(lock_path(locations, slot))
    elsewhere.write_text("not a lock\n")
    path.symlink_to(elsewhere)
    return path


def test_a_symlinked_lock_is_skipped_and_said_once_and_the_send_goes_out(
    inboxes: Inboxes, locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    inbox = inboxes.start("reachable", busy=0)
    target = tmp_path / "someone-elses-file"
    link = unsafe_lock(locations, 0, target)
    sent = run_cli(private_agent_dir, "send", "reachable", "hello", "--json", cwd=tmp_path)
    assert sent.returncode == 0, sent
    warnings = [line for line in sent.stderr.splitlines() if "skipped" in line]
    assert warnings == [
        f"pi-cross-session: warning: skipped command-line identity 0: its lock file {link} is a "
        "symbolic link; remove it if you did not put it there (it is made again, safely, when "
        "needed)"
    ], sent
    second = cli_identity.load_existing(locations, 1)
    assert second is not None  # the send went out as identity 1
    event = inbox.wait_event("state", messageId=sent.json()["messageId"], state="delivered")
    assert event["source"] == second.instance_id
    assert target.read_text() == "not a lock\n"  # never opened for writing, no note in it
    assert link.is_symlink()
    # status asks as the identity that sent it; a question about an id no identity remembers
    # skips the unsafe one as well, instead of failing on it.
    message_id = sent.json()["messageId"]
    asked = run_cli(private_agent_dir, "status", "reachable", message_id, cwd=tmp_path)
    assert asked.returncode == 0, asked
    cli_identity.load_or_create(locations, 0)  # so the question tries identity 0 first
    unknown = run_cli(private_agent_dir, "status", "reachable", str(uuid.uuid4()), cwd=tmp_path)
    assert unknown.returncode == 3, unknown  # "unknown", asked as identity 1
    assert target.read_text() == "not a lock\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_lock_of_another_user_is_skipped(
    inboxes: Inboxes, locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    inboxes.start("reachable", busy=0)
    path = Path(lock_path(locations, 0))
    path.write_bytes(b"")
    os.chown(path, 65534, 65534)
    sent = run_cli(private_agent_dir, "send", "reachable", "hello", cwd=tmp_path)
    assert sent.returncode == 0, sent
    assert "skipped command-line identity 0: its lock file" in sent.stderr
    assert "belongs to another user (uid 65534)" in sent.stderr


def test_when_no_lock_is_safe_the_send_fails_at_once_saying_why(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    for slot in ALL_SLOTS:
        unsafe_lock(locations, slot, tmp_path / f"target-{slot}")
    sent = run_cli(private_agent_dir, "send", "anyone", "hello", "--json", cwd=tmp_path)
    assert sent.returncode == 1, sent
    report = sent.json()
    assert (report["ok"], report["status"]) == (False, "identity_unusable")
    assert report["error"].startswith("no command-line identity can be used (identity 0: ")
    assert "waiting" not in sent.stderr  # nothing to wait for: no lock will become safe
    text = run_cli(private_agent_dir, "send", "anyone", "hello", cwd=tmp_path)
    assert text.returncode == 1, text
    assert "pi-cross-session: no command-line identity can be used" in text.stderr


@pytest.mark.anyio
async def test_a_skipped_slot_is_reported_once_while_the_wait_goes_on(
    locations: Locations, tmp_path: Path
) -> None:
    """Slot 0 unsafe, slot 1 busy: slot 0 is said once, and the wait is for slot 1 alone."""
    unsafe_lock(locations, 0, tmp_path / "target")
    busy = NotedLock(lock_path(locations, 1))
    assert busy.try_acquire()
    record = Recorder()
    try:
        with pytest.raises(IdentityBusyError):
            await cli_identity.acquire_slot(
                locations, [0, 1], timeout_s=0.3, reporter=Reporter(record)
            )
    finally:
        busy.release()
    assert [(s.slot, s.problem) for s in record.skipped] == [(0, LockProblem.SYMLINK)]
    [holders] = record.started
    assert [slot for slot, _ in holders] == [1]
    with pytest.raises(IdentityUnusableError):
        await cli_identity.acquire_slot(locations, [0], reporter=Reporter(record))
