"""``pi-cross-session gateway``: this machine's gateway to the remote plane (docs/remote.md).

Runs until interrupted (Ctrl-C, SIGTERM), then withdraws what it published and removes its
proxies. Prints one line when it serves (``gateway <machine> ready …``) and, on SIGUSR1, its
status as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

from pi_cross_session.cli import exits
from pi_cross_session.cli.console import Console
from pi_cross_session.protocol.io import environment

#: The password of ``--user`` comes from here, never from the command line (``ps`` shows that).
PASSWORD_ENV = "PI_XS_NATS_PASSWORD"


def run(args: argparse.Namespace, console: Console) -> int:
    """Run the gateway until a signal ends it."""
    import anyio

    from pi_cross_session.plugin.remote import files
    from pi_cross_session.plugin.remote.bucket import BucketSpec
    from pi_cross_session.plugin.remote.gateway import Gateway, GatewayOptions
    from pi_cross_session.plugin.remote.link import Link, LinkConfig

    locations = environment.resolve()
    identity = files.load_identity(locations)
    trust = files.load_trust(locations)
    if args.account is not None:
        trust = trust.with_account(args.account)
    inbound = trust.inbound if args.inbound is None else args.inbound == "on"
    lock = files.GatewayLock(locations)
    if not lock.acquire():
        console.problem(
            f"pi-cross-session gateway: another gateway already serves this agent dir ({lock.path})"
        )
        return exits.EXIT_LOCAL
    credentials = None if args.user else files.load_nats_credentials(locations)
    link = Link(
        LinkConfig(
            servers=tuple(url for part in args.nats for url in part.split(",") if url),
            machine=identity.machine,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            user=args.user,
            password=os.environ.get(PASSWORD_ENV) if args.user else None,
            credentials=credentials,
            name=f"pi-cross-session gateway {identity.machine}",
            bucket=BucketSpec(ttl_s=args.record_ttl, replicas=args.kv_replicas),
        )
    )
    options = GatewayOptions(
        machine=identity.machine,
        key=identity.key,
        trust=trust,
        inbound=inbound,
        max_proxies=args.max_proxies,
        record_ttl_s=args.record_ttl,
        publish_every_s=args.record_ttl / 3,
    )

    async def main() -> None:
        await link.connect()
        gateway = Gateway(locations, options, link)
        try:
            async with anyio.create_task_group() as group:
                await group.start(gateway.run)
                console.result(
                    f"gateway {identity.machine} ready: account {trust.account}, remote inbound "
                    f"{'on' if inbound else 'off'}, trusting "
                    f"{', '.join(sorted(trust.machines)) or 'nobody'}"
                )
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
