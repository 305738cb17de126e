"""``pi-cross-session remote``: this machine's identity and trust, and a deployment's set-up
(docs/remote.md).

On a machine: ``status`` shows the gateway, its server and the machines it sees
(:mod:`.remote_status`); ``rotate`` replaces its keys through its hub (:mod:`.remote_rotate`);
``init`` makes its identity (an Ed25519 key and a NATS user key),
``show`` prints its card (the line another machine pastes into ``trust``, and the administrator
into ``deploy``), ``trust``/``untrust`` edit the allow-list, ``inbound`` turns remote delivery
here on or off, ``credentials`` installs the deployment's JWT for this machine. For the
deployment's administrator: ``deploy`` writes the NATS server's configuration and each
machine's JWT, ``bucket`` creates or repairs the discovery bucket, ``pki`` writes a private CA and
certificates.
"""

from __future__ import annotations

import argparse

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations


def run(args: argparse.Namespace, console: Console) -> int:
    """Dispatch the subcommand."""
    if args.remote_command == "status":  # reads files only: it needs no extra
        from pi_cross_session._internal.cli import remote_status

        return remote_status.run(args, console)
    if args.remote_command == "rotate":
        from pi_cross_session._internal.cli import remote_rotate

        return remote_rotate.run(args, console)
    if args.remote_command in ("hub", "join", "invite", "revoke"):
        from pi_cross_session._internal.cli import remote_hub

        return {
            "hub": remote_hub.run_hub,
            "join": remote_hub.run_join,
            "invite": remote_hub.run_invite,
            "revoke": remote_hub.run_revoke,
        }[args.remote_command](args, console)
    from pi_cross_session._internal.plugin.remote import files
    from pi_cross_session._internal.security.remote.identity import parse_public_key

    locations = environment.resolve()
    action = args.remote_command
    if action == "init":
        identity = files.init_identity(locations, args.machine, replace=args.replace)
        trust = files.load_trust(locations)
        if args.inbound is not None:
            trust = trust.with_inbound(args.inbound == "on")
        if args.account is not None:
            trust = trust.with_account(args.account)
        files.save_trust(locations, trust)
        console.result(identity.card())
        return exits.EXIT_OK
    if action == "show":
        identity = files.load_identity(locations)
        trust = files.load_trust(locations)
        if args.json:
            console.json(
                {
                    "machine": identity.machine,
                    "publicKey": identity.key.public_text(),
                    "natsKey": identity.nats.public_key,
                    "card": identity.card(),
                    "account": trust.account,
                    "inbound": "on" if trust.inbound else "off",
                    "trusted": sorted(trust.machines),
                }
            )
        else:
            trusted = ", ".join(sorted(trust.machines)) or "nobody"
            console.result(
                f"{identity.card()}\n"
                f"account {trust.account}; remote inbound {'on' if trust.inbound else 'off'}; "
                f"trusts {trusted}"
            )
        return exits.EXIT_OK
    if action in ("trust", "untrust", "inbound"):
        trust = files.load_trust(locations)
        if action == "trust":
            trust = trust.with_machine(args.machine, parse_public_key(args.key))
            said = f"trusting {args.machine}"
        elif action == "untrust":
            trust = trust.without_machine(args.machine)
            said = f"no longer trusting {args.machine}"
        else:
            trust = trust.with_inbound(args.state == "on")
            said = f"remote inbound {args.state}"
        before = _trust_changes(locations)
        files.save_trust(locations, trust)
        console.result(f"{said}; {_taken(locations, before, console)}")
        return exits.EXIT_OK
    if action == "credentials":
        token = files.install_nats_jwt(locations, _read_text(args.file))
        console.result(
            f"NATS credentials installed for {token.name}; the gateway uses them from its next "
            "start"
        )
        return exits.EXIT_OK
    if action == "deploy":
        return _deploy(args, console)
    if action == "bucket":
        return _bucket(args, console)
    if action == "pki":
        from pi_cross_session._internal.plugin.remote import pki

        made = pki.create(args.out, args.host)
        console.result(
            f"CA {made.ca}\nserver {made.server_cert} (key {made.server_key})\n"
            f"client {made.client_cert} (key {made.client_key})"
        )
        return exits.EXIT_OK
    console.problem("pi-cross-session remote: name a subcommand (see --help)")
    return exits.EXIT_LOCAL


def _trust_changes(locations: Locations) -> int | None:
    """How many trust changes the running gateway has taken (``None``: no gateway runs)."""
    from pi_cross_session._internal.plugin import remote_state

    gateway = remote_state.read_gateway(locations)
    if gateway.state is not remote_state.GatewayState.RUNNING or gateway.snapshot is None:
        return None
    changes = gateway.snapshot.get("trustChanges")
    return changes if type(changes) is int else 0


def _taken(locations: Locations, before: int | None, console: Console) -> str:
    """Wait (a few seconds at most) until the running gateway took the changed trust file;
    what to tell the person about when it takes effect."""
    import time

    from pi_cross_session._internal.protocol.remote.settings import REMOTE_TRUST_TAKEN_WAIT_S

    if before is None:
        return "no gateway runs here: it takes effect when one starts"
    console.progress("waiting for the running gateway to take it")
    started = time.monotonic()
    while time.monotonic() - started < REMOTE_TRUST_TAKEN_WAIT_S:
        now = _trust_changes(locations)
        if now is not None and now > before:
            return f"the running gateway took it ({time.monotonic() - started:.1f} s)"
        time.sleep(0.1)
    return (
        f"the running gateway has not taken it within {REMOTE_TRUST_TAKEN_WAIT_S:g} s; see "
        "'pi-cross-session remote status'"
    )


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(64 * 1024)
    except (OSError, UnicodeDecodeError) as exc:
        from pi_cross_session._internal.plugin.remote.files import RemoteSetupError

        raise RemoteSetupError(f"cannot read {path}: {exc}") from None


def _deploy(args: argparse.Namespace, console: Console) -> int:
    import time
    from pathlib import Path

    from pi_cross_session._internal.plugin.remote import natsd, pki
    from pi_cross_session._internal.plugin.remote.deployment import (
        PKI_DIR,
        SERVER_FILE,
        Deployment,
        MachineCard,
    )

    now = int(time.time())
    deployment = Deployment.open(args.out, create=True)
    if args.host:
        deployment.hosts = list(args.host)
    if args.listen is not None:
        deployment.listen = args.listen
    for card in args.machine:
        deployment.admit(MachineCard.parse(card), now=now)
    revoked = [deployment.revoke(name, now=now).name for name in args.revoke]
    if deployment.ca is None:
        if not deployment.hosts:
            console.problem(
                "pi-cross-session remote deploy: name the server's host with --host (its TLS "
                "certificate must carry the name or address machines reach it by)"
            )
            return exits.EXIT_LOCAL
        pki.create(str(Path(args.out) / PKI_DIR), deployment.hosts)
    deployment.save(now=now)
    if args.push:
        import anyio

        from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig

        async def push() -> None:
            link = Link(
                LinkConfig(
                    servers=(args.push,),
                    machine=None,
                    tls_ca=args.tls_ca or (str(deployment.ca) if deployment.ca else None),
                    credentials=deployment.system_creds.read_text(),
                )
            )
            await link.connect()
            try:
                await link.push_account(deployment.account_jwt(now=now))
            finally:
                await link.close()

        anyio.run(push)
    port = deployment.listen.rpartition(":")[2]
    host = deployment.hosts[0] if deployment.hosts else "HOST"
    url = f"tls://{host}:{port}"
    names = ", ".join(sorted(deployment.machines)) or "none yet"
    lines = [
        f"deployment {deployment.directory}: machines {names}",
        *([f"revoked {', '.join(revoked)}"] if revoked else []),
        *([f"pushed to {args.push}"] if args.push else []),
        f"start the server:   {natsd.server_binary_hint()} -c {deployment.directory / SERVER_FILE}",
        f"create the bucket:  pi-cross-session remote bucket --nats {url} "
        f"--creds {deployment.admin_creds} --tls-ca {deployment.ca}",
        "on each machine:    pi-cross-session remote credentials "
        f"{deployment.directory / 'machines'}/<name>.jwt",
        f"                    pi-cross-session gateway --nats {url} "
        f"--tls-ca <a copy of {deployment.ca}>",
    ]
    console.result("\n".join(lines))
    return exits.EXIT_OK


def _bucket(args: argparse.Namespace, console: Console) -> int:
    import anyio

    from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
    from pi_cross_session._internal.plugin.remote.link import LinkConfig
    from pi_cross_session._internal.plugin.remote.mirror import ensure_bucket_with

    config = LinkConfig(
        servers=tuple(args.nats.split(",")),
        machine=None,
        tls_ca=args.tls_ca,
        credentials=_read_text(args.creds),
        bucket=BucketSpec(ttl_s=args.record_ttl, replicas=args.replicas),
    )
    state, detail = anyio.run(ensure_bucket_with, config)
    if state in ("ok", "created", "repaired"):
        console.result("the bucket is as it should be" + (f" ({detail})" if detail else ""))
        return exits.EXIT_OK
    console.problem(f"pi-cross-session remote bucket: {state}: {detail}")
    return exits.EXIT_LOCAL
