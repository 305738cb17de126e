"""Machines that are separate hosts (``tests/support/netns.py``): each its own network stack,
/tmp and home, set up with the commands a person types (docs/remote.md, "Five minutes, two
machines": ``remote hub`` on one host, ``remote join`` with the line it printed on each other,
one ``remote invite`` per further machine), then messaging each other across the hub's NATS
server, and through a partition longer than a record's validity.

The set-up is one list of commands (:func:`set_up_steps`); the scenario after it does not
depend on how the machines were joined.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from pi_cross_session._internal.cli import exits
from tests.support import netns
from tests.support.netns import Host, HostProcess, Network, Run, Spawn, Step
from tests.support.waiting import eventually

#: Short, so that a partition outlasts a record's validity within seconds (the smallest TTL a
#: deployment may pick); the bucket and every gateway must use the same.
RECORD_TTL_S: Final = 6
MACHINES: Final = ("laptop", "buildbox")
#: What a send may end in, by exit code: the state its report says.
DEFINITE: Final = {
    exits.EXIT_OK: {"submitted", "queued"},
    exits.EXIT_REFUSED: {"refused"},
    exits.EXIT_UNKNOWN: {"receipt_unknown"},
    # No session of that name (its proxy withdrawn): refused before any message existed.
    exits.EXIT_NO_TARGET: {"refused"},
    # Its proxy withdrawn between the listing and the send: nothing was written, so certainly
    # not delivered (the code says how it ended: a socket gone, a connection refused).
    exits.EXIT_LOCAL: {"refused", "receipt_unknown"},
}
#: Pauses between the sends of one direction while the link is cut and mended (keeps the two
#: cores for the gateways; the sends themselves take up to 5 s each).
SEND_PAUSE_S: Final = 0.3


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Network]:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    try:
        made = Network(tmp_path / "hosts")
    except netns.NamespaceError as exc:
        pytest.skip(f"cannot create network namespaces here: {exc}")
    try:
        yield made
    finally:
        made.close()


def join_line(servers: str = r"\S+", token: str = r"PIXS1-\S+") -> str:
    """A pattern of the join line ``remote hub`` and ``remote invite`` print (the two words a
    machine pastes after ``remote join``), with ``servers`` and ``token`` the groups to keep."""
    return rf"pi-cross-session remote join {servers} {token}"


def set_up_steps(hub: Host, machines: tuple[str, ...], *, record_ttl: int) -> list[Step]:
    """Everything a person types, host by host, to join ``machines`` through a server on
    ``hub`` (docs/remote.md, "Five minutes, two machines"): ``remote hub`` on the hub, which
    prints a join line and keeps running; ``remote join`` with that line on the first machine;
    then for each further machine ``remote invite`` on the hub and ``remote join`` with the line
    it printed. Each join keeps running as its machine's gateway. Trust is the deployment's:
    nobody types a ``trust``. The hub's own machine runs no gateway here (``--no-gateway``)."""
    steps: list[Step] = [
        Spawn(
            hub.name,
            f"pi-cross-session remote hub --machine {hub.name} --host {hub.address} "
            f"--record-ttl {record_ttl} --no-gateway",
            ready=join_line(
                rf"(?P<{machines[0]}_servers>\S+)", rf"(?P<{machines[0]}_token>PIXS1-\S+)"
            ),
            name="hub",
        )
    ]
    for number, machine in enumerate(machines):
        if number > 0:
            # One line admits one machine: the next one is printed on the hub.
            steps.append(
                Run(
                    hub.name,
                    "pi-cross-session remote invite",
                    save={
                        f"{machine}_servers": join_line(servers=r"(\S+)"),
                        f"{machine}_token": join_line(token=r"(PIXS1-\S+)"),
                    },
                )
            )
        steps.append(
            Spawn(
                machine,
                f"pi-cross-session remote join {{{machine}_servers}} {{{machine}_token}} "
                f"--machine {machine} --record-ttl {record_ttl}",
                ready=rf"gateway {machine} ready",
                name=f"{machine} gateway",
            )
        )
    return steps


# -- what the hosts show -------------------------------------------------------------------------


def listed(host: Host) -> set[str]:
    """The names ``peers`` lists on ``host`` (probed, as a person sees them)."""
    result = host.must("pi-cross-session peers --json")
    return {peer["name"] for peer in result.json()["peers"]}


def registered(host: Host) -> set[str]:
    """The names in ``host``'s peers dir (no command run: cheap enough to poll while a partition
    lasts)."""
    names = set()
    for path in host.file("~/.pi/agent/peers").glob("*.json"):
        try:
            names.add(json.loads(path.read_bytes())["name"])
        except (OSError, ValueError, KeyError):
            continue  # replaced or removed while we looked
    return names


def converge(condition: Callable[[], bool], explain: Callable[[], object] = lambda: "") -> None:
    """Wait until ``condition`` holds: an eventual assertion, bounded only as a failing test
    (which then says what ``explain`` returns)."""
    try:
        anyio.run(partial(eventually, condition))
    except TimeoutError:
        raise AssertionError(f"never came true: {explain()}") from None


def arrivals(inbox: HostProcess) -> Counter[str]:
    """How many times each message id reached the session."""
    return Counter(e["messageId"] for e in inbox.events() if e.get("event") == "message")


def start_inbox(host: Host, name: str) -> HostProcess:
    inbox = host.spawn(f"pi-cross-session inbox --name {name} --busy 0 --json")
    inbox.wait_event("ready")
    return inbox


def sent(host: Host, target: str, text: str) -> dict[str, Any]:
    """``send`` from ``host``: the report of a send that ended in a definite state."""
    result = host.run(f"pi-cross-session send {target} '{text}' --json")
    assert result.returncode in DEFINITE, str(result)
    report: dict[str, Any] = result.json()
    assert report["state"] in DEFINITE[result.returncode], str(result)
    return {**report, "exit": result.returncode}


# -- traffic through a partition -----------------------------------------------------------------


@dataclass
class Traffic:
    """Sends from one host to one target, one after another, until stopped."""

    host: Host
    target: str
    reports: list[dict[str, Any]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        number = 0
        while not self.stopping.is_set():
            number += 1
            started = time.monotonic()
            try:
                report = sent(self.host, self.target, f"in flight {number}")
            except BaseException as exc:  # the test fails with it in stop()
                self.failure.append(exc)
                return
            self.reports.append({**report, "started": started, "to": self.target})
            self.stopping.wait(SEND_PAUSE_S)

    def received_since(self, moment: float) -> bool:
        """Whether a send started after ``moment`` got a receipt (a send that ended in no
        definite state fails the test at once)."""
        if self.failure:
            raise self.failure[0]
        return any(r["exit"] == exits.EXIT_OK and r["started"] > moment for r in self.reports)

    def stop(self) -> list[dict[str, Any]]:
        self.stopping.set()
        self.thread.join()
        if self.failure:
            raise self.failure[0]
        return self.reports


@contextmanager
def traffic(host: Host, target: str) -> Iterator[Traffic]:
    """:class:`Traffic` that stops (its last send ended) however the block ends."""
    made = Traffic(host, target)
    try:
        yield made
    finally:
        made.stopping.set()
        made.thread.join()


def plain_send(session: HostProcess, target: str, text: str) -> tuple[str, list[Any]]:
    """Have a :mod:`~tests.support.plain_v1_session` send: the message id and every reply."""
    message_id = str(uuid.uuid4())
    stdin = session.process.stdin
    assert stdin is not None
    stdin.write(json.dumps({"send": target, "text": text, "messageId": message_id}) + "\n")
    stdin.flush()
    replies: list[Any] = session.wait_event("sent", messageId=message_id)["replies"]
    return message_id, replies


def settle(sender: Host, inbox: HostProcess, report: dict[str, Any]) -> None:
    """A send's fate, once the network is whole: what its receipt said is what the session saw,
    and a receipt that never came is answered by ``status`` and matches the session's rows."""
    message_id = report["messageId"]
    if report["exit"] == exits.EXIT_NO_TARGET:
        assert (report["status"], message_id) == ("not_found", None), report
    elif report["exit"] == exits.EXIT_OK:
        inbox.wait_event("message", messageId=message_id)
    elif report["exit"] == exits.EXIT_UNKNOWN:
        asked = sender.run(f"pi-cross-session status {report['to']} {message_id} --json")
        if asked.returncode in (exits.EXIT_OK, exits.EXIT_SUBMITTED, exits.EXIT_QUEUED):
            inbox.wait_event("message", messageId=message_id)
        else:
            # The receiver has no record of it: it never arrived, and never will.
            assert asked.returncode == exits.EXIT_UNKNOWN, str(asked)
            assert arrivals(inbox)[message_id] == 0, str(asked)
    else:  # refused, or no proxy to send to: nothing left the machine
        assert arrivals(inbox)[message_id] == 0, report


def test_two_hosts_message_each_other(network: Network) -> None:
    hub = network.host("hub")
    laptop = network.host("laptop")
    buildbox = network.host("buildbox")

    # Sessions first, as on machines already in use.
    alice = start_inbox(laptop, "alice")
    bob = start_inbox(buildbox, "bob")
    carol = buildbox.spawn(
        "python -m tests.support.plain_v1_session --name carol", cwd=netns.CHECKOUT, stdin=True
    )
    carol.wait_event("ready")

    network.play(set_up_steps(hub, MACHINES, record_ttl=RECORD_TTL_S))

    def whole() -> bool:
        return {"bob@buildbox", "carol@buildbox"} <= listed(laptop) and "alice@laptop" in listed(
            buildbox
        )

    def listings() -> str:
        return f"laptop lists {sorted(listed(laptop))}, buildbox {sorted(listed(buildbox))}"

    converge(whole, listings)
    # The hub made the bucket as every gateway checks it (the same record TTL): nothing for a
    # machine to repair, which it may not.
    for host in (laptop, buildbox):
        status = host.must("pi-cross-session remote status --json").json()
        assert status["bucket"]["state"] == "ok", status["bucket"]

    # Both ways, with receipts.
    to_bob = sent(laptop, "bob@buildbox", "hello from laptop")
    assert to_bob["exit"] == exits.EXIT_OK, to_bob
    bob.wait_event("message", messageId=to_bob["messageId"])
    to_alice = sent(buildbox, "alice@laptop", "hello from buildbox")
    assert to_alice["exit"] == exits.EXIT_OK, to_alice
    alice.wait_event("message", messageId=to_alice["messageId"])

    # A session that speaks only the reference's plain v1 (no capability of ours) is reached
    # through a proxy, and reaches a remote session through one, with nothing changed: what a
    # Node session does.
    to_carol = sent(laptop, "carol@buildbox", "hello, plain session")
    assert to_carol["exit"] == exits.EXIT_OK, to_carol
    carol.wait_event("message", messageId=to_carol["messageId"])
    from_carol, replies = plain_send(carol, "alice@laptop", "hello from a plain session")
    assert [(r.get("ok"), r.get("status")) for r in replies] == [
        (True, "ready"),
        (True, "submitted"),
    ], replies
    assert alice.wait_event("message", messageId=from_carol)["sender"]["name"] == "carol@buildbox"

    # A partition longer than a record's validity, with sends in flight both ways.
    with traffic(laptop, "bob@buildbox") as outbound, traffic(buildbox, "alice@laptop") as inbound:
        converge(lambda: outbound.received_since(0) and inbound.received_since(0))
        laptop.cut()
        # Each side withdraws the other's sessions once their records went unrefreshed for a
        # TTL: the cut has then lasted longer than a record's validity.
        converge(
            lambda: (
                "bob@buildbox" not in registered(laptop)
                and "alice@laptop" not in registered(buildbox)
            ),
            lambda: f"laptop has {registered(laptop)}, buildbox {registered(buildbox)}",
        )
        restored = time.monotonic()
        laptop.restore()
        converge(whole, listings)
        converge(
            lambda: outbound.received_since(restored) and inbound.received_since(restored),
            lambda: "\n".join(
                [f"restored at {restored}", *map(str, outbound.reports + inbound.reports)]
                + [p.output() for p in network.processes if "gateway" in p.label]
            ),
        )
        reports = [(laptop, bob, r) for r in outbound.stop()] + [
            (buildbox, alice, r) for r in inbound.stop()
        ]

    # Every send ended in a definite state (checked as each ended) that the sessions bear out.
    for sender, inbox, report in reports:
        settle(sender, inbox, report)
    assert any(r["exit"] != exits.EXIT_OK for _, _, r in reports), "nothing was sent in the cut"
    # Nothing arrived twice, before, during or after the partition.
    for inbox in (alice, bob, carol):
        assert max(arrivals(inbox).values()) == 1, arrivals(inbox)


def server_steps(hub: Host, servers: tuple[Host, ...], *, record_ttl: int) -> list[Step]:
    """What a person types to run the deployment on one server per host (docs/remote.md, "From
    one server to three"): ``remote hub`` on the first, then for each other host ``remote
    invite --server`` on the hub and ``remote hub --join … --host`` there. Every host keeps its
    own gateway running, through its own server."""
    steps: list[Step] = [
        Spawn(
            hub.name,
            f"pi-cross-session remote hub --machine {hub.name} --host {hub.address} "
            f"--record-ttl {record_ttl}",
            ready=rf"gateway {hub.name} ready",
            name="hub",
        )
    ]
    for server in servers:
        steps += [
            Run(
                hub.name,
                "pi-cross-session remote invite --server",
                save={
                    f"{server.name}_servers": r"remote hub --join (\S+) PIXS1-",
                    f"{server.name}_token": r"remote hub --join \S+ (PIXS1-\S+)",
                },
            ),
            Spawn(
                server.name,
                f"pi-cross-session remote hub --join {{{server.name}_servers}} "
                f"{{{server.name}_token}} --host "
                f"{server.address} --machine {server.name} --record-ttl {record_ttl}",
                ready=rf"gateway {server.name} ready",
                name=f"{server.name} server",
            ),
        ]
    return steps


def test_three_servers_one_per_host_lose_one(network: Network) -> None:
    alpha, beta, gamma = (network.host(name) for name in ("alpha", "beta", "gamma"))
    inboxes = {host.name: start_inbox(host, f"{host.name[0]}ee") for host in (alpha, beta, gamma)}

    steps = server_steps(alpha, (beta, gamma), record_ttl=RECORD_TTL_S)
    played = network.play(steps)
    hub = played.processes["hub"]
    hub.wait_output(r"the bucket is kept by 3 servers", timeout=120)

    everyone = {"aee@alpha", "bee@beta", "gee@gamma"}

    def sees_all(host: Host) -> Callable[[], bool]:
        return lambda: everyone - {f"{host.name[0]}ee@{host.name}"} <= listed(host)

    for host in (alpha, beta, gamma):
        converge(sees_all(host), lambda: {h.name: sorted(listed(h)) for h in (alpha, beta, gamma)})
    to_gamma = sent(alpha, "gee@gamma", "hello from alpha")
    assert to_gamma["exit"] == exits.EXIT_OK, to_gamma
    inboxes["gamma"].wait_event("message", messageId=to_gamma["messageId"])

    # The hub's host drops off the network: its server, its admissions, its gateway. The other
    # two servers hold two of the bucket's three copies and go on.
    alpha.cut()
    converge(
        lambda: "aee@alpha" not in registered(beta) and "aee@alpha" not in registered(gamma),
        lambda: f"beta has {registered(beta)}, gamma {registered(gamma)}",
    )
    to_beta = sent(gamma, "bee@beta", "after the hub is gone")
    assert to_beta["exit"] == exits.EXIT_OK, to_beta
    inboxes["beta"].wait_event("message", messageId=to_beta["messageId"])
    to_gamma = sent(beta, "gee@gamma", "and back")
    assert to_gamma["exit"] == exits.EXIT_OK, to_gamma
    inboxes["gamma"].wait_event("message", messageId=to_gamma["messageId"])

    # Back on the network: the hub's host is listed everywhere again.
    alpha.restore()
    for host in (alpha, beta, gamma):
        converge(sees_all(host), lambda: {h.name: sorted(listed(h)) for h in (alpha, beta, gamma)})
    for inbox in inboxes.values():
        assert max(arrivals(inbox).values(), default=1) == 1, arrivals(inbox)
