"""The hostile catalogue, file side: attacks on every path the code touches (spec §1.2, spec §1.5,
spec §2).

The runtime dir, the peers dir, a registration file and a socket path are each replaced by a
symlink, a file of the wrong type, a too-open mode or another owner, and registrations are forged,
bloated, multiplied or swapped while they are being used. Each case checks the exact refusal and
that nothing was published, connected to, followed or admitted that should not have been.

Changing a file's owner needs root; those cases are skipped otherwise, and each owner rule is
also checked without root through the ``uid=`` argument of the file layer.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from pi_cross_session._internal.plugin.runtime import SessionRuntime
from pi_cross_session._internal.protocol.frames import Sender
from pi_cross_session._internal.protocol.io.discovery import Listing, NameWindow, list_peers
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.limits import (
    MAX_LISTED_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
)
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.fs import Reason, UnsafePathError
from tests.files import files
from tests.receiver.model import Identity
from tests.receiver.strategies import hello_obj, message_obj
from tests.receiver.talk import HELLO_ID, admitted, lines, talk
from tests.support.processes import run_cli
from tests.support.scripted_host import ScriptedHost
from tests.support.socket_peers import (
    as_sender,
    make_message,
    make_registration,
    now_ms,
    published_sender,
    running_peer,
    serving,
)
from tests.support.wire_session import Receiver, running_receiver, runtime_options

pytestmark = [pytest.mark.anyio, pytest.mark.hostile]

FOREIGN_UID: Final = 12345
IS_ROOT: Final = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="chown to another uid needs root")


def mode_of(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# Small blocking helpers: the async tests below call these rather than ``pathlib`` directly.


def write_file(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    Path(path).write_bytes(data)
    os.chmod(path, mode)


def read_file(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def empty_or_missing(path: str) -> bool:
    return not os.path.exists(path) or os.listdir(path) == []


def leaf(exc: BaseException) -> BaseException:
    """The one exception inside (possibly nested) single-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def start_failure(locations: Locations) -> BaseException:
    """Run a session that must fail to start; return why."""
    runtime = SessionRuntime(ScriptedHost(), locations=locations, options=runtime_options())
    with pytest.raises(Exception) as info:  # noqa: PT011 (the leaf is checked by the caller)
        await runtime.run()
    return leaf(info.value)


async def listing(locations: Locations, registry: Any = fs) -> Listing:
    """A listing as a session makes it, without git."""
    return await list_peers(
        locations, registry, Exchanger(locations, fs).is_live, self_instance_id=None, with_git=False
    )


def live_ids(found: Listing) -> list[str]:
    return [peer.instance_id for peer in found.peers]


@contextmanager
def removed_afterwards(path: str) -> Iterator[None]:
    """Remove whatever a test puts at ``path`` (the suite's cleanup does not unlink symlinks)."""
    try:
        yield
    finally:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)


@contextmanager
def decoy_listener(path: str) -> Iterator[socket.socket]:
    """A listening socket owned by us where nobody should ever connect."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as decoy:
        decoy.bind(path)
        os.chmod(path, 0o600)
        decoy.listen(8)
        decoy.setblocking(False)
        try:
            yield decoy
        finally:
            os.unlink(path)


def never_connected(decoy: socket.socket) -> bool:
    try:
        connection, _ = decoy.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


@asynccontextmanager
async def live_peer(locations: Locations) -> AsyncIterator[Receiver]:
    """A real receiving session whose registration the test then attacks."""
    async with running_receiver(locations) as rx:
        yield rx


def registration_path(rx: Receiver) -> str:
    return rx.locations.registration_path(rx.registration.instance_id)


def rewrite(rx: Receiver, **changes: Any) -> None:
    """Rewrite the session's own registration in place with ``changes`` (0600, ours)."""
    path = registration_path(rx)
    with open(path, encoding="utf-8") as file:
        body = json.load(file)
    body.update(changes)
    files.write_raw(rx.locations, rx.registration.instance_id, files.record_bytes(body))


# -- the runtime dir -------------------------------------------------------------------------------


async def test_runtime_dir_symlinked_to_a_private_dir_is_refused(
    locations: Locations, tmp_path: Path
) -> None:
    target = tmp_path / "attacker-dir"
    target.mkdir(mode=0o700)
    with removed_afterwards(locations.runtime_dir):
        os.symlink(target, locations.runtime_dir)
        failure = await start_failure(locations)
        assert isinstance(failure, UnsafePathError)
        assert failure.reason is Reason.SYMLINK
        assert os.listdir(target) == [], "a socket was created through the symlink"
    assert empty_or_missing(locations.peers_dir)


async def test_runtime_dir_that_is_a_file_is_refused(locations: Locations) -> None:
    with removed_afterwards(locations.runtime_dir):
        write_file(locations.runtime_dir, b"not a dir")
        failure = await start_failure(locations)
        assert isinstance(failure, UnsafePathError)
        assert failure.reason is Reason.NOT_DIRECTORY
        assert read_file(locations.runtime_dir) == b"not a dir"


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o755, 0o711], ids=oct)
async def test_runtime_dir_left_open_is_repaired_to_0700(locations: Locations, mode: int) -> None:
    os.mkdir(locations.runtime_dir, 0o700)
    os.chmod(locations.runtime_dir, mode)
    async with live_peer(locations) as rx:
        assert mode_of(locations.runtime_dir) == 0o700
        assert mode_of(rx.registration.socket_path) == 0o600


@needs_root
async def test_runtime_dir_owned_by_another_uid_is_refused(locations: Locations) -> None:
    os.mkdir(locations.runtime_dir, 0o700)
    os.chown(locations.runtime_dir, FOREIGN_UID, FOREIGN_UID)
    failure = await start_failure(locations)
    assert isinstance(failure, UnsafePathError)
    assert failure.reason is Reason.FOREIGN_OWNER
    assert os.listdir(locations.runtime_dir) == []


def test_runtime_dir_of_another_uid_is_refused_by_the_owner_rule(locations: Locations) -> None:
    """The owner rule without root: the dir is ours, so it is foreign to any other uid."""
    fs.ensure_private_dir(locations.runtime_dir)
    with pytest.raises(UnsafePathError) as info:
        fs.ensure_private_dir(locations.runtime_dir, uid=os.getuid() + 1)
    assert info.value.reason is Reason.FOREIGN_OWNER


async def test_stale_symlink_at_the_socket_path_is_replaced_not_followed(
    locations: Locations, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    registration = make_registration(locations, "beta")
    fs.ensure_private_dir(locations.runtime_dir)
    os.symlink(victim, registration.socket_path)
    async with serving(locations, registration):
        assert stat.S_ISSOCK(os.lstat(registration.socket_path).st_mode)
        assert mode_of(registration.socket_path) == 0o600
        replies = await talk(registration.socket_path, lines(hello_obj(_identity(registration))))
        assert replies == [(True, "ready", HELLO_ID)]
    assert victim.read_bytes() == b"precious"


def _identity(registration: Registration) -> Identity:
    return Identity(registration.id, registration.instance_id, registration.token)


# -- the peers dir ---------------------------------------------------------------------------------


async def test_peers_dir_symlinked_elsewhere_stops_start_up_and_listing(
    locations: Locations, tmp_path: Path
) -> None:
    target = tmp_path / "attacker-peers"
    target.mkdir(mode=0o700)
    os.symlink(target, locations.peers_dir)
    failure = await start_failure(locations)
    assert isinstance(failure, UnsafePathError)
    assert failure.reason is Reason.SYMLINK
    assert os.listdir(target) == [], "a registration was written through the symlink"
    with pytest.raises(UnsafePathError):
        await listing(locations)


async def test_peers_dir_that_is_a_file_stops_listing(locations: Locations) -> None:
    write_file(locations.peers_dir, b"")
    with pytest.raises(UnsafePathError) as info:
        await listing(locations)
    assert info.value.reason is Reason.NOT_DIRECTORY


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o707, 0o755], ids=oct)
async def test_peers_dir_made_world_or_group_writable_is_repaired_by_a_listing(
    locations: Locations, mode: int
) -> None:
    async with live_peer(locations) as rx:
        os.chmod(locations.peers_dir, mode)
        found = await listing(locations)
        assert mode_of(locations.peers_dir) == 0o700
        assert live_ids(found) == [rx.registration.instance_id]


@needs_root
async def test_peers_dir_owned_by_another_uid_stops_listing(locations: Locations) -> None:
    os.makedirs(locations.peers_dir, 0o700)
    os.chown(locations.peers_dir, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(UnsafePathError) as info:
        await listing(locations)
    assert info.value.reason is Reason.FOREIGN_OWNER
    assert stat.S_IMODE(os.lstat(locations.peers_dir).st_mode) == 0o700


# -- registration files in a listing ---------------------------------------------------------------


def _symlink_to_copy(rx: Receiver) -> None:
    path = registration_path(rx)
    copy = os.path.join(os.path.dirname(rx.locations.peers_dir), "copy.json")
    shutil.copy(path, copy)
    os.chmod(copy, 0o600)
    os.unlink(path)
    os.symlink(copy, path)


def _fifo(rx: Receiver) -> None:
    os.unlink(registration_path(rx))
    os.mkfifo(registration_path(rx), 0o600)


def _directory(rx: Receiver) -> None:
    os.unlink(registration_path(rx))
    os.mkdir(registration_path(rx), 0o700)


def _mode(mode: int) -> Callable[[Receiver], None]:
    return lambda rx: os.chmod(registration_path(rx), mode)


def _size(size: int) -> Callable[[Receiver], None]:
    def pad(rx: Receiver) -> None:
        data = Path(registration_path(rx)).read_bytes()
        files.write_raw(rx.locations, rx.registration.instance_id, files.padded(data, size))

    return pad


def _changed(**changes: Any) -> Callable[[Receiver], None]:
    return lambda rx: rewrite(rx, **changes)


#: Attacks on a live session's registration; each must hide the session from a listing. The value
#: is the listing bucket the file ends in (``None``: not even considered, by its directory entry).
REGISTRATION_ATTACKS: Final = [
    pytest.param(_symlink_to_copy, None, id="symlink-to-a-valid-copy"),
    pytest.param(_fifo, None, id="fifo"),
    pytest.param(_directory, None, id="directory"),
    pytest.param(_mode(0o644), "unsafe", id="mode-0644"),
    pytest.param(_mode(0o640), "unsafe", id="mode-0640"),
    pytest.param(_mode(0o604), "unsafe", id="mode-0604"),
    pytest.param(_mode(0o601), "unsafe", id="mode-0601"),
    pytest.param(_size(MAX_REGISTRATION_BYTES + 1), "unsafe", id="65537-bytes"),
    pytest.param(_changed(socketPath="/tmp/pi-peers-elsewhere.sock"), "invalid", id="socket-out"),
    pytest.param(_changed(instanceId="f" * 32), "invalid", id="instance-id-not-the-file-name"),
    pytest.param(_changed(version=3), "invalid", id="version-3"),
    pytest.param(_changed(protocol=2), "invalid", id="protocol-2"),
    pytest.param(_changed(pid=0), "invalid", id="pid-0"),
    pytest.param(_changed(pid="1"), "invalid", id="pid-string"),
    pytest.param(_changed(status="sleeping"), "invalid", id="status-unknown"),
    pytest.param(_changed(id=""), "invalid", id="session-id-empty"),
    pytest.param(_changed(token="A" * 64), "invalid", id="token-uppercase"),
    pytest.param(_changed(name="\ud800"), "invalid", id="name-lone-surrogate"),
]


@pytest.mark.parametrize(("attack", "bucket"), REGISTRATION_ATTACKS)
async def test_attacked_registration_hides_its_session(
    locations: Locations, attack: Callable[[Receiver], None], bucket: str | None
) -> None:
    async with live_peer(locations) as rx:
        attack(rx)
        attacked = os.lstat(registration_path(rx))
        found = await listing(locations)
        assert found.peers == []
        counts = {"unsafe": found.unsafe, "invalid": found.invalid, "hidden": found.hidden}
        expected = dict.fromkeys(counts, 0)
        if bucket is not None:
            expected[bucket] = 1
        assert counts == expected
        assert found.considered == (0 if bucket is None else 1)
        # Judged, never repaired: a reader leaves another session's file as it found it.
        after = os.lstat(registration_path(rx))
        assert (after.st_ino, after.st_mode) == (attacked.st_ino, attacked.st_mode)


async def test_registration_of_exactly_64_KiB_is_still_read(locations: Locations) -> None:
    async with live_peer(locations) as rx:
        _size(MAX_REGISTRATION_BYTES)(rx)
        assert live_ids(await listing(locations)) == [rx.registration.instance_id]


async def test_registration_naming_a_socket_outside_the_runtime_dir_is_never_connected(
    locations: Locations, tmp_path: Path
) -> None:
    outside = str(tmp_path / "decoy.sock")
    with decoy_listener(outside) as decoy:
        body = files.record(locations, "lure", socketPath=outside)
        files.write_record(locations, body)
        found = await listing(locations)
        assert (found.peers, found.invalid) == ([], 1)
        assert never_connected(decoy)


@needs_root
async def test_registration_owned_by_another_uid_hides_its_session(locations: Locations) -> None:
    async with live_peer(locations) as rx:
        os.chown(registration_path(rx), FOREIGN_UID, FOREIGN_UID)
        found = await listing(locations)
        assert (found.peers, found.unsafe) == ([], 1)


def test_registration_of_another_uid_is_refused_by_the_owner_rule(locations: Locations) -> None:
    body = files.record(locations, "mine")
    path = files.write_record(locations, body)
    with pytest.raises(UnsafePathError) as info:
        fs.read_registration_bytes(path, uid=os.getuid() + 1)
    assert info.value.reason is Reason.FOREIGN_OWNER


async def test_dot_files_temp_files_and_the_reap_lock_are_never_read(locations: Locations) -> None:
    async with live_peer(locations) as rx:
        peers = files.peers_dir(locations)
        junk = files.record_bytes(files.record(locations, "junk"))
        for name in (
            f".{'a' * 32}.json",
            f".{rx.registration.instance_id}.{os.urandom(16).hex()}.tmp",
            ".reap.lock",
            f"{'b' * 32}.json.tmp",
            f"{'C' * 32}.json",
            f"{'d' * 31}.json",
            f"{'e' * 32}.JSON",
        ):
            write_file(os.path.join(peers, name), junk)
        found = await listing(locations)
        assert live_ids(found) == [rx.registration.instance_id]
        assert (found.considered, found.skipped) == (1, 0)


async def test_ten_thousand_junk_files_do_not_hide_a_live_session(locations: Locations) -> None:
    async with live_peer(locations) as rx:
        peers = files.peers_dir(locations)
        for index in range(10_000):
            # Names a listing must skip by their name alone, in several near-miss spellings.
            name = (f"g{index:031x}.json", f"{index:031x}.json", f"{index:032x}.jsn")[index % 3]
            fd = os.open(os.path.join(peers, name), os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
        found = await listing(locations)
        assert live_ids(found) == [rx.registration.instance_id]
        assert (found.considered, found.at_limit, found.skipped) == (1, False, 0)


async def test_ten_thousand_registration_lookalikes_keep_a_listing_bounded(
    locations: Locations,
) -> None:
    async with live_peer(locations) as rx:
        peers = files.peers_dir(locations)
        for index in range(10_000):
            fd = os.open(os.path.join(peers, f"{index:032x}.json"), os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, b"{}")
            os.close(fd)
        found = await listing(locations)
        # At most 512 names are read (spec §1.5); whether the live one is among them depends on
        # the directory order, which the contract leaves to the file system.
        assert (found.considered, found.at_limit) == (MAX_LISTED_REGISTRATIONS, True)
        assert found.invalid + len(found.peers) == MAX_LISTED_REGISTRATIONS
        assert live_ids(found) in ([], [rx.registration.instance_id])


async def test_ten_thousand_decoys_of_a_live_process_are_never_reaped_and_reported_unread(
    locations: Locations, private_agent_dir: Path
) -> None:
    """Well-formed registrations naming a live process that is no session push a real session
    past the 512-entry window. The window stays (spec §1.5); what changes is that the listing
    counts what it left unread, and says so in the text and the JSON of ``peers``."""
    with files.unrelated_process() as pid:
        async with live_peer(locations) as rx:
            files.write_decoys(locations, 10_000, pid)
            found = await listing(locations)
            assert (found.considered, found.unread) == (MAX_LISTED_REGISTRATIONS, 10_001 - 512)
            # Every decoy read is hidden, none reaped: their process runs.
            assert found.reaped == found.reap_deferred == 0
            assert found.hidden + len(found.peers) == MAX_LISTED_REGISTRATIONS
            assert live_ids(found) in ([], [rx.registration.instance_id])

            text = await anyio.to_thread.run_sync(run_cli, private_agent_dir, "peers")
            as_json = await anyio.to_thread.run_sync(run_cli, private_agent_dir, "peers", "--json")
            missed = await anyio.to_thread.run_sync(
                run_cli, private_agent_dir, "send", "nobody-here", "hello", "--json"
            )
        # ``peers`` publishes nothing; a send publishes the command line's registration, one more
        # name while it runs.
        unread = 10_001 - 512
        assert text.returncode == 0, text
        assert f"{unread} more registrations were left unread" in text.stdout
        assert "pi-cross-session doctor" in text.stdout
        assert as_json.returncode == 0, as_json
        assert as_json.json()["unread"] == unread
        # A send that finds no such session says the target may be among the unread.
        assert missed.returncode == 4, missed
        assert missed.json()["status"] == "not_found"
        assert f"{unread + 1} more registrations were left unread" in missed.json()["error"]
        left = [name for name in os.listdir(locations.peers_dir) if name.endswith(".json")]
        assert len(left) == 10_000  # the decoys; the session and the command line removed theirs


# -- races: a file replaced between its check and its use ------------------------------------------


class SwapAfterListing:
    """The file layer, except that ``swap`` runs right after the names were listed."""

    def __init__(self, swap: Callable[[], None]) -> None:
        self._swap = swap

    def __getattr__(self, name: str) -> Any:
        return getattr(fs, name)

    def list_registration_names(self, peers_dir: str, *, limit: int = 512) -> NameWindow:
        names = fs.list_registration_names(peers_dir, limit=limit)
        self._swap()
        return names


@pytest.mark.parametrize(
    ("swap", "bucket"),
    [
        pytest.param(_symlink_to_copy, "unsafe", id="by-a-symlink"),
        pytest.param(_fifo, "unsafe", id="by-a-fifo"),
        pytest.param(_mode(0o644), "unsafe", id="by-a-loose-mode"),
        pytest.param(_changed(instanceId="f" * 32), "invalid", id="by-a-forged-record"),
        pytest.param(lambda rx: os.unlink(registration_path(rx)), "unreadable", id="by-nothing"),
    ],
)
async def test_registration_replaced_after_listing_before_reading(
    locations: Locations, swap: Callable[[Receiver], None], bucket: str
) -> None:
    async with live_peer(locations) as rx:
        found = await listing(locations, SwapAfterListing(lambda: swap(rx)))
        assert found.peers == []
        counts = {"unsafe": found.unsafe, "invalid": found.invalid, "unreadable": found.unreadable}
        assert counts == {**dict.fromkeys(counts, 0), bucket: 1}


@pytest.mark.parametrize(
    ("replacement", "expected"),
    [
        # A file of ours at 0600, naming the connecting process: a same-uid writer could have
        # put it there before the hello just as well, so winning the race buys nothing: it is
        # judged as the file it became (see docs/security.md, "Same-user impersonation").
        ("forged-file", [(True, "ready", HELLO_ID), (True, "submitted", "r")]),
        # Never followed, whenever it appears.
        ("symlink", [(False, "authentication_failed", HELLO_ID)]),
    ],
)
async def test_sender_registration_swapped_during_authentication_is_judged_as_what_it_became(
    locations: Locations,
    monkeypatch: pytest.MonkeyPatch,
    replacement: str,
    expected: list[tuple[bool, str, str]],
    tmp_path: Path,
) -> None:
    """Between the receiver's ``lstat`` and its ``open`` of the sender's registration, the file is
    replaced by one carrying the attacker's token, and the hello presents that token. The
    receiver judges the file it opened, by every rule (a symlink is never followed); a race gives
    an attacker nothing a plain rewrite before the hello would not (sessions rewrite their own
    registration that way at every heartbeat, so the reader reads again rather than refuse).

    The receiver here is an endpoint with the real authenticator and nothing else reading the
    peers dir (a session's own start-up listing could meet the seam first).
    """
    alpha = published_sender(locations, "alpha")
    path = locations.registration_path(alpha.instance_id)
    forged = files.record(
        locations, "alpha", instance_id=alpha.instance_id, id=alpha.id, pid=alpha.pid
    )
    staged = str(tmp_path / "forged.json")
    write_file(staged, files.record_bytes(forged))
    real_open = fs._open
    swapped: list[str] = []

    def racing_open(target: str, flags: int, mode: int) -> int:
        if target == path and not swapped:
            swapped.append(target)
            if replacement == "symlink":
                os.symlink(staged, path + ".link")
                os.replace(path + ".link", path)
            else:
                shutil.copy(staged, path + ".new")
                os.chmod(path + ".new", 0o600)
                os.replace(path + ".new", path)
        return real_open(target, flags, mode)

    async with running_peer(locations, "beta") as beta:
        monkeypatch.setattr(fs, "_open", racing_open)
        claim = Identity(alpha.id, alpha.instance_id, forged["token"])
        hello = hello_obj(_identity(beta.registration), sender=claim, request_id=HELLO_ID)
        body = message_obj(request_id="r", message_id="m", text="forged", sent_at=now_ms())
        replies = await talk(beta.registration.socket_path, lines(hello, body))
        monkeypatch.undo()
        assert swapped == [path], "the race window was never reached"
        assert replies == expected
        assert len(beta.inbox.entries) == len(expected) - 1


# -- sockets, vetted by the sender -----------------------------------------------------------------


def _socket_mode(mode: int) -> Callable[[str], None]:
    return lambda path: os.chmod(path, mode)


def _socket_symlink(path: str) -> None:
    os.rename(path, path + ".real")
    os.symlink(path + ".real", path)


def _socket_file(path: str) -> None:
    os.rename(path, path + ".real")
    Path(path).write_bytes(b"")
    os.chmod(path, 0o600)


def _restore(path: str) -> None:
    if os.path.lexists(path + ".real"):
        os.unlink(path)
        os.rename(path + ".real", path)
    os.chmod(path, 0o600)


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param(_socket_mode(0o666), id="item-8-socket-mode-0666"),
        pytest.param(_socket_mode(0o660), id="socket-mode-0660"),
        pytest.param(_socket_mode(0o606), id="socket-mode-0606"),
        pytest.param(_socket_symlink, id="socket-path-is-a-symlink-to-the-socket"),
        pytest.param(_socket_file, id="socket-path-is-a-regular-file"),
    ],
)
async def test_unsafe_socket_hides_its_session_and_is_never_connected(
    locations: Locations, attack: Callable[[str], None]
) -> None:
    async with live_peer(locations) as rx:
        registration = rx.registration
        path = registration.socket_path
        accepted = rx.runtime._current.endpoint.statistics().accepted  # type: ignore[union-attr]
        attack(path)
        try:
            found = await listing(locations)
            assert (found.peers, found.hidden) == ([], 1)
            with pytest.raises(ExchangeError) as info:
                await Exchanger(locations, fs).probe(registration)
            assert info.value.code == "unsafe_endpoint"
            stats = rx.runtime._current.endpoint.statistics()  # type: ignore[union-attr]
            assert stats.accepted == accepted, "a connection was made to an unsafe socket"
        finally:
            _restore(path)
        assert live_ids(await listing(locations)) == [registration.instance_id]


@needs_root
async def test_socket_owned_by_another_uid_is_never_connected(locations: Locations) -> None:
    async with live_peer(locations) as rx:
        path = rx.registration.socket_path
        os.chown(path, FOREIGN_UID, FOREIGN_UID)
        try:
            with pytest.raises(ExchangeError) as info:
                await Exchanger(locations, fs).probe(rx.registration)
            assert info.value.code == "unsafe_endpoint"
        finally:
            os.chown(path, os.getuid(), os.getgid())


async def test_socket_of_another_uid_is_refused_by_the_owner_rule(locations: Locations) -> None:
    async with live_peer(locations) as rx:
        path = rx.registration.socket_path
        assert fs.vet_socket(path) is None
        assert fs.vet_socket(path, uid=os.getuid() + 1) == "unsafe_endpoint"


async def test_socket_swapped_for_a_symlink_after_listing_before_the_send(
    locations: Locations, tmp_path: Path
) -> None:
    """The listing saw a good peer; before the send its socket path becomes a symlink to a decoy
    that would collect the hello (and its token). The send must refuse, and connect nowhere."""
    async with live_peer(locations) as rx:
        alpha = published_sender(locations, "alpha")
        found = await listing(locations)
        peer = found.registrations[rx.registration.instance_id]
        path = peer.socket_path
        with decoy_listener(str(tmp_path / "decoy.sock")) as decoy:
            os.rename(path, path + ".real")
            os.symlink(str(tmp_path / "decoy.sock"), path)
            try:
                with pytest.raises(ExchangeError) as info:
                    await Exchanger(locations, fs).send(
                        peer,
                        sender=as_sender(alpha),
                        message=make_message("lured", sentAt=rx.clock.wall_ms()),
                    )
                assert (info.value.code, info.value.message_written) == ("unsafe_endpoint", False)
                assert never_connected(decoy)
            finally:
                _restore(path)
        assert admitted(rx) == []


async def test_registration_forged_after_listing_changes_nothing_about_the_send(
    locations: Locations,
) -> None:
    """A forged record replacing the peer's after the listing (another token, a socket path
    elsewhere) is never read again: the send goes to the recomputed socket with the listed
    token, and the receiver admits it once."""
    async with live_peer(locations) as rx:
        alpha = published_sender(locations, "alpha")
        found = await listing(locations)
        peer = found.registrations[rx.registration.instance_id]
        rewrite(rx, token="0" * 64, socketPath="/tmp/forged.sock")
        receipt = await Exchanger(locations, fs).send(
            peer,
            sender=Sender(id=alpha.id, instance_id=alpha.instance_id, token=alpha.token),
            message=make_message("still fine", sentAt=rx.clock.wall_ms()),
        )
        assert receipt.status == "submitted"
        assert [key[0] for key in admitted(rx)] == [alpha.instance_id]


# -- the reap lock ---------------------------------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


async def test_reap_lock_symlinked_to_a_victim_file_is_not_followed(
    locations: Locations, tmp_path: Path
) -> None:
    """``.reap.lock`` is the one file a listing creates in the peers dir; a symlink planted there
    must not let a reaping listing open, truncate or chmod what it points to."""
    victim = tmp_path / "victim.txt"
    write_file(victim, b"precious", mode=0o644)
    dead = files.record(locations, "dead", pid=_dead_pid())
    files.write_record(locations, dead)
    lock = os.path.join(locations.peers_dir, ".reap.lock")
    os.symlink(victim, lock)
    found = await listing(locations)
    assert (found.peers, found.reaped, found.reap_deferred) == ([], 0, 1)
    assert read_file(victim) == b"precious"
    assert mode_of(str(victim)) == 0o644
    assert stat.S_ISLNK(os.lstat(lock).st_mode)
    assert stat.S_ISREG(os.lstat(locations.registration_path(dead["instanceId"])).st_mode)
