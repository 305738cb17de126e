"""``pi-cross-session gateway``: this machine's gateway to the remote plane (docs/remote.md).

Runs until interrupted (Ctrl-C, SIGTERM), then withdraws what it published and removes its
proxies. Prints one line when it serves (``gateway <machine> ready …``) and, on SIGUSR1, its
status as JSON. Until it can connect it says why at each try, with the fix and when it tries
again (docs/remote.md, "When something is wrong").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pi_cross_session.cli import exits, words
from pi_cross_session.cli.console import Console
from pi_cross_session.protocol.io import environment

if TYPE_CHECKING:  # only for annotations: the remote plane's extra is imported when it runs
    import anyio.abc

    from pi_cross_session.plugin.remote.link import Link

#: The password of ``--user`` comes from here, never from the command line (``ps`` shows that).
PASSWORD_ENV = "PI_XS_NATS_PASSWORD"


async def connect(link: Link, console: Console, machine: str) -> bool:
    """Connect ``link``, trying again on a schedule said out loud (one line per failure, with
    its cause and fix, from ``NATS_START_RETRY_FIRST_S`` doubling up to ``NATS_START_RETRY_MAX_S``):
    a gateway started before its server, or as a service, comes up when the server does. False
    when SIGINT or SIGTERM ended the wait."""
    import anyio

    from pi_cross_session.plugin.remote.link import ConnectError
    from pi_cross_session.protocol.remote.settings import (
        NATS_START_RETRY_FIRST_S,
        NATS_START_RETRY_MAX_S,
    )

    stopped = False
    delay = NATS_START_RETRY_FIRST_S
    async with anyio.create_task_group() as group:

        async def stop_on_signal() -> None:
            nonlocal stopped
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    stopped = True
                    group.cancel_scope.cancel()
                    return

        group.start_soon(stop_on_signal)
        while True:
            try:
                await link.connect()
                break
            except ConnectError as exc:
                console.problem(words.gateway_not_connected(machine, str(exc), delay))
            await anyio.sleep(delay)
            delay = min(delay * 2, NATS_START_RETRY_MAX_S)
        group.cancel_scope.cancel()
    return not stopped


def run(
    args: argparse.Namespace,
    console: Console,
    *,
    alongside: Callable[[anyio.abc.TaskGroup], Awaitable[None]] | None = None,
) -> int:
    """Run the gateway until a signal ends it; ``alongside`` (the hub's admissions) is started
    in the same task group once the gateway is ready."""
    import anyio

    from pi_cross_session.plugin.remote import files
    from pi_cross_session.plugin.remote.bucket import BucketSpec
    from pi_cross_session.plugin.remote.gateway import Gateway, GatewayOptions
    from pi_cross_session.plugin.remote.link import Link, LinkConfig
    from pi_cross_session.plugin.remote.trust_watch import DeploymentKey, TrustWatch
    from pi_cross_session.security.remote.identity import PublicKey
    from pi_cross_session.security.remote.nats_jwt import public_key_bytes
    from pi_cross_session.security.remote.trust import TrustConfig

    locations = environment.resolve()
    identity = files.load_identity(locations)
    joined = files.load_joined(locations)
    own = files.load_trust(locations)
    if args.account is not None:
        own = own.with_account(args.account)
    servers = tuple(url for part in args.nats for url in part.split(",") if url)
    tls_ca = args.tls_ca
    tls_first = False
    if not servers and joined is not None:
        servers = joined.servers
        tls_ca = tls_ca or files.ca_path(locations)
        tls_first = joined.tls_first
    if not servers:
        console.problem(words.GATEWAY_NO_SERVER)
        return exits.EXIT_LOCAL
    lock = files.GatewayLock(locations)
    if not lock.acquire():
        console.problem(
            f"pi-cross-session gateway: another gateway already serves this agent dir ({lock.path})"
        )
        return exits.EXIT_LOCAL
    credentials = None if args.user else files.load_nats_credentials(locations)
    link = Link(
        LinkConfig(
            servers=servers,
            machine=identity.machine,
            tls_ca=tls_ca,
            tls_first=tls_first,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            user=args.user,
            password=os.environ.get(PASSWORD_ENV) if args.user else None,
            credentials=credentials,
            name=f"pi-cross-session gateway {identity.machine}",
            bucket=BucketSpec(ttl_s=args.record_ttl, replicas=args.kv_replicas),
        )
    )
    gateways: list[Gateway] = []

    async def apply(trust: TrustConfig) -> None:
        if gateways:
            await gateways[0].apply_trust(trust)

    deployment = None
    if joined is not None:
        key = PublicKey(public_key_bytes(joined.deployment))
        deployment = DeploymentKey(joined.deployment, key)
    watch = TrustWatch(
        locations, machine=identity.machine, own=own, deployment=deployment, apply=apply
    )
    trust = watch.trust
    inbound = trust.inbound if args.inbound is None else args.inbound == "on"
    options = GatewayOptions(
        machine=identity.machine,
        key=identity.key,
        trust=trust,
        inbound=inbound,
        max_proxies=args.max_proxies,
        record_ttl_s=args.record_ttl,
        publish_every_s=args.record_ttl / 3,
        watch=watch,
        inbound_fixed=args.inbound is not None,
    )

    async def main() -> None:
        if not await connect(link, console, identity.machine):
            return
        gateway = Gateway(locations, options, link)
        gateway.on_trust_changed = console.result
        gateways.append(gateway)
        try:
            async with anyio.create_task_group() as group:
                await group.start(gateway.run)
                trusted = sorted(watch.trust.machines)
                console.result(
                    f"gateway {identity.machine} ready: account {watch.trust.account}, remote "
                    f"inbound {'on' if gateway.options.inbound else 'off'}, trusting "
                    f"{', '.join(trusted) or 'nobody'}"
                )
                if alongside is not None:
                    await alongside(group)
                with anyio.open_signal_receiver(
                    signal.SIGINT, signal.SIGTERM, signal.SIGUSR1
                ) as signals:
                    async for signum in signals:
                        if signum == signal.SIGUSR1:
                            console.result(json.dumps(gateway.snapshot()))
                            continue
                        break
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await link.close()

    try:
        anyio.run(main)
    finally:
        lock.release()
    console.result(f"gateway {identity.machine} stopped")
    return exits.EXIT_OK
