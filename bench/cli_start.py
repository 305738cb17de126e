"""How fast the command line starts, as a ratio to the interpreter's own start.

Each round runs ``python -c pass`` and one ``pi-cross-session`` command back to back (their order
alternating from round to round), each as a fresh process, and records the ratio of the two wall
times. The figure is the median of those paired ratios, so load that comes and goes on a shared
machine hits both sides of a pair alike. Commands, all in an empty temporary agent dir:

* ``peers --json`` — the target: at most 6x ``python -c pass`` (nothing to list, so nothing but
  the parser, the paths and the output should be imported);
* ``paths --json`` — computes paths only;
* ``send nobody x --json`` — the full path of a send (identity, listing, exchange modules),
  ending ``not_found``: what a command that talks to peers costs before it talks.

Usage: ``python bench/cli_start.py [--rounds N] [--json]``. Exit status 1 when the ``peers``
ratio misses the target.
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
from pathlib import Path
from typing import Final

#: peers --json on an empty agent dir, as a multiple of ``python -c pass`` (median of pairs).
TARGET_RATIO: Final = 6.0

COMMANDS: Final = {
    "peers --json": ("peers", "--json"),
    "paths --json": ("paths", "--json"),
    "send nobody x --json": ("send", "nobody", "x", "--json"),
}


def cli_argv() -> list[str]:
    """The installed ``pi-cross-session`` script beside this interpreter (what users run),
    else ``python -m pi_cross_session``."""
    script = shutil.which("pi-cross-session", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "pi_cross_session"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def measure(rounds: int, agent_dir: str) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir}
    baseline = [sys.executable, "-c", "pass"]
    cli = cli_argv()
    results: dict[str, dict[str, float]] = {}
    for label, args in COMMANDS.items():
        timed([*cli, *args], env)  # warm the file cache once
        ratios: list[float] = []
        floors: list[float] = []
        ours: list[float] = []
        for number in range(rounds):
            if number % 2 == 0:
                floor = timed(baseline, env)
                mine = timed([*cli, *args], env)
            else:
                mine = timed([*cli, *args], env)
                floor = timed(baseline, env)
            floors.append(floor)
            ours.append(mine)
            ratios.append(mine / floor)
        results[label] = {
            "ratio_median": statistics.median(ratios),
            "ours_median_ms": statistics.median(ours) * 1000,
            "floor_median_ms": statistics.median(floors) * 1000,
        }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=31, help="pairs per command (default 31)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="xs-bench-start-")
    agent_dir = os.path.join(root, "agent")
    os.mkdir(agent_dir, 0o700)
    try:
        results = measure(args.rounds, agent_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        # A send resolves (and may create) the runtime dir of this agent dir under /tmp.
        from pi_cross_session._internal.protocol.io import environment

        runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": agent_dir}).runtime_dir
        shutil.rmtree(runtime_dir, ignore_errors=True)
    ok = results["peers --json"]["ratio_median"] <= TARGET_RATIO
    if args.json:
        print(json.dumps({"rounds": args.rounds, "target": TARGET_RATIO, "results": results}))
    else:
        print(f"{args.rounds} paired rounds; figures are medians")
        print(f"{'command':<24}{'ours / python -c pass':>24}{'ours ms':>10}{'floor ms':>10}")
        for label, figures in results.items():
            print(
                f"{label:<24}{figures['ratio_median']:>24.2f}"
                f"{figures['ours_median_ms']:>10.1f}{figures['floor_median_ms']:>10.1f}"
            )
        print(f"target: peers --json <= {TARGET_RATIO:g}x ({'met' if ok else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
