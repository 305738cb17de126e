"""The deployment's roster: which machines the hub vouches for, signed by the deployment.

Trust between machines is deployment-wide (docs/remote.md, "Joining"): the hub admits a machine
and lists it, with its identity key, in a roster signed by the deployment's account key; every
gateway that joined follows the roster and trusts the machines on it, so a third machine is one
more ``join``, not two more ``trust`` commands on every machine. The roster travels in the bucket
under a key no machine may write (only the hub, the account's administrator).

A gateway reads a roster only when its signature verifies with the deployment key it learnt when
it joined (over a connection verified with the deployment's CA); it keeps the newest (``seq``
only grows), so an older roster written back, one that still listed a revoked machine, changes
nothing. The signature is checked before a byte is parsed.

Pure: the caller passes the bytes and the keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pi_cross_session._internal.protocol.remote.envelope import ACCOUNT_RE, is_machine_name
from pi_cross_session._internal.security.remote.identity import (
    MachineKeyError,
    PublicKey,
    parse_public_key,
    public_key_text,
    split,
)
from pi_cross_session._internal.security.remote.trust import TrustConfig

#: What a roster's JSON says it is, so that no other signed document of the key passes for one.
ROSTER_TYPE: Final = "pi-xs-roster"
ROSTER_VERSION: Final = 1
#: A sealed roster, at most: about 150 bytes a machine, so thousands of machines fit.
MAX_ROSTER_BYTES: Final = 1_048_576


@dataclass(frozen=True, slots=True)
class Roster:
    """The machines a deployment vouches for, as of ``seq`` (the hub's clock, in ms)."""

    deployment: str
    account: str
    seq: int
    machines: Mapping[str, PublicKey] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        body = {
            "type": ROSTER_TYPE,
            "v": ROSTER_VERSION,
            "deployment": self.deployment,
            "account": self.account,
            "seq": self.seq,
            "machines": {n: public_key_text(k) for n, k in sorted(self.machines.items())},
        }
        return json.dumps(body, separators=(",", ":")).encode("utf-8")


def open_roster(payload: bytes, deployment_key: PublicKey, deployment: str) -> Roster | None:
    """The roster in ``payload`` when ``deployment_key`` signed it for ``deployment``; ``None``
    for anything else (too large, unsigned, malformed, another deployment's)."""
    if len(payload) > MAX_ROSTER_BYTES:
        return None
    parts = split(payload)
    if parts is None or not deployment_key.verifies(parts[0], parts[1]):
        return None
    try:
        body: Any = json.loads(parts[1])
    except ValueError:
        return None
    return _read(body, deployment)


def _read(body: Any, deployment: str) -> Roster | None:
    if not isinstance(body, dict):
        return None
    if body.get("type") != ROSTER_TYPE or body.get("v") != ROSTER_VERSION:
        return None
    seq, account, machines = body.get("seq"), body.get("account"), body.get("machines")
    if body.get("deployment") != deployment or not isinstance(seq, int) or seq < 0:
        return None
    if not isinstance(account, str) or ACCOUNT_RE.fullmatch(account) is None:
        return None
    if not isinstance(machines, dict):
        return None
    keys: dict[str, PublicKey] = {}
    for name, text in machines.items():
        if not is_machine_name(name) or not isinstance(text, str):
            return None
        try:
            keys[name] = parse_public_key(text)
        except MachineKeyError:
            return None
    return Roster(deployment, account, seq, keys)


class RosterKeeper:
    """The newest verified roster this machine has seen (``seq`` never goes back)."""

    def __init__(self, roster: Roster | None = None) -> None:
        self.current = roster

    def offer(self, roster: Roster) -> bool:
        """Take ``roster`` when it is newer than the one kept; True when it was taken."""
        if self.current is not None and roster.seq <= self.current.seq:
            return False
        self.current = roster
        return True


def merged_trust(own: TrustConfig, roster: Roster | None, me: str) -> TrustConfig:
    """What a gateway trusts: the machines on the deployment's roster (but itself), and those
    of its own trust file, which win where both name a machine (the local user's word is the
    last one on this machine)."""
    if roster is None:
        return own
    machines = {name: key for name, key in roster.machines.items() if name != me}
    machines.update(own.machines)
    return TrustConfig(own.account, own.inbound, machines)


__all__ = ["MAX_ROSTER_BYTES", "Roster", "RosterKeeper", "merged_trust", "open_roster"]
