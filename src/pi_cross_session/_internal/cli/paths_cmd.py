"""``pi-cross-session paths``: where sessions of this environment register and listen.

Computes everything from the environment; reads and creates nothing.
"""

from __future__ import annotations

import argparse
import secrets

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.sanitize import line


def run(args: argparse.Namespace, console: Console) -> int:
    """Print the agent dir, namespace, runtime dir and an instance's socket and registration."""
    where = environment.resolve()
    example = args.instance_id is None
    instance_id = args.instance_id or secrets.token_hex(16)
    report = {
        "agentDir": where.agent_dir,
        "namespace": where.namespace,
        "uid": where.uid,
        "peersDir": where.peers_dir,
        "runtimeDir": where.runtime_dir,
        "instanceId": instance_id,
        "instanceIdIsExample": example,
        "socketPath": where.socket_path(instance_id),
        "registrationPath": where.registration_path(instance_id),
    }
    if args.json:
        console.json(report)
        return exits.EXIT_OK
    rows = (
        ("agent dir", where.agent_dir),
        ("namespace", where.namespace),
        ("peers dir", where.peers_dir),
        ("runtime dir", where.runtime_dir),
        ("example instance" if example else "instance", instance_id),
        ("socket path", where.socket_path(instance_id)),
        ("registration", where.registration_path(instance_id)),
    )
    # The agent dir comes from the environment: shown escaped if it holds anything unsafe.
    console.result("\n".join(f"{label:<18}{line(value)}" for label, value in rows))
    return exits.EXIT_OK
