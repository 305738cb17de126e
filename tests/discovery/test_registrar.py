"""Publishing our registration: writes, fence, heartbeat, failure and withdrawal (spec §1.4)."""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import LocalProtocolError
from pi_cross_session._internal.protocol.io.discovery import Registrar, RegistrarStoppedError
from pi_cross_session._internal.protocol.limits import HEARTBEAT_INTERVAL_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    Status,
    UnpublishableRegistrationError,
    serialize,
)
from pi_cross_session._internal.security.io import fs
from tests.discovery.conftest import exists, make_registration, mock_clock_backend, now_ms
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio


class Clock:
    """Epoch milliseconds that advance by one at every reading."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


class State:
    """What the runtime would hold: the base registration and the current status."""

    def __init__(self, locations: Locations) -> None:
        self.registration = make_registration(locations, updated_at=1)
        self.status: Status = "idle"
        self.snapshots = 0

    def snapshot(self) -> Registration:
        self.snapshots += 1
        return self.registration.model_copy(update={"status": self.status})


class RecordingFiles:
    """The real file layer, with every write's (monotonic) time recorded and hooks to fail."""

    def __init__(self) -> None:
        self.write_times: list[float] = []
        self.fail_write: BaseException | None = None
        self.fail_after_writes: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(fs, name)

    def write_registration(
        self, peers_dir: str, instance_id: str, data: bytes, *, still_current: Callable[[], bool]
    ) -> bool:
        if self.fail_after_writes is not None and len(self.write_times) >= self.fail_after_writes:
            raise fs.FileOperationError(peers_dir, "write", OSError(errno.ENOSPC, "disk full"))
        self.write_times.append(time.monotonic())
        return fs.write_registration(peers_dir, instance_id, data, still_current=still_current)


def registration_file(locations: Locations, state: State) -> Path:
    return Path(locations.registration_path(state.registration.instance_id))


def is_stopped(registrar: Registrar) -> bool:
    """Whether the registrar is fenced (it will not write again): its own flag, read here because
    nothing in the package needs to ask."""
    return registrar._stopped


def mode_of(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def test_register_writes_the_exact_bytes_privately(locations: Locations) -> None:
    state = State(locations)
    clock = Clock()
    registrar = Registrar(locations, fs, state.snapshot, clock=clock)
    assert not exists(locations.peers_dir)
    await registrar.register()
    path = registration_file(locations, state)
    expected = serialize(state.registration.model_copy(update={"updated_at": clock.now}))
    assert path.read_bytes() == expected
    assert mode_of(path) == 0o600
    assert mode_of(locations.peers_dir) == 0o700
    assert registrar.instance_id == state.registration.instance_id
    assert registrar.writes == 1
    assert not is_stopped(registrar)
    assert registrar.last_error is None


async def test_register_repairs_a_loose_peers_dir(locations: Locations) -> None:
    os.makedirs(locations.peers_dir, mode=0o755)
    os.chmod(locations.peers_dir, 0o755)
    state = State(locations)
    await Registrar(locations, fs, state.snapshot).register()
    assert mode_of(locations.peers_dir) == 0o700


async def test_refresh_rewrites_status_and_updated_at(locations: Locations) -> None:
    state = State(locations)
    clock = Clock()
    registrar = Registrar(locations, fs, state.snapshot, clock=clock)
    await registrar.register()
    first = registration_file(locations, state).read_bytes()
    state.status = "busy"
    assert await registrar.refresh()
    data = registration_file(locations, state).read_bytes()
    assert data != first
    assert b'"status":"busy"' in data
    assert f'"updatedAt":{clock.now},'.encode() in data
    assert registrar.writes == 2


async def test_unregister_removes_the_file_and_fences_every_later_write(
    locations: Locations,
) -> None:
    state = State(locations)
    registrar = Registrar(locations, fs, state.snapshot)
    await registrar.register()
    path = registration_file(locations, state)
    assert path.exists()
    assert await registrar.unregister()
    assert not path.exists()
    assert is_stopped(registrar)
    snapshots = state.snapshots
    assert not await registrar.refresh()
    with pytest.raises(RegistrarStoppedError) as info:
        await registrar.register()
    assert info.value.code == Code.STOPPED
    assert state.snapshots == snapshots  # not even asked for a snapshot
    assert not path.exists()
    assert await registrar.unregister()  # idempotent


async def test_unregister_before_any_write(locations: Locations) -> None:
    state = State(locations)
    registrar = Registrar(locations, fs, state.snapshot)
    assert await registrar.unregister()
    assert not exists(locations.peers_dir)


class BlockingFiles(RecordingFiles):
    """A write that passes its first fence check, then blocks until released."""

    def __init__(self) -> None:
        super().__init__()
        self.block = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.results: list[bool] = []

    def write_registration(
        self, peers_dir: str, instance_id: str, data: bytes, *, still_current: Callable[[], bool]
    ) -> bool:
        if not self.block:
            return super().write_registration(
                peers_dir, instance_id, data, still_current=still_current
            )
        assert still_current()
        self.entered.set()
        assert self.release.wait(5)
        result = fs.write_registration(peers_dir, instance_id, data, still_current=still_current)
        self.results.append(result)
        return result


async def test_unregister_fences_a_write_in_flight(locations: Locations) -> None:
    state = State(locations)
    files = BlockingFiles()
    registrar = Registrar(locations, files, state.snapshot)
    await registrar.register()
    path = registration_file(locations, state)
    files.block = True
    events: list[str] = []

    async def write() -> None:
        events.append(f"refresh={await registrar.refresh()}")

    async def withdraw() -> None:
        await anyio.to_thread.run_sync(files.entered.wait)
        async with anyio.create_task_group() as inner:
            inner.start_soon(unregister)
            await anyio.wait_all_tasks_blocked()
            events.append("released")
            files.release.set()

    async def unregister() -> None:
        events.append(f"unregister={await registrar.unregister()}")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(write)
            group.start_soon(withdraw)
    # The unregister waited for the write, the write saw the fence, and no file is left.
    assert events == ["released", "refresh=False", "unregister=True"]
    assert files.results == [False]
    assert not path.exists()
    assert [p for p in os.listdir(locations.peers_dir) if not p.startswith(".reap")] == []


async def test_heartbeat_writes_every_interval(locations: Locations) -> None:
    state = State(locations)
    interval = 0.05
    beats: list[float] = []
    enough = anyio.Event()

    def clock() -> int:
        beats.append(time.monotonic())
        if len(beats) == 6:
            enough.set()
        return now_ms()

    registrar = Registrar(locations, fs, state.snapshot, heartbeat_interval_s=interval, clock=clock)
    await registrar.register()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await group.start(registrar.run_heartbeat)
            await enough.wait()
            # Stopping wakes the heartbeat at once: the task group exits without a cancel.
            assert await registrar.unregister()
    # Beats sit on a fixed grid that starts after the first write: the k-th heartbeat comes no
    # earlier than k intervals after it. A loaded machine can only make a beat later (and a
    # late one is skipped rather than bunched), never earlier, so this holds under any load.
    assert len(beats) >= 6
    early = [k for k in range(1, len(beats)) if beats[k] < beats[0] + k * interval - 0.001]
    assert early == [], beats
    assert not registration_file(locations, state).exists()


async def test_heartbeat_ends_promptly_when_unregistered(locations: Locations) -> None:
    state = State(locations)
    registrar = Registrar(locations, fs, state.snapshot)  # the real 30 s interval
    await registrar.register()
    started = time.monotonic()
    # Promptly means well before the next beat would have come (30 s), not within a tight figure.
    with anyio.fail_after(HEARTBEAT_INTERVAL_S):
        async with anyio.create_task_group() as group:
            await group.start(registrar.run_heartbeat)
            await registrar.unregister()
    assert time.monotonic() - started < HEARTBEAT_INTERVAL_S / 2


async def test_heartbeat_write_failure_withdraws_and_reports_once(locations: Locations) -> None:
    state = State(locations)
    files = RecordingFiles()
    failures: list[BaseException] = []
    interval = 0.03
    registrar = Registrar(
        locations, files, state.snapshot, heartbeat_interval_s=interval, on_failure=failures.append
    )
    await registrar.register()
    files.fail_after_writes = 3
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            # The loop must end by itself; a hung heartbeat would trip the deadline above.
            await group.start(registrar.run_heartbeat)
    assert len(failures) == 1
    assert isinstance(failures[0], fs.FileOperationError)
    assert failures[0].code == "ENOSPC"
    assert is_stopped(registrar)
    assert registrar.last_error is failures[0]
    assert not registration_file(locations, state).exists()
    writes = len(files.write_times)
    await anyio.sleep(interval * 4)
    assert len(files.write_times) == writes == 3
    assert not await registrar.refresh()
    assert await registrar.unregister()  # the runtime's cleanup may call it again
    assert len(failures) == 1


async def test_heartbeat_snapshot_failure_withdraws_and_reports_once(
    locations: Locations,
) -> None:
    state = State(locations)
    failures: list[BaseException] = []
    broken = False

    def snapshot() -> Registration:
        if broken:
            raise RuntimeError("the host went away")
        return state.snapshot()

    registrar = Registrar(
        locations, fs, snapshot, heartbeat_interval_s=0.02, on_failure=failures.append
    )
    await registrar.register()
    broken = True
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await group.start(registrar.run_heartbeat)
    assert [type(e) for e in failures] == [RuntimeError]
    assert is_stopped(registrar)
    assert not registration_file(locations, state).exists()


async def test_heartbeat_failure_without_callback_is_logged(
    locations: Locations, caplog: pytest.LogCaptureFixture
) -> None:
    state = State(locations)
    files = RecordingFiles()
    registrar = Registrar(locations, files, state.snapshot, heartbeat_interval_s=0.02)
    await registrar.register()
    files.fail_after_writes = 1
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await group.start(registrar.run_heartbeat)
    assert "heartbeat failed" in caplog.text
    assert is_stopped(registrar)


async def test_register_failure_is_raised_and_recorded(locations: Locations) -> None:
    state = State(locations)
    files = RecordingFiles()
    files.fail_after_writes = 0
    registrar = Registrar(locations, files, state.snapshot)
    with pytest.raises(fs.FileOperationError):
        await registrar.register()
    assert isinstance(registrar.last_error, fs.FileOperationError)
    assert not is_stopped(registrar)  # the runtime decides; a failed start-up cleans up anyway


async def test_snapshot_must_stay_the_same_incarnation(locations: Locations) -> None:
    state = State(locations)
    registrar = Registrar(locations, fs, state.snapshot)
    await registrar.register()
    state.registration = make_registration(locations)
    with pytest.raises(LocalProtocolError):
        await registrar.refresh()
    assert isinstance(registrar.last_error, LocalProtocolError)


async def test_socket_path_must_be_the_computed_one(locations: Locations) -> None:
    state = State(locations)
    state.registration = state.registration.model_copy(update={"socket_path": "/tmp/elsewhere"})
    registrar = Registrar(locations, fs, state.snapshot)
    with pytest.raises(UnpublishableRegistrationError):
        await registrar.register()
    assert not exists(locations.registration_path(state.registration.instance_id))


async def test_concurrent_refreshes_never_overlap(locations: Locations) -> None:
    state = State(locations)
    inside = 0
    peak = 0

    class Counting(RecordingFiles):
        def write_registration(self, *args: Any, **kwargs: Any) -> bool:
            nonlocal inside, peak
            inside += 1
            peak = max(peak, inside)
            time.sleep(0.005)
            try:
                return super().write_registration(*args, **kwargs)
            finally:
                inside -= 1

    registrar = Registrar(locations, Counting(), state.snapshot)
    await registrar.register()
    async with anyio.create_task_group() as group:
        for _ in range(10):
            group.start_soon(registrar.refresh)
    assert peak == 1
    assert registrar.writes == 11


def test_interval_must_be_positive(locations: Locations) -> None:
    with pytest.raises(ValueError, match="positive"):
        Registrar(locations, fs, lambda: make_registration(locations), heartbeat_interval_s=0)


@pytest.mark.parametrize("anyio_backend", [mock_clock_backend()])
async def test_heartbeat_keeps_the_real_interval_on_a_virtual_clock(
    locations: Locations,
) -> None:
    state = State(locations)
    beats: list[float] = []
    fourth = anyio.Event()

    def clock() -> int:
        # Stamped inside the event loop at each write: the loop's (virtual) time of the write.
        beats.append(anyio.current_time())
        if len(beats) == 4:
            fourth.set()
        return len(beats)

    registrar = Registrar(locations, fs, state.snapshot, clock=clock)  # 30 s by default
    await registrar.register()
    async with anyio.create_task_group() as group:
        await group.start(registrar.run_heartbeat)
        # No deadline of our own here: while a write waits for its worker thread, a pending
        # timeout would let the virtual clock jump past beats.
        await fourth.wait()
        await registrar.unregister()
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(beats)]
    assert gaps == [HEARTBEAT_INTERVAL_S] * 3


# -- a shortage of kernel resources is not a reason to leave the network ---------------------------


class ShortFiles:
    """The real file layer, whose registration writes fail with ``fail_with`` while it is set,
    the way the file layer reports it (the errno name as the code, the OSError as the cause)."""

    def __init__(self) -> None:
        self.fail_with: int | None = None
        self.attempts = 0
        self.written = 0
        self.attempted = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(fs, name)

    def write_registration(
        self, peers_dir: str, instance_id: str, data: bytes, *, still_current: Callable[[], bool]
    ) -> bool:
        self.attempts += 1
        if self.fail_with is not None:
            cause = OSError(self.fail_with, os.strerror(self.fail_with))
            raise fs.FileOperationError(peers_dir, "create a temp file in", cause) from cause
        self.written += 1
        return fs.write_registration(peers_dir, instance_id, data, still_current=still_current)


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
async def test_a_heartbeat_short_of_resources_retries_and_stays_registered(
    locations: Locations, number: int
) -> None:
    """Regression: one ``EMFILE`` on a heartbeat write withdrew the registration and stopped the
    session, so whoever could exhaust our descriptors could make us leave the network."""
    state = State(locations)
    files = ShortFiles()
    failures: list[BaseException] = []
    registrar = Registrar(
        locations,
        files,
        state.snapshot,
        heartbeat_interval_s=0.05,
        retry_s=0.01,
        on_failure=failures.append,
    )
    await registrar.register()
    name = errno.errorcode[number]
    async with anyio.create_task_group() as group:
        await group.start(registrar.run_heartbeat)
        files.fail_with = number
        await eventually(lambda: registrar.retries.get(name, 0) >= 3)
        # Still ours, still on disk, nothing reported as a failure.
        assert failures == []
        assert not is_stopped(registrar)
        assert registration_file(locations, state).exists()
        assert registrar.last_retry_at is not None
        files.fail_with = None
        written = files.written
        await eventually(lambda: files.written > written)
        await registrar.unregister()
    assert failures == []
    assert set(registrar.retries) == {name}


async def test_retries_back_off_up_to_the_heartbeat_interval(locations: Locations) -> None:
    state = State(locations)
    files = ShortFiles()
    registrar = Registrar(locations, files, state.snapshot, heartbeat_interval_s=0.2, retry_s=0.01)
    await registrar.register()
    files.fail_with = errno.EMFILE
    async with anyio.create_task_group() as group:
        await group.start(registrar.run_heartbeat)
        await anyio.sleep(0.7)  # a window to count attempts in, not a timing assertion
        attempts = files.attempts - 1
        await registrar.unregister()
    # Pauses of 0.01, 0.02, 0.04 … capped at 0.2 after the first beat at 0.2: a handful of
    # tries, never a spin (hundreds) and never only the beats (three).
    assert 4 <= attempts <= 12, attempts


async def test_a_refresh_short_of_resources_raises_and_the_heartbeat_retries_soon(
    locations: Locations,
) -> None:
    state = State(locations)
    files = ShortFiles()
    registrar = Registrar(
        locations, files, state.snapshot, heartbeat_interval_s=3600.0, retry_s=0.01
    )
    await registrar.register()
    async with anyio.create_task_group() as group:
        await group.start(registrar.run_heartbeat)
        files.fail_with = errno.EMFILE
        state.status = "busy"
        with pytest.raises(fs.FileOperationError) as caught:
            await registrar.refresh()
        assert caught.value.code == "EMFILE"
        assert registrar.retries == {"EMFILE": 1}
        files.fail_with = None
        # The heartbeat (an hour away) retries within its short pause and publishes "busy".
        await eventually(lambda: files.written >= 2)
        assert b'"status":"busy"' in registration_file(locations, state).read_bytes()
        await registrar.unregister()


async def test_any_other_heartbeat_failure_still_withdraws(locations: Locations) -> None:
    state = State(locations)
    files = ShortFiles()
    failures: list[BaseException] = []
    registrar = Registrar(
        locations, files, state.snapshot, heartbeat_interval_s=0.02, on_failure=failures.append
    )
    await registrar.register()
    files.fail_with = errno.EIO
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await group.start(registrar.run_heartbeat)
    assert [getattr(f, "code", None) for f in failures] == ["EIO"]
    assert registrar.retries == {}
    assert not registration_file(locations, state).exists()
