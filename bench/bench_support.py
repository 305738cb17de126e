"""What several benchmarks share: a published sender identity a receiver can authenticate, and
what a process has spent (CPU, memory), read from ``/proc``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pi_cross_session._internal.protocol.frames import Sender
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    Registration,
    build_registration,
    serialize,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.tokens import new_instance_id, new_token


def publish_sender(locations: Locations, session_id: str) -> tuple[Registration, Sender]:
    """A new registration for this process (its pid, a fresh instance id and token), written to
    the peers dir so that a receiver can authenticate hellos naming it; and the matching sender."""
    instance_id = new_instance_id()
    now = time.time_ns() // 1_000_000
    registration = build_registration(
        session_id=session_id,
        session_name=session_id,
        instance_id=instance_id,
        cwd=os.getcwd(),
        pid=os.getpid(),
        started_at=now,
        updated_at=now,
        status="idle",
        inbound="refuse",
        socket_path=locations.socket_path(instance_id),
        token=new_token(),
    )
    fs.ensure_private_dir(locations.peers_dir)
    fs.write_registration(
        locations.peers_dir, instance_id, serialize(registration), still_current=lambda: True
    )
    sender = Sender(id=registration.id, instance_id=instance_id, token=registration.token)
    return registration, sender


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU of ``pid`` so far (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s() -> float:
    """CPU seconds every core of this machine has spent busy so far (``/proc/stat``)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def rss_mib(pid: int) -> float:
    """The resident memory of ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
