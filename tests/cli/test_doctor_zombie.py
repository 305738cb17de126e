"""``doctor`` and a session killed but not reaped: a zombie, with the parent that must reap it.

A zombie has exited, but ``kill(pid, 0)`` still finds its pid until its parent collects it, so no
listing removes its registration, and a doctor that asks only ``kill`` calls it a running session
that does not answer. Here a real ``pi-cross-session inbox`` (this test process is its parent) is
killed with SIGKILL and left unreaped; a real ``doctor`` then has to say what it is, name this
process as the one that must reap it, change nothing, and never advise removing its files (they are
not proven stale while the pid exists). Once reaped, the next listing removes them.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.doctor_survey import look_up_process
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.file_state import exists, tree_state
from tests.support.forked import EXEC_ENV
from tests.support.processes import CLI, WatchedProcess, cli_env, run_cli
from tests.support.waiting import eventually


def state_of(pid: int) -> str:
    """The state letter in ``/proc/<pid>/stat`` (``""`` once the pid is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    return raw[raw.rfind(b")") + 1 :].split()[0].decode()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="zombies are read from Linux's /proc")
@pytest.mark.anyio
async def test_a_killed_unreaped_session_is_a_zombie_its_parent_must_reap(
    private_agent_dir: Path, locations: Locations
) -> None:
    # Executed, not forked from the suite's fork server: this process must be its parent.
    inbox = WatchedProcess(
        [*CLI, "inbox", "--json", "--name", "undead"],
        env={**cli_env(private_agent_dir), EXEC_ENV: "1"},
        label="inbox",
    )
    try:
        ready = inbox.wait_event("ready")
        pid = inbox.pid
        assert ready["pid"] == pid
        registration = locations.registration_path(ready["instanceId"])
        os.kill(pid, signal.SIGKILL)
        await eventually(lambda: state_of(pid) == "Z")

        process = look_up_process(pid)
        assert (process.gone, process.zombie) == (False, True)
        assert process.parent is not None
        assert process.parent.pid == os.getpid()

        before = tree_state(private_agent_dir, locations.runtime_dir)
        checked = run_cli(private_agent_dir, "doctor", "--json")
        text = run_cli(private_agent_dir, "doctor")
        assert tree_state(private_agent_dir, locations.runtime_dir) == before
        assert checked.returncode == 0, checked
        [finding] = [
            finding
            for finding in checked.json()["findings"]
            if f"process {pid}" in finding["detail"]
        ]
        assert finding["subject"] == f"session undead [{ready['ref']}]"
        assert finding["severity"] == "warning"
        assert "has exited but is not reaped: a zombie" in finding["detail"]
        assert f"its parent, process {os.getpid()}" in finding["detail"]
        assert "still runs" not in finding["detail"]
        assert "rm " not in finding["fix"]
        assert "leave it in place" in finding["fix"]
        assert f"ps -o pid,stat,args -p {os.getpid()}" in finding["fix"]
        assert "zombie" in text.stdout

        # A listing cannot reap it yet: the pid still exists.
        assert run_cli(private_agent_dir, "peers", "--json").returncode == 0
        assert exists(registration)
    finally:
        inbox.close()  # reaps it
    assert look_up_process(pid).gone
    # Reaped: the next listing removes the registration, as the fix says.
    listing = run_cli(private_agent_dir, "peers", "--json")
    assert listing.returncode == 0, listing
    assert not exists(registration)


def test_a_running_process_is_no_zombie() -> None:
    process = look_up_process(os.getpid())
    assert (process.gone, process.zombie, process.parent) == (False, False, None)
