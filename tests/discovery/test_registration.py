"""The v2 registration record: reader rules, byte-exact writer, public view, git probe, display."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pi_cross_session._internal.protocol import jsonwire, limits, paths
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.errors import CrossSessionError, LocalProtocolError
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.registration import (
    GitInfo,
    InvalidRegistrationError,
    PublicPeer,
    Registration,
    UnpublishableRegistrationError,
    build_registration,
    default_name,
    display_line,
    inbound_from_flag,
    js_number_text,
    parse_git_output,
    parse_registration,
    serialize,
)
from pi_cross_session._internal.protocol.text import clean_name
from tests.data_paths import REFERENCE
from tests.support.hostile_text import ATTACKS, assert_safe_line

FIXTURE = environment.resolve(env={paths.AGENT_DIR_ENV: "/tmp/xs-fixture/agent"}, uid=0)
INSTANCE = "2d06c66b2c0fbee2d957b41c6c78cad0"
TOKEN = "0123456789abcdef" * 4
EMOJI = "\U0001f600"  # one code point, two UTF-16 units


def fields(**overrides: Any) -> dict[str, Any]:
    """A valid registration as the JSON object a reader sees, with some values replaced."""
    base: dict[str, Any] = {
        "version": 2,
        "protocol": 1,
        "id": "01a22679-d160-738f-81de-3c5ba9cff5c6",
        "instanceId": INSTANCE,
        "name": "ts-ref",
        "cwd": "/tmp/xs-fixture/cwd-ts",
        "pid": 12962,
        "startedAt": 1795941847396,
        "updatedAt": 1795941847398,
        "status": "idle",
        "inbound": "accept",
        "socketPath": FIXTURE.socket_path(INSTANCE),
        "token": TOKEN,
    }
    base.update(overrides)
    return base


def parse(data: Any, *, stem: str = INSTANCE) -> Registration:
    raw = data if isinstance(data, (bytes, str)) else jsonwire.dumps(data).encode()
    return parse_registration(raw, file_stem=stem, expected_socket_path=FIXTURE.socket_path(stem))


def refused(data: Any, field: str | None) -> InvalidRegistrationError:
    with pytest.raises(InvalidRegistrationError) as info:
        parse(data)
    assert info.value.field == field
    return info.value


# -- the recorded reference files ------------------------------------------------------------------

RECORDED_FILES = sorted(REFERENCE.glob("registration-*.json"))


def test_all_four_recorded_files_are_present() -> None:
    assert [f.name for f in RECORDED_FILES] == [
        "registration-py-rpc.json",
        "registration-py.json",
        "registration-ts-rpc.json",
        "registration-ts.json",
    ]


@pytest.mark.parametrize("path", RECORDED_FILES, ids=lambda p: p.name)
def test_recorded_file_parses_and_serialises_to_the_same_bytes(path: Path) -> None:
    # The recorded tokens are redacted with same-length placeholders that are not hex. We swap in
    # a real 64-hex token to parse, and swap the placeholder back before comparing: every byte of
    # the file is compared, the token's value is the only thing not taken from the recording.
    recorded = path.read_bytes()
    placeholder = json.loads(recorded)["token"]
    assert len(placeholder) == 64
    assert recorded.count(placeholder.encode()) == 1
    stem = json.loads(recorded)["instanceId"]

    registration = parse(recorded.replace(placeholder.encode(), TOKEN.encode()), stem=stem)

    assert registration.token == TOKEN
    assert registration.socket_path == FIXTURE.socket_path(stem)
    assert serialize(registration).replace(TOKEN.encode(), placeholder.encode()) == recorded


@pytest.mark.parametrize("path", RECORDED_FILES, ids=lambda p: p.name)
def test_recorded_file_with_its_placeholder_token_is_refused_for_the_token_only(path: Path) -> None:
    recorded = path.read_bytes()
    with pytest.raises(InvalidRegistrationError) as info:
        parse(recorded, stem=json.loads(recorded)["instanceId"])
    assert info.value.field == "token"


def test_recorded_file_is_refused_under_another_agent_dir() -> None:
    recorded = REFERENCE / "registration-ts.json"
    other = environment.resolve(env={paths.AGENT_DIR_ENV: "/tmp/xs-fixture/agent/"}, uid=0)
    raw = recorded.read_bytes()
    stem = json.loads(raw)["instanceId"]
    with pytest.raises(InvalidRegistrationError) as info:
        parse_registration(raw, file_stem=stem, expected_socket_path=other.socket_path(stem))
    assert info.value.field in ("token", "socketPath")  # the token fails first; either skips it


# -- reader rules, field by field ------------------------------------------------------------------


def test_valid_record_parses_into_snake_case_attributes() -> None:
    reg = parse(fields())
    assert reg.instance_id == INSTANCE
    assert reg.started_at == 1795941847396
    assert isinstance(reg.started_at, int)
    assert reg.socket_path == FIXTURE.socket_path(INSTANCE)
    assert reg.ref == INSTANCE[:8]


def test_text_input_is_accepted_like_bytes() -> None:
    assert parse(jsonwire.dumps(fields())) == parse(fields())


@pytest.mark.parametrize("key", list(fields()))
def test_every_field_is_required(key: str) -> None:
    data = fields()
    del data[key]
    refused(data, key)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("version", 1),
        ("version", 3),
        ("version", "2"),
        ("version", 2.0),  # JS would read 2.0 as 2; we read the JSON spelling (documented)
        ("protocol", 2),
        ("protocol", True),  # True == 1 in Python: the classic trap
        ("protocol", 1.0),
        ("protocol", None),
    ],
)
def test_version_and_protocol_must_be_exact_integers(key: str, value: Any) -> None:
    refused(fields(**{key: value}), key)


@pytest.mark.parametrize(
    ("pid", "ok"),
    [
        (0, False),
        (1, True),
        (-1, False),
        (limits.MAX_PID - 1, True),
        (limits.MAX_PID, True),
        (limits.MAX_PID + 1, False),
        (True, False),
        (12962.0, False),
        (12962.5, False),
        ("12962", False),
    ],
)
def test_pid_bounds_and_type(pid: Any, ok: bool) -> None:
    if ok:
        assert parse(fields(pid=pid)).pid == pid
    else:
        refused(fields(pid=pid), "pid")


def test_pid_written_as_float_literal_is_refused() -> None:
    raw = jsonwire.dumps(fields()).replace('"pid":12962', '"pid":12962.0')
    refused(raw, "pid")
    refused(jsonwire.dumps(fields()).replace('"pid":12962', '"pid":1.2962e4'), "pid")


@pytest.mark.parametrize("key", ["startedAt", "updatedAt"])
@pytest.mark.parametrize("value", [0, -5, 1.5, 1795941847396.25, limits.MAX_SAFE_INTEGER + 10])
def test_timestamps_accept_any_finite_number(key: str, value: float) -> None:
    assert parse(fields(**{key: value})).model_dump(by_alias=True)[key] == value


@pytest.mark.parametrize("key", ["startedAt", "updatedAt"])
@pytest.mark.parametrize("value", [True, False, None, "1", [1], float("inf"), 10**400])
def test_timestamps_refuse_non_numbers_and_non_finite(key: str, value: Any) -> None:
    # 10**400 is an exact int in Python but Infinity in JS. The stdlib encoder spells Infinity, as
    # a forger might; our JSON reader refuses that literal (field None), everything else is the
    # field's own refusal.
    raw = json.dumps(fields(**{key: value}))
    with pytest.raises(InvalidRegistrationError) as info:
        parse(raw)
    assert info.value.field in (key, None)


@pytest.mark.parametrize("spelling", ["1e400", "-1e400", str(10**400)])
def test_timestamp_literal_too_large_for_a_double_is_refused(spelling: str) -> None:
    raw = jsonwire.dumps(fields()).replace('"startedAt":1795941847396', f'"startedAt":{spelling}')
    refused(raw, "startedAt")


def test_nan_is_not_json() -> None:
    raw = jsonwire.dumps(fields()).replace('"startedAt":1795941847396', '"startedAt":NaN')
    refused(raw, None)


def test_nan_is_refused_by_the_model_too() -> None:
    with pytest.raises(ValueError, match="finite"):
        Registration.model_validate(fields(startedAt=float("nan")))


@pytest.mark.parametrize(
    ("session_id", "ok"),
    [
        ("", False),
        ("a", True),
        ("a" * (limits.MAX_SESSION_ID_UNITS - 1), True),
        ("a" * limits.MAX_SESSION_ID_UNITS, True),
        ("a" * (limits.MAX_SESSION_ID_UNITS + 1), False),
        # UTF-16 units, not code points: 256 emoji are 512 units; one more unit is too many.
        (EMOJI * (limits.MAX_SESSION_ID_UNITS // 2), True),
        (EMOJI * (limits.MAX_SESSION_ID_UNITS // 2) + "a", False),
        # 512 code points but 513 units.
        ("a" * (limits.MAX_SESSION_ID_UNITS - 1) + EMOJI, False),
        (" ", True),  # the reader only asks for non-empty
    ],
)
def test_session_id_length_in_utf16_units(session_id: str, ok: bool) -> None:
    if ok:
        assert parse(fields(id=session_id)).id == session_id
    else:
        refused(fields(id=session_id), "id")


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("", False),
        ("a" * (limits.MAX_NAME_CODE_POINTS - 1), True),
        ("a" * limits.MAX_NAME_CODE_POINTS, True),
        ("a" * (limits.MAX_NAME_CODE_POINTS + 1), False),
        # Code points, not UTF-16 units: 200 emoji are 400 units and still fine.
        (EMOJI * limits.MAX_NAME_CODE_POINTS, True),
        (EMOJI * (limits.MAX_NAME_CODE_POINTS + 1), False),
        ("x\ny", True),  # the reader does not require a clean name; display cleans it
    ],
)
def test_name_length_in_code_points(name: str, ok: bool) -> None:
    if ok:
        assert parse(fields(name=name)).name == name
    else:
        refused(fields(name=name), "name")


@pytest.mark.parametrize(
    ("cwd", "ok"),
    [
        ("", True),
        ("/" * (limits.MAX_CWD_UNITS - 1), True),
        ("/" * limits.MAX_CWD_UNITS, True),
        ("/" * (limits.MAX_CWD_UNITS + 1), False),
        (EMOJI * (limits.MAX_CWD_UNITS // 2), True),
        (EMOJI * (limits.MAX_CWD_UNITS // 2) + "/", False),
        ("/" * (limits.MAX_CWD_UNITS - 1) + EMOJI, False),  # 32,768 code points, 32,769 units
    ],
)
def test_cwd_length_in_utf16_units(cwd: str, ok: bool) -> None:
    # Checked on the model: 16,384 emoji are 65,536 UTF-8 bytes, past the file cap on their own.
    if ok:
        assert Registration.model_validate(fields(cwd=cwd)).cwd == cwd
    else:
        with pytest.raises(ValidationError, match="cwd"):
            Registration.model_validate(fields(cwd=cwd))


def test_cwd_limit_through_a_file() -> None:
    assert parse(fields(cwd="/" * limits.MAX_CWD_UNITS)).cwd == "/" * limits.MAX_CWD_UNITS
    refused(fields(cwd="/" * (limits.MAX_CWD_UNITS + 1)), "cwd")
    refused(fields(cwd="/" * (limits.MAX_CWD_UNITS - 1) + EMOJI), "cwd")


@pytest.mark.parametrize(
    "value", [INSTANCE.upper(), INSTANCE[:-1], INSTANCE + "0", INSTANCE + "\n", "g" * 32, 7, None]
)
def test_instance_id_must_be_32_lowercase_hex(value: Any) -> None:
    data = fields(instanceId=value)
    with pytest.raises(InvalidRegistrationError) as info:
        parse_registration(
            jsonwire.dumps(data), file_stem=INSTANCE, expected_socket_path=data["socketPath"]
        )
    assert info.value.field == "instanceId"


@pytest.mark.parametrize("value", [TOKEN[:-1], TOKEN + "0", TOKEN.upper(), TOKEN + "\n", "", 0])
def test_token_must_be_64_lowercase_hex(value: Any) -> None:
    refused(fields(token=value), "token")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("status", "Idle"),
        ("status", "stopped"),
        ("status", ""),
        ("inbound", "deny"),
        ("inbound", 1),
    ],
)
def test_status_and_inbound_are_closed_sets(key: str, value: Any) -> None:
    refused(fields(**{key: value}), key)


@pytest.mark.parametrize(("key", "value"), [("status", "busy"), ("inbound", "refuse")])
def test_status_and_inbound_other_values(key: str, value: str) -> None:
    assert parse(fields(**{key: value})).model_dump(by_alias=True)[key] == value


@pytest.mark.parametrize("key", ["id", "name", "cwd", "socketPath"])
def test_lone_surrogate_escapes_are_refused(key: str) -> None:
    raw = jsonwire.dumps(fields(**{key: "SENTINEL"})).replace("SENTINEL", "a\\ud800b")
    refused(raw, key)


def test_a_surrogate_pair_escape_is_one_character() -> None:
    raw = jsonwire.dumps(fields(name="SENTINEL")).replace("SENTINEL", "\\ud83d\\ude00")
    assert parse(raw).name == EMOJI


def test_stem_must_equal_instance_id() -> None:
    other = "0" * 32
    with pytest.raises(InvalidRegistrationError) as info:
        parse_registration(
            jsonwire.dumps(fields()).encode(),
            file_stem=other,
            expected_socket_path=FIXTURE.socket_path(INSTANCE),
        )
    assert info.value.field == "instanceId"
    assert info.value.code == Code.INVALID_FRAME


@pytest.mark.parametrize(
    "socket_path",
    [
        "/tmp/pi-peers-1000-0012f3d496fe/" + INSTANCE + ".sock",  # another uid
        "/tmp/pi-peers-0-0012f3d496fe/" + INSTANCE + ".sock/",
        "/tmp/pi-peers-0-0012f3d496fe//" + INSTANCE + ".sock",
        "/tmp/evil/" + INSTANCE + ".sock",
        "",
    ],
)
def test_socket_path_must_equal_the_readers_own_computation(socket_path: str) -> None:
    error = refused(fields(socketPath=socket_path), "socketPath")
    assert error.code == Code.UNSAFE_ENDPOINT


def test_socket_path_must_be_a_string() -> None:
    error = refused(fields(socketPath=None), "socketPath")
    assert error.code == Code.INVALID_FRAME


def test_extra_fields_are_ignored_and_dropped() -> None:
    reg = parse(fields(extra="x", git={"worktree": "/evil"}, ref="deadbeef", nested={"a": [1]}))
    assert reg == parse(fields())
    assert "extra" not in reg.model_dump(by_alias=True)
    peer = PublicPeer.from_registration(reg)
    assert peer.ref == INSTANCE[:8]
    assert peer.git is None


def test_snake_case_keys_do_not_stand_in_for_the_contracts_keys() -> None:
    data = fields()
    data["instance_id"] = data.pop("instanceId")
    refused(data, "instanceId")


def test_duplicate_keys_keep_the_last_value_as_json_parse_does() -> None:
    raw = jsonwire.dumps(fields())[:-1] + ',"pid":0}'
    refused(raw, "pid")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (
            b"\xef\xbb\xbf" + jsonwire.dumps(fields()).encode(),
            "not JSON",
        ),  # a BOM breaks JSON.parse
        (b"\xff{}", "not UTF-8"),
        (b"[]", "not a JSON object"),
        (b"null", "not a JSON object"),
        (b"2", "not a JSON object"),
        (b'"x"', "not a JSON object"),
        (b"[" * 100_000, "not JSON"),  # past the size cap, so refused before any parsing
    ],
)
def test_records_that_are_not_objects(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidRegistrationError) as info:
        parse(raw)
    assert info.value.field is None
    assert reason in str(info.value) or "larger than" in str(info.value)


def test_deep_nesting_within_the_cap_is_a_refusal_not_a_crash() -> None:
    refused(b"[" * 60_000, None)


def test_size_cap_counts_bytes() -> None:
    compact = jsonwire.dumps(fields())
    padding = limits.MAX_REGISTRATION_BYTES - len(compact.encode())
    at_limit = compact + " " * padding  # JSON allows trailing whitespace
    assert len(at_limit.encode()) == limits.MAX_REGISTRATION_BYTES
    assert parse(at_limit.encode()) == parse(fields())
    assert parse(at_limit) == parse(fields())
    with pytest.raises(InvalidRegistrationError, match="larger than"):
        parse((at_limit + " ").encode())
    with pytest.raises(InvalidRegistrationError, match="larger than"):
        parse(at_limit + " ")


def test_error_messages_never_echo_the_offending_value() -> None:
    for key in ("name", "cwd", "token", "status", "pid"):
        error = refused(fields(**{key: ["SECRET-VALUE" * 10]}), key)
        assert "SECRET-VALUE" not in str(error)
        assert key in str(error)


def test_errors_belong_to_the_package_tree() -> None:
    assert issubclass(InvalidRegistrationError, CrossSessionError)
    assert issubclass(UnpublishableRegistrationError, LocalProtocolError)


# -- writer ----------------------------------------------------------------------------------------


def test_serialise_is_compact_in_writer_order_without_newline() -> None:
    reg = parse(fields(name="caf\u00e9 \U0001f600", cwd='/a"b\\c\td\u2028'))
    text = serialize(reg).decode()
    assert list(json.loads(text)) == list(fields())
    assert text.startswith('{"version":2,"protocol":1,"id":')
    assert not text.endswith("\n")
    assert ", " not in text
    assert ": " not in text
    # Non-ASCII stays UTF-8, as JSON.stringify writes it; quotes, backslash and tab are escaped.
    assert "caf\u00e9 \U0001f600" in text
    assert '"cwd":"/a\\"b\\\\c\\td\u2028"' in text
    assert parse(text) == reg


def test_registration_repr_hides_the_token() -> None:
    reg = parse(fields())
    assert TOKEN not in repr(reg)
    assert TOKEN not in str(reg)


@pytest.mark.parametrize(
    ("value", "text"),
    # Right-hand sides are what Node's JSON.stringify prints for the same number.
    [
        (0, "0"),
        (-0.0, "0"),
        (1795941847396, "1795941847396"),
        (1795941847396.0, "1795941847396"),
        (1.5, "1.5"),
        (-1234.5678, "-1234.5678"),
        (0.1, "0.1"),
        (1e16, "10000000000000000"),
        (1e21, "1e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-7, "1e-7"),
        (-1e-7, "-1e-7"),
        (0.000001, "0.000001"),
        (1.5e-5, "0.000015"),
        (123e-20, "1.23e-18"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (2**53 + 1, "9007199254740992"),  # beyond 2**53 JS holds the nearest double
        (limits.MAX_SAFE_INTEGER, "9007199254740991"),
    ],
)
def test_numbers_are_spelled_as_json_stringify_spells_them(value: float, text: str) -> None:
    assert js_number_text(value) == text


def test_non_finite_numbers_have_no_spelling() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        js_number_text(float("inf"))


def test_fractional_timestamps_serialise_like_js() -> None:
    reg = parse(fields(startedAt=1795941847396.5, updatedAt=1e16))
    assert b'"startedAt":1795941847396.5,"updatedAt":10000000000000000,' in serialize(reg)


# -- building our own registration -----------------------------------------------------------------


def build(**overrides: Any) -> Registration:
    values: dict[str, Any] = {
        "session_id": "6ca36b18-705f-4149-8b6b-60fe95514bad",
        "session_name": None,
        "instance_id": INSTANCE,
        "cwd": "/home/dev/project",
        "pid": 4242,
        "started_at": 1795941860116,
        "updated_at": 1795941860116,
        "status": "idle",
        "inbound": "accept",
        "socket_path": FIXTURE.socket_path(INSTANCE),
        "token": TOKEN,
    }
    values.update(overrides)
    return build_registration(**values)


def test_build_defaults_the_name_to_pi_and_the_ids_first_eight() -> None:
    reg = build()
    assert reg.name == "pi-6ca36b18"
    assert (reg.version, reg.protocol) == (2, 1)
    assert parse(serialize(reg)) == reg


@pytest.mark.parametrize(
    ("session_name", "expected"),
    [
        ("  my\tsession\n", "my session"),
        ("a\u200bb", "a b"),  # a format character becomes a space
        ("", "unnamed-session"),  # only None falls back to the id
        ("\u3000\ufeff", "unnamed-session"),
        ("x" * 250, "x" * 200),
        ("bad\ud800name", "bad\ufffdname"),
    ],
)
def test_build_cleans_the_session_name(session_name: str, expected: str) -> None:
    assert build(session_name=session_name).name == expected


def test_default_name_slices_the_id_by_utf16_units() -> None:
    assert default_name(EMOJI * 5, None) == "pi-" + EMOJI * 4
    # JS would cut the pair in half; we stop before it.
    assert default_name("abcdefg" + EMOJI, None) == "pi-abcdefg"
    assert default_name("ab", None) == "pi-ab"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"session_id": ""}, "id"),
        ({"session_id": "a" * (limits.MAX_SESSION_ID_UNITS + 1)}, "id"),
        ({"session_id": "a\ud800"}, "id"),
        ({"cwd": "/" * (limits.MAX_CWD_UNITS + 1)}, "cwd"),
        ({"cwd": EMOJI * (limits.MAX_CWD_UNITS // 2)}, "cwd"),  # within units, past the file cap
        ({"instance_id": "x"}, "instanceId"),
        ({"token": "x"}, "token"),
        ({"pid": 0}, "pid"),
        ({"status": "stopped"}, "status"),
    ],
)
def test_build_refuses_what_readers_would_skip(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(UnpublishableRegistrationError) as info:
        build(**overrides)
    assert info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("flag", "inbound"),
    [
        (None, "accept"),
        ("accept", "accept"),
        ("refuse", "refuse"),
        ("Accept", "refuse"),
        ("", "refuse"),
    ],
)
def test_inbound_flag(flag: str | None, inbound: str) -> None:
    assert inbound_from_flag(flag) == inbound


# -- public view -----------------------------------------------------------------------------------

HEAD = "2f1e3d4c5b6a79880716253443526170fedcba98"


def test_public_peer_has_no_token_and_the_reference_key_order() -> None:
    git = GitInfo(worktree="/home/dev/project", branch="main", head=HEAD)
    peer = PublicPeer.from_registration(parse(fields()), git)
    assert not hasattr(peer, "token")
    data = peer.to_dict()
    assert list(data) == [
        "version",
        "protocol",
        "id",
        "instanceId",
        "name",
        "cwd",
        "pid",
        "startedAt",
        "updatedAt",
        "status",
        "inbound",
        "socketPath",
        "ref",
        "git",
    ]
    assert data["ref"] == INSTANCE[:8]
    assert data["git"] == {"worktree": "/home/dev/project", "branch": "main", "head": HEAD}
    assert TOKEN not in jsonwire.dumps(data)


def test_public_peer_reads_a_listing_object_back() -> None:
    peer = PublicPeer.from_registration(parse(fields()), None)
    assert PublicPeer.model_validate(peer.to_dict()) == peer


# -- git probe -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        (f"/w\n{HEAD}\nmain\n", GitInfo(worktree="/w", branch="main", head=HEAD)),
        (f"/w\n{HEAD}\nHEAD\n", GitInfo(worktree="/w", branch=None, head=HEAD)),
        (f"/w\n{HEAD}\nmain", GitInfo(worktree="/w", branch="main", head=HEAD)),
        (f"/w\r\n{HEAD}\r\nmain\r\n", GitInfo(worktree="/w", branch="main", head=HEAD)),
        (f"/a\nb\n{HEAD}\nfeat/x\n", GitInfo(worktree="/a\nb", branch="feat/x", head=HEAD)),
        ("/w\n" + "a" * 64 + "\nmain\n", GitInfo(worktree="/w", branch="main", head="a" * 64)),
        ("/w\n" + "a" * 39 + "\nmain\n", None),
        ("/w\n" + "a" * 65 + "\nmain\n", None),
        (f"/w\n{HEAD.upper()}\nmain\n", None),
        (f"{HEAD}\nmain\n", None),
        (f"\n{HEAD}\nmain\n", None),
        (f"/w\n{HEAD}\n\n", None),
        (f"/w\n{HEAD}\nmain\n\n", None),
        ("", None),
        ("fatal: not a git repository\n", None),
        (f"/w\ud800\n{HEAD}\nmain\n", None),
    ],
)
def test_parse_git_output(stdout: str, expected: GitInfo | None) -> None:
    assert parse_git_output(stdout) == expected


# -- display ---------------------------------------------------------------------------------------


def peer_with(git: GitInfo | None = None, **overrides: Any) -> PublicPeer:
    return PublicPeer.from_registration(parse(fields(**overrides)), git)


def test_display_line_with_git() -> None:
    peer = peer_with(GitInfo(worktree="/home/dev/project", branch="main", head=HEAD))
    assert display_line(peer) == (
        "ts-ref [2d06c66b] \u2014 idle \u2014 /tmp/xs-fixture/cwd-ts"
        " \u2014 git /home/dev/project (main@2f1e3d4c)"
        " \u2014 session 01a22679-d160-738f-81de-3c5ba9cff5c6"
    )


def test_display_line_detached_and_without_git() -> None:
    detached = peer_with(GitInfo(worktree="/w", branch=None, head=HEAD), status="busy")
    assert " \u2014 busy \u2014 " in display_line(detached)
    assert " \u2014 git /w (detached@2f1e3d4c) \u2014 " in display_line(detached)
    assert " \u2014 git none \u2014 session " in display_line(peer_with(None))


def test_display_line_cannot_be_split_by_peer_text() -> None:
    forged = "x\nother [deadbeef] \u2014 idle\u2028\r\x1b[2J"
    peer = peer_with(
        GitInfo(worktree=forged, branch=forged, head=HEAD), name=forged, cwd=forged, id=forged
    )
    line = display_line(peer)
    assert line.splitlines() == [line]
    assert "\x1b" not in line
    # Escaped, not dropped: the reader sees that something was there, and what.
    assert "x\\x0aother [deadbeef] \u2014 idle\\u2028\\x0d\\x1b[2J" in line


def test_display_line_escapes_every_attack_in_every_field() -> None:
    for sample in ATTACKS.values():
        peer = peer_with(
            GitInfo(worktree="/w" + sample, branch=sample, head=HEAD),
            name="n" + sample,
            cwd="/c" + sample,
            id="s" + sample,
        )
        assert_safe_line(display_line(peer))


def test_display_line_truncates_by_code_points() -> None:
    peer = peer_with(
        GitInfo(worktree="w" * 600, branch="b", head=HEAD), cwd=EMOJI * 600, id="i" * 300
    )
    line = display_line(peer)
    # A cut field keeps one code point less than its limit and ends in an ellipsis, so a reader
    # knows there was more.
    cwd_kept, id_kept = (
        limits.DISPLAY_CWD_CODE_POINTS - 1,
        limits.DISPLAY_SESSION_ID_CODE_POINTS - 1,
    )
    assert EMOJI * cwd_kept + "\u2026 \u2014 git " in line
    assert EMOJI * (cwd_kept + 1) not in line
    assert " git " + "w" * cwd_kept + "\u2026 (b@" in line
    assert line.endswith(" session " + "i" * id_kept + "\u2026")


def test_display_line_shows_a_blank_name_as_unnamed() -> None:
    assert display_line(peer_with(name="\u3000")).startswith("unnamed-session [2d06c66b]")


# -- properties ------------------------------------------------------------------------------------

# Any JSON value, lone surrogates and non-finite floats included (the stdlib encoder spells them).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(alphabet=st.characters(exclude_categories=())),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(list(fields())) | st.text(max_size=12), children, max_size=6
        )
    ),
    max_leaves=16,
)


@given(json_values)
def test_any_json_value_is_a_registration_or_a_coded_refusal(value: Any) -> None:
    try:
        raw = json.dumps(value, ensure_ascii=False)
    except ValueError:
        return
    try:
        parse(raw)
    except InvalidRegistrationError as exc:
        code = exc.code
    else:
        return
    assert code in (Code.INVALID_FRAME, Code.UNSAFE_ENDPOINT)


@given(st.sampled_from(list(fields())), json_values)
def test_one_field_replaced_by_any_value_never_escapes_the_refusal(key: str, value: Any) -> None:
    raw = json.dumps(fields(**{key: value}), ensure_ascii=False, allow_nan=True)
    try:
        reg = parse(raw.encode("utf-8", "surrogatepass"))
    except InvalidRegistrationError:
        return
    # Whatever got through must survive our own writer unchanged, as a JS reader sees numbers:
    # JSON.stringify spells 7.080046065253406e16 as 70800460652534060, which Python reads back as
    # an exact int one ulp-fraction away from the double, JS as the same double.
    again = parse(serialize(reg))
    assert again.model_copy(update={"started_at": 0, "updated_at": 0}) == reg.model_copy(
        update={"started_at": 0, "updated_at": 0}
    )
    assert float(again.started_at) == float(reg.started_at)
    assert float(again.updated_at) == float(reg.updated_at)


@given(st.binary(max_size=512))
def test_any_bytes_are_a_registration_or_a_coded_refusal(raw: bytes) -> None:
    with contextlib.suppress(InvalidRegistrationError):
        parse(raw)


@given(st.text())
def test_clean_name_is_idempotent(name: str) -> None:
    assert clean_name(clean_name(name)) == clean_name(name)


@given(st.text(), st.text(max_size=10))
def test_built_names_are_always_publishable(session_name: str, session_id: str) -> None:
    name = default_name(session_id or "x", session_name)
    assert 1 <= len(name) <= limits.MAX_NAME_CODE_POINTS
    assert name == clean_name(name)
