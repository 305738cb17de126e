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

Then, with two live peers (two ``pi-cross-session inbox --busy 0`` processes in another agent
dir, started before the rounds and stopped after them):

* ``peers --json (2 live)`` — a listing that reads, probes and prints two sessions;
* ``send (2 live)`` — a send to one of them that ends ``submitted``: a distinct text each time
  (no duplicate), and few enough rounds to stay inside one sender's burst (every send's exit
  status is checked; a round that did not exit 0 is counted and makes the run fail).

Target for both: at most 12x ``python -c pass`` (median of the paired ratios).

And, for reference (no target), what any command that reads a registration or talks to a peer
imports before it does anything, each as ``python -c``:

* ``floor: pydantic + 1 model`` — pydantic, and one model built and used;
* ``floor: protocol models + loop`` — the frame and registration models, the exchange, and an
  event loop run once.

Usage: ``python bench/cli_start.py [--rounds N] [--only empty|live|floor] [--json]``. Exit
status 1 when a ratio misses its target (or a live send failed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

#: peers --json on an empty agent dir, as a multiple of ``python -c pass`` (median of pairs).
TARGET_RATIO: Final = 6.0
#: peers --json and a send, with two live peers, as a multiple of ``python -c pass``.
LIVE_TARGET_RATIO: Final = 12.0
#: Rounds of the live send at most: one sender may send 30 at once, then one every 2 s, and a
#: send that is refused ``rate_limited`` would measure something else.
MAX_LIVE_SEND_ROUNDS: Final = 28

COMMANDS: Final = {
    "peers --json": ("peers", "--json"),
    "paths --json": ("paths", "--json"),
    "send nobody x --json": ("send", "nobody", "x", "--json"),
}
#: The commands run against two live peers (``alpha`` and ``beta``); the round number makes
#: each send's text its own.
LIVE_COMMANDS: Final[dict[str, Callable[[int], tuple[str, ...]]]] = {
    "peers --json (2 live)": lambda _round: ("peers", "--json"),
    "send (2 live)": lambda number: ("send", "alpha", f"bench round {number}", "--json"),
}
#: What a command that reads a registration or talks to a peer cannot go below: the imports
#: alone, as ``python -c`` programs (for reference; no target).
FLOORS: Final = {
    "floor: pydantic + 1 model": (
        "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nM(x=1)"
    ),
    "floor: protocol models + loop": (
        "import anyio\n"
        "import pi_cross_session._internal.protocol.frames\n"
        "import pi_cross_session._internal.protocol.registration\n"
        "import pi_cross_session._internal.protocol.io.exchange\n"
        "anyio.run(anyio.sleep, 0)"
    ),
}
#: The target of each command measured.
TARGETS: Final = {"peers --json": TARGET_RATIO, **dict.fromkeys(LIVE_COMMANDS, LIVE_TARGET_RATIO)}


def cli_argv() -> list[str]:
    """The installed ``pi-cross-session`` script beside this interpreter (what users run),
    else ``python -m pi_cross_session``."""
    script = shutil.which("pi-cross-session", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "pi_cross_session"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall time of one run, and its exit status."""
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    return time.perf_counter() - started, done.returncode


def paired(
    rounds: int,
    env: dict[str, str],
    command: Callable[[int], Sequence[str]],
    program: Sequence[str] | None = None,
) -> dict[str, float]:
    """``rounds`` pairs of ``python -c pass`` and ``command(round)`` (run by ``program``, the
    command line by default), the order alternating."""
    baseline = [sys.executable, "-c", "pass"]
    cli = cli_argv() if program is None else list(program)
    ratios: list[float] = []
    floors: list[float] = []
    ours: list[float] = []
    failed = 0
    for number in range(rounds):
        argv = [*cli, *command(number)]
        if number % 2 == 0:
            floor, _ = timed(baseline, env)
            mine, code = timed(argv, env)
        else:
            mine, code = timed(argv, env)
            floor, _ = timed(baseline, env)
        failed += code != 0
        floors.append(floor)
        ours.append(mine)
        ratios.append(mine / floor)
    return {
        "ratio_median": statistics.median(ratios),
        "ours_median_ms": statistics.median(ours) * 1000,
        "floor_median_ms": statistics.median(floors) * 1000,
        "failed": failed,
    }


def measure(rounds: int, agent_dir: str) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir}
    results: dict[str, dict[str, float]] = {}
    for label, args in COMMANDS.items():
        timed([*cli_argv(), *args], env)  # warm the file cache once
        results[label] = paired(rounds, env, lambda _round, args=args: args)
        results[label].pop("failed")  # a send to nobody fails by design
    return results


@contextmanager
def live_peers(agent_dir: str, names: Sequence[str]) -> Iterator[None]:
    """``pi-cross-session inbox --busy 0`` processes, one per name, each until it said ready."""
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir, "PYTHONUNBUFFERED": "1"}
    inboxes: list[subprocess.Popen[str]] = []
    try:
        for name in names:
            inbox = subprocess.Popen(
                [*cli_argv(), "inbox", "--name", name, "--busy", "0", "--json"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            inboxes.append(inbox)
            assert inbox.stdout is not None
            first = inbox.stdout.readline()
            if '"ready"' not in first:
                raise RuntimeError(f"inbox {name} did not start: {first!r}")
        yield
    finally:
        for inbox in inboxes:
            inbox.terminate()
        for inbox in inboxes:
            try:
                inbox.wait(timeout=15)
            except subprocess.TimeoutExpired:
                inbox.kill()
                inbox.wait()


def measure_live(rounds: int, agent_dir: str) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir}
    results: dict[str, dict[str, float]] = {}
    counter = itertools.count(10_000)
    with live_peers(agent_dir, ("alpha", "beta")):
        for label, command in LIVE_COMMANDS.items():
            count = rounds
            if label.startswith("send"):
                count = min(rounds, MAX_LIVE_SEND_ROUNDS)
            timed([*cli_argv(), *command(next(counter))], env)  # warm the file cache once
            results[label] = paired(count, env, command)
            results[label]["rounds"] = count
    return results


def measure_floors(rounds: int, agent_dir: str) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PI_CODING_AGENT_DIR": agent_dir}
    python = [sys.executable, "-c"]
    results: dict[str, dict[str, float]] = {}
    for label, code in FLOORS.items():
        timed([*python, code], env)  # warm the file cache once
        results[label] = paired(rounds, env, lambda _round, code=code: (code,), python)
        results[label].pop("failed")
    return results


def _agent_dir(root: str, name: str) -> str:
    path = os.path.join(root, name)
    os.mkdir(path, 0o700)
    return path


def _remove_runtime_dir(agent_dir: str) -> None:
    # A send resolves (and may create) the runtime dir of this agent dir under /tmp.
    from pi_cross_session._internal.protocol.io import environment

    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": agent_dir}).runtime_dir
    shutil.rmtree(runtime_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=31, help="pairs per command (default 31)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--only",
        choices=("empty", "live", "floor"),
        help="only the commands in an empty agent dir, those with two live peers, or the floors",
    )
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="xs-bench-start-")
    empty_dir, live_dir = _agent_dir(root, "agent"), _agent_dir(root, "live")
    results: dict[str, dict[str, float]] = {}
    try:
        if args.only in (None, "empty"):
            results.update(measure(args.rounds, empty_dir))
        if args.only in (None, "live"):
            results.update(measure_live(args.rounds, live_dir))
        if args.only in (None, "floor"):
            results.update(measure_floors(args.rounds, empty_dir))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for agent_dir in (empty_dir, live_dir):
            _remove_runtime_dir(agent_dir)
    verdicts = {
        label: results[label]["ratio_median"] <= target and not results[label].get("failed")
        for label, target in TARGETS.items()
        if label in results
    }
    ok = all(verdicts.values())
    if args.json:
        targets = {label: TARGETS[label] for label in verdicts}
        print(json.dumps({"rounds": args.rounds, "targets": targets, "results": results}))
    else:
        print(f"{args.rounds} paired rounds (a live send at most {MAX_LIVE_SEND_ROUNDS}); medians")
        print(f"{'command':<30}{'ours / python -c pass':>24}{'ours ms':>10}{'floor ms':>10}")
        for label, figures in results.items():
            print(
                f"{label:<30}{figures['ratio_median']:>24.2f}"
                f"{figures['ours_median_ms']:>10.1f}{figures['floor_median_ms']:>10.1f}"
            )
        for label, met in verdicts.items():
            failed = results[label].get("failed")
            note = f"; {failed:g} runs did not exit 0" if failed else ""
            print(f"target: {label} <= {TARGETS[label]:g}x ({'met' if met else 'MISSED'}{note})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
