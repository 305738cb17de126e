"""What a listing costs with git metadata read from files, against one ``git`` process per peer.

Set-up (all in a fresh temporary dir, removed at the end): N git repositories, each with one
commit, and N registrations of live peers whose cwds are those repositories, in a private agent dir.
"Live" means their probe succeeds: by default a fake probe that answers at once (``--probe fake``),
so the figures are about the listing's own work; ``--probe socket`` gives every peer a real Unix
listener and probes it by connecting, which adds the same socket cost to both sides.

Listings are timed in alternation, all through :func:`list_peers` with the real file layer:

* **fast** — git metadata from :func:`resolve_git_info` (git's files read in one worker thread,
  the ``git`` command only as a fallback);
* **naive** — git metadata from one ``git -C <cwd> rev-parse --show-toplevel HEAD --abbrev-ref
  HEAD`` per peer, all started at once, as the reference does;
* **cached, cold / warm** — the alternative to the file reader: that same ``git`` command once per
  distinct cwd, at most :data:`MAX_GIT_SUBPROCESSES` at a time, its answers kept for
  ``--cache-ttl`` seconds (:class:`CachedGit`). "Cold" empties the cache before each listing (a
  command-line ``peers`` is a new process, so it is always cold; a session is cold after the TTL);
  "warm" lists again within the TTL;
* **no git** — the listing a send makes: no git metadata at all.

All must produce the same peers, and the git-reading ones the same git metadata (checked before
timing). The ratio fast / naive of the medians is reported; the target is at most 0.3. The other
listings and the git step alone are timed the same way and reported as ratios to naive too.

Run ``python bench/listing.py`` (``--json`` for machine-readable output, ``--peers N``,
``--repos N`` to spread the peers over fewer repositories, ``--repeat N``). Needs ``git`` on PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.io.discovery import Listing, list_peers
from pi_cross_session._internal.protocol.io.git_settings import MAX_GIT_SUBPROCESSES
from pi_cross_session._internal.protocol.io.gitinfo import git_rev_parse, resolve_git_info
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import (
    GitInfo,
    Registration,
    build_registration,
    serialize,
)
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.tokens import new_instance_id, new_token

TARGET_RATIO = 0.3
Resolver = Callable[[Sequence[str]], Awaitable[Mapping[str, GitInfo | None]]]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def make_repos(root: Path, count: int) -> list[Path]:
    repos = []
    for index in range(count):
        repo = root / f"repo-{index:03d}"
        repo.mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main" if index % 2 else f"topic/{index}")
        (repo / "README").write_text(f"repository {index}\n")
        git(repo, "add", "README")
        git(repo, "commit", "-q", "-m", "first")
        if index % 5 == 0:
            git(repo, "pack-refs", "--all")  # some repos with packed refs only
        repos.append(repo)
    return repos


def publish_peers(locations: Locations, repos: list[Path], peers: int) -> list[Registration]:
    """``peers`` live registrations, their cwds the repositories in turn."""
    fs.ensure_private_dir(locations.peers_dir)
    now = time.time_ns() // 1_000_000
    registrations = []
    for index in range(peers):
        repo = repos[index % len(repos)]
        instance_id = new_instance_id()
        registration = build_registration(
            session_id=f"bench-session-{index}",
            session_name=f"bench-{index}",
            instance_id=instance_id,
            cwd=str(repo),
            pid=os.getpid(),
            started_at=now,
            updated_at=now + index,
            status="idle",
            inbound="accept",
            socket_path=locations.socket_path(instance_id),
            token=new_token(),
        )
        fs.write_registration(
            locations.peers_dir, instance_id, serialize(registration), still_current=lambda: True
        )
        registrations.append(registration)
    return registrations


async def fake_probe(registration: Registration) -> bool:
    await anyio.lowlevel.checkpoint()
    return True


async def socket_probe(registration: Registration) -> bool:
    with anyio.move_on_after(0.35):
        try:
            stream = await anyio.connect_unix(registration.socket_path)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


@contextlib.asynccontextmanager
async def listeners(locations: Locations, registrations: list[Registration]) -> AsyncIterator[None]:
    """A real Unix listener per peer that accepts and closes each connection."""
    fs.ensure_private_dir(locations.runtime_dir)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        await stream.aclose()

    async with contextlib.AsyncExitStack() as stack, anyio.create_task_group() as group:
        for registration in registrations:
            listener = await anyio.create_unix_listener(registration.socket_path)
            await stack.enter_async_context(listener)
            group.start_soon(listener.serve, handle)
        yield
        group.cancel_scope.cancel()


async def naive_resolver(cwds: Sequence[str]) -> dict[str, GitInfo | None]:
    """The reference's way: one git process per peer, all at once."""
    results: dict[str, GitInfo | None] = {}

    async def one(cwd: str) -> None:
        results[cwd] = await git_rev_parse(cwd)

    async with anyio.create_task_group() as group:
        for cwd in cwds:
            group.start_soon(one, cwd)
    return results


class CachedGit:
    """The measured alternative to the file reader: ``git`` once per distinct cwd, a few at a
    time, each answer kept ``ttl_s`` seconds."""

    def __init__(self, ttl_s: float, max_processes: int = MAX_GIT_SUBPROCESSES) -> None:
        self.ttl_s = ttl_s
        self.max_processes = max_processes
        self._answers: dict[str, tuple[float, GitInfo | None]] = {}
        self.processes = 0

    def clear(self) -> None:
        self._answers.clear()

    async def __call__(self, cwds: Sequence[str]) -> dict[str, GitInfo | None]:
        now = time.monotonic()
        unique = list(dict.fromkeys(cwds))
        stale = [c for c in unique if c not in self._answers or self._answers[c][0] <= now]
        limiter = anyio.CapacityLimiter(self.max_processes)

        async def one(cwd: str) -> None:
            async with limiter:
                self.processes += 1
                answer = await git_rev_parse(cwd)
            self._answers[cwd] = (time.monotonic() + self.ttl_s, answer)

        async with anyio.create_task_group() as group:
            for cwd in stale:
                group.start_soon(one, cwd)
        return {cwd: self._answers[cwd][1] for cwd in unique}


def summary(listing: Listing) -> list[tuple[str, Any]]:
    return [(p.instance_id, None if p.git is None else p.git.to_dict()) for p in listing.peers]


async def run(
    peers: int, repeat: int, probe_kind: str, repos: int | None = None, cache_ttl_s: float = 5.0
) -> dict[str, Any]:
    repo_count = peers if repos is None else repos
    root = Path(tempfile.mkdtemp(prefix="pi-bench-listing-"))
    locations = environment.resolve(env={paths.AGENT_DIR_ENV: str(root / "agent")})
    try:
        started = time.perf_counter()
        repo_paths = await anyio.to_thread.run_sync(make_repos, root / "repos", repo_count)
        registrations = publish_peers(locations, repo_paths, peers)
        setup_s = time.perf_counter() - started
        probe = fake_probe if probe_kind == "fake" else socket_probe
        cached = CachedGit(cache_ttl_s)
        async with contextlib.AsyncExitStack() as stack:
            if probe_kind == "socket":
                await stack.enter_async_context(listeners(locations, registrations))

            async def listing(resolver: Resolver, *, with_git: bool = True) -> Listing:
                return await list_peers(
                    locations,
                    fs,
                    probe,
                    self_instance_id=None,
                    with_git=with_git,
                    git_resolver=resolver,
                )

            async def cold() -> Listing:
                cached.clear()
                return await listing(cached)

            # Same answer every way, and every peer in a repository: otherwise no comparison.
            fast_listing = await listing(resolve_git_info)
            expected = summary(fast_listing)
            if summary(await listing(naive_resolver)) != expected:
                raise SystemExit("the fast and the naive listing disagree")
            if summary(await cold()) != expected:
                raise SystemExit("the fast and the cached-git listing disagree")
            plain = await listing(resolve_git_info, with_git=False)
            if [p.instance_id for p in plain.peers] != [p for p, _ in expected]:
                raise SystemExit("the listing without git lists other peers")
            if len(fast_listing.peers) != peers or any(p.git is None for p in fast_listing.peers):
                raise SystemExit("some peers are missing or have no git metadata")

            cwds = [r.cwd for r in registrations]
            cases: list[tuple[str, Callable[[], Awaitable[object]]]] = [
                ("listing_fast", lambda: listing(resolve_git_info)),
                ("listing_naive", lambda: listing(naive_resolver)),
                ("listing_cached_cold", cold),
                ("listing_cached_warm", lambda: listing(cached)),
                ("listing_no_git", lambda: listing(resolve_git_info, with_git=False)),
                ("git_fast", lambda: resolve_git_info(cwds)),
                ("git_naive", lambda: naive_resolver(cwds)),
            ]
            timings: dict[str, list[float]] = {name: [] for name, _ in cases}
            for round_index in range(repeat):
                # Alternate the order so neither side always runs on a warmer cache. The warm
                # cached listing always follows a listing through the same cache.
                order = cases if round_index % 2 == 0 else cases[::-1]
                for name, case in order:
                    if name == "listing_cached_warm":
                        await listing(cached)  # within the TTL from here on
                    before = time.perf_counter()
                    await case()
                    timings[name].append(time.perf_counter() - before)
        medians = {name: statistics.median(values) for name, values in timings.items()}
        naive = medians["listing_naive"]
        return {
            "peers": peers,
            "repos": repo_count,
            "repeat": repeat,
            "probe": probe_kind,
            "cache_ttl_s": cache_ttl_s,
            "setup_s": round(setup_s, 3),
            "p50_ms": {name: round(value * 1000, 2) for name, value in medians.items()},
            "listing_ratio": round(medians["listing_fast"] / naive, 4),
            "ratios_to_naive": {
                name: round(value / naive, 4)
                for name, value in medians.items()
                if name.startswith("listing_")
            },
            "git_ratio": round(medians["git_fast"] / medians["git_naive"], 4),
            "target_ratio": TARGET_RATIO,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--peers", type=int, default=100, help="live peers")
    parser.add_argument(
        "--repos", type=int, default=None, help="repositories the peers share (default: one each)"
    )
    parser.add_argument(
        "--cache-ttl", type=float, default=5.0, help="seconds the cached-git alternative keeps"
    )
    parser.add_argument("--repeat", type=int, default=15, help="interleaved rounds")
    parser.add_argument(
        "--probe",
        choices=("fake", "socket"),
        default="fake",
        help="fake: an instant probe (default); socket: a real Unix listener per peer",
    )
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        print("git is not on PATH", file=sys.stderr)
        return 2
    # Deterministic git: no user or system config, no repository of ours leaking in.
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES"):
        os.environ.pop(name, None)
    result = anyio.run(run, args.peers, args.repeat, args.probe, args.repos, args.cache_ttl)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    p50 = result["p50_ms"]
    probe_note = "fake instant probe" if args.probe == "fake" else "real Unix listeners"
    ratios = result["ratios_to_naive"]
    print(
        f"{result['peers']} peers in {result['repos']} git repositories, {probe_note}, "
        f"{result['repeat']} interleaved rounds (set-up {result['setup_s']} s)"
    )
    for name, label in (
        ("listing_fast", "listing, git from files "),
        ("listing_naive", "listing, git per peer   "),
        ("listing_cached_cold", "listing, cached git cold"),
        ("listing_cached_warm", "listing, cached git warm"),
        ("listing_no_git", "listing without git     "),
    ):
        print(f"{label}: p50 {p50[name]:8.2f} ms  ({ratios[name]:.3f} of git per peer)")
    print(f"git step alone          : p50 {p50['git_fast']:8.2f} ms vs {p50['git_naive']:.2f} ms")
    verdict = "ok" if result["listing_ratio"] <= TARGET_RATIO else "OVER"
    print(
        f"listing ratio fast/naive: {result['listing_ratio']:.3f} "
        f"(target <= {TARGET_RATIO}: {verdict}); git step ratio {result['git_ratio']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
