"""``remote hub``, ``remote join``, ``remote invite`` and ``remote revoke``: a deployment made and
grown by people, one command per machine (docs/remote.md, "Five minutes, two machines").

* ``hub`` (on one machine): the deployment's NATS server, this machine admitted, one join line
  printed, joiners answered, and this machine's gateway, until interrupted;
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pi_cross_session.cli import exits, gateway_cmd
from pi_cross_session.cli.console import Console
from pi_cross_session.protocol.io import environment
from pi_cross_session.protocol.paths import Locations

if TYPE_CHECKING:  # the remote plane's extra is imported only when a command runs
    import anyio.abc

    from pi_cross_session.plugin.remote.deployment import Deployment
    from pi_cross_session.plugin.remote.files import Identity


def hub_dir(locations: Locations, given: str | None) -> Path:
    """The deployment's directory: ``--dir``, else ``hub`` in this agent dir's remote area."""
    from pi_cross_session.plugin.remote import files

    return Path(given) if given else Path(files.remote_dir(locations)) / "hub"


def default_machine() -> str:
    """This host's name as a machine name (``a-z 0-9 -``), for a machine that has none yet."""
    from pi_cross_session.protocol.remote.envelope import is_machine_name

    raw = socket.gethostname().split(".")[0].lower()
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in raw).strip("-")[:32].strip("-")
    return name if is_machine_name(name) else "machine"


def _identity(locations: Locations, machine: str | None) -> Identity:
    from pi_cross_session.plugin.remote import files

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

    from pi_cross_session.plugin.remote import files, hub
    from pi_cross_session.plugin.remote.bucket import BucketSpec
    from pi_cross_session.plugin.remote.deployment import ACCOUNT_NAME, Deployment, MachineCard
    from pi_cross_session.plugin.remote.link import Link
    from pi_cross_session.plugin.remote.mirror import ensure_bucket_with
    from pi_cross_session.plugin.remote.natsd import NatsServer

    locations = environment.resolve()
    directory = hub_dir(locations, args.dir)
    if args.write_service:
        return _write_service(args, directory, console)
    identity = _identity(locations, args.machine)
    now = int(time.time())
    deployment = hub.prepare(directory, hosts=args.host, listen=args.listen, now=now)
    with hub.lock(directory):
        deployment = Deployment.open(directory)
        deployment.admit(MachineCard.parse(identity.card()), now=now)
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
    server = NatsServer(
        directory / "run",
        name="hub",
        port=hub.port_of(deployment.listen),
        config_file=directory / "server.conf",
        host=hub.local_url(deployment).split("//")[1].rsplit(":", 1)[0],
    )
    console.progress(f"starting the NATS server ({deployment.listen})")
    try:
        server.start()
    except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
        console.problem(f"pi-cross-session remote hub: the NATS server did not start: {exc}")
        return exits.EXIT_LOCAL
    try:
        # The bucket as the gateways of this deployment check it: the hub's --record-ttl and
        # --kv-replicas (a machine may not repair a bucket made with other ones).
        spec = BucketSpec(ttl_s=args.record_ttl, replicas=args.kv_replicas)
        admin = dataclasses.replace(hub.admin_config(deployment), bucket=spec)
        state, detail = anyio.run(ensure_bucket_with, admin)
        if state not in ("ok", "created", "repaired"):
            console.problem(f"pi-cross-session remote hub: the bucket: {detail}")
            return exits.EXIT_LOCAL
        anyio.run(_publish_roster, deployment)

        async def admissions(group: anyio.abc.TaskGroup) -> None:
            link = Link(hub.admin_config(deployment))
            await link.connect()
            answering = hub.Admissions(
                directory, link, admitted=lambda name: console.result(f"admitted {name}")
            )
            await answering.start()
            # Printed only now: a join typed the moment the line appears finds the hub listening.
            console.result(
                f"hub of deployment {deployment.account.public_key[:12]}… serving "
                f"{', '.join(hub.servers(deployment))}\n"
                "On another machine, run (valid once, until "
                f"{time.strftime('%H:%M %Z', time.localtime(until))}):\n\n  {line.command()}\n\n"
                "Another line: 'pi-cross-session remote invite'. Remove a machine: "
                "'pi-cross-session remote revoke NAME'."
            )

        if args.no_gateway:
            return _serve_only(admissions, console)
        args.nats = []
        args.tls_ca = None
        return gateway_cmd.run(args, console, alongside=admissions)
    finally:
        server.stop()


async def _publish_roster(deployment: Deployment) -> None:
    from pi_cross_session.plugin.remote import hub
    from pi_cross_session.plugin.remote.link import Link

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

    from pi_cross_session.plugin.remote import joining
    from pi_cross_session.protocol.remote.join import JoinLine

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
    from pi_cross_session.plugin.remote import hub

    directory = hub_dir(environment.resolve(), args.dir)
    now = int(time.time())
    line, until = hub.invite(directory, now=now, valid_s=args.valid)
    pushed = _push(directory, now, console, roster=False)
    console.result(
        f"On the machine to join, run (valid once, until "
        f"{time.strftime('%H:%M %Z', time.localtime(until))}):\n\n  {line.command()}"
        + ("" if pushed else "\n\n(the hub is not running: the line works once it runs)")
    )
    return exits.EXIT_OK


def run_revoke(args: argparse.Namespace, console: Console) -> int:
    """``remote revoke NAME``."""
    from pi_cross_session.plugin.remote import hub
    from pi_cross_session.plugin.remote.deployment import Deployment

    directory = hub_dir(environment.resolve(), args.dir)
    now = int(time.time())
    with hub.lock(directory):
        deployment = Deployment.open(directory)
        deployment.revoke(args.machine, now=now)
        deployment.save(now=now)
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

    from pi_cross_session.plugin.remote import hub
    from pi_cross_session.plugin.remote.deployment import Deployment
    from pi_cross_session.protocol.errors import CrossSessionError

    deployment = Deployment.open(directory)
    try:
        anyio.run(lambda: hub.push(deployment, now=now, roster=roster))
    except (CrossSessionError, OSError) as exc:
        console.progress(f"could not reach the hub's server: {exc}")
        return False
    return True


__all__ = ["run_hub", "run_invite", "run_join", "run_revoke"]
