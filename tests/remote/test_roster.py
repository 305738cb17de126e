"""The deployment's roster (security/remote/roster.py): read only when the deployment key signed
it for this deployment (and checked before a byte of it is parsed), kept only when newer, and
merged under the machine's own trust file."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_cross_session._internal.security.remote import roster as roster_module
from pi_cross_session._internal.security.remote.identity import (
    MachineKey,
    PublicKey,
    public_key_text,
)
from pi_cross_session._internal.security.remote.roster import (
    MAX_ROSTER_BYTES,
    ROSTER_TYPE,
    ROSTER_VERSION,
    Roster,
    RosterKeeper,
    merged_trust,
    open_roster,
)
from pi_cross_session._internal.security.remote.trust import TrustConfig
from tests.hypothesis_profiles import scaled
from tests.support.call_counts import count_calls

#: The deployment's account key signs rosters; its public key names the deployment.
DEPLOYMENT_KEY = MachineKey.generate()
DEPLOYMENT = "A" + "D" * 55
LAPTOP = MachineKey.generate().public_key
DESK = MachineKey.generate().public_key
SERVER = MachineKey.generate().public_key
SEQ = 1_700_000_000_000
ROSTER = Roster(DEPLOYMENT, "pi-xs", SEQ, {"laptop": LAPTOP, "desk": DESK})


def sealed(data: bytes, key: MachineKey = DEPLOYMENT_KEY) -> bytes:
    return key.seal(data)


def body_of(roster: Roster = ROSTER, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(roster.to_bytes())
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def signed_body(body: Any) -> bytes:
    return sealed(json.dumps(body).encode())


def opened(payload: bytes) -> Roster | None:
    return open_roster(payload, DEPLOYMENT_KEY.public_key, DEPLOYMENT)


# -- reading ---------------------------------------------------------------------------------------


def test_a_signed_roster_reads_back_as_itself() -> None:
    again = opened(sealed(ROSTER.to_bytes()))
    assert again == ROSTER
    assert again is not None
    assert dict(again.machines) == {"laptop": LAPTOP, "desk": DESK}


def test_a_roster_says_what_it_is_and_lists_machines_by_name() -> None:
    body = json.loads(ROSTER.to_bytes())
    assert body == {
        "type": ROSTER_TYPE,
        "v": ROSTER_VERSION,
        "deployment": DEPLOYMENT,
        "account": "pi-xs",
        "seq": SEQ,
        "machines": {"desk": public_key_text(DESK), "laptop": public_key_text(LAPTOP)},
    }
    # The same roster, whatever order its machines were listed in, is the same bytes.
    swapped = Roster(DEPLOYMENT, "pi-xs", SEQ, {"desk": DESK, "laptop": LAPTOP})
    assert swapped.to_bytes() == ROSTER.to_bytes()


def test_an_empty_roster_is_a_roster() -> None:
    empty = Roster(DEPLOYMENT, "pi-xs", 0)
    assert opened(sealed(empty.to_bytes())) == empty


MACHINE_NAMES = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@settings(max_examples=scaled(100))
@given(
    names=st.lists(MACHINE_NAMES, max_size=6, unique=True),
    seq=st.integers(min_value=0, max_value=2**63),
    account=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
)
def test_any_roster_reads_back_as_itself(names: list[str], seq: int, account: str) -> None:
    keys = [LAPTOP, DESK, SERVER]
    roster = Roster(DEPLOYMENT, account, seq, {n: keys[i % 3] for i, n in enumerate(names)})
    assert opened(sealed(roster.to_bytes())) == roster


# -- what is refused -------------------------------------------------------------------------------


def test_a_roster_signed_by_another_key_is_refused() -> None:
    other = MachineKey.generate()
    assert opened(sealed(ROSTER.to_bytes(), other)) is None
    # ...which opens with that other key: the refusal is the key's.
    assert open_roster(sealed(ROSTER.to_bytes(), other), other.public_key, DEPLOYMENT) == ROSTER


def test_a_flipped_bit_anywhere_is_refused() -> None:
    payload = sealed(ROSTER.to_bytes())
    assert opened(payload) == ROSTER
    for index in range(len(payload)):
        for mask in (0x01, 0x80):
            damaged = bytearray(payload)
            damaged[index] ^= mask
            assert opened(bytes(damaged)) is None, (index, mask)


@pytest.mark.parametrize("cut", [1, 64, 65])
def test_a_truncated_or_extended_roster_is_refused(cut: int) -> None:
    payload = sealed(ROSTER.to_bytes())
    assert opened(payload[:-cut]) is None
    assert opened(payload[cut:]) is None
    assert opened(payload + b" ") is None


@pytest.mark.parametrize("payload", [b"", b"x" * 64, b"\x00" * 65, b"{}"])
def test_what_is_too_short_to_be_signed_is_refused(payload: bytes) -> None:
    assert opened(payload) is None


def test_a_roster_of_another_deployment_is_refused() -> None:
    """Signed by the same key, but naming another deployment (and the other way round)."""
    other = Roster("A" + "E" * 55, "pi-xs", SEQ, {"laptop": LAPTOP})
    payload = sealed(other.to_bytes())
    assert opened(payload) is None
    assert open_roster(payload, DEPLOYMENT_KEY.public_key, other.deployment) == other
    assert open_roster(sealed(ROSTER.to_bytes()), DEPLOYMENT_KEY.public_key, "A" + "E" * 55) is None


SIGNED_BUT_WRONG: dict[str, Any] = {
    "another type": body_of(type="pi-xs-trust"),
    "no type": body_of(type=...),
    "another version": body_of(v=2),
    "version as text": body_of(v="1"),
    "no version": body_of(v=...),
    "no deployment": body_of(deployment=...),
    "seq negative": body_of(seq=-1),
    "seq as text": body_of(seq=str(SEQ)),
    "seq fractional": body_of(seq=1.5),
    "no seq": body_of(seq=...),
    "account with a space": body_of(account="pi xs"),
    "account too long": body_of(account="a" * 65),
    "account a number": body_of(account=1),
    "no account": body_of(account=...),
    "machines a list": body_of(machines=[["laptop", public_key_text(LAPTOP)]]),
    "no machines": body_of(machines=...),
    "a machine name in capitals": body_of(machines={"Laptop": public_key_text(LAPTOP)}),
    "a machine name with a dot": body_of(machines={"lap.top": public_key_text(LAPTOP)}),
    "a machine name starting with _": body_of(machines={"_deployment": public_key_text(LAPTOP)}),
    "an empty machine name": body_of(machines={"": public_key_text(LAPTOP)}),
    "a machine name with a wildcard": body_of(machines={"*": public_key_text(LAPTOP)}),
    "a key of no prefix": body_of(machines={"laptop": public_key_text(LAPTOP)[8:]}),
    "a key too short": body_of(machines={"laptop": "ed25519:AAAA"}),
    "a key not base64": body_of(machines={"laptop": "ed25519:!!!!"}),
    "a key a number": body_of(machines={"laptop": 1}),
    "a key null": body_of(machines={"laptop": None}),
    "one bad machine among good ones": body_of(
        machines={"laptop": public_key_text(LAPTOP), "desk": "ed25519:AAAA"}
    ),
    "a list": [body_of()],
    "a string": "roster",
    "null": None,
}


@pytest.mark.parametrize("case", sorted(SIGNED_BUT_WRONG))
def test_a_signed_document_that_is_no_roster_is_refused(case: str) -> None:
    assert opened(signed_body(body_of())) == ROSTER
    assert opened(signed_body(SIGNED_BUT_WRONG[case])) is None


@pytest.mark.parametrize("data", [b"{", b"\xff\xfe\xfd", b"[1,", b"\x00"])
def test_signed_bytes_that_are_no_json_are_refused(data: bytes) -> None:
    assert opened(sealed(data)) is None


def test_a_roster_over_the_bound_is_refused_even_when_signed() -> None:
    """Whitespace after the JSON keeps it a valid roster, so only the size is in question."""
    data = ROSTER.to_bytes()
    filler = MAX_ROSTER_BYTES - 64 - len(data)
    assert opened(sealed(data + b" " * filler)) == ROSTER
    assert opened(sealed(data + b" " * (filler + 1))) is None


def test_nothing_unsigned_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The signature is checked before a byte is parsed: a forged roster costs one check."""
    parses = count_calls(monkeypatch, [(json, "loads"), (roster_module, "_read")])
    payload = sealed(ROSTER.to_bytes())
    forged = bytearray(payload)
    forged[0] ^= 0x01
    other = sealed(ROSTER.to_bytes(), MachineKey.generate())
    tampered = payload[:64] + ROSTER.to_bytes().replace(b"laptop", b"lapbot")
    for refused in (bytes(forged), other, tampered, payload[:64], b"{}" * 40):
        assert opened(refused) is None
    assert parses.count == 0
    assert opened(payload) == ROSTER
    assert parses.count == 2  # the counter counts: one JSON parse, one read of its fields


def test_an_oversized_payload_is_not_even_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = count_calls(monkeypatch, [(PublicKey, "verifies")])
    assert opened(sealed(b" " * MAX_ROSTER_BYTES)) is None
    assert checks.count == 0
    assert opened(sealed(ROSTER.to_bytes())) == ROSTER
    assert checks.count == 1


# -- keeping the newest ----------------------------------------------------------------------------


def at(seq: int, **machines: PublicKey) -> Roster:
    return Roster(DEPLOYMENT, "pi-xs", seq, machines)


def test_the_keeper_takes_only_newer_rosters() -> None:
    keeper = RosterKeeper()
    assert keeper.current is None
    assert keeper.offer(at(5, laptop=LAPTOP))
    assert keeper.offer(at(7, desk=DESK))
    # An older roster written back (one that still listed the laptop) changes nothing.
    assert not keeper.offer(at(6, laptop=LAPTOP))
    assert not keeper.offer(at(7, laptop=LAPTOP))
    assert keeper.current == at(7, desk=DESK)


def test_a_keeper_started_from_a_kept_roster_does_not_go_below_it() -> None:
    keeper = RosterKeeper(at(10))
    assert not keeper.offer(at(0, laptop=LAPTOP))
    assert not keeper.offer(at(10, laptop=LAPTOP))
    assert keeper.current == at(10)
    assert keeper.offer(at(11, laptop=LAPTOP))


@settings(max_examples=scaled(200))
@given(seqs=st.lists(st.integers(min_value=0, max_value=2**53), max_size=30))
def test_the_kept_seq_never_goes_back(seqs: list[int]) -> None:
    keeper = RosterKeeper()
    highest: int | None = None
    for seq in seqs:
        taken = keeper.offer(at(seq))
        assert taken == (highest is None or seq > highest)
        highest = seq if highest is None else max(highest, seq)
        assert keeper.current is not None
        assert keeper.current.seq == highest


# -- what a gateway trusts -------------------------------------------------------------------------


def test_a_gateway_trusts_the_roster_but_not_itself() -> None:
    own = TrustConfig("pi-xs", True, {})
    merged = merged_trust(own, at(1, laptop=LAPTOP, desk=DESK, server=SERVER), "laptop")
    assert dict(merged.machines) == {"desk": DESK, "server": SERVER}
    assert (merged.account, merged.inbound) == ("pi-xs", True)


def test_the_machines_own_trust_file_wins() -> None:
    mine_for_desk = MachineKey.generate().public_key
    own = TrustConfig("my-account", False, {"desk": mine_for_desk, "nas": SERVER})
    merged = merged_trust(own, at(1, desk=DESK, laptop=LAPTOP), "server")
    assert dict(merged.machines) == {"desk": mine_for_desk, "laptop": LAPTOP, "nas": SERVER}
    # The file's account and inbound switch are the machine's own too.
    assert (merged.account, merged.inbound) == ("my-account", False)
    # The trust file itself is not changed.
    assert dict(own.machines) == {"desk": mine_for_desk, "nas": SERVER}


def test_a_machine_listed_in_its_own_trust_file_is_kept_there() -> None:
    """Only the roster's entry for this machine is left out: the local user's word stands."""
    own = TrustConfig("pi-xs", True, {"laptop": SERVER})
    merged = merged_trust(own, at(1, laptop=LAPTOP), "laptop")
    assert dict(merged.machines) == {"laptop": SERVER}


def test_without_a_roster_the_trust_file_is_all() -> None:
    own = TrustConfig("pi-xs", True, {"desk": DESK})
    assert merged_trust(own, None, "laptop") == own
    assert dict(merged_trust(own, at(1), "laptop").machines) == {"desk": DESK}
