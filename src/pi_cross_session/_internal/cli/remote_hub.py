"""``remote hub``, ``remote join``, ``remote invite`` and ``remote revoke``: a deployment made and
grown by people, one command per machine (docs/remote.md, "Five minutes, two machines").

* ``hub`` (on one machine): the deployment's NATS server, this machine admitted, one join line
  printed, joiners answered, and this machine's gateway, until interrupted;
* ``hub --join LINE --host HOST`` (on a second or third machine, with a line of
  ``invite --server``): one more server of the deployment, and this machine's gateway;
* ``join LINE`` (on each other machine): admitted by the line, then its gateway;
* ``invite`` and ``revoke NAME`` (on the hub's machine, hub running or not): another join line;
  a machine removed everywhere (its NATS user revoked, the roster without it) within seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_cross_session._internal.cli import exits, gateway_cmd, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations

if TYPE_CHECKING:  # the remote plane's extra is imported only when a command runs
    import anyio.abc

    from pi_cross_session._internal.plugin.remote.deployment import Deployment
    from pi_cross_session._internal.plugin.remote.files import Identity
    from pi_cross_session._internal.plugin.remote.natsd import NatsServer


def hub_dir(locations: Locations, given: str | None) -> Path:
    """The deployment's directory: ``--dir``, else ``hub`` in this agent dir's remote area."""
    from pi_cross_session._internal.plugin.remote import files

    return Path(given) if given else Path(files.remote_dir(locations)) / "hub"


def default_machine() -> str:
    """This host's name as a machine name (``a-z 0-9 -``), for a machine that has none yet."""
    from pi_cross_session._internal.protocol.remote.envelope import is_machine_name

    raw = socket.gethostname().split(".")[0].lower()
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in raw).strip("-")[:32].strip("-")
    return name if is_machine_name(name) else "machine"


def _identity(locations: Locations, machine: str | None) -> Identity:
    from pi_cross_session._internal.plugin.remote import files

    try:
        identity = files.load_identity(locations)
    except files.RemoteSetupError:
        return files.init_identity(locations, machine or default_machine())
    if machine is not None and machine != identity.machine:
        raise files.RemoteSetupError(
            f"this agent dir is already machine {identity.machine}; leave out --machine, or "
            "make a new identity with 'pi-cross-session remote init --replace'"
        )
    return identity


def run_hub(args: argparse.Namespace, console: Console) -> int:
    """``remote hub``."""
    import anyio

    from pi_cross_session._internal.plugin.remote import files, hub, member, rotation
    from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
    from pi_cross_session._internal.plugin.remote.deployment import (
        ACCOUNT_NAME,
        Deployment,
        DeploymentError,
    )
    from pi_cross_session._internal.plugin.remote.link import Link
    from pi_cross_session._internal.plugin.remote.mirror import ensure_bucket_with

    locations = environment.resolve()
    directory = hub_dir(locations, args.dir)
    if args.write_service:
        return _write_service(args, directory, console)
    # SIGHUP restarts the gateway once it runs; until then it must not end the hub (nor leave
    # its NATS server running on its own, as ending here before the ``finally`` below would).
    gateway_cmd.hold_sighup()
    if args.join is not None or member.is_member(directory):
        return _run_member(args, console, locations, directory)
    identity = _identity(locations, args.machine)
    now = int(time.time())
    deployment = hub.prepare(
        directory,
        hosts=args.host,
        listen=args.listen,
        cluster_listen=args.cluster_listen,
        now=now,
    )
    with hub.lock(directory):
        deployment = Deployment.open(directory)
        try:
            # A rotation of this machine's keys that the hub confirmed is finished first.
            identity = rotation.settle_own_keys(locations, deployment, identity, now=now)
        except DeploymentError as exc:
            console.problem(words.hub_machine_keys_revoked(identity.machine, str(exc)))
            return exits.EXIT_LOCAL
        deployment.save(now=now)
    line, until = hub.invite(directory, now=now, valid_s=args.valid)
    deployment = Deployment.open(directory)
    files.install_nats_jwt(locations, deployment.machine_jwt(identity.machine, now=now).decode())
    ca = deployment.ca
    assert ca is not None
    files.save_joined(
        locations,
        files.Joined(hub.servers(deployment), deployment.account.public_key, ACCOUNT_NAME),
        ca.read_bytes(),
    )
    files.save_roster(locations, deployment.sealed_roster(seq=deployment.roster_seq))
    files.save_trust(
        locations, files.load_trust(locations).with_account(ACCOUNT_NAME).with_inbound(True)
    )
    server = _start_server(
        directory, "hub", deployment.listen, directory / "server.conf", console, ""
    )
    if server is None:
        return exits.EXIT_LOCAL
    try:
        # The bucket as the gateways of this deployment check it: the hub's --record-ttl and
        # --kv-replicas (a machine may not repair a bucket made with other ones).
        spec = BucketSpec(ttl_s=args.record_ttl, replicas=args.kv_replicas)
        admin = dataclasses.replace(hub.admin_config(deployment), bucket=spec)
        state, detail = anyio.run(ensure_bucket_with, admin)
        if state not in ("ok", "created", "repaired"):
            if not deployment.members:
                console.problem(f"pi-cross-session remote hub: the bucket: {detail}")
                return exits.EXIT_LOCAL
            # Clustered: JetStream answers once enough of the other servers are back.
            console.problem(f"the bucket: {detail}; the other servers may not be up yet")
        else:
            anyio.run(_publish_roster, deployment)

        async def grown(deployment: Deployment, name: str) -> None:
            where = deployment.members[name].client
            console.result(f"server {name} ({where}) joined the deployment")
            if len(deployment.members) == 1:
                # A server that ran alone runs JetStream on its own; with routes it must start
                # again to share it. Its bucket would not move into the cluster (which counts
                # it orphaned): it is made again there, and the gateways publish anew.
                console.progress("starting this hub's NATS server again, clustered")
                await hub.drop_bucket(deployment)
                await anyio.to_thread.run_sync(_restart, server)
                # A server takes its share of the bucket once a machine of the account has
                # connected to it (the new server's gateway, within seconds): asked again.
                deadline = anyio.current_time() + hub.REPLICAS_WAIT_S
                while True:
                    state, detail = await ensure_bucket_with(admin)
                    if state in ("ok", "created", "repaired"):
                        await _publish_roster(deployment)
                        console.result("the bucket is made again in the cluster")
                        break
                    if anyio.current_time() >= deadline:
                        console.problem(f"the bucket: {detail}")
                        break
                    await anyio.sleep(2.0)
            if 1 + len(deployment.members) >= hub.REPLICATED_AT:
                await _replicate(deployment, console)

        async def admissions(group: anyio.abc.TaskGroup) -> None:
            link = Link(hub.admin_config(deployment))
            await link.connect()
            answering = hub.Admissions(
                directory,
                link,
                admitted=lambda name: console.result(f"admitted {name}"),
                rotated=lambda name: console.result(f"rotated the keys of {name}"),
                grown=lambda d, name: _in_background(group, grown, d, name),
            )
            await answering.start()
            if 1 + len(deployment.members) >= hub.REPLICATED_AT:
                group.start_soon(_replicate, deployment, console)
            # Printed only now: a join typed the moment the line appears finds the hub listening.
            console.result(
                f"hub of deployment {deployment.account.public_key[:12]}… serving "
                f"{', '.join(hub.servers(deployment))}\n"
                "On another machine, run (valid once, until "
                f"{time.strftime('%H:%M %Z', time.localtime(until))}):\n\n  {line.command()}\n\n"
                "Another line: 'pi-cross-session remote invite'. Another server: "
                "'pi-cross-session remote invite --server'. Remove a machine: "
                "'pi-cross-session remote revoke NAME'."
            )

        if args.no_gateway:
            return _serve_only(admissions, console)
        args.nats = []
        args.tls_ca = None
        return gateway_cmd.run(args, console, alongside=admissions)
    finally:
        server.stop()


async def _in_background(
    group: anyio.abc.TaskGroup,
    work: Callable[[Deployment, str], Coroutine[Any, Any, None]],
    deployment: Deployment,
    name: str,
) -> None:
    """Run ``work`` beside the admissions (it restarts the server they are connected to)."""
    group.start_soon(work, deployment, name)


def _restart(server: NatsServer) -> None:
    server.stop()
    server.start()


async def _replicate(deployment: Deployment, console: Console) -> None:
    from pi_cross_session._internal.plugin.remote import hub

    servers = 1 + len(deployment.members)
    console.progress(f"asking for the bucket on {hub.REPLICATED_AT} of the {servers} servers")
    if await hub.raise_replicas(deployment, hub.REPLICATED_AT, wait_s=hub.REPLICAS_WAIT_S):
        console.result(
            f"the bucket is kept by {hub.REPLICATED_AT} servers: the deployment outlives one"
        )
    else:
        console.problem(
            f"the bucket is still on fewer than {hub.REPLICATED_AT} servers: are they all up? "
            "It is asked again when this hub starts"
        )


def _run_member(
    args: argparse.Namespace, console: Console, locations: Locations, directory: Path
) -> int:
    """``remote hub --join`` (and ``remote hub`` again on a machine that joined so)."""
    import anyio

    from pi_cross_session._internal.plugin.remote import hub, joining, member
    from pi_cross_session._internal.plugin.remote.deployment import (
        DEFAULT_CLUSTER_LISTEN,
        DEFAULT_LISTEN,
        DEPLOYMENT_FILE,
        host_port,
    )
    from pi_cross_session._internal.protocol.remote.join import JoinLine, ServeAsk

    if args.join is None:
        serving = member.open_member(directory)
    else:
        if member.is_member(directory) or (directory / DEPLOYMENT_FILE).exists():
            console.problem(
                f"pi-cross-session remote hub: {directory} already serves a deployment; run "
                "'pi-cross-session remote hub' without --join to start it"
            )
            return exits.EXIT_LOCAL
        if not args.host:
            console.problem(
                "pi-cross-session remote hub --join: name this server with --host: the name or "
                "address the other machines reach it by"
            )
            return exits.EXIT_LOCAL
        line = JoinLine.parse(*args.join)
        identity = _identity(locations, args.machine)
        listen = args.listen or DEFAULT_LISTEN
        cluster_listen = args.cluster_listen or DEFAULT_CLUSTER_LISTEN
        serve = ServeAsk(
            csr=member.request(directory, [*args.host, *hub.LOOPBACK_NAMES]),
            client=host_port(args.host[0], listen),
            cluster=host_port(args.host[0], cluster_listen),
        )
        joined = anyio.run(
            lambda: joining.join(locations, line, identity, progress=console.progress, serve=serve)
        )
        assert joined.grant is not None  # join checked the answer has what was asked
        serving = member.install(
            directory,
            joined.grant,
            joined.ca,
            deployment=line.deployment,
            listen=listen,
            cluster_listen=cluster_listen,
            client=serve.client,
            cluster=serve.cluster,
        )
        console.result(f"joined as {joined.machine}, serving as {serving.name}")
    _own_server_first(locations, hub.local_url_of(serving.listen))
    routes = f", routes to {serving.cluster}"
    server = _start_server(
        directory, serving.name, serving.listen, serving.config_file, console, routes
    )
    if server is None:
        return exits.EXIT_LOCAL
    try:
        console.result(f"server {serving.name} of the deployment serving {serving.client}")
        if args.no_gateway:
            # The account is known to this server once one of its users connected: the
            # bucket's share here needs it (the gateway does this otherwise).
            anyio.run(_connect_once, locations, hub.local_url_of(serving.listen))
            return _serve_only(_nothing, console)
        args.nats = []
        args.tls_ca = None
        return gateway_cmd.run(args, console)
    finally:
        server.stop()


async def _connect_once(locations: Locations, url: str) -> None:
    """Connect to ``url`` as this machine, then leave."""
    from pi_cross_session._internal.plugin.remote import files
    from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig

    identity = files.load_identity(locations)
    link = Link(
        LinkConfig(
            servers=(url,),
            machine=identity.machine,
            tls_ca=files.ca_path(locations),
            tls_first=True,
            credentials=files.load_nats_credentials(locations),
            name=f"pi-cross-session server {identity.machine}",
        )
    )
    await link.connect()
    await link.close()


def _start_server(
    directory: Path, name: str, listen: str, config: Path, console: Console, more: str
) -> NatsServer | None:
    """This machine's server of the deployment, started from ``config``; ``None`` (said) when
    it did not start."""
    from pi_cross_session._internal.plugin.remote import hub
    from pi_cross_session._internal.plugin.remote.natsd import NatsServer

    local = hub.local_url_of(listen)
    server = NatsServer(
        directory / "run",
        name=name,
        port=hub.port_of(listen),
        config_file=config,
        host=local.split("//")[1].rsplit(":", 1)[0],
    )
    console.progress(f"starting the NATS server ({listen}{more})")
    try:
        server.start()
    except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
        console.problem(f"pi-cross-session remote hub: the NATS server did not start: {exc}")
        return None
    return server


async def _nothing(group: anyio.abc.TaskGroup) -> None:
    return None


def _own_server_first(locations: Locations, local: str) -> None:
    """This machine's gateway reaches the deployment through its own server first."""
    from pi_cross_session._internal.plugin.remote import files

    joined = files.load_joined(locations)
    if joined is None:
        return
    servers = (local, *(url for url in joined.servers if url != local))
    files.save_joined(locations, dataclasses.replace(joined, servers=servers), None)


async def _publish_roster(deployment: Deployment) -> None:
    from pi_cross_session._internal.plugin.remote import hub
    from pi_cross_session._internal.plugin.remote.link import Link

    link = Link(hub.admin_config(deployment))
    await link.connect()
    try:
        await hub.publish_roster(link, deployment)
    finally:
        await link.close()


def _serve_only(
    admissions: Callable[[anyio.abc.TaskGroup], Awaitable[None]], console: Console
) -> int:
    import signal

    import anyio

    async def main() -> None:
        async with anyio.create_task_group() as group:
            await admissions(group)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            group.cancel_scope.cancel()

    anyio.run(main)
    console.result("hub stopped")
    return exits.EXIT_OK


def _write_service(args: argparse.Namespace, directory: Path, console: Console) -> int:
    words = ["--dir", str(directory)]
    for host in args.host:
        words += ["--host", host]
    if args.listen:
        words += ["--listen", args.listen]
    if args.cluster_listen:
        words += ["--cluster-listen", args.cluster_listen]
    if args.machine:
        words += ["--machine", args.machine]
    if args.no_gateway:
        words.append("--no-gateway")
    words += ["--record-ttl", f"{args.record_ttl:g}", "--kv-replicas", str(args.kv_replicas)]
    words += ["--max-proxies", str(args.max_proxies)]
    command = shlex.join([sys.executable, "-m", "pi_cross_session", "remote", "hub", *words])
    unit = (
        "[Unit]\n"
        "Description=pi-cross-session hub (NATS server and gateway)\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={command}\n"
        "Restart=on-failure\nRestartSec=5\n\n"
        "[Install]\nWantedBy=default.target\n"
    )
    Path(args.write_service).write_text(unit)
    console.result(
        f"wrote {args.write_service}; install it with: cp {args.write_service} "
        "~/.config/systemd/user/ && systemctl --user enable --now "
        f"{Path(args.write_service).name}"
    )
    return exits.EXIT_OK


def run_join(args: argparse.Namespace, console: Console) -> int:
    """``remote join``."""
    import anyio

    from pi_cross_session._internal.plugin.remote import joining
    from pi_cross_session._internal.protocol.remote.join import JoinLine

    locations = environment.resolve()
    line = JoinLine.parse(args.servers, args.token)
    identity = _identity(locations, args.machine)
    joined = anyio.run(lambda: joining.join(locations, line, identity, progress=console.progress))
    others = ", ".join(joined.machines) or "no other machine yet"
    console.result(f"joined as {joined.machine}; the deployment has {others}")
    if args.no_gateway:
        console.result("start the gateway with: pi-cross-session gateway")
        return exits.EXIT_OK
    args.nats = []
    args.tls_ca = None
    return gateway_cmd.run(args, console)


def run_invite(args: argparse.Namespace, console: Console) -> int:
    """``remote invite``."""
    from pi_cross_session._internal.plugin.remote import hub

    directory = hub_dir(environment.resolve(), args.dir)
    now = int(time.time())
    line, until = hub.invite(directory, now=now, valid_s=args.valid, server=args.server)
    pushed = _push(directory, now, console, roster=False)
    what = "to serve (HOST: the name or address the others reach it by)" if args.server else ""
    console.result(
        f"On the machine to join{' ' + what if what else ''}, run (valid once, until "
        f"{time.strftime('%H:%M %Z', time.localtime(until))}):\n\n"
        f"  {line.command(server=args.server)}"
        + ("" if pushed else "\n\n(the hub is not running: the line works once it runs)")
    )
    return exits.EXIT_OK


def run_revoke(args: argparse.Namespace, console: Console) -> int:
    """``remote revoke NAME``."""
    from pi_cross_session._internal.plugin.remote import hub
    from pi_cross_session._internal.plugin.remote.deployment import Deployment

    directory = hub_dir(environment.resolve(), args.dir)
    now = int(time.time())
    with hub.lock(directory):
        deployment = Deployment.open(directory)
        served = deployment.member_of(args.machine)
        deployment.revoke(args.machine, now=now)
        deployment.save(now=now)
    if served is not None:
        console.problem(
            f"{args.machine} ran server {served[0]} of the deployment: its certificate stays "
            "good (there is no revocation list), so stop that server; if the machine is not "
            "trusted any more, make a new deployment (docs/security.md, the CA key)"
        )
    if _push(directory, now, console, roster=True):
        console.result(
            f"revoked {args.machine}: cut off the servers, and off every gateway's trust"
        )
    else:
        console.result(
            f"revoked {args.machine} in the deployment; the hub is not running, so it takes "
            "effect when it starts"
        )
    return exits.EXIT_OK


def _push(directory: Path, now: int, console: Console, *, roster: bool) -> bool:
    """Hand the account (and the roster) to the running hub's server; False when none runs."""
    import anyio

    from pi_cross_session._internal.plugin.remote import hub
    from pi_cross_session._internal.plugin.remote.deployment import Deployment
    from pi_cross_session._internal.protocol.errors import CrossSessionError

    deployment = Deployment.open(directory)
    try:
        anyio.run(lambda: hub.push(deployment, now=now, roster=roster))
    except (CrossSessionError, OSError) as exc:
        console.progress(f"could not reach the hub's server: {exc}")
        return False
    return True


__all__ = ["run_hub", "run_invite", "run_join", "run_revoke"]
