"""What a commit costs once a bounded table is full, when eviction has to choose whose entry goes.

The receiver's tables (``security/limits.py``) evict so that no sender pushes out another's
entries (docs/security.md, "Bounded tables and who can evict what"). The choice is cheap when the
committing sender holds entries of its own (its oldest goes) and costs a scan of the holders when
it holds none (the largest holder's oldest goes), which is what a flood of throwaway identities
causes. This measures, per table, microseconds per commit into a full table:

* **one sender** — the table is full of one sender's entries and that sender commits more;
* **newcomers** — the table is full, one entry per sender (512 senders for the id ledger and the
  text digests), and every commit comes from a sender never seen before: each one scans every
  holder. For the rate buckets (256 tracked), every tracked bucket is drained, so that no bucket
  is full and forgetting one needs the whole scan.

Each case runs ``--rounds`` times (fresh tables each time) with the collector paused; the median
and best are reported. The same script runs unchanged against an older checkout of the package,
since it uses only the public ``commit`` methods.

Run ``.venv/bin/python bench/tables.py`` (``--json`` for machine-readable output).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from pi_cross_session._internal.protocol.limits import (
    MAX_CACHE_ENTRIES,
    MAX_RATE_SENDERS,
    RATE_CAPACITY,
)
from pi_cross_session._internal.security.limits import MessageIdLedger, RateLimiter, TextDedup

NOW = 1_000.0


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    #: Builds a full table and returns the commit to time (called with 0, 1, 2 …).
    setup: Callable[[], Callable[[int], None]]


def text_one_sender() -> Callable[[int], None]:
    table = TextDedup()
    for n in range(MAX_CACHE_ENTRIES):
        table.commit(TextDedup.key("s", f"fill {n}"), NOW)
    return lambda n: table.commit(TextDedup.key("s", f"new {n}"), NOW)


def text_newcomers() -> Callable[[int], None]:
    table = TextDedup()
    for n in range(MAX_CACHE_ENTRIES):
        table.commit(TextDedup.key(f"fill-{n}", "text"), NOW)
    return lambda n: table.commit(TextDedup.key(f"new-{n}", "text"), NOW)


def ids_one_sender() -> Callable[[int], None]:
    ledger = MessageIdLedger()
    for n in range(MAX_CACHE_ENTRIES):
        ledger.commit("s", f"fill-{n}")
    return lambda n: ledger.commit("s", f"new-{n}")


def ids_newcomers() -> Callable[[int], None]:
    ledger = MessageIdLedger()
    for n in range(MAX_CACHE_ENTRIES):
        ledger.commit(f"fill-{n}", "m")
    return lambda n: ledger.commit(f"new-{n}", "m")


def rate_tracked() -> Callable[[int], None]:
    rate = RateLimiter()
    senders = [f"s{n}" for n in range(MAX_RATE_SENDERS)]
    for sender in senders:
        rate.commit(sender, NOW)
    # A tracked sender commits again (no eviction); a second apart so tokens never run out.
    return lambda n: rate.commit(senders[n % len(senders)], NOW + n)


def rate_newcomers() -> Callable[[int], None]:
    rate = RateLimiter()
    for n in range(MAX_RATE_SENDERS):
        for _ in range(RATE_CAPACITY):
            rate.commit(f"drained-{n}", NOW)
    return lambda n: rate.commit(f"new-{n}", NOW)


CASES = (
    Case("text digests, one sender", text_one_sender),
    Case("text digests, newcomers", text_newcomers),
    Case("message ids, one sender", ids_one_sender),
    Case("message ids, newcomers", ids_newcomers),
    Case("rate buckets, tracked senders", rate_tracked),
    Case("rate buckets, newcomers (all drained)", rate_newcomers),
)


def time_case(case: Case, commits: int) -> float:
    """Microseconds per commit, for ``commits`` commits into a freshly filled table."""
    commit = case.setup()
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for n in range(commits):
            commit(n)
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed / commits * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--commits", type=int, default=5_000, help="commits timed per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per case")
    args = parser.parse_args(argv)
    results = {}
    for case in CASES:
        samples = [time_case(case, args.commits) for _ in range(args.rounds)]
        results[case.name] = {"median_us": statistics.median(samples), "best_us": min(samples)}
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'case':<42} {'median µs':>10} {'best µs':>9}")
    for name, figures in results.items():
        print(f"{name:<42} {figures['median_us']:>10.2f} {figures['best_us']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
