"""Whether a gateway runs, is starting or is stuck, judged from its files and real processes; and
the gateway's bounded ring of recent warnings and errors (docs/remote.md, "remote status")."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from pi_cross_session._internal.plugin import remote_state
from pi_cross_session._internal.plugin.capped import snapshot_path
from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.problems import RecentProblems
from pi_cross_session._internal.plugin.remote_state import GatewayState
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.remote.settings import (
    REMOTE_PROBLEM_CHARS,
    REMOTE_PROBLEMS_KEPT,
    REMOTE_SNAPSHOT_STALE_S,
)
from pi_cross_session._internal.security.io import fs

#: A process that takes the gateway's lock as the gateway does (flock, its pid in the file), says
#: so, and holds it until its stdin closes.
HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.ftruncate(fd, 0)\n"
    "os.pwrite(fd, str(os.getpid()).encode(), 0)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


def _locations(tmp_path: Path) -> Locations:
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(tmp_path / "agent")})
    fs.ensure_private_dir(str(tmp_path / "agent"))
    fs.ensure_private_dir(str(tmp_path / "agent" / "cross-session"))
    fs.ensure_private_dir(remote_state.remote_dir(locations))
    return locations


def _snapshot(locations: Locations, pid: int, written_ms: int) -> None:
    path = snapshot_path(locations)
    body = {"pid": pid, "writtenAt": written_ms}
    fs.write_private_file(os.path.dirname(path), os.path.basename(path), json.dumps(body).encode())


def test_the_file_names_are_the_gateways() -> None:
    assert remote_state.MACHINE_FILE == files.MACHINE_FILE
    assert remote_state.KEY_FILE == files.KEY_FILE
    assert remote_state.NATS_SEED_FILE == files.NATS_SEED_FILE
    assert remote_state.NATS_JWT_FILE == files.NATS_JWT_FILE
    assert remote_state.TRUST_FILE == files.TRUST_FILE
    assert remote_state.LOCK_FILE == files.LOCK_FILE
    assert remote_state.REMOTE_DIR == files.REMOTE_DIR


def test_a_process_holding_the_lock_without_a_snapshot_is_a_gateway_starting(
    tmp_path: Path,
) -> None:
    locations = _locations(tmp_path)
    assert remote_state.read_gateway(locations).state is GatewayState.STOPPED
    lock = os.path.join(remote_state.remote_dir(locations), remote_state.LOCK_FILE)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        starting = remote_state.read_gateway(locations)
        assert (starting.state, starting.pid) == (GatewayState.STARTING, holder.pid)
    finally:
        holder.communicate("")
    # Gone: its pid stays in the lock file, which says nothing any more.
    assert remote_state.read_gateway(locations).state is GatewayState.STOPPED
    # A live process named in the lock file that does not hold it open is no gateway either.
    with open(lock, "w") as handle:
        handle.write(str(os.getpid()))
    assert remote_state.read_gateway(locations).state is GatewayState.STOPPED


def test_a_snapshot_names_a_running_gateway_until_it_stops_being_rewritten(tmp_path: Path) -> None:
    locations = _locations(tmp_path)
    now = time.time()
    _snapshot(locations, os.getpid(), int(now * 1000))
    running = remote_state.read_gateway(locations, now_s=now + 1)
    assert (running.state, running.pid) == (GatewayState.RUNNING, os.getpid())
    assert running.age_s is not None
    assert 0.9 < running.age_s < 1.1
    stuck = remote_state.read_gateway(locations, now_s=now + REMOTE_SNAPSHOT_STALE_S + 1)
    assert stuck.state is GatewayState.STUCK
    dead = 2**22 + 12_345  # above the default pid_max: no such process
    _snapshot(locations, dead, int(now * 1000))
    left = remote_state.read_gateway(locations, now_s=now)
    assert left.state is GatewayState.STOPPED
    assert left.snapshot is not None  # what a killed gateway left: its last errors are in it


def test_a_snapshot_others_could_read_is_not_trusted(tmp_path: Path) -> None:
    locations = _locations(tmp_path)
    _snapshot(locations, os.getpid(), int(time.time() * 1000))
    os.chmod(snapshot_path(locations), 0o644)
    assert remote_state.read_gateway(locations).state is GatewayState.STOPPED


def test_the_ring_of_recent_problems_is_bounded_and_sees_only_the_remote_plane() -> None:
    problems = RecentProblems()
    problems.attach()
    try:
        remote = logging.getLogger("pi_cross_session._internal.plugin.remote.link")
        remote.info("not a problem")
        for index in range(REMOTE_PROBLEMS_KEPT + 5):
            remote.warning("lost %d", index)
        remote.error("x" * (REMOTE_PROBLEM_CHARS * 2))
        logging.getLogger("pi_cross_session._internal.plugin.runtime").warning(
            "not the remote plane"
        )
    finally:
        problems.detach()
    logging.getLogger("pi_cross_session._internal.plugin.remote.link").warning(
        "after it was detached"
    )
    kept = problems.to_json()
    assert len(kept) == REMOTE_PROBLEMS_KEPT
    assert problems.seen == REMOTE_PROBLEMS_KEPT + 6
    assert kept[0]["text"] == "lost 6"
    assert {entry["where"] for entry in kept} == {"link"}
    assert kept[-1]["level"] == "error"
    assert len(kept[-1]["text"]) == REMOTE_PROBLEM_CHARS
    assert abs(kept[-1]["at"] - time.time() * 1000) < 60_000
