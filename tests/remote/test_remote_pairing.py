"""Pairwise keys between two machines (security/remote/pairing.py): what a request and a reply
are authenticated by."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.security.remote.identity import MachineKey, PublicKey
from pi_cross_session._internal.security.remote.pairing import MAC_BYTES, Pair, Pairs, derive_pair

LAPTOP = MachineKey.generate()
BUILDBOX = MachineKey.generate()
DESK = MachineKey.generate()
DATA = b'{"v":1,"kind":"send"}'


def pair(
    me: str, key: MachineKey, other: str, other_key: MachineKey, account: str = "pi-xs"
) -> Pair:
    made = derive_pair(account=account, me=me, key=key, other=other, other_key=other_key.public_key)
    assert made is not None
    return made


def test_both_machines_of_a_pair_compute_the_same_keys_one_per_direction() -> None:
    laptop = pair("laptop", LAPTOP, "buildbox", BUILDBOX)
    buildbox = pair("buildbox", BUILDBOX, "laptop", LAPTOP)
    sealed = laptop.sending.seal(DATA)
    assert len(sealed) == MAC_BYTES + len(DATA)
    assert buildbox.receiving.verifies(sealed[:MAC_BYTES], DATA)
    assert laptop.receiving.verifies(buildbox.sending.mac(DATA), DATA)
    # A MAC sent one way is not good the other way: nothing can be reflected to its maker.
    assert not laptop.receiving.verifies(sealed[:MAC_BYTES], DATA)
    assert not buildbox.receiving.verifies(sealed[:MAC_BYTES], DATA + b" ")


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: pair("desk", DESK, "buildbox", BUILDBOX), id="a third machine"),
        pytest.param(
            lambda: pair("laptop", DESK, "buildbox", BUILDBOX), id="a third machine's key"
        ),
        pytest.param(lambda: pair("desk", LAPTOP, "buildbox", BUILDBOX), id="another name"),
        pytest.param(
            lambda: pair("laptop", LAPTOP, "buildbox", BUILDBOX, account="other"),
            id="another account",
        ),
        pytest.param(lambda: pair("laptop", LAPTOP, "desk", BUILDBOX), id="to another name"),
    ],
)
def test_no_other_pair_makes_a_mac_buildbox_takes_from_the_laptop(other: object) -> None:
    buildbox = pair("buildbox", BUILDBOX, "laptop", LAPTOP)
    forger: Pair = other()  # type: ignore[operator]
    assert not buildbox.receiving.verifies(forger.sending.mac(DATA), DATA)


def test_a_key_of_small_order_makes_no_pair() -> None:
    # The identity point: its shared secret is all zeros whatever the private key.
    identity_point = PublicKey(bytes([1]) + bytes(31))
    made = derive_pair(
        account="pi-xs", me="buildbox", key=BUILDBOX, other="evil", other_key=identity_point
    )
    assert made is None
    pairs = Pairs(account="pi-xs", me="buildbox", key=BUILDBOX)
    assert pairs.seal("evil", identity_point, DATA) is None
    assert pairs.seal("laptop", None, DATA) is None


def test_pairs_are_derived_once_and_forgotten_with_their_trust() -> None:
    pairs = Pairs(account="pi-xs", me="buildbox", key=BUILDBOX)
    first = pairs.pair("laptop", LAPTOP.public_key)
    assert first is not None
    assert pairs.pair("laptop", LAPTOP.public_key) is first
    # The laptop rotated its key: a pair under the new key, the old one gone.
    rotated = MachineKey.generate()
    second = pairs.pair("laptop", rotated.public_key)
    assert second is not None
    assert second is not first
    pairs.keep("pi-xs", {"laptop": rotated.public_key})
    assert pairs.pair("laptop", rotated.public_key) is second
    pairs.keep("pi-xs", {})
    assert pairs.pair("laptop", rotated.public_key) is not second
    # Another account: every pair again, under it.
    under_team = Pairs(account="team", me="buildbox", key=BUILDBOX).pair(
        "laptop", LAPTOP.public_key
    )
    pairs.keep("team", {"laptop": LAPTOP.public_key})
    again = pairs.pair("laptop", LAPTOP.public_key)
    assert again is not None
    assert under_team is not None
    assert again.sending.mac(DATA) == under_team.sending.mac(DATA)


def test_a_machine_makes_no_pair_with_itself() -> None:
    assert (
        derive_pair(
            account="pi-xs", me="laptop", key=LAPTOP, other="laptop", other_key=LAPTOP.public_key
        )
        is None
    )


def test_a_holder_of_a_machines_key_can_speak_to_it_as_any_machine_it_trusts() -> None:
    """What MACs give up against signatures (docs/security.md): buildbox's own key, with the
    laptop's public key, makes the key buildbox checks the laptop's MACs with, so a thief of
    buildbox's key can make MACs buildbox takes as the laptop's. Towards anyone else it can make
    none: the desk's pair with the laptop is out of its reach (the test above)."""
    thief = pair("buildbox", BUILDBOX, "laptop", LAPTOP)
    forged = thief.receiving.seal(DATA)
    buildbox = pair("buildbox", BUILDBOX, "laptop", LAPTOP)
    assert buildbox.receiving.verifies(forged[:MAC_BYTES], DATA)
    desk = pair("desk", DESK, "laptop", LAPTOP)
    assert not desk.receiving.verifies(thief.sending.mac(DATA), DATA)
    assert not desk.receiving.verifies(forged[:MAC_BYTES], DATA)
