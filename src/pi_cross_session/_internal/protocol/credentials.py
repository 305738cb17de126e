"""Who is on the other end of a local connection, as the kernel tells it: the data, and the
layout of the platform structures that carry it (pure: parsing only; reading them from a socket is
:mod:`pi_cross_session._internal.protocol.io.peercred`'s job).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """Who the kernel says opened a connection, as of its ``connect()``.

    A field is ``None`` when the platform does not report it; nothing is enforced on a ``None``.
    """

    pid: int | None
    uid: int | None
    gid: int | None


def may_connect(peer: PeerCredentials | None, our_uid: int) -> bool:
    """Whether a connection the kernel says ``peer`` opened may be served by an endpoint running
    as ``our_uid``: only our own uid may. Where the platform reports no uid (``peer`` or its
    ``uid`` is ``None``), the socket's 0600 mode in our 0700 directory is the only guard, and the
    connection is served."""
    return peer is None or peer.uid is None or peer.uid == our_uid


#: ``struct xucred`` of macOS: ``u_int cr_version; uid_t cr_uid; short cr_ngroups;
#: gid_t cr_groups[16]``.
XUCRED: Final = struct.Struct("=IIh2x16I")
XUCRED_VERSION: Final = 0
#: ``struct ucred`` of Linux: ``pid_t pid; uid_t uid; gid_t gid``.
UCRED: Final = struct.Struct("=3i")


def parse_ucred(raw: bytes) -> PeerCredentials:
    """The credentials in a Linux ``struct ucred``."""
    pid, uid, gid = UCRED.unpack(raw)
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def parse_xucred(raw: bytes) -> tuple[int, int | None]:
    """``(uid, first gid)`` from a macOS ``struct xucred``; ``ValueError`` if it is not one."""
    if len(raw) < XUCRED.size:
        raise ValueError(f"xucred of {len(raw)} bytes, expected {XUCRED.size}")
    version, uid, ngroups, *groups = XUCRED.unpack_from(raw)
    if version != XUCRED_VERSION:
        raise ValueError(f"xucred version {version}")
    return uid, (groups[0] if ngroups > 0 else None)
