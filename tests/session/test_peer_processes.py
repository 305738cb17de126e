"""Two sessions in two OS processes: messages both ways, a third process listing them, and a clean
exit (registration, then socket, removed) whichever way each process is told to stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from pi_cross_session._internal.protocol.paths import Locations
from tests.support.file_state import exists
from tests.support.processes import PeerProcess, PeerProcesses

#: How long the command line's ``peers`` may take (each listing probes with a 350 ms deadline).
CLI_TIMEOUT_S = 30.0


def leftovers(locations: Locations) -> list[str]:
    """Registration files and sockets still in this agent dir (lock files aside)."""
    found: list[str] = []
    for directory, suffix in ((locations.peers_dir, ".json"), (locations.runtime_dir, ".sock")):
        if os.path.isdir(directory):
            found += [name for name in os.listdir(directory) if name.endswith(suffix)]
    return found


def assert_files(peer: PeerProcess, *, present: bool) -> None:
    ready = peer.ready
    assert exists(ready["registrationPath"]) is present, peer.output()
    assert exists(ready["socketPath"]) is present, peer.output()


def test_two_processes_message_each_other_and_clean_up_on_exit_and_eof(
    peer_processes: PeerProcesses, locations: Locations, private_agent_dir: Path
) -> None:
    alpha, beta = peer_processes.start("alpha", "beta")
    for peer in (alpha, beta):
        assert peer.ready["pid"] == peer.pid
        assert_files(peer, present=True)

    to_beta = alpha.send("beta", "Hello beta, from the alpha process.")
    to_alpha = beta.send("alpha", "Hello alpha, from the beta process.")
    for report in (to_beta, to_alpha):
        assert (report["ok"], report["status"]) == (True, "submitted"), report

    # Each message reached the other process's host, from the sender's very process.
    got = beta.wait_event("message", messageId=to_beta["messageId"])
    assert got["text"] == "Hello beta, from the alpha process."
    assert got["from"]["instanceId"] == alpha.ready["instanceId"]
    assert got["from"]["pid"] == alpha.pid
    got = alpha.wait_event("message", messageId=to_alpha["messageId"])
    assert got["text"] == "Hello alpha, from the beta process."
    assert got["from"]["instanceId"] == beta.ready["instanceId"]
    assert got["from"]["pid"] == beta.pid

    # A third process, the command line, sees both.
    listed = subprocess.run(
        [sys.executable, "-m", "pi_cross_session", "peers", "--json"],
        env={**os.environ, "PI_CODING_AGENT_DIR": str(private_agent_dir)},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    seen = {(p["name"], p["instanceId"], p["pid"]) for p in json.loads(listed.stdout)["peers"]}
    assert seen == {
        ("alpha", alpha.ready["instanceId"], alpha.pid),
        ("beta", beta.ready["instanceId"], beta.pid),
    }

    alpha.exit()  # an explicit {"exit": true}
    beta.close_stdin()  # end of input
    assert alpha.wait_exit() == 0, alpha.output()
    assert beta.wait_exit() == 0, beta.output()
    assert alpha.wait_event("stopped")["reason"] == "exit"
    assert beta.wait_event("stopped")["reason"] == "eof"
    for peer in (alpha, beta):
        assert peer.wait_event("stopped")["error"] is None
        assert_files(peer, present=False)
    assert leftovers(locations) == []


def test_sigterm_and_sigint_stop_a_process_cleanly(
    peer_processes: PeerProcesses, locations: Locations
) -> None:
    terminated, interrupted = peer_processes.start("terminated", "interrupted")
    for peer in (terminated, interrupted):
        assert_files(peer, present=True)
    terminated.signal(signal.SIGTERM)
    interrupted.signal(signal.SIGINT)
    assert terminated.wait_exit() == 0, terminated.output()
    assert interrupted.wait_exit() == 0, interrupted.output()
    assert terminated.wait_event("stopped")["reason"] == "signal SIGTERM"
    assert interrupted.wait_event("stopped")["reason"] == "signal SIGINT"
    for peer in (terminated, interrupted):
        assert_files(peer, present=False)
        assert "Traceback" not in peer.output()
    assert leftovers(locations) == []
