"""Blocking file checks run on the loop only where the filesystem is local.

``fs.on_local_filesystem`` reads the kernel's mount table (any doubt means "not local"), and
``Offload`` asks it once per directory: inline afterwards when local, a worker thread otherwise,
and always a worker thread for a file-judging object that cannot say (a test's stalled double).
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from pi_cross_session._internal.protocol.io.offload import Offload
from pi_cross_session._internal.security.io import fs
from tests.support import platforms

linux_only = platforms.linux_only("reads mountinfo")


def mountinfo(tmp_path: Path, *entries: tuple[str, str]) -> str:
    """A mount table with ``(mount point, type)`` entries, in the kernel's format."""
    lines = [
        f"{n} 1 0:{n} / {point} rw,relatime - {kind} src rw"
        for n, (point, kind) in enumerate(entries)
    ]
    table = tmp_path / "mountinfo"
    table.write_text("\n".join(lines) + "\n")
    return str(table)


@linux_only
def test_a_temporary_dir_is_local_and_procfs_is_not() -> None:
    assert fs.on_local_filesystem("/tmp")
    assert not fs.on_local_filesystem("/proc/self")


def test_the_longest_matching_mount_point_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = mountinfo(tmp_path, ("/", "ext4"), ("/home", "nfs4"), ("/home/me/fast", "tmpfs"))
    monkeypatch.setattr(fs, "_MOUNTINFO", table)
    assert fs.on_local_filesystem("/var/lib")
    assert not fs.on_local_filesystem("/home/me/.pi/agent/peers")
    assert fs.on_local_filesystem("/home/me/fast/x")
    assert fs.on_local_filesystem("/homer")  # "/home" (nfs) is a prefix of the text, not a parent


def test_escaped_mount_points_and_unknown_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = mountinfo(tmp_path, ("/", "ext4"), ("/mnt/my\\040disk", "fuse.sshfs"))
    monkeypatch.setattr(fs, "_MOUNTINFO", table)
    assert not fs.on_local_filesystem("/mnt/my disk/peers")  # FUSE may stall: not local
    assert fs.on_local_filesystem("/mnt/my")


def test_an_unreadable_mount_table_means_not_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs, "_MOUNTINFO", str(tmp_path / "missing"))
    assert not fs.on_local_filesystem("/tmp")


class Judge:
    """A file-judging double that records which thread each call ran on."""

    def __init__(self, local: bool | None) -> None:
        self.local = local
        self.threads: list[bool] = []  # True: the call ran on the event loop's thread
        self.loop_thread = threading.get_ident()
        self.probes = 0

    def check(self, path: str) -> str:
        self.threads.append(threading.get_ident() == self.loop_thread)
        return path


class LocalityJudge(Judge):
    def on_local_filesystem(self, path: str) -> bool:
        self.probes += 1
        return bool(self.local)


@pytest.mark.anyio
@pytest.mark.parametrize(("local", "inline"), [(True, True), (False, False)])
async def test_offload_asks_once_then_runs_inline_only_where_local(
    local: bool, inline: bool
) -> None:
    judge = LocalityJudge(local)
    runner = Offload(judge, "/some/dir")
    assert runner.inline is None
    for _ in range(3):
        assert await runner.run(judge.check, "/some/dir/x") == "/some/dir/x"
    assert judge.probes == 1
    assert runner.inline is inline
    assert judge.threads == [inline] * 3


@pytest.mark.anyio
async def test_a_judge_that_cannot_say_always_gets_a_worker_thread() -> None:
    judge = Judge(None)
    runner = Offload(judge, "/some/dir")
    assert runner.inline is False
    await runner.run(judge.check, "/some/dir/x")
    assert judge.threads == [False]


@linux_only
def test_a_mount_table_out_of_reach_for_lack_of_descriptors_raises_instead_of_guessing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_descriptors(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr("builtins.open", no_descriptors)
    with pytest.raises(OSError, match="Too many open files"):
        fs.on_local_filesystem("/tmp")


class ShortJudge(LocalityJudge):
    """Cannot read the mount table the first time: the process is out of descriptors."""

    def on_local_filesystem(self, path: str) -> bool:
        self.probes += 1
        if self.probes == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return True


@pytest.mark.anyio
async def test_offload_asks_again_after_a_shortage_instead_of_keeping_not_local() -> None:
    judge = ShortJudge(True)
    runner = Offload(judge, "/some/dir")
    await runner.run(judge.check, "/some/dir/x")  # could not tell: a worker thread, no verdict
    assert runner.inline is None
    await runner.run(judge.check, "/some/dir/x")
    await runner.run(judge.check, "/some/dir/x")
    assert judge.probes == 2
    assert runner.inline is True
    assert judge.threads == [False, True, True]
