"""The process-exit fallback: a process that never calls ``harness.close()`` leaves no files.

pi-python runs no cleanup when a process ends without ``close()`` (``pi-agent-cli -p``, stdin
EOF). Here a child process registers a session, then exits with its loop abandoned mid-flight —
no close, no task cancellation — so only the extension's ``atexit`` hook can remove the files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pi_cross_session._internal.protocol.paths import Locations

CHILD = """
import asyncio, os, sys
from pi_cross_session._internal.plugin.hosts import pi_python
from tests.host.pi_harness import new_harness, runtime_of

async def main() -> None:
    harness = await new_harness(sys.argv[1], pi_python.activate)
    runtime = await runtime_of(harness)
    instance = runtime.identity.instance_id
    for path in (runtime.locations.registration_path(instance),
                 runtime.locations.socket_path(instance)):
        assert os.path.exists(path), path
        print(path, flush=True)

loop = asyncio.new_event_loop()
loop.run_until_complete(main())
# Leave without closing anything: the runtime task is still pending on an abandoned loop.
"""


@pytest.mark.slow
def test_files_are_removed_at_exit_without_close(
    locations: Locations, tmp_path: Path, pi_home: Path
) -> None:
    work = tmp_path / "child-work"
    work.mkdir()
    env = {**os.environ, "PI_HOME": str(pi_home), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(work)],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    registration, socket = done.stdout.split()
    assert registration.startswith(locations.peers_dir)
    assert socket.startswith(locations.runtime_dir)
    assert not os.path.exists(registration)
    assert not os.path.exists(socket)
