"""Registrations the gateway writes for remote sessions (plugin/remote/identities.py): readers of
the contract accept them, the marks of the machine survive every cut, the marker is extra."""

from __future__ import annotations

import json

from pi_cross_session._internal.plugin.remote import identities
from pi_cross_session._internal.protocol.limits import MAX_NAME_CODE_POINTS, MAX_SESSION_ID_UNITS
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import parse_registration
from pi_cross_session._internal.protocol.text import utf16_length


def build(locations: Locations, **overrides: object) -> identities.Registration:
    fields: dict[str, object] = {
        "local_id": "c" * 32,
        "machine": "buildbox",
        "remote_id": "0190-remote-session",
        "name": "bob",
        "cwd": "/home/bob/project",
        "status": "busy",
        "inbound": "accept",
        "started_at": 1,
        "updated_at": 2,
        "token": "d" * 64,
    }
    fields.update(overrides)
    return identities.build(locations, **fields)  # type: ignore[arg-type]


def test_a_proxy_registration_passes_every_readers_check_with_its_marker(
    locations: Locations,
) -> None:
    registration = build(locations)
    data = identities.file_bytes(registration, "buildbox")
    body = json.loads(data)
    assert list(body)[-1] == "remote"
    assert body["remote"] == {"machine": "buildbox", "via": "gateway"}
    read = parse_registration(
        data,
        file_stem=registration.instance_id,
        expected_socket_path=locations.socket_path(registration.instance_id),
    )
    assert read == registration  # the marker is ignored, everything else is the contract's
    assert (read.name, read.id, read.cwd) == (
        "bob@buildbox",
        "0190-remote-session@buildbox",
        "buildbox:/home/bob/project",
    )


def test_the_machine_survives_every_cut(locations: Locations) -> None:
    long = build(locations, name="n" * 500, remote_id="\U0001f600" * 400, cwd="/" + "c" * 9000)
    assert long.name.endswith("@buildbox")
    assert len(long.name) <= MAX_NAME_CODE_POINTS
    assert long.id.endswith("@buildbox")
    assert utf16_length(long.id) <= MAX_SESSION_ID_UNITS
    assert "\ud83d" not in long.id  # never half of a surrogate pair
    assert long.cwd.startswith("buildbox:/")
    assert not long.cwd.startswith("/")  # never an absolute path here: no git runs in it


def test_a_hostile_remote_name_is_cleaned_like_any_name(locations: Locations) -> None:
    hostile = build(locations, name="bob\n\u202eevil\x1b[31m")
    assert "\n" not in hostile.name
    assert "\x1b" not in hostile.name
    assert hostile.name.endswith("@buildbox")
