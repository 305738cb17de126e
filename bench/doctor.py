"""What ``pi-cross-session doctor`` costs in a peers dir stuffed with decoy registrations.

Set-up (in a fresh temporary agent dir, removed at the end, with its runtime dir): one live
``pi-cross-session inbox`` and N well-formed registrations (default 10,000) naming a live process
that is no session (a ``sleep``), so that no listing can reach them or prove them stale. Then
``pi-cross-session doctor`` (text) runs R times as a real process; the wall time of each run and
the bytes it printed are recorded, and ``doctor --json`` once for the finding count.

Nothing is compared side by side here: the figure to beat is the one the tracker reported for the
same set-up before doctor was bounded (12 s and 2 MB). To measure another version of the package
under the same set-up, run this script with that version first on ``PYTHONPATH``.

Run ``python bench/doctor.py`` (``--json``, ``--decoys N``, ``--repeat R``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs

CLI = (sys.executable, "-m", "pi_cross_session")


def write_decoys(locations: Locations, count: int, pid: int) -> None:
    fs.ensure_private_dir(locations.peers_dir)
    for index in range(count):
        instance_id = os.urandom(16).hex()
        body = {
            "version": 2,
            "protocol": 1,
            "id": str(uuid.uuid4()),
            "instanceId": instance_id,
            "name": f"decoy-{index}",
            "cwd": "/",
            "pid": pid,
            "startedAt": 1,
            "updatedAt": 1,
            "status": "idle",
            "inbound": "accept",
            "socketPath": locations.socket_path(instance_id),
            "token": os.urandom(32).hex(),
        }
        data = json.dumps(body, separators=(",", ":")).encode()
        fs.write_registration(locations.peers_dir, instance_id, data, still_current=lambda: True)


@contextmanager
def decoy_environment(decoys: int) -> Iterator[tuple[dict[str, str], Locations]]:
    """A private agent dir with a live inbox and ``decoys`` decoys of a live ``sleep``."""
    root = tempfile.mkdtemp(prefix="bench-doctor-")
    agent_dir = os.path.join(root, "agent")
    os.mkdir(agent_dir)
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir, "PYTHONUNBUFFERED": "1"}
    locations = environment.resolve(env=env)
    sleeper = subprocess.Popen(["sleep", "3600"])
    inbox = subprocess.Popen(
        [*CLI, "inbox", "--name", "real", "--json"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert inbox.stdout is not None
        for line in inbox.stdout:  # wait for the ready event
            if json.loads(line).get("event") == "ready":
                break
        write_decoys(locations, decoys, sleeper.pid)
        yield env, locations
    finally:
        inbox.terminate()
        inbox.wait(timeout=30)
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


def measure(decoys: int, repeat: int) -> dict[str, Any]:
    with decoy_environment(decoys) as (env, _):
        seconds: list[float] = []
        sizes: list[int] = []
        for _ in range(repeat):
            start = time.perf_counter()
            done = subprocess.run([*CLI, "doctor"], env=env, capture_output=True, check=False)
            seconds.append(time.perf_counter() - start)
            sizes.append(len(done.stdout))
        as_json = subprocess.run(
            [*CLI, "doctor", "--json"], env=env, capture_output=True, check=False
        )
        try:
            findings = len(json.loads(as_json.stdout)["findings"])
        except ValueError:
            findings = -1
    return {
        "decoys": decoys,
        "runs": repeat,
        "seconds_median": statistics.median(seconds),
        "seconds_max": max(seconds),
        "bytes_median": statistics.median(sizes),
        "bytes_max": max(sizes),
        "findings": findings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--decoys", type=int, default=10_000, help="decoy registrations")
    parser.add_argument("--repeat", type=int, default=5, help="doctor runs")
    args = parser.parse_args(argv)
    result = measure(args.decoys, args.repeat)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"doctor with {result['decoys']} decoys, {result['runs']} runs: "
        f"{result['seconds_median']:.2f} s median ({result['seconds_max']:.2f} s max, process "
        f"start included), {result['bytes_median']:.0f} bytes printed (max "
        f"{result['bytes_max']}), {result['findings']} findings"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
