"""``pi-cross-session remote``: this machine's identity and trust (docs/remote.md).

``init`` makes the Ed25519 identity, ``show`` prints it (the line another machine pastes into
``trust``), ``trust``/``untrust`` edit the allow-list, ``inbound`` turns remote delivery here on
or off, ``pki`` writes a private CA and certificates for a small NATS deployment.
"""

from __future__ import annotations

import argparse

from pi_cross_session.cli import exits
from pi_cross_session.cli.console import Console
from pi_cross_session.protocol.io import environment


def run(args: argparse.Namespace, console: Console) -> int:
    """Dispatch the subcommand."""
    from pi_cross_session.plugin.remote import files
    from pi_cross_session.security.remote.identity import parse_public_key

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
        console.result(f"{identity.machine} {identity.key.public_text()}")
        return exits.EXIT_OK
    if action == "show":
        identity = files.load_identity(locations)
        trust = files.load_trust(locations)
        if args.json:
            console.json(
                {
                    "machine": identity.machine,
                    "publicKey": identity.key.public_text(),
                    "account": trust.account,
                    "inbound": "on" if trust.inbound else "off",
                    "trusted": sorted(trust.machines),
                }
            )
        else:
            trusted = ", ".join(sorted(trust.machines)) or "nobody"
            console.result(
                f"{identity.machine} {identity.key.public_text()}\n"
                f"account {trust.account}; remote inbound {'on' if trust.inbound else 'off'}; "
                f"trusts {trusted}"
            )
        return exits.EXIT_OK
    if action == "trust":
        trust = files.load_trust(locations).with_machine(args.machine, parse_public_key(args.key))
        files.save_trust(locations, trust)
        console.result(f"trusting {args.machine}")
        return exits.EXIT_OK
    if action == "untrust":
        files.save_trust(locations, files.load_trust(locations).without_machine(args.machine))
        console.result(f"no longer trusting {args.machine}")
        return exits.EXIT_OK
    if action == "inbound":
        files.save_trust(locations, files.load_trust(locations).with_inbound(args.state == "on"))
        console.result(f"remote inbound {args.state} (a running gateway picks it up at restart)")
        return exits.EXIT_OK
    if action == "pki":
        from pi_cross_session.plugin.remote import pki

        made = pki.create(args.out, args.host)
        console.result(
            f"CA {made.ca}\nserver {made.server_cert} (key {made.server_key})\n"
            f"client {made.client_cert} (key {made.client_key})"
        )
        return exits.EXIT_OK
    console.problem("pi-cross-session remote: name a subcommand (see --help)")
    return exits.EXIT_LOCAL
