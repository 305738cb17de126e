"""Reading a connected Unix socket's peer credentials from the kernel: ``SO_PEERCRED`` on Linux,
``LOCAL_PEERCRED``/``LOCAL_PEERPID`` on macOS, nothing elsewhere (see ``docs/security.md``,
"Kernel-checked peers")."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import Final

from pi_cross_session._internal.protocol.credentials import (
    UCRED,
    XUCRED,
    PeerCredentials,
    parse_ucred,
    parse_xucred,
)

#: Reads the peer credentials of an accepted Unix socket: ``None`` when the platform exposes none;
#: raises ``OSError`` when it should but the call failed (the endpoint then closes the connection).
PeerCredentialsReader = Callable[[socket.socket], PeerCredentials | None]

# <sys/un.h> on macOS: the option level for local sockets and its two options. CPython does not
# export them, and they are part of the stable kernel ABI.
_SOL_LOCAL: Final = 0
_LOCAL_PEERCRED: Final = 0x001
_LOCAL_PEERPID: Final = 0x002


def _linux_credentials(sock: socket.socket) -> PeerCredentials:
    return parse_ucred(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))


def _darwin_credentials(sock: socket.socket) -> PeerCredentials:
    raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, XUCRED.size)
    try:
        uid, gid = parse_xucred(raw)
    except ValueError as exc:
        raise OSError(f"unreadable peer credentials: {exc}") from exc
    try:
        pid: int | None = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID)
    except OSError:
        pid = None  # macOS before 10.8 reports the uid only
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def _no_credentials(sock: socket.socket) -> None:
    del sock


def _platform_reader() -> tuple[str, PeerCredentialsReader]:
    if sys.platform.startswith("linux"):
        return "SO_PEERCRED", _linux_credentials
    if sys.platform == "darwin":
        return "LOCAL_PEERCRED", _darwin_credentials
    # Other BSDs have getpeereid() but Python does not expose it, and their structs differ from
    # both of the above; we would rather enforce nothing than misread a uid.
    return "unavailable", _no_credentials


_SOURCE_AND_READER: Final = _platform_reader()
#: How this platform's peer credentials are read (``"unavailable"``: not at all), for status.
PEER_CREDENTIALS_SOURCE: Final = _SOURCE_AND_READER[0]


def read_peer_credentials(sock: socket.socket) -> PeerCredentials | None:
    """The kernel's record of who connected to ``sock`` (an accepted ``AF_UNIX`` stream).

    ``None`` on a platform that exposes no peer credentials (:data:`PEER_CREDENTIALS_SOURCE` is
    ``"unavailable"``); ``OSError`` when the call fails.
    """
    return _SOURCE_AND_READER[1](sock)
