"""What the remote plane says: how a send to another machine ended and what can be done about
it, the gateway's lines about its NATS connection (problems, a missing JetStream, refused rights),
a machine refused for its clock, paused for failing MACs or too old to speak to, and what the hub
says back to a key rotation (``remote rotate``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

from pi_cross_session._internal.plugin.render.peer_text import shown_diagnostic
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.registration import PublicPeer


def remote_machine(peer: PublicPeer | None) -> str:
    """The machine a proxy stands for, by its name (``bob@buildbox``), as shown; "the remote
    machine" when its name names none."""
    if peer is None:
        return "the remote machine"
    # Imported here: the envelope module builds the remote plane's models, which a send that
    # ends well never needs (start-up time, docs/performance.md).
    from pi_cross_session._internal.protocol.remote.envelope import machine_of_name

    machine = machine_of_name(peer.name)
    return "the remote machine" if machine is None else sanitize.line(machine, 32)


def remote_refusal(code: str, machine: str) -> str | None:
    """What a remote-plane ending means, for a model and a person (``None`` for other codes);
    ``machine`` as :func:`remote_machine` shows it."""
    if code == Code.UNREACHABLE:
        return (
            "this machine's gateway is not connected to NATS right now (the server is down or "
            "cannot be reached from here), so nothing left this machine"
        )
    if code == Code.NOT_LISTENING:
        return (
            f"{machine} has not trusted this machine: no gateway there takes its messages (or, "
            f"if it does trust it, {machine}'s gateway stopped or lost NATS moments ago); nothing "
            "was delivered"
        )
    if code == Code.REMOTE_INBOUND_OFF:
        return (
            f"{machine} does not take messages from other machines: its gateway runs with remote "
            "inbound off (whatever its sessions accept); nothing was delivered"
        )
    if code == Code.PERMISSION_DENIED:
        return (
            f"the NATS deployment does not let this machine send to {machine} (its credentials "
            "lack that right), so nothing left this machine"
        )
    return None


def remote_next(code: str, machine: str) -> str | None:
    """What can be done about a remote-plane ending (``None`` for other codes)."""
    if code == Code.UNREACHABLE:
        return (
            "the gateway reconnects by itself (its output says when); send again once it is "
            "back: nothing was sent, so nothing can arrive twice"
        )
    if code == Code.NOT_LISTENING:
        return (
            f"on {machine}, its user trusts this machine with: pi-cross-session remote trust "
            "<this machine's card> (pi-cross-session remote show prints it here), or both "
            "machines join one deployment; do not resend before that"
        )
    if code == Code.REMOTE_INBOUND_OFF:
        return (
            f"{machine}'s user can turn it on there with: pi-cross-session remote inbound on; "
            "do not resend before that"
        )
    if code == Code.PERMISSION_DENIED:
        return (
            "a machine that joined a hub's deployment gets the current rights with "
            "'pi-cross-session remote rotate'; on a deployment set up by hand, its administrator "
            "grants them (pi-cross-session remote deploy --machine CARD --push URL)"
        )
    return None


#: A line about the NATS connection, per problem (:class:`~.remote.link.NatsProblem`'s values):
#: what is wrong, then the fix. ``{where}`` is the server's URL(s), ``{detail}`` the client's
#: own words for it.
NATS_PROBLEMS: Final[Mapping[str, str]] = {
    "unreachable": (
        "cannot reach NATS at {where} ({detail}): check the URL, and that the server runs and "
        "lets this machine connect"
    ),
    "tls": (
        "TLS to NATS at {where} refused ({detail}): the server's certificate is not signed by a "
        "CA this gateway trusts; give the deployment's CA with --tls-ca FILE ('remote deploy' "
        "writes it as pki/ca.pem), and the client certificate with --tls-cert/--tls-key if the "
        "server asks for one"
    ),
    "not_tls": (
        "TLS to NATS at {where} refused: the server does not use TLS, though this gateway was "
        "told to (--tls-ca or a tls:// URL), so nothing was sent in the clear; turn TLS on in "
        "the server's configuration (as 'remote deploy' writes it), or point the gateway at the "
        "right server"
    ),
    "tls_first": (
        "NATS at {where} expects the TLS handshake first ({detail}): it is a hub's server, "
        "which machines reach by joining its deployment; run 'pi-cross-session remote join' "
        "with a line from the hub ('pi-cross-session remote invite' there), then the gateway "
        "without --nats"
    ),
    "auth": (
        "NATS at {where} refused this machine's credentials ({detail}): they are missing, "
        "revoked or expired; a machine of a hub's deployment joins again with a new line "
        "('pi-cross-session remote invite' on the hub's machine); on a deployment set up by "
        "hand, install this machine's JWT with: pi-cross-session remote credentials FILE (its "
        "administrator makes it with 'pi-cross-session remote deploy --machine CARD')"
    ),
    "other": "NATS at {where} refused the connection ({detail})",
}


def nats_lost(where: str) -> str:
    """The NATS client gave the connection up for good: what that usually means, and the fix."""
    return (
        f"NATS at {sanitize.line(where)} closed this machine's connection and it will not be "
        "opened again: most often this machine was revoked from the deployment (ask the hub's "
        "user; a machine let back in joins again with a new line), or its keys were just "
        "replaced ('remote rotate'); the gateway starts again from this machine's files"
    )


def nats_problem(problem: str, where: str, detail: str) -> str:
    """One line about a NATS connection that failed: what, and the fix (no retry schedule)."""
    template = NATS_PROBLEMS.get(problem, NATS_PROBLEMS["other"])
    return template.format(where=sanitize.line(where), detail=shown_diagnostic(detail))


def no_jetstream(where: str, every_s: float) -> str:
    """The NATS server has no JetStream for this account: what to add, and when we look again."""
    return (
        f"no JetStream on the NATS server at {sanitize.line(where)}: the bucket that lists "
        "each machine's sessions needs it, so no machine sees this one's sessions; add "
        "'jetstream {}' to the server's configuration (or start it with -js), or run the "
        "deployment's server with 'pi-cross-session remote hub' (which has it); checking again "
        f"every {every_s:g} s"
    )


def nats_denied(what: str, subject: str) -> str:
    """NATS refused this machine a publish or subscription: which, and who can change it."""
    return (
        f"NATS refused this machine a {what} {sanitize.line(subject)}: its credentials do not "
        "allow it (a deployment made before this version, or a machine admitted with fewer "
        "rights); a machine that joined a hub's deployment gets the current rights with "
        "'pi-cross-session remote rotate'; on one set up by hand, its administrator admits it "
        "again with: pi-cross-session remote deploy --machine CARD --push URL"
    )


def clock_skew(machine: str, skew_ms: int, what: str) -> str:
    """``what`` from ``machine`` was refused for its time: by how much, and the fix."""
    way = "behind" if skew_ms > 0 else "ahead of"
    return (
        f"{what} from {sanitize.line(machine, 32)} refused for its time: its clock is about "
        f"{abs(skew_ms) / 1000:.0f} s {way} this machine's (more than the 5 s ahead or 30 s "
        "behind a message may be); keep both clocks in sync (NTP)"
    )


def machine_paused(machine: str, pause_s: float) -> str:
    """A trusted machine's requests or records keep failing their MAC or signature."""
    name = sanitize.line(machine, 32)
    return (
        f"requests or records from {name} keep failing their MAC or signature although the "
        f"deployment vouches that {name} sent them: its NATS credentials are used without its "
        f"machine key (stolen), or its gateway is broken or too old; not listening to {name} "
        f"for {pause_s:.0f} s (its sessions stay listed as they were). If {name} is yours, "
        f"update it, or give it new keys ('pi-cross-session remote rotate' there); if not, "
        f"'pi-cross-session remote revoke {name}' on the hub"
    )


def older_gateway(machine: str, what: str) -> str:
    """``what`` from ``machine`` was signed as versions before pairwise keys sign it."""
    name = sanitize.line(machine, 32)
    return (
        f"{what} from {name} was refused: it is signed the way versions of pi-cross-session "
        f"before pairwise keys sign it, and this gateway takes only MACs; update "
        f"pi-cross-session on {name}"
    )


def rotate_too_soon(machine: str, keys: int, window_s: int, *, until: int, now: int) -> str:
    """The hub gave ``machine`` its share of new keys for now (``too_soon``): when it may ask
    again (``until``, ``now``: epoch s, the hub's clock)."""
    wait_min = max(1, -(-(until - now) // 60))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until))
    return (
        f"{sanitize.line(machine)} was given new keys {keys} times within {window_s // 3600} h, "
        "as many as the hub gives (each one revokes a key for good, and every revocation stays "
        f"in the deployment): try again after {when} (in {wait_min} min), or have the hub's "
        "administrator revoke it ('pi-cross-session remote revoke NAME') and join it again"
    )


def rotate_hub_error(*, busy: bool) -> str:
    """The hub could not take a rotation ask for a fault of its own (``hub_error``)."""
    if busy:
        return (
            "the hub's deployment is busy (another change holds its lock): nothing changed; "
            "run 'pi-cross-session remote rotate' again in a moment"
        )
    return (
        "the hub could not take the ask (its log says why): nothing changed on this machine; "
        "run 'pi-cross-session remote rotate' again, or tell the hub's administrator"
    )


def rotate_busy(lock_path: str) -> str:
    """Another ``remote rotate`` runs on this machine (``busy``)."""
    return (
        "another 'pi-cross-session remote rotate' is running for this machine (it holds "
        f"{sanitize.line(lock_path)}): let it finish, then run it again if it did not"
    )


__all__ = [
    "NATS_PROBLEMS",
    "clock_skew",
    "machine_paused",
    "nats_denied",
    "nats_lost",
    "nats_problem",
    "no_jetstream",
    "older_gateway",
    "remote_machine",
    "remote_next",
    "remote_refusal",
    "rotate_busy",
    "rotate_hub_error",
    "rotate_too_soon",
]
