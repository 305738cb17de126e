"""From one server to three (docs/remote.md, "From one server to three"), as a person types it:
a hub, ``remote invite --server`` twice, ``remote hub --join … --host …`` on two more machines,
the bucket kept by all three; then the hub's machine is lost and the others go on messaging.

Real processes on 127.0.0.1: each machine its own agent dir, its own nats-server (routes secured
by the deployment's CA), its own gateway.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin.remote.natsd import free_port
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.hub_hosts import JOIN_LINE, Host, hub_hosts, join_words, wait_listed
from tests.support.processes import WatchedProcess

SERVER_LINE = re.compile(r"pi-cross-session remote hub --join (\S+) (PIXS1-\S+) --host HOST")
#: The third server must start, join the cluster and take its replica: seconds, not a deadline.
REPLICATED_S = 90.0


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[dict[str, Host]]:
    with hub_hosts(tmp_path, "alpha", "beta", "gamma", "delta", "early") as made:
        yield made


def serve_line(alpha: Host) -> list[str]:
    invited = alpha.cli("remote", "invite", "--server")
    assert invited.returncode == 0, invited
    match = SERVER_LINE.search(invited.stdout)
    assert match is not None, invited
    return [match.group(1), match.group(2)]


def add_server(hub: Host, host: Host, listen: list[str], name: str) -> WatchedProcess:
    """``remote hub --join`` on ``host`` with a server line from ``hub``, as typed; running."""
    server = host.start(
        "remote", "hub", "--join", *serve_line(hub), "--host", "127.0.0.1",
        "--machine", host.name, *listen,
    )  # fmt: skip
    server.wait_line(rf"joined as {host.name}, serving as {name}", timeout=MUST_HAPPEN_S)
    server.wait_line(rf"gateway {host.name} ready", timeout=MUST_HAPPEN_S)
    return server


def test_three_servers_outlive_the_hub(hosts: dict[str, Host]) -> None:
    alpha, beta, gamma, delta, early = (
        hosts[n] for n in ("alpha", "beta", "gamma", "delta", "early")
    )
    ports = {name: (free_port(), free_port()) for name in ("alpha", "beta", "gamma")}

    def listen(name: str) -> list[str]:
        client, cluster = ports[name]
        return ["--listen", f"127.0.0.1:{client}", "--cluster-listen", f"127.0.0.1:{cluster}"]

    hub = alpha.start(
        "remote", "hub", "--machine", "alpha", "--host", "127.0.0.1", *listen("alpha")
    )
    machine_line = join_words(hub)
    hub.wait_line(r"gateway alpha ready", timeout=MUST_HAPPEN_S)
    # A machine that joins while there is one server: it learns of the others from NATS.
    joined_early = early.start("remote", "join", *machine_line, "--machine", "early")
    joined_early.wait_line(r"gateway early ready", timeout=MUST_HAPPEN_S)

    # The second server: its own machine joins, its server gets a certificate from the CA, and
    # the hub's server starts again, clustered. At the third, the bucket is kept by all three.
    second = add_server(alpha, beta, listen("beta"), "pi-xs-2")
    hub.wait_line(r"server pi-xs-2 .* joined the deployment", timeout=MUST_HAPPEN_S)
    third = add_server(alpha, gamma, listen("gamma"), "pi-xs-3")
    hub.wait_line(r"the bucket is kept by 3 servers", timeout=REPLICATED_S)

    # A machine that joins now is told of all three servers.
    invited = alpha.cli("remote", "invite")
    match = JOIN_LINE.search(invited.stdout)
    assert match is not None, invited
    joined = delta.start("remote", "join", *match.groups(), "--machine", "delta")
    joined.wait_line(r"gateway delta ready", timeout=MUST_HAPPEN_S)
    servers = json.loads((delta.agent_dir / "cross-session" / "remote" / "joined.json").read_text())
    assert len(servers["servers"]) == 3, servers

    delta.inbox("dora").wait_event("ready")
    gamma.inbox("gus").wait_event("ready")
    wait_listed(gamma, "dora@delta")
    wait_listed(delta, "gus@gamma")
    delivered(gamma.cli("send", "dora@delta", "before the loss", "--wait", "10"))

    # A member started again (no --join) serves as it did.
    third.process.terminate()
    third.process.wait(timeout=MUST_HAPPEN_S)
    third = gamma.start("remote", "hub")
    third.wait_line(r"server pi-xs-3 of the deployment serving", timeout=MUST_HAPPEN_S)
    third.wait_line(r"gateway gamma ready", timeout=MUST_HAPPEN_S)
    wait_listed(delta, "gus@gamma")

    # The hub's machine is lost: its server, its gateway, its admissions. delta's and early's
    # gateways were connected there and move to another server; the bucket has two of its three
    # copies.
    alpha.close()
    wait_listed(delta, "gus@gamma")
    delivered(delta.cli("send", "gus@gamma", "after the loss", "--wait", "20"))
    delivered(gamma.cli("send", "dora@delta", "and back", "--wait", "20"))
    wait_listed(early, "gus@gamma")
    delivered(early.cli("send", "gus@gamma", "from the first machine", "--wait", "20"))

    # The hub comes back as it was, and a revocation pushed to its server reaches the others:
    # beta's gateway, connected to beta's own server all along, is cut off there and says so
    # (then that its credentials are refused, on its retry schedule), and the others stop
    # trusting beta.
    hub = alpha.start("remote", "hub")
    hub.wait_line(r"gateway alpha ready", timeout=MUST_HAPPEN_S)
    revoked = alpha.cli("remote", "revoke", "beta")
    assert revoked.returncode == 0, revoked
    assert "its certificate stays good" in revoked.stderr, revoked
    second.wait_line(r"will not be opened again", timeout=MUST_HAPPEN_S, stderr=True)
    second.wait_line(r"refused this machine's credentials", timeout=MUST_HAPPEN_S, stderr=True)
    third.wait_line(r"trust changed: .*removed beta", timeout=MUST_HAPPEN_S)
    delivered(delta.cli("send", "gus@gamma", "after the revocation", "--wait", "20"))


def delivered(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result
    assert "delivered" in result.stdout, result
