"""File judgement on real files, real modes and real owners (spec §1.2, spec §1.4, spec §1.5,
spec §2).

Tests run as root on CI, and root ignores permission bits when opening, so these tests check the
module's *judgement* of modes and owners, not kernel enforcement. Tests that chown to a foreign uid
need root and are skipped otherwise; each such rule is also tested without root through the
``uid=`` override.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.io.discovery import NameWindow
from pi_cross_session._internal.protocol.limits import (
    MAX_LISTED_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
    REGISTRATION_READ_ATTEMPTS,
)
from pi_cross_session._internal.protocol.paths import instance_id_from_filename
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.fs import (
    DirState,
    FileOperationError,
    Reason,
    UnsafePathError,
    ensure_private_dir,
    inspect_private_dir,
    list_registration_names,
    make_socket_private,
    pid_is_dead,
    read_registration_bytes,
    remove_file,
    vet_socket,
    write_registration,
)

FOREIGN_UID = 12345
ID_A = "a" * 32
ID_B = "0123456789abcdef" * 2

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root"
)


def mode_of(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def make_file(path: Path, data: bytes = b"{}", mode: int = 0o600) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A dir with a short path, so AF_UNIX socket paths stay far below the 104/108-byte limit."""
    path = tempfile.mkdtemp(dir="/tmp", prefix="xs-")
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def bind_socket(short_dir: Path) -> Iterator[Callable[[str], Path]]:
    """Bind and listen on a real AF_UNIX socket in ``short_dir``; closed at teardown."""
    opened: list[socket.socket] = []

    def bind(name: str = "s.sock") -> Path:
        path = short_dir / name
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        opened.append(sock)
        sock.bind(str(path))
        sock.listen(1)
        return path

    yield bind
    for sock in opened:
        sock.close()


# -- the error types -------------------------------------------------------------------------------


def test_errors_are_coded_cross_session_errors(tmp_path: Path) -> None:
    target = tmp_path / "x"
    target.symlink_to(tmp_path)
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(target))
    assert isinstance(refused.value, CrossSessionError)
    assert refused.value.code == Code.UNSAFE_ENDPOINT
    assert refused.value.reason is Reason.SYMLINK
    assert refused.value.path == str(target)
    assert str(target) in str(refused.value)

    with pytest.raises(FileOperationError) as failed:
        read_registration_bytes(str(tmp_path / "missing.json"))
    assert isinstance(failed.value, CrossSessionError)
    assert failed.value.code == "ENOENT"
    assert failed.value.operation
    assert isinstance(failed.value.__cause__, FileNotFoundError)
    assert "missing.json" in str(failed.value)


# -- ensure_private_dir ----------------------------------------------------------------------------


def test_missing_dir_is_created_0700_with_its_parents(tmp_path: Path) -> None:
    leaf = tmp_path / "agent" / "deeper" / "peers"
    with umask(0o022):
        ensure_private_dir(str(leaf))
    assert leaf.is_dir()
    assert mode_of(leaf) == 0o700
    assert mode_of(leaf.parent) == 0o700


def test_created_dir_is_0700_even_under_a_umask_that_strips_owner_bits(tmp_path: Path) -> None:
    leaf = tmp_path / "peers"
    with umask(0o277):
        ensure_private_dir(str(leaf))
    assert mode_of(leaf) == 0o700


def test_a_trailing_slash_is_accepted(tmp_path: Path) -> None:
    ensure_private_dir(f"{tmp_path}/a/b/")
    assert mode_of(tmp_path / "a" / "b") == 0o700


@pytest.mark.parametrize("loose", [0o755, 0o777, 0o701, 0o710, 0o750, 0o500])
def test_existing_dir_with_another_mode_is_repaired_to_0700(tmp_path: Path, loose: int) -> None:
    leaf = tmp_path / "peers"
    leaf.mkdir()
    (leaf / "keep.json").write_bytes(b"x")
    os.chmod(leaf, loose)
    ensure_private_dir(str(leaf))
    assert mode_of(leaf) == 0o700
    assert (leaf / "keep.json").read_bytes() == b"x"


def test_a_good_dir_is_left_alone_and_the_call_is_idempotent(tmp_path: Path) -> None:
    leaf = tmp_path / "peers"
    ensure_private_dir(str(leaf))
    inode = os.lstat(leaf).st_ino
    ensure_private_dir(str(leaf))
    assert os.lstat(leaf).st_ino == inode
    assert mode_of(leaf) == 0o700


def test_a_symlink_to_a_good_dir_is_refused_and_the_target_untouched(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    os.chmod(real, 0o755)
    link = tmp_path / "peers"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(link))
    assert refused.value.reason is Reason.SYMLINK
    assert mode_of(real) == 0o755


def test_a_dangling_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    link = tmp_path / "peers"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(link))
    assert refused.value.reason is Reason.SYMLINK
    assert not (tmp_path / "nowhere").exists()


def test_a_file_at_the_path_is_refused(tmp_path: Path) -> None:
    path = make_file(tmp_path / "peers")
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(path))
    assert refused.value.reason is Reason.NOT_DIRECTORY


@needs_root
def test_a_dir_owned_by_another_uid_is_refused_and_not_repaired(tmp_path: Path) -> None:
    leaf = tmp_path / "peers"
    leaf.mkdir()
    os.chmod(leaf, 0o755)
    os.chown(leaf, FOREIGN_UID, -1)
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf))
    assert refused.value.reason is Reason.FOREIGN_OWNER
    assert str(FOREIGN_UID) in str(refused.value)
    assert mode_of(leaf) == 0o755


def test_the_expected_owner_can_be_overridden(tmp_path: Path) -> None:
    leaf = tmp_path / "peers"
    leaf.mkdir()
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf), uid=os.getuid() + 1)
    assert refused.value.reason is Reason.FOREIGN_OWNER


# -- a private dir someone else made: what the refusal says ------------------------------------


@needs_root
def test_a_squatted_dir_names_its_owner_and_what_to_do(tmp_path: Path) -> None:
    leaf = tmp_path / "pi-peers-0-0123456789ab"
    leaf.mkdir(mode=0o700)
    os.chown(leaf, 65534, -1)  # "nobody" on most systems, a name or not
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf))
    message = str(refused.value)
    assert str(leaf) in message
    assert f"owned by {fs.describe_uid(65534)}, not by you (uid {os.getuid()})" in message
    assert "another user created it first" in message
    assert "PI_CODING_AGENT_DIR" in message
    assert "administrator" in message
    assert refused.value.remedy in message
    assert os.listdir(leaf) == []


def test_a_dir_of_another_uid_is_described_without_root(tmp_path: Path) -> None:
    """The same refusal through the ``uid=`` seam: our own dir is another user's to anyone else."""
    leaf = tmp_path / "peers"
    leaf.mkdir(mode=0o700)
    stranger = os.getuid() + 1
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf), uid=stranger)
    assert refused.value.reason is Reason.FOREIGN_OWNER
    assert refused.value.detail == (
        f"owned by {fs.describe_uid(os.getuid())}, not by you (uid {stranger}): another user "
        "created it first"
    )
    assert "Use another agent dir (set PI_CODING_AGENT_DIR" in refused.value.remedy


def test_a_symlinked_dir_names_its_target(tmp_path: Path) -> None:
    link = tmp_path / "peers"
    link.symlink_to(tmp_path / "elsewhere\x1b[2J")
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(link))
    detail = refused.value.detail
    assert detail.startswith(f"it is a symbolic link to '{tmp_path}/elsewhere")
    assert "\x1b" not in detail  # the target is someone's text: escaped for display
    assert "\\x1b[2J" in detail
    assert "Move it aside" in refused.value.remedy


def test_a_file_in_place_of_the_dir_says_what_it_is(tmp_path: Path) -> None:
    path = make_file(tmp_path / "peers")
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(path))
    assert refused.value.detail == "it is not a directory but a regular file"


@pytest.mark.parametrize(
    ("prepare", "state"),
    [
        pytest.param(lambda p: None, DirState.MISSING, id="missing"),
        pytest.param(lambda p: p.mkdir(mode=0o700), DirState.PRIVATE, id="private"),
        pytest.param(lambda p: (p.mkdir(), os.chmod(p, 0o751)), DirState.LOOSE_MODE, id="loose"),
        pytest.param(lambda p: p.symlink_to("/"), DirState.UNUSABLE, id="symlink"),
        pytest.param(lambda p: make_file(p), DirState.UNUSABLE, id="file"),
    ],
)
def test_inspecting_a_dir_judges_it_and_changes_nothing(
    tmp_path: Path, prepare: Callable[[Path], object], state: DirState
) -> None:
    path = tmp_path / "peers"
    prepare(path)
    before = os.lstat(path) if os.path.lexists(path) else None
    found = inspect_private_dir(str(path))
    assert found.state is state
    if before is None:
        assert not os.path.lexists(path)
    else:
        after = os.lstat(path)
        assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    if state is DirState.LOOSE_MODE:
        assert found.detail == "mode 0751 instead of 0700"
    if state is DirState.UNUSABLE:
        assert found.remedy


def test_inspecting_a_dir_of_another_uid_gives_the_start_up_refusal(tmp_path: Path) -> None:
    leaf = tmp_path / "peers"
    leaf.mkdir(mode=0o700)
    found = inspect_private_dir(str(leaf), uid=os.getuid() + 1)
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf), uid=os.getuid() + 1)
    assert (found.state, found.detail, found.remedy) == (
        DirState.UNUSABLE,
        refused.value.detail,
        refused.value.remedy,
    )


def test_a_parent_that_is_a_file_is_an_os_failure(tmp_path: Path) -> None:
    make_file(tmp_path / "file")
    with pytest.raises(FileOperationError) as failed:
        ensure_private_dir(str(tmp_path / "file" / "peers"))
    assert failed.value.code == "ENOTDIR"


def test_a_dir_swapped_before_its_repair_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaf = tmp_path / "peers"
    leaf.mkdir()
    os.chmod(leaf, 0o755)
    real_open = fs._open

    def swap_then_open(path: str, flags: int, mode: int) -> int:
        os.rename(leaf, tmp_path / "judged")
        (tmp_path / "impostor").mkdir()
        os.rename(tmp_path / "impostor", leaf)
        os.chmod(leaf, 0o755)
        return real_open(path, flags, mode)

    monkeypatch.setattr(fs, "_open", swap_then_open)
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf))
    assert refused.value.reason is Reason.REPLACED
    assert mode_of(leaf) == 0o755


def test_a_dir_swapped_for_a_symlink_before_its_repair_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaf = tmp_path / "peers"
    leaf.mkdir()
    os.chmod(leaf, 0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chmod(elsewhere, 0o755)
    real_open = fs._open

    def swap_then_open(path: str, flags: int, mode: int) -> int:
        leaf.rmdir()
        leaf.symlink_to(elsewhere)
        return real_open(path, flags, mode)

    monkeypatch.setattr(fs, "_open", swap_then_open)
    with pytest.raises(UnsafePathError) as refused:
        ensure_private_dir(str(leaf))
    assert refused.value.reason is Reason.REPLACED
    assert mode_of(elsewhere) == 0o755


# -- list_registration_names ----------------------------------------------------------------------


def test_a_missing_peers_dir_lists_nothing(tmp_path: Path) -> None:
    assert list_registration_names(str(tmp_path / "missing")) == NameWindow([], 0)


def test_a_peers_path_that_is_a_file_is_an_os_failure(tmp_path: Path) -> None:
    path = make_file(tmp_path / "peers")
    with pytest.raises(FileOperationError) as failed:
        list_registration_names(str(path))
    assert failed.value.code == "ENOTDIR"


def test_only_regular_files_named_like_registrations_are_listed(tmp_path: Path) -> None:
    valid = {f"{ID_A}.json", f"{ID_B}.json", f"{'f' * 32}.json"}
    for name in valid:
        make_file(tmp_path / name)
    junk_files = [
        f"{ID_A.upper()}.json",  # uppercase hex
        f"{'A' * 31}b.json",
        f"{'a' * 31}.json",  # 31 chars
        f"{'a' * 33}.json",  # 33 chars
        f"{'g' * 32}.json",  # not hex
        f".{ID_A}.0b7e3c1a-1111-4222-8333-944445555666.tmp",  # a writer's temp file
        f"{ID_A}.json.tmp",
        f".{ID_A}.json",  # dotfile
        f"{ID_A}.JSON",
        f"{ID_A}.json ",
        f"{ID_A}.json\n",  # ``$`` would match before this newline; fullmatch does not
        f"{ID_A}json",
        f"x{ID_A}.json",
        "peers.json",
    ]
    for name in junk_files:
        make_file(tmp_path / name)
    real = make_file(tmp_path / "target")
    (tmp_path / f"{'b' * 32}.json").symlink_to(real)  # symlink named like a registration
    (tmp_path / f"{'c' * 32}.json").symlink_to(tmp_path / "dangling")
    (tmp_path / f"{'d' * 32}.json").mkdir()  # subdirectory named like a registration
    os.mkfifo(tmp_path / f"{'e' * 32}.json")  # FIFO named like a registration

    window = list_registration_names(str(tmp_path))
    assert set(window.names) == valid
    assert window.unread == 0


def test_the_listing_stops_at_the_limit(tmp_path: Path) -> None:
    created = {f"{index:032x}.json" for index in range(600)}
    for name in created:
        (tmp_path / name).touch()
    listed, unread = list_registration_names(str(tmp_path))
    assert len(listed) == MAX_LISTED_REGISTRATIONS == 512
    assert len(set(listed)) == 512
    assert set(listed) <= created
    assert unread == 600 - 512


@pytest.mark.parametrize("limit", [0, 1, 4, 5, 6])
def test_the_limit_is_overridable(tmp_path: Path, limit: int) -> None:
    for index in range(5):
        (tmp_path / f"{index:032x}.json").touch()
    listed, unread = list_registration_names(str(tmp_path), limit=limit)
    assert len(listed) == min(limit, 5)
    assert unread == 5 - len(listed)


def test_a_negative_limit_is_a_bug(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="limit"):
        list_registration_names(str(tmp_path), limit=-1)


def test_names_past_the_limit_are_counted_never_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pass over the dir: the first ``limit`` names are kept, the rest only counted (the
    junk a dir holds costs the same pass), and no file is opened."""
    for index in range(600):
        (tmp_path / f"{index:032x}.json").touch()
    for index in range(7):
        (tmp_path / f"junk-{index}").touch()
    opened: list[str] = []
    real_open = fs._open

    def recording_open(path: str, flags: int, mode: int) -> int:
        opened.append(path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(fs, "_open", recording_open)
    listed, unread = list_registration_names(str(tmp_path), limit=10)
    assert (len(listed), unread) == (10, 590)
    assert opened == []


def test_ten_thousand_junk_files_do_not_hide_the_real_ones(tmp_path: Path) -> None:
    # Speed is measured under bench/, not asserted here; this proves the listing copes at all.
    for index in range(10_000):
        (tmp_path / f"junk-{index}").touch()
    for index in range(3):
        (tmp_path / f"{index:032x}.json").touch()
    assert list_registration_names(str(tmp_path)).unread == 0
    assert len(list_registration_names(str(tmp_path)).names) == 3


# -- read_registration_bytes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"version":2}', id="a-good-registration"),
        pytest.param(b"", id="an-empty-file"),
    ],
)
def test_a_registration_of_ours_is_read_as_it_is(tmp_path: Path, content: bytes) -> None:
    """A good registration is read; an empty file reads as no bytes (what they mean is the
    parser's business)."""
    path = make_file(tmp_path / f"{ID_A}.json", content)
    assert read_registration_bytes(str(path)) == content


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_owner_only_modes_are_accepted(tmp_path: Path, mode: int) -> None:
    path = make_file(tmp_path / f"{ID_A}.json", b"{}", mode)
    assert read_registration_bytes(str(path)) == b"{}"


@pytest.mark.parametrize(
    ("size", "accepted"),
    [
        (MAX_REGISTRATION_BYTES - 1, True),
        (MAX_REGISTRATION_BYTES, True),
        (MAX_REGISTRATION_BYTES + 1, False),
    ],
)
def test_the_size_limit(tmp_path: Path, size: int, accepted: bool) -> None:
    assert MAX_REGISTRATION_BYTES == 65_536
    path = make_file(tmp_path / f"{ID_A}.json", b"x" * size)
    if accepted:
        assert len(read_registration_bytes(str(path))) == size
    else:
        with pytest.raises(UnsafePathError) as refused:
            read_registration_bytes(str(path))
        assert refused.value.reason is Reason.TOO_LARGE


@pytest.mark.parametrize(("size", "accepted"), [(9, True), (10, True), (11, False)])
def test_the_size_limit_is_overridable(tmp_path: Path, size: int, accepted: bool) -> None:
    path = make_file(tmp_path / f"{ID_A}.json", b"x" * size)
    if accepted:
        assert read_registration_bytes(str(path), max_bytes=10) == b"x" * size
    else:
        with pytest.raises(UnsafePathError):
            read_registration_bytes(str(path), max_bytes=10)


def test_a_negative_size_limit_is_a_bug(tmp_path: Path) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    with pytest.raises(ValueError, match="max_bytes"):
        read_registration_bytes(str(path), max_bytes=-1)


@pytest.mark.parametrize(("size", "refused"), [(9, False), (10, False), (11, True), (100, True)])
def test_the_read_loop_never_takes_more_than_one_byte_over(size: int, refused: bool) -> None:
    # The bound is checked where bytes accumulate, whatever fstat said: a pipe has no size.
    reader, writer = os.pipe()
    try:
        os.write(writer, b"y" * size)
        os.close(writer)
        writer = -1
        if refused:
            with pytest.raises(UnsafePathError) as refusal:
                fs._read_at_most(reader, "pipe", 10)
            assert refusal.value.reason is Reason.TOO_LARGE
            assert len(os.read(reader, 1000)) == size - 11  # it stopped after 11 bytes
        else:
            assert fs._read_at_most(reader, "pipe", 10) == b"y" * size
    finally:
        os.close(reader)
        if writer != -1:
            os.close(writer)


def test_a_symlink_to_a_good_registration_is_refused(tmp_path: Path) -> None:
    real = make_file(tmp_path / "real.json")
    link = tmp_path / f"{ID_A}.json"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(link))
    assert refused.value.reason is Reason.SYMLINK


@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / f"{ID_A}.json"
    os.mkfifo(path, 0o600)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.NOT_REGULAR


def test_a_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / f"{ID_A}.json"
    path.mkdir(mode=0o700)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.NOT_REGULAR


def test_a_socket_is_refused(bind_socket: Callable[[str], Path]) -> None:
    path = bind_socket(f"{ID_A}.json")
    os.chmod(path, 0o600)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.NOT_REGULAR


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o606, 0o644, 0o610, 0o601, 0o620, 0o602])
def test_any_group_or_other_bit_is_refused_and_not_repaired(tmp_path: Path, mode: int) -> None:
    path = make_file(tmp_path / f"{ID_A}.json", b"{}", mode)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.LOOSE_MODE
    assert f"{mode:04o}" in str(refused.value)
    assert mode_of(path) == mode


@needs_root
def test_a_registration_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    os.chown(path, FOREIGN_UID, -1)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.FOREIGN_OWNER


def test_the_expected_owner_of_a_registration_can_be_overridden(tmp_path: Path) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path), uid=os.getuid() + 1)
    assert refused.value.reason is Reason.FOREIGN_OWNER


def _swap_before_open(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> None:
    real_open = fs._open

    def swap_then_open(path: str, flags: int, mode: int) -> int:
        swap()
        return real_open(path, flags, mode)

    monkeypatch.setattr(fs, "_open", swap_then_open)


def test_a_file_replaced_once_between_check_and_open_is_judged_again_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a session's heartbeat does to its registration (an atomic rename) while another
    # session lists: the reader runs its checks again on the new file instead of refusing it.
    path = make_file(tmp_path / f"{ID_A}.json", b"checked")
    other = make_file(tmp_path / "other", b"rewritten")
    swaps = iter([lambda: os.replace(other, path)])
    _swap_before_open(monkeypatch, lambda: next(swaps, lambda: None)())
    assert read_registration_bytes(str(path)) == b"rewritten"


def test_a_file_replaced_on_every_attempt_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_file(tmp_path / f"{ID_A}.json", b"checked")
    rounds = 0

    def replace_again() -> None:
        nonlocal rounds
        rounds += 1
        make_file(tmp_path / "next", f"swapped in {rounds}".encode())
        os.replace(tmp_path / "next", path)

    _swap_before_open(monkeypatch, replace_again)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.REPLACED
    assert rounds == REGISTRATION_READ_ATTEMPTS
    assert "swapped in" not in str(refused.value)


def test_a_file_swapped_for_a_symlink_before_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    target = make_file(tmp_path / "target", b"secret")

    def swap() -> None:
        path.unlink()
        path.symlink_to(target)

    _swap_before_open(monkeypatch, swap)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.SYMLINK


@pytest.mark.timeout(10)
def test_a_file_swapped_for_a_fifo_before_open_does_not_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")

    def swap() -> None:
        path.unlink()
        os.mkfifo(path, 0o600)

    _swap_before_open(monkeypatch, swap)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.NOT_REGULAR


def test_a_file_that_vanished_before_open_is_an_os_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    _swap_before_open(monkeypatch, path.unlink)
    with pytest.raises(FileOperationError) as failed:
        read_registration_bytes(str(path))
    assert failed.value.code == "ENOENT"


def test_a_mode_loosened_between_check_and_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    _swap_before_open(monkeypatch, lambda: os.chmod(path, 0o644))
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path))
    assert refused.value.reason is Reason.LOOSE_MODE


def test_a_file_grown_between_check_and_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_file(tmp_path / f"{ID_A}.json", b"x" * 10)

    def grow() -> None:
        with path.open("ab") as handle:
            handle.write(b"x" * 10)

    _swap_before_open(monkeypatch, grow)
    with pytest.raises(UnsafePathError) as refused:
        read_registration_bytes(str(path), max_bytes=15)
    assert refused.value.reason is Reason.TOO_LARGE


# -- write_registration ----------------------------------------------------------------------------


class Fence:
    """A scripted ``still_current``: answers in order, records how often it was asked."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.answers.pop(0)


@pytest.fixture
def peers(tmp_path: Path) -> Path:
    path = tmp_path / "peers"
    ensure_private_dir(str(path))
    return path


def test_a_write_publishes_the_bytes_at_0600_and_leaves_no_temp(peers: Path) -> None:
    fence = Fence(True, True)
    assert write_registration(str(peers), ID_A, b'{"v":1}', still_current=fence) is True
    assert fence.calls == 2
    assert os.listdir(peers) == [f"{ID_A}.json"]
    final = peers / f"{ID_A}.json"
    assert final.read_bytes() == b'{"v":1}'
    assert mode_of(final) == 0o600
    assert read_registration_bytes(str(final)) == b'{"v":1}'


def test_a_write_replaces_a_stale_loose_file_and_ends_0600(peers: Path) -> None:
    final = make_file(peers / f"{ID_A}.json", b"old", 0o644)
    assert write_registration(str(peers), ID_A, b"new", still_current=Fence(True, True))
    assert final.read_bytes() == b"new"
    assert mode_of(final) == 0o600
    assert os.listdir(peers) == [f"{ID_A}.json"]


def test_a_write_ends_0600_whatever_the_umask(peers: Path) -> None:
    with umask(0o277):
        assert write_registration(str(peers), ID_A, b"x", still_current=Fence(True, True))
    assert mode_of(peers / f"{ID_A}.json") == 0o600


def test_a_large_write_is_complete(peers: Path) -> None:
    data = os.urandom(3 * 1024 * 1024)
    assert write_registration(str(peers), ID_A, data, still_current=Fence(True, True))
    assert (peers / f"{ID_A}.json").read_bytes() == data


def test_partial_writes_are_continued(peers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = fs._write
    monkeypatch.setattr(fs, "_write", lambda fd, data: real_write(fd, data[:7]))
    data = bytes(range(256)) * 3
    assert write_registration(str(peers), ID_A, data, still_current=Fence(True, True))
    assert (peers / f"{ID_A}.json").read_bytes() == data


def test_the_temp_file_is_a_hidden_exclusive_sibling(
    peers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int, int]] = []
    real_open = fs._open

    def spy(path: str, flags: int, mode: int) -> int:
        seen.append((path, flags, mode))
        return real_open(path, flags, mode)

    monkeypatch.setattr(fs, "_open", spy)
    assert write_registration(str(peers), ID_A, b"x", still_current=Fence(True, True))
    [(temp, flags, mode)] = seen
    assert os.path.dirname(temp) == str(peers)
    prefix, nonce, suffix = os.path.basename(temp).rsplit(".", 2)
    assert (prefix, suffix) == (f".{ID_A}", "tmp")
    assert str(uuid.UUID(nonce)) == nonce
    assert uuid.UUID(nonce).version == 4
    assert instance_id_from_filename(os.path.basename(temp)) is None  # never listed
    for flag in (os.O_CREAT, os.O_EXCL, os.O_WRONLY, os.O_NOFOLLOW, os.O_CLOEXEC):
        assert flags & flag
    assert mode == 0o600


def test_a_fence_that_says_no_first_writes_nothing(peers: Path) -> None:
    old = make_file(peers / f"{ID_A}.json", b"old")
    fence = Fence(False)
    assert write_registration(str(peers), ID_A, b"new", still_current=fence) is False
    assert fence.calls == 1
    assert old.read_bytes() == b"old"
    assert os.listdir(peers) == [f"{ID_A}.json"]


def test_a_fence_that_says_no_before_the_rename_renames_nothing(peers: Path) -> None:
    old = make_file(peers / f"{ID_A}.json", b"old")
    inode = os.lstat(old).st_ino
    fence = Fence(True, False)
    assert write_registration(str(peers), ID_A, b"new", still_current=fence) is False
    assert fence.calls == 2
    assert old.read_bytes() == b"old"
    assert os.lstat(old).st_ino == inode
    assert os.listdir(peers) == [f"{ID_A}.json"]


def test_a_fence_that_says_no_before_the_rename_creates_nothing(peers: Path) -> None:
    assert write_registration(str(peers), ID_A, b"new", still_current=Fence(True, False)) is False
    assert os.listdir(peers) == []


def test_a_fence_that_raises_propagates_and_leaves_no_temp(peers: Path) -> None:
    calls = 0

    def fence() -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("session getter failed")
        return True

    with pytest.raises(RuntimeError, match="getter"):
        write_registration(str(peers), ID_A, b"x", still_current=fence)
    assert os.listdir(peers) == []


@pytest.mark.parametrize("bad_id", ["", "A" * 32, "a" * 31, "../" + "a" * 29, f"{ID_A}/x"])
def test_an_invalid_instance_id_is_a_bug(peers: Path, bad_id: str) -> None:
    fence = Fence(True, True)
    with pytest.raises(ValueError, match="instance id"):
        write_registration(str(peers), bad_id, b"x", still_current=fence)
    assert fence.calls == 0
    assert os.listdir(peers) == []


def test_a_missing_peers_dir_fails_with_a_code(tmp_path: Path) -> None:
    with pytest.raises(FileOperationError) as failed:
        write_registration(str(tmp_path / "missing"), ID_A, b"x", still_current=Fence(True, True))
    assert failed.value.code == "ENOENT"
    assert not (tmp_path / "missing").exists()


def test_a_refused_create_fails_with_a_code(peers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str, flags: int, mode: int) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(fs, "_open", refuse)
    with pytest.raises(FileOperationError) as failed:
        write_registration(str(peers), ID_A, b"x", still_current=Fence(True, True))
    assert failed.value.code == "EACCES"
    assert os.listdir(peers) == []


@pytest.mark.parametrize("after_bytes", [0, 5])
def test_a_full_disk_fails_with_a_code_and_removes_the_temp(
    peers: Path, monkeypatch: pytest.MonkeyPatch, after_bytes: int
) -> None:
    old = make_file(peers / f"{ID_A}.json", b"old")
    real_write = fs._write
    written = 0

    def fill_up(fd: int, data: memoryview) -> int:
        nonlocal written
        if written >= after_bytes:
            raise OSError(errno.ENOSPC, "No space left on device")
        count = real_write(fd, data[: after_bytes - written])
        written += count
        return count

    monkeypatch.setattr(fs, "_write", fill_up)
    fence = Fence(True, True)
    with pytest.raises(FileOperationError) as failed:
        write_registration(str(peers), ID_A, b"0123456789", still_current=fence)
    assert failed.value.code == "ENOSPC"
    assert fence.calls == 1
    assert old.read_bytes() == b"old"
    assert os.listdir(peers) == [f"{ID_A}.json"]


def test_a_write_that_makes_no_progress_fails_instead_of_spinning(
    peers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs, "_write", lambda fd, data: 0)
    with pytest.raises(FileOperationError) as failed:
        write_registration(str(peers), ID_A, b"x", still_current=Fence(True, True))
    assert failed.value.code == "EIO"
    assert os.listdir(peers) == []


def test_a_failed_mode_change_fails_with_a_code_and_removes_the_temp(
    peers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(fd: int, mode: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refuse)
    with pytest.raises(FileOperationError) as failed:
        write_registration(str(peers), ID_A, b"x", still_current=Fence(True, True))
    assert failed.value.code == "EPERM"
    assert os.listdir(peers) == []


def test_a_failed_rename_fails_with_a_code_and_removes_the_temp(peers: Path) -> None:
    # A non-empty dir squatting on the final name makes the rename fail for real.
    squatter = peers / f"{ID_A}.json"
    squatter.mkdir()
    (squatter / "inside").touch()
    fence = Fence(True, True)
    with pytest.raises(FileOperationError) as failed:
        write_registration(str(peers), ID_A, b"x", still_current=fence)
    assert failed.value.code in {"EISDIR", "ENOTEMPTY", "EEXIST"}
    assert fence.calls == 2
    assert os.listdir(peers) == [f"{ID_A}.json"]
    assert os.listdir(squatter) == ["inside"]


def test_a_temp_that_cannot_be_removed_is_logged_not_raised(
    peers: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(path: str) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(os, "unlink", refuse)
    with caplog.at_level("WARNING", logger=fs.__name__):
        assert not write_registration(str(peers), ID_A, b"x", still_current=Fence(True, False))
    monkeypatch.undo()
    [left] = os.listdir(peers)
    assert left.startswith(f".{ID_A}.")
    assert left in caplog.text


def test_other_registrations_are_untouched_by_a_write(peers: Path) -> None:
    other = make_file(peers / f"{ID_B}.json", b"other")
    assert write_registration(str(peers), ID_A, b"mine", still_current=Fence(True, True))
    assert other.read_bytes() == b"other"
    assert sorted(os.listdir(peers)) == sorted([f"{ID_A}.json", f"{ID_B}.json"])


# -- remove_file -----------------------------------------------------------------------------------


def test_remove_file_removes_a_file_and_tolerates_a_missing_one(tmp_path: Path) -> None:
    path = make_file(tmp_path / f"{ID_A}.json")
    remove_file(str(path))
    assert not path.exists()
    remove_file(str(path))
    remove_file(str(tmp_path / "never" / "existed"))


def test_remove_file_removes_a_symlink_not_its_target(tmp_path: Path) -> None:
    target = make_file(tmp_path / "target")
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_file(str(link))
    assert not link.is_symlink()
    assert target.exists()


def test_remove_file_removes_a_stale_socket(bind_socket: Callable[[str], Path]) -> None:
    path = bind_socket("s.sock")
    remove_file(str(path))
    assert not os.path.lexists(path)


def test_remove_file_refuses_a_directory_with_a_code(tmp_path: Path) -> None:
    path = tmp_path / "dir"
    path.mkdir()
    with pytest.raises(FileOperationError) as failed:
        remove_file(str(path))
    assert failed.value.code in {"EISDIR", "EPERM"}
    assert path.is_dir()


# -- vet_socket and make_socket_private ------------------------------------------------------------


@pytest.mark.parametrize(
    "mode", [pytest.param(0o600, id="private"), pytest.param(0o700, id="owner-only-with-execute")]
)
def test_a_socket_of_ours_open_to_its_owner_only_is_safe(
    bind_socket: Callable[[str], Path], mode: int
) -> None:
    path = bind_socket("s.sock")
    os.chmod(path, mode)
    assert vet_socket(str(path)) is None


@pytest.mark.parametrize("mode", [0o666, 0o660, 0o606, 0o640, 0o604, 0o610, 0o601])
def test_a_socket_open_to_others_is_unsafe(bind_socket: Callable[[str], Path], mode: int) -> None:
    path = bind_socket("s.sock")
    os.chmod(path, mode)
    assert vet_socket(str(path)) == Code.UNSAFE_ENDPOINT
    assert Code.UNSAFE_ENDPOINT.value == "unsafe_endpoint"


def test_a_regular_file_is_an_unsafe_endpoint(short_dir: Path) -> None:
    path = make_file(short_dir / "s.sock")
    assert vet_socket(str(path)) == "unsafe_endpoint"


def test_a_directory_is_an_unsafe_endpoint(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    path.mkdir(mode=0o700)
    assert vet_socket(str(path)) == "unsafe_endpoint"


def test_a_symlink_to_a_good_socket_is_unsafe(
    bind_socket: Callable[[str], Path], short_dir: Path
) -> None:
    good = bind_socket("good.sock")
    os.chmod(good, 0o600)
    link = short_dir / "s.sock"
    link.symlink_to(good)
    assert vet_socket(str(good)) is None
    assert vet_socket(str(link)) == "unsafe_endpoint"


def test_a_missing_socket_gives_the_errno_name(short_dir: Path) -> None:
    assert vet_socket(str(short_dir / "gone.sock")) == "ENOENT"


def test_a_socket_under_a_file_gives_the_errno_name(short_dir: Path) -> None:
    make_file(short_dir / "file")
    assert vet_socket(str(short_dir / "file" / "s.sock")) == "ENOTDIR"


def test_an_impossible_path_is_unsafe_without_raising() -> None:
    assert vet_socket("/tmp/x\0y.sock") == "unsafe_endpoint"


def test_an_errorless_os_failure_is_a_missing_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    real_lstat = os.lstat

    def fail(path: str, *args: Any, **kwargs: Any) -> os.stat_result:
        # Only the path under test fails: on Python 3.13 the fixtures' clean-up calls lstat too.
        if path == "/anything":
            raise OSError("no errno at all")
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", fail)
    assert vet_socket("/anything") == "missing_endpoint"


@needs_root
def test_a_socket_owned_by_another_uid_is_unsafe(bind_socket: Callable[[str], Path]) -> None:
    path = bind_socket("s.sock")
    os.chmod(path, 0o600)
    os.chown(path, FOREIGN_UID, -1)
    assert vet_socket(str(path)) == "unsafe_endpoint"


def test_the_expected_socket_owner_can_be_overridden(bind_socket: Callable[[str], Path]) -> None:
    path = bind_socket("s.sock")
    os.chmod(path, 0o600)
    assert vet_socket(str(path), uid=os.getuid() + 1) == "unsafe_endpoint"


def test_make_socket_private_fixes_the_umask_mode(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with umask(0o022):
            sock.bind(str(path))
        sock.listen(1)
        assert mode_of(path) == 0o755
        assert vet_socket(str(path)) == "unsafe_endpoint"
        make_socket_private(str(path))
        assert mode_of(path) == 0o600
        assert vet_socket(str(path)) is None
    finally:
        sock.close()


def test_make_socket_private_refuses_a_symlink_and_leaves_its_target(
    bind_socket: Callable[[str], Path], short_dir: Path
) -> None:
    good = bind_socket("good.sock")
    os.chmod(good, 0o666)
    link = short_dir / "s.sock"
    link.symlink_to(good)
    with pytest.raises(UnsafePathError) as refused:
        make_socket_private(str(link))
    assert refused.value.reason is Reason.SYMLINK
    assert mode_of(good) == 0o666


def test_make_socket_private_refuses_a_regular_file(short_dir: Path) -> None:
    path = make_file(short_dir / "s.sock", mode=0o644)
    with pytest.raises(UnsafePathError) as refused:
        make_socket_private(str(path))
    assert refused.value.reason is Reason.NOT_SOCKET
    assert mode_of(path) == 0o644


def test_make_socket_private_on_a_missing_path_fails_with_a_code(short_dir: Path) -> None:
    with pytest.raises(FileOperationError) as failed:
        make_socket_private(str(short_dir / "gone.sock"))
    assert failed.value.code == "ENOENT"


@needs_root
def test_make_socket_private_refuses_a_foreign_socket(bind_socket: Callable[[str], Path]) -> None:
    path = bind_socket("s.sock")
    os.chmod(path, 0o666)
    os.chown(path, FOREIGN_UID, -1)
    with pytest.raises(UnsafePathError) as refused:
        make_socket_private(str(path))
    assert refused.value.reason is Reason.FOREIGN_OWNER
    assert mode_of(path) == 0o666


# -- pid_is_dead -----------------------------------------------------------------------------------


def test_our_own_process_is_not_dead() -> None:
    assert pid_is_dead(os.getpid()) is False


def test_a_reaped_child_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    pid = child.pid
    child.wait()
    assert pid_is_dead(pid) is True


def test_a_true_process_reaped_is_dead() -> None:
    true = shutil.which("true")
    if true is None:
        pytest.skip("no `true` on PATH")
    child = subprocess.Popen([true])
    child.wait()
    assert pid_is_dead(child.pid) is True


@pytest.mark.parametrize("pid", [0, -1, pytest.param(-os.getpid(), id="minus-own-pid"), -(2**31)])
def test_process_group_pids_are_never_signalled(monkeypatch: pytest.MonkeyPatch, pid: int) -> None:
    def must_not_run(pid: int, signal: int) -> None:
        raise AssertionError("kill must not be called")

    monkeypatch.setattr(os, "kill", must_not_run)
    assert pid_is_dead(pid) is False


def test_a_bool_is_not_a_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "kill", lambda pid, sig: pytest.fail("kill must not be called"))
    assert pid_is_dead(True) is False


def test_a_pid_too_large_for_the_os_is_not_proven_dead() -> None:
    assert pid_is_dead(2**40) is False


@pytest.mark.parametrize(
    "error",
    [
        PermissionError(errno.EPERM, "Operation not permitted"),
        OSError(errno.EINVAL, "Invalid argument"),
        OSError("no errno"),
    ],
)
def test_only_esrch_proves_death(monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    def kill(pid: int, signal: int) -> None:
        raise error

    monkeypatch.setattr(os, "kill", kill)
    assert pid_is_dead(4242) is False


def test_esrch_proves_death(monkeypatch: pytest.MonkeyPatch) -> None:
    def kill(pid: int, signal: int) -> None:
        raise ProcessLookupError(errno.ESRCH, "No such process")

    monkeypatch.setattr(os, "kill", kill)
    assert pid_is_dead(4242) is True


# -- read_refused_registration (doctor's evidence) -------------------------------------------------


def test_a_loose_registration_can_be_read_as_evidence_only(tmp_path: Path) -> None:
    path = make_file(tmp_path / f"{ID_A}.json", b'{"pid": 42}', mode=0o644)
    with pytest.raises(UnsafePathError):
        read_registration_bytes(str(path))
    assert fs.read_refused_registration(str(path)) == b'{"pid": 42}'
    assert mode_of(path) == 0o644


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("symlink", Reason.SYMLINK), ("fifo", Reason.NOT_REGULAR), ("too-large", Reason.TOO_LARGE)],
)
def test_evidence_reading_still_refuses_what_could_follow_block_or_cost(
    tmp_path: Path, kind: str, reason: Reason
) -> None:
    path = tmp_path / f"{ID_A}.json"
    if kind == "symlink":
        path.symlink_to(make_file(tmp_path / "target", b'{"pid": 42}'))
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        make_file(path, b" " * (MAX_REGISTRATION_BYTES + 1))
    with pytest.raises(UnsafePathError) as refused:
        fs.read_refused_registration(str(path))
    expected = {
        "symlink": Reason.SYMLINK,
        "fifo": Reason.NOT_REGULAR,
        "too-large": Reason.TOO_LARGE,
    }
    assert refused.value.reason is expected[kind]
