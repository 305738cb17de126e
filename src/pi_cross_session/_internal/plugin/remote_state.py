"""This agent dir's remote plane as its files show it, for ``remote status`` and ``doctor``.

Facts only, no words (``remote status`` words them in :mod:`pi_cross_session._internal.cli.words`,
``doctor`` in :mod:`pi_cross_session._internal.plugin.doctor`). Three promises, as ``doctor`` makes
them:

* **Without the remote extra.** Nothing here imports ``nats``, ``nkeys``, ``cryptography`` or
  ``pynacl`` unless it is installed (then only to name this machine's NATS key and to check the
  trust file's keys as the gateway will): a machine without the extra still learns what is set up
  and that the gateway cannot run.
* **Read-only.** No file or dir is created, repaired or locked: every file is read with the
  registration checks of :mod:`pi_cross_session._internal.security.io.fs` (ours, a regular file, no
  group/other bits, bounded), and a file those checks refuse is reported, not read.
* **No guess about the gateway.** It runs when the snapshot it rewrites every few seconds names a
  live pid; it is starting when no snapshot names one but the process named in its lock file
  still holds that file open; a snapshot that stopped being rewritten says the gateway is stuck.
  What the snapshot holds came partly from other machines: whoever prints it escapes it.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pi_cross_session._internal.plugin.capped import MAX_SNAPSHOT_BYTES, snapshot_path
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.paths import Locations, node_join
from pi_cross_session._internal.protocol.remote.settings import REMOTE_SNAPSHOT_STALE_S
from pi_cross_session._internal.security.io import fs

#: The remote plane's files, named here (this module needs no extra) and used by
#: :mod:`pi_cross_session._internal.plugin.remote.files` too.
REMOTE_DIR: Final = "remote"
MACHINE_FILE: Final = "machine.json"
KEY_FILE: Final = "machine.key"
NATS_SEED_FILE: Final = "nats-user.nk"
NATS_JWT_FILE: Final = "nats-user.jwt"
TRUST_FILE: Final = "trust.json"
JOINED_FILE: Final = "joined.json"
LOCK_FILE: Final = "gateway.lock"
#: The modules the ``[remote]`` extra brings (``pip install 'pi-cross-session[remote]'``).
EXTRA_MODULES: Final = ("nats", "nkeys", "cryptography", "nacl")
#: Open files of a process looked at, at most, to see whether it holds the gateway lock.
_FDS_LOOKED_AT: Final = 4096


class FileState(StrEnum):
    """A private file of the remote plane, as the gateway would judge it."""

    PRIVATE = "private"
    MISSING = "missing"
    #: Others may read or write it: the gateway refuses it (a key file may have leaked).
    LOOSE = "loose"
    #: A symlink, not a regular file, another user's, too large: refused.
    REFUSED = "refused"
    #: The OS refused to read it.
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class PrivateFile:
    name: str
    path: str
    state: FileState
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Credentials:
    """The deployment's user JWT for this machine, as its claims say (signature not checked:
    the NATS server checks it)."""

    name: str | None = None
    issuer: str | None = None
    subject: str | None = None
    issued_at: int | None = None
    #: Epoch seconds; ``None``: it never expires.
    expires_at: int | None = None
    #: Why it cannot be read, if so.
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Trust:
    """The trust file: the account, remote inbound, the allow-list."""

    state: FileState
    path: str = ""
    account: str | None = None
    inbound: bool | None = None
    machines: tuple[str, ...] = ()
    #: What is wrong with a file that is there, if anything (the gateway would not start).
    problem: str | None = None


class GatewayState(StrEnum):
    """Whether this agent dir's gateway runs."""

    RUNNING = "running"
    #: Its process holds the lock but has written no status yet (connecting, waiting for
    #: JetStream, checking the bucket).
    STARTING = "starting"
    #: Its process lives, but its status stopped being rewritten.
    STUCK = "stuck"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Gateway:
    state: GatewayState
    pid: int | None = None
    #: The snapshot the gateway wrote; when stopped, one a gateway that was killed left behind.
    snapshot: dict[str, Any] | None = None
    #: Seconds since the snapshot was written.
    age_s: float | None = None


@dataclass(frozen=True, slots=True)
class RemoteFacts:
    """Everything ``remote status`` and ``doctor`` know of this agent dir's remote plane."""

    directory: fs.DirInspection
    machine: str | None
    public_key: str | None
    #: This machine's NATS user key, when its seed is readable and the extra is installed.
    nats_key: str | None
    files: tuple[PrivateFile, ...]
    #: ``None``: no NATS credentials installed.
    credentials: Credentials | None
    credentials_file: PrivateFile
    trust: Trust
    #: The NATS servers ``remote join`` recorded, if this machine joined a deployment.
    joined_servers: tuple[str, ...]
    gateway: Gateway
    #: Whether the ``[remote]`` extra is installed (the gateway cannot run without it).
    extra: bool

    @property
    def set_up(self) -> bool:
        """Whether this agent dir has (part of) a machine identity."""
        return any(f.state is not FileState.MISSING for f in self.files)

    @property
    def card(self) -> str | None:
        """The line other machines and a deployment read, when every part of it is known."""
        if self.machine is None or self.public_key is None or self.nats_key is None:
            return None
        return f"{self.machine} {self.public_key} nats:{self.nats_key}"


def remote_dir(locations: Locations) -> str:
    """``<agentDir>/cross-session/remote``."""
    return node_join(locations.agent_dir, "cross-session", REMOTE_DIR)


def _read(path: str, max_bytes: int = 65_536) -> tuple[PrivateFile, bytes | None]:
    name = os.path.basename(path)
    try:
        data = fs.read_registration_bytes(path, max_bytes=max_bytes)
    except fs.UnsafePathError as exc:
        state = FileState.LOOSE if exc.reason is fs.Reason.LOOSE_MODE else FileState.REFUSED
        return PrivateFile(name, path, state, exc.detail), None
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return PrivateFile(name, path, FileState.MISSING), None
        return PrivateFile(name, path, FileState.UNREADABLE, str(exc.code)), None
    except CrossSessionError as exc:
        return PrivateFile(name, path, FileState.UNREADABLE, str(exc)), None
    return PrivateFile(name, path, FileState.PRIVATE), data


def _json(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        body: Any = json.loads(data)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def extra_installed() -> bool:
    """Whether every module of the ``[remote]`` extra can be imported (none is imported)."""
    for name in EXTRA_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def _nats_public_key(seed: bytes | None, extra: bool) -> str | None:
    if seed is None or not extra:
        return None
    try:
        from pi_cross_session._internal.security.remote.nats_jwt import NKey

        return NKey(seed.decode("ascii").strip()).public_key
    except (ImportError, UnicodeDecodeError, CrossSessionError, ValueError):
        return None


def _claims(token: str) -> Credentials:
    parts = token.strip().split(".")
    if len(parts) != 3:
        return Credentials(problem="not a JWT (a JWT has three parts)")
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims: Any = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, binascii.Error):
        return Credentials(problem="not a JWT (its claims are not JSON)")
    if not isinstance(claims, dict):
        return Credentials(problem="not a JWT (its claims are not an object)")

    def text(key: str) -> str | None:
        value = claims.get(key)
        return value if isinstance(value, str) else None

    def number(key: str) -> int | None:
        value = claims.get(key)
        return value if type(value) is int and value > 0 else None

    return Credentials(
        name=text("name"),
        issuer=text("iss"),
        subject=text("sub"),
        issued_at=number("iat"),
        expires_at=number("exp"),
    )


def _trust(path: str, extra: bool) -> Trust:
    found, data = _read(path)
    if data is None:
        return Trust(found.state, path, problem=found.detail or None)
    if extra:
        # The gateway's own reading: a key that does not parse is refused there too.
        try:
            from pi_cross_session._internal.security.remote.trust import parse_trust

            parsed = parse_trust(data)
        except ImportError:
            pass
        except CrossSessionError as exc:
            return Trust(FileState.PRIVATE, path, problem=str(exc))
        else:
            names = tuple(sorted(parsed.machines))
            return Trust(FileState.PRIVATE, path, parsed.account, parsed.inbound, names)
    body = _json(data)
    machines = None if body is None else body.get("machines")
    if body is None or not isinstance(machines, dict):
        return Trust(FileState.PRIVATE, path, problem="the trust file is not one the gateway reads")
    account, inbound = body.get("account"), body.get("inbound")
    return Trust(
        FileState.PRIVATE,
        path,
        account if isinstance(account, str) else None,
        None if inbound not in ("on", "off") else inbound == "on",
        tuple(sorted(str(name) for name in machines)),
    )


def _holds_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open; ``True`` when that cannot be seen (no
    ``/proc``): its pid is alive, which is all that can be known then."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return not os.path.isdir("/proc/self/fd")
    wanted = os.path.realpath(path)
    for name in names[:_FDS_LOOKED_AT]:
        try:
            if os.readlink(f"{fd_dir}/{name}") == wanted:
                return True
        except OSError:
            continue
    return False


def _alive(pid: object) -> bool:
    return type(pid) is int and pid > 0 and not fs.pid_is_dead(pid)


def read_gateway(locations: Locations, *, now_s: float | None = None) -> Gateway:
    """Whether this agent dir's gateway runs, and its snapshot (blocking, read-only)."""
    now = time.time() if now_s is None else now_s
    _, data = _read(snapshot_path(locations), MAX_SNAPSHOT_BYTES)
    snapshot = _json(data)
    if snapshot is not None:
        pid, written = snapshot.get("pid"), snapshot.get("writtenAt")
        age = max(0.0, now - written / 1000) if type(written) is int else None
        if _alive(pid):
            assert isinstance(pid, int)
            stale = age is None or age > REMOTE_SNAPSHOT_STALE_S
            state = GatewayState.STUCK if stale else GatewayState.RUNNING
            return Gateway(state, pid, snapshot, age)
    else:
        age = None
    lock = node_join(remote_dir(locations), LOCK_FILE)
    _, holder = _read(lock, 64)
    try:
        pid = int(holder.decode("ascii").strip()) if holder else None
    except (UnicodeDecodeError, ValueError):
        pid = None
    if pid is not None and _alive(pid) and _holds_open(pid, lock):
        return Gateway(GatewayState.STARTING, pid)
    return Gateway(GatewayState.STOPPED, None, snapshot, age)


def gateway_holder(locations: Locations) -> int | None:
    """The pid of the process that holds this agent dir's gateway lock (a gateway, or a hub
    running one), or ``None`` (blocking, read-only): the pid its lock file names, only while
    that process has the file open, so a pid reused since is never taken for it."""
    lock = node_join(remote_dir(locations), LOCK_FILE)
    _, holder = _read(lock, 64)
    try:
        pid = int(holder.decode("ascii").strip()) if holder else None
    except (UnicodeDecodeError, ValueError):
        return None
    if pid is None or not _alive(pid) or not _holds_open(pid, lock):
        return None
    return pid


def read(locations: Locations, *, now_s: float | None = None) -> RemoteFacts:
    """Every fact of :class:`RemoteFacts` (blocking, read-only)."""
    directory = remote_dir(locations)
    extra = extra_installed()
    machine_file, machine_data = _read(node_join(directory, MACHINE_FILE))
    key_file, _ = _read(node_join(directory, KEY_FILE))
    seed_file, seed = _read(node_join(directory, NATS_SEED_FILE))
    meta = _json(machine_data) or {}
    machine, public_key = meta.get("machine"), meta.get("publicKey")
    jwt_file, jwt = _read(node_join(directory, NATS_JWT_FILE))
    credentials = None
    if jwt is not None:
        try:
            credentials = _claims(jwt.decode("ascii"))
        except UnicodeDecodeError:
            credentials = Credentials(problem="not a JWT (not ASCII)")
    elif jwt_file.state is not FileState.MISSING:
        credentials = Credentials(problem=f"{jwt_file.state}: {jwt_file.detail}")
    joined = _json(_read(node_join(directory, JOINED_FILE))[1]) or {}
    servers = joined.get("servers")
    return RemoteFacts(
        directory=fs.inspect_private_dir(directory, uid=locations.uid),
        machine=machine if isinstance(machine, str) else None,
        public_key=public_key if isinstance(public_key, str) else None,
        nats_key=_nats_public_key(seed, extra),
        files=(machine_file, key_file, seed_file),
        credentials=credentials,
        credentials_file=jwt_file,
        trust=_trust(node_join(directory, TRUST_FILE), extra),
        joined_servers=tuple(s for s in servers if isinstance(s, str))
        if isinstance(servers, list)
        else (),
        gateway=read_gateway(locations, now_s=now_s),
        extra=extra,
    )
