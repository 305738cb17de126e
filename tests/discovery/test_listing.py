"""Listing live peers: reading, skipping, probing, hiding and reaping (spec §1.5)."""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import filelock
import pytest

from pi_cross_session._internal.protocol.io.discovery import REAP_LOCK_NAME, Listing, list_peers
from pi_cross_session._internal.protocol.limits import PROBE_DEADLINE_S, PROBE_GUARD_MARGIN_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import GitInfo, Registration, serialize
from pi_cross_session._internal.security.io import fs
from tests.discovery.conftest import (
    dead_pid,
    exists,
    make_registration,
    make_repo,
    mock_clock_backend,
    needs_git,
    now_ms,
    publish,
)
from tests.support.bounds import MUST_HAPPEN_S

pytestmark = pytest.mark.anyio


class FakeProbe:
    """Answers from a table (default: live) and records whom it was asked about."""

    def __init__(self, answers: dict[str, bool] | None = None, *, default: bool = True) -> None:
        self.answers = answers or {}
        self.default = default
        self.asked: list[str] = []

    async def __call__(self, registration: Registration) -> bool:
        self.asked.append(registration.instance_id)
        await anyio.lowlevel.checkpoint()
        return self.answers.get(registration.instance_id, self.default)


async def listing(
    locations: Locations, probe: Any = None, *, files: Any = fs, **kwargs: Any
) -> Listing:
    kwargs.setdefault("self_instance_id", None)
    kwargs.setdefault("with_git", False)
    # The fake probes answer at once; on a loaded machine 512 of them started together may not
    # all be scheduled within the real guard, and these tests are about what a listing reads.
    kwargs.setdefault("probe_guard_s", MUST_HAPPEN_S)
    return await list_peers(locations, files, probe or FakeProbe(), **kwargs)


def make_socket_file(path: str) -> None:
    """Leave a socket file behind, as a killed peer does."""
    fs.ensure_private_dir(os.path.dirname(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    finally:
        sock.close()


async def test_newest_first_and_self_excluded(locations: Locations) -> None:
    base = now_ms()
    old, new, mid = (make_registration(locations, updated_at=base + d) for d in (0, 20, 10))
    me = make_registration(locations, updated_at=base + 30)
    for registration in (old, new, mid, me):
        publish(locations, registration)
    probe = FakeProbe()
    result = await listing(locations, probe, self_instance_id=me.instance_id)
    assert [p.instance_id for p in result.peers] == [
        new.instance_id,
        mid.instance_id,
        old.instance_id,
    ]
    assert me.instance_id not in probe.asked
    assert result.self_seen
    assert result.considered == 4
    assert not result.at_limit
    assert result.skipped == result.hidden == result.reaped == 0
    peer = result.peers[0].to_dict()
    assert "token" not in peer
    assert peer["ref"] == new.instance_id[:8]


async def test_peers_dir_is_created_and_repaired(locations: Locations) -> None:
    result = await listing(locations)
    assert result.peers == []
    assert result.considered == 0
    os.chmod(locations.peers_dir, 0o755)
    await listing(locations)
    assert os.stat(locations.peers_dir).st_mode & 0o777 == 0o700


async def test_bad_files_are_skipped_and_counted(locations: Locations) -> None:
    good = make_registration(locations)
    publish(locations, good)
    peers = Path(locations.peers_dir)

    def raw_file(name: str, data: bytes, mode: int = 0o600) -> None:
        path = peers / name
        path.write_bytes(data)
        os.chmod(path, mode)

    def record(**changes: Any) -> tuple[str, bytes]:
        registration = make_registration(locations)
        data = json.loads(serialize(registration))
        data.update(changes)
        return registration.instance_id, json.dumps(data).encode()

    iid, data = record()
    raw_file(f"{iid}.json", data, 0o640)  # group-readable: unsafe, never repaired
    iid, data = record()
    raw_file(f"{iid}.json", data + b" " * 70_000)  # oversized: unsafe
    iid, _ = record()
    raw_file(f"{iid}.json", b"{not json")  # invalid
    iid, data = record(socketPath="/tmp/somewhere-else.sock")
    raw_file(f"{iid}.json", data)  # invalid: socket path differs from the computed one
    _, data = record()
    raw_file(f"{'f' * 32}.json", data)  # invalid: instanceId differs from the file name
    iid, data = record(version=3)
    raw_file(f"{iid}.json", data)  # invalid
    # Never even considered: a symlink, a dir, a temp file, an uppercase name.
    (peers / f"{'1' * 32}.json").symlink_to(peers / f"{good.instance_id}.json")
    (peers / f"{'2' * 32}.json").mkdir()
    raw_file(f".{'3' * 32}.tmp", b"{}")
    raw_file(f"{'A' * 32}.json", b"{}")

    result = await listing(locations)
    assert [p.instance_id for p in result.peers] == [good.instance_id]
    assert (result.unsafe, result.invalid, result.unreadable) == (2, 4, 0)
    assert result.considered == 7
    assert result.skipped == 6
    assert os.stat(peers).st_mode & 0o777 == 0o700
    # Ignored files are left exactly as they were.
    assert len(os.listdir(peers)) == 11


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
async def test_foreign_owned_registration_is_unsafe(locations: Locations) -> None:
    registration = make_registration(locations)
    path = publish(locations, registration)
    os.chown(path, 12345, 12345)
    probe = FakeProbe()
    result = await listing(locations, probe)
    assert result.peers == []
    assert result.unsafe == 1
    assert probe.asked == []
    assert path.exists()


async def test_only_the_first_512_names_are_considered(locations: Locations) -> None:
    registrations = [make_registration(locations) for _ in range(600)]
    for registration in registrations:
        publish(locations, registration)
    probe = FakeProbe()
    result = await listing(locations, probe)
    assert result.considered == 512
    assert result.at_limit
    assert result.unread == 600 - 512
    assert len(probe.asked) == len(result.peers) == 512


async def test_limit_keyword_override(locations: Locations) -> None:
    for _ in range(5):
        publish(locations, make_registration(locations))
    result = await listing(locations, limit=3)
    assert (result.considered, result.at_limit, len(result.peers)) == (3, True, 3)
    assert result.unread == 2


@pytest.mark.parametrize("count", [511, 512, 513])
async def test_unread_counts_exactly_what_the_window_left(locations: Locations, count: int) -> None:
    for _ in range(count):
        publish(locations, make_registration(locations))
    result = await listing(locations)
    assert (result.considered, result.unread) == (min(count, 512), max(0, count - 512))


async def test_our_own_registration_past_the_window_counts_as_unread(
    locations: Locations,
) -> None:
    # Self is set aside by name only when it falls in the window; past it, it is one more name.
    mine = make_registration(locations)
    publish(locations, mine)
    for _ in range(4):
        publish(locations, make_registration(locations))
    result = await listing(locations, limit=2, self_instance_id=mine.instance_id)
    assert result.considered + result.unread == 5
    assert result.unread == 3


async def test_failed_probe_with_dead_pid_reaps_file_and_socket(locations: Locations) -> None:
    dead = make_registration(locations, pid=dead_pid())
    alive = make_registration(locations)
    path = publish(locations, dead)
    publish(locations, alive)
    make_socket_file(locations.socket_path(dead.instance_id))
    assert exists(locations.socket_path(dead.instance_id))
    result = await listing(locations, FakeProbe({dead.instance_id: False}))
    assert [p.instance_id for p in result.peers] == [alive.instance_id]
    assert (result.reaped, result.hidden, result.reap_deferred) == (1, 0, 0)
    assert not path.exists()
    assert not exists(locations.socket_path(dead.instance_id))


async def test_failed_probe_with_live_pid_is_hidden_not_removed(locations: Locations) -> None:
    registration = make_registration(locations, pid=os.getpid())
    path = publish(locations, registration)
    result = await listing(locations, FakeProbe(default=False))
    assert result.peers == []
    assert (result.hidden, result.reaped) == (1, 0)
    assert path.exists()


class NotProvenDead:
    """The file layer, except that no pid is ever proven dead (kill gives EPERM, say)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(fs, name)

    def pid_is_dead(self, pid: int) -> bool:
        return False


async def test_unproven_death_only_hides(locations: Locations) -> None:
    registration = make_registration(locations, pid=dead_pid())
    path = publish(locations, registration)
    result = await listing(locations, FakeProbe(default=False), files=NotProvenDead())
    assert (result.hidden, result.reaped) == (1, 0)
    assert path.exists()


async def test_a_hanging_probe_is_cut_by_the_guard(locations: Locations) -> None:
    stuck = make_registration(locations)
    fine = make_registration(locations)
    publish(locations, stuck)
    publish(locations, fine)

    async def probe(registration: Registration) -> bool:
        if registration.instance_id == stuck.instance_id:
            await anyio.sleep_forever()
        return True

    started = time.monotonic()
    # Without the guard the listing would never end; any bound well short of forever shows it.
    with anyio.fail_after(2 * MUST_HAPPEN_S):
        result = await listing(locations, probe, probe_guard_s=0.2)
    assert time.monotonic() - started < MUST_HAPPEN_S
    assert [p.instance_id for p in result.peers] == [fine.instance_id]
    assert (result.probe_faults, result.hidden) == (1, 1)


async def test_a_raising_probe_is_a_fault_and_is_logged(
    locations: Locations, caplog: pytest.LogCaptureFixture
) -> None:
    registration = make_registration(locations, pid=dead_pid())
    path = publish(locations, registration)

    async def probe(registration: Registration) -> bool:
        raise RuntimeError("bug in the probe")

    result = await listing(locations, probe)
    assert result.peers == []
    assert result.probe_faults == 1
    assert result.reaped == 1  # a failed probe all the same, and the pid is dead
    assert not path.exists()
    assert "bug in the probe" in caplog.text


async def test_two_listers_reaping_the_same_peer(locations: Locations) -> None:
    dead = make_registration(locations, pid=dead_pid())
    path = publish(locations, dead)
    make_socket_file(locations.socket_path(dead.instance_id))
    results: list[Listing] = []

    async def one() -> None:
        results.append(await listing(locations, FakeProbe(default=False)))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(one)
    assert len(results) == 4
    # Each lister reaped it, left it to the lock holder, or came after it was gone.
    for result in results:
        assert result.peers == []
        assert result.considered == result.reaped + result.reap_deferred + result.unreadable
    assert sum(r.reaped for r in results) >= 1
    assert not path.exists()
    assert not exists(locations.socket_path(dead.instance_id))


async def test_busy_reap_lock_defers_reaping(locations: Locations) -> None:
    dead = make_registration(locations, pid=dead_pid())
    path = publish(locations, dead)
    # Another process (here: another lock handle) is reaping right now.
    other = filelock.FileLock(os.path.join(locations.peers_dir, REAP_LOCK_NAME), mode=0o600)
    with other:
        result = await listing(locations, FakeProbe(default=False))
    assert (result.reaped, result.reap_deferred) == (0, 1)
    assert path.exists()
    result = await listing(locations, FakeProbe(default=False))
    assert result.reaped == 1
    assert not path.exists()
    lock_file = os.path.join(locations.peers_dir, REAP_LOCK_NAME)
    assert os.stat(lock_file).st_mode & 0o777 == 0o600


async def test_a_reap_lock_that_fails_on_release_counts_each_peer_once(
    locations: Locations, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = make_registration(locations, pid=dead_pid())
    path = publish(locations, dead)

    def failing_release(self: filelock.FileLock, force: bool = False) -> None:
        raise OSError(errno.EIO, "lock release failed")

    monkeypatch.setattr(filelock.FileLock, "release", failing_release)
    result = await listing(locations, FakeProbe(default=False))
    assert not path.exists()
    assert (result.reaped, result.reap_deferred) == (1, 0)
    assert result.considered == 1


async def test_git_metadata_for_live_peers_only(locations: Locations, tmp_path: Path) -> None:
    live = make_registration(locations, cwd=str(tmp_path / "live"))
    gone = make_registration(locations, cwd=str(tmp_path / "gone"), pid=dead_pid())
    publish(locations, live)
    publish(locations, gone)
    asked: list[Sequence[str]] = []
    info = GitInfo(worktree="/w", branch="b", head="a" * 40)

    async def resolver(cwds: Sequence[str]) -> dict[str, GitInfo | None]:
        asked.append(list(cwds))
        return dict.fromkeys(cwds, info)

    result = await listing(
        locations, FakeProbe({gone.instance_id: False}), with_git=True, git_resolver=resolver
    )
    assert asked == [[live.cwd]]
    assert [p.git for p in result.peers] == [info]
    result = await listing(locations, with_git=False, git_resolver=resolver)
    assert [p.git for p in result.peers] == [None]
    assert len(asked) == 1


@needs_git
@pytest.mark.usefixtures("git_env")
async def test_git_metadata_from_a_real_repository(locations: Locations, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    publish(locations, make_registration(locations, cwd=str(repo)))
    publish(locations, make_registration(locations, cwd=str(tmp_path)))
    result = await listing(locations, with_git=True)
    by_cwd = {p.cwd: p.git for p in result.peers}
    assert by_cwd[str(tmp_path)] is None
    git = by_cwd[str(repo)]
    assert git is not None
    assert (git.worktree, git.branch) == (str(repo), "main")


async def test_vanishing_file_is_unreadable(locations: Locations) -> None:
    registration = make_registration(locations)
    publish(locations, registration)

    class Vanishing(NotProvenDead):
        def read_registration_bytes(self, path: str, **kwargs: Any) -> bytes:
            os.unlink(path)
            return fs.read_registration_bytes(path, **kwargs)

    result = await listing(locations, files=Vanishing())
    assert (result.unreadable, len(result.peers)) == (1, 0)


async def test_real_socket_probe(locations: Locations) -> None:
    """The seam with a real endpoint: a listener answers, a stale socket file does not."""
    live = make_registration(locations)
    stale = make_registration(locations)
    publish(locations, live)
    publish(locations, stale)
    fs.ensure_private_dir(locations.runtime_dir)
    make_socket_file(locations.socket_path(stale.instance_id))

    async def probe(registration: Registration) -> bool:
        with anyio.move_on_after(0.35):
            try:
                stream = await anyio.connect_unix(registration.socket_path)
            except OSError:
                return False
            await stream.aclose()
            return True
        return False

    listener = await anyio.create_unix_listener(locations.socket_path(live.instance_id))
    async with listener, anyio.create_task_group() as group:

        async def serve() -> None:
            async def handle(stream: anyio.abc.SocketStream) -> None:
                await stream.aclose()

            await listener.serve(handle)

        group.start_soon(serve)
        result = await listing(locations, probe)
        group.cancel_scope.cancel()
    assert [p.instance_id for p in result.peers] == [live.instance_id]
    assert result.hidden == 1  # our own pid: alive, so the stale one is only hidden


@pytest.mark.parametrize("anyio_backend", [mock_clock_backend()])
async def test_default_guard_on_a_virtual_clock(locations: Locations) -> None:
    publish(locations, make_registration(locations))

    async def probe(registration: Registration) -> bool:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    started = anyio.current_time()
    result = await list_peers(locations, fs, probe, self_instance_id=None, with_git=False)
    assert anyio.current_time() - started == pytest.approx(PROBE_DEADLINE_S + PROBE_GUARD_MARGIN_S)
    assert (result.probe_faults, result.hidden) == (1, 1)


async def test_a_peer_rewriting_its_registration_never_drops_out_of_a_listing(
    locations: Locations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session rewrites its registration (atomic rename) at every heartbeat and busy/idle
    change. A listing that meets such a rewrite between its check and its open must read the new
    file, not refuse the session as unsafe: it then looked dead to a sender (``not_found``). The
    rewrite is placed in that window through the file layer's open seam, every time."""
    registration = make_registration(locations, name="busy-writer")
    publish(locations, registration)
    real_open = fs._open
    opens = rewrites = 0

    def heartbeat_then_open(path: str, flags: int, mode: int) -> int:
        nonlocal opens, rewrites
        if path == locations.registration_path(registration.instance_id):
            opens += 1
            if opens % 2:  # one rewrite per listing, in the window
                rewrites += 1
                publish(locations, registration)  # the owner's real atomic rewrite
        return real_open(path, flags, mode)

    monkeypatch.setattr(fs, "_open", heartbeat_then_open)
    seen = [len((await listing(locations)).peers) for _ in range(20)]
    assert seen == [1] * 20
    assert rewrites == 20
