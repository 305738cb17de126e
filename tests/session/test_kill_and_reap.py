"""A session killed with SIGKILL leaves its files; listings hide it while its pid is taken and reap
it (registration and socket) once the pid is gone —
spec §1.5 and spec §10 item 20, across processes."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.file_state import exists
from tests.support.processes import PeerProcess, PeerProcesses, pid_exists


def listed_ids(listing: dict[str, object]) -> list[str]:
    peers = listing["peers"]
    assert isinstance(peers, list)
    return [peer["instanceId"] for peer in peers]


def files_of(peer: PeerProcess) -> tuple[bool, bool]:
    ready = peer.ready
    return exists(ready["registrationPath"]), exists(ready["socketPath"])


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid(WNOWAIT)")
def test_a_killed_peer_is_hidden_while_its_pid_lives_and_reaped_once_it_is_gone(
    peer_processes: PeerProcesses,
) -> None:
    victim, observer = peer_processes.start("victim", "observer")
    victim_id = victim.ready["instanceId"]
    first = observer.list_peers()
    assert listed_ids(first) == [victim_id]

    # Stopped: its socket still accepts (the kernel queues the connection) but nobody answers,
    # so the observer's probe fails; kill(pid, 0) succeeds, so the peer is only hidden.
    os.kill(victim.pid, signal.SIGSTOP)
    _, status = os.waitpid(victim.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    stopped = observer.list_peers()
    assert (listed_ids(stopped), stopped["hidden"], stopped["reaped"]) == ([], 1, 0)
    assert files_of(victim) == (True, True)

    # Killed but not yet waited for: a zombie still holds its pid, so still only hidden.
    os.kill(victim.pid, signal.SIGKILL)
    os.waitid(os.P_PID, victim.pid, os.WEXITED | os.WNOWAIT)
    assert pid_exists(victim.pid)
    zombie = observer.list_peers()
    assert (listed_ids(zombie), zombie["hidden"], zombie["reaped"]) == ([], 1, 0)
    assert files_of(victim) == (True, True)

    # Reaped by its parent: kill(pid, 0) now fails with ESRCH. SIGKILL ran no cleanup, so both
    # files are still there until a listing proves the process dead and removes them.
    assert victim.wait_exit() == -signal.SIGKILL
    assert not pid_exists(victim.pid)
    assert files_of(victim) == (True, True)
    gone = observer.list_peers()
    assert (listed_ids(gone), gone["hidden"], gone["reaped"]) == ([], 0, 1)
    assert files_of(victim) == (False, False)

    # The next listing has nothing left to do, and the observer itself is untouched.
    after = observer.list_peers()
    assert (listed_ids(after), after["hidden"], after["reaped"]) == ([], 0, 0)
    assert files_of(observer) == (True, True)
