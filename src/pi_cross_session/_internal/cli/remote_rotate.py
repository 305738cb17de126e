"""``remote rotate``: replace this machine's keys through its deployment's hub, keeping its name
(docs/remote.md, "Rotating a machine's keys";
:mod:`pi_cross_session._internal.plugin.remote.rotation`).

Once the new keys are in place, a gateway running here is told to start again from its files
(SIGHUP, sent only to the process that holds this agent dir's gateway lock), and the command
waits until the gateway's status names the new key, or says that it did not come back.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations


def run(args: argparse.Namespace, console: Console) -> int:
    """``remote rotate``."""
    import anyio

    from pi_cross_session._internal.plugin.remote import rotation

    del args  # no options
    locations = environment.resolve()
    try:
        rotated = anyio.run(
            lambda: rotation.rotate(
                locations, progress=console.progress, not_joined=words.ROTATE_NOT_JOINED
            )
        )
    except rotation.RotateFailedError as exc:
        console.problem(
            f"pi-cross-session remote rotate: {words.rotate_failed(exc.code, str(exc))}"
        )
        if exc.code in rotation.LOCAL_CODES:
            return exits.EXIT_LOCAL
        # What the hub did is not known here: as after a lost answer (run it again to learn it).
        if exc.code in rotation.UNKNOWN_CODES:
            return exits.EXIT_UNKNOWN
        return exits.EXIT_REFUSED
    console.result(
        words.rotated(
            rotated.machine,
            rotated.old_key,
            rotated.new_key,
            rotated.nats_key,
            resumed=rotated.resumed,
        )
    )
    console.result(_gateway_follows(locations, rotated.new_key, console))
    return exits.EXIT_OK


def _gateway_follows(locations: Locations, new_key: str, console: Console) -> str:
    """Have a running gateway start again with the new keys; what to tell the person."""
    from pi_cross_session._internal.plugin import remote_state
    from pi_cross_session._internal.protocol.remote.settings import ROTATE_GATEWAY_WAIT_S

    pid = remote_state.gateway_holder(locations)
    if pid is None:
        return words.ROTATE_NO_GATEWAY
    console.progress(f"telling the running gateway (pid {pid}) to start again with the new keys")
    os.kill(pid, signal.SIGHUP)
    started = time.monotonic()
    while time.monotonic() - started < ROTATE_GATEWAY_WAIT_S:
        gateway = remote_state.read_gateway(locations)
        snapshot = gateway.snapshot or {}
        if (
            gateway.state is remote_state.GatewayState.RUNNING
            and snapshot.get("publicKey") == new_key
            and snapshot.get("ready") is True
        ):
            return words.rotate_gateway_took(time.monotonic() - started)
        time.sleep(0.1)
    return words.rotate_gateway_not_yet(ROTATE_GATEWAY_WAIT_S)


__all__ = ["run"]
