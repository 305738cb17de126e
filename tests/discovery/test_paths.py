"""Agent dir, namespace, runtime dir and endpoint names (spec §1.1, spec §1.2, spec §2)."""

from __future__ import annotations

import hashlib
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment

FIXTURE_AGENT_DIR = "/tmp/xs-fixture/agent"
INSTANCE = "2d06c66b2c0fbee2d957b41c6c78cad0"


# -- agent dir -------------------------------------------------------------------------------------


def test_default_agent_dir_is_home_dot_pi_agent() -> None:
    assert environment.resolve_agent_dir(env={}, home="/home/alice") == "/home/alice/.pi/agent"


def test_default_agent_dir_is_joined_like_node() -> None:
    # path.join normalises: a trailing or doubled slash in HOME does not change the agent dir.
    assert environment.resolve_agent_dir(env={}, home="/home/alice/") == "/home/alice/.pi/agent"
    assert environment.resolve_agent_dir(env={}, home="/home//alice") == "/home/alice/.pi/agent"
    assert environment.resolve_agent_dir(env={}, home="/") == "/.pi/agent"


def test_empty_env_value_counts_as_unset() -> None:
    env = {paths.AGENT_DIR_ENV: ""}
    assert environment.resolve_agent_dir(env=env, home="/home/alice") == "/home/alice/.pi/agent"


def test_env_value_is_used_verbatim() -> None:
    for value in ("/tmp/x/", "/tmp//x", "/tmp/./x/..", "relative/dir", " /tmp/x", "~alice/x"):
        env = {paths.AGENT_DIR_ENV: value}
        assert environment.resolve_agent_dir(env=env, home="/home/alice") == value


def test_tilde_alone_is_home() -> None:
    env = {paths.AGENT_DIR_ENV: "~"}
    assert environment.resolve_agent_dir(env=env, home="/home/alice") == "/home/alice"


def test_tilde_slash_is_home_plus_rest() -> None:
    home = "/home/alice"
    cases = {
        "~/agent": "/home/alice/agent",
        "~/": "/home/alice/",  # the trailing slash stays: a different namespace from "~"
        "~//x": "/home/alice//x",  # concatenated, never reset to "/x" as os.path.join would
        "~/a/../b": "/home/alice/a/../b",
    }
    for value, expected in cases.items():
        assert (
            environment.resolve_agent_dir(env={paths.AGENT_DIR_ENV: value}, home=home) == expected
        )


def test_home_is_taken_from_the_given_env_verbatim() -> None:
    assert environment.resolve_home({"HOME": "/h/"}) == "/h/"
    # Node takes an empty HOME as is; Python's expanduser would say "/".
    assert environment.resolve_home({"HOME": ""}) == ""
    assert environment.resolve_agent_dir(env={"HOME": "/h"}) == "/h/.pi/agent"


def test_home_is_not_looked_up_when_not_needed() -> None:
    # An absolute override needs no home: nothing to fall back on, nothing read.
    env = {paths.AGENT_DIR_ENV: FIXTURE_AGENT_DIR}
    assert environment.resolve_agent_dir(env=env) == FIXTURE_AGENT_DIR


def test_non_utf8_env_value_is_read_as_node_reads_it() -> None:
    # os.environ holds undecodable bytes as surrogate escapes; Node sees U+FFFD.
    escaped = b"/tmp/\xe2\x82x".decode("utf-8", "surrogateescape")
    resolved = environment.resolve_agent_dir(env={paths.AGENT_DIR_ENV: escaped})
    assert resolved == "/tmp/\ufffdx"


# -- namespace -------------------------------------------------------------------------------------


def test_namespace_of_the_spec_example() -> None:
    assert paths.namespace_for("/home/alice/.pi/agent") == "4e34e845addf"


def test_namespace_of_the_recorded_fixture() -> None:
    assert paths.namespace_for(FIXTURE_AGENT_DIR) == "0012f3d496fe"


def test_namespace_is_sensitive_to_every_byte() -> None:
    assert paths.namespace_for("/tmp/x") != paths.namespace_for("/tmp/x/")


def test_namespace_hashes_a_lone_surrogate_as_node_does() -> None:
    # Node encodes a lone surrogate as U+FFFD before hashing (checked against node's crypto).
    assert paths.namespace_for("a\ud800b") == paths.namespace_for("a\ufffdb") == "05087813392e"


@given(st.text())
def test_namespace_is_twelve_lowercase_hex(agent_dir: str) -> None:
    namespace = paths.namespace_for(agent_dir)
    assert len(namespace) == paths.NAMESPACE_CHARS
    assert set(namespace) <= set("0123456789abcdef")
    assert namespace == hashlib.sha256(agent_dir.encode()).hexdigest()[:12]


# -- node path.join --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "expected"),
    # Expected values are what Node's path.posix.join returns for the same arguments.
    [
        (("/home/alice", ".pi", "agent"), "/home/alice/.pi/agent"),
        (("//h", ".pi", "agent"), "/h/.pi/agent"),
        (("", ".pi", "agent"), ".pi/agent"),
        (("/tmp/x/", "peers"), "/tmp/x/peers"),
        (("/tmp/./x/..", "peers"), "/tmp/peers"),
        (("/tmp/x", "../peers"), "/tmp/peers"),
        (("../a", "../../b"), "../../b"),
        (("a/..", ""), "."),
        (("a/../",), "./"),
        (("", ""), "."),
        (("/a/b/../../..",), "/"),
        (("/a/",), "/a/"),
    ],
)
def test_node_join(parts: tuple[str, ...], expected: str) -> None:
    assert paths.node_join(*parts) == expected


@given(st.lists(st.text(alphabet="ab./", max_size=8), max_size=4))
def test_node_join_is_normpath_with_nodes_two_differences(parts: list[str]) -> None:
    # An independent model: posixpath.normpath differs from Node only in keeping a leading "//"
    # and dropping a trailing slash.
    joined = "/".join(p for p in parts if p)
    expected = posixpath.normpath(joined or ".")
    if expected.startswith("//"):
        expected = expected[1:]
    if joined.endswith("/") and expected != "/":
        expected += "/"
    assert paths.node_join(*parts) == expected


# -- uid, runtime dir, endpoints -------------------------------------------------------------------


def test_uid_override_and_default() -> None:
    assert environment.resolve_uid(1234) == 1234
    assert environment.resolve_uid(0) == 0
    assert isinstance(environment.resolve_uid(), int)


def test_resolve_bundles_every_location() -> None:
    loc = environment.resolve(env={paths.AGENT_DIR_ENV: FIXTURE_AGENT_DIR}, uid=0)
    assert loc == paths.Locations(
        agent_dir=FIXTURE_AGENT_DIR,
        namespace="0012f3d496fe",
        uid=0,
        runtime_dir="/tmp/pi-peers-0-0012f3d496fe",
        peers_dir="/tmp/xs-fixture/agent/peers",
    )
    assert loc.socket_path(INSTANCE) == f"/tmp/pi-peers-0-0012f3d496fe/{INSTANCE}.sock"
    assert loc.registration_path(INSTANCE) == f"/tmp/xs-fixture/agent/peers/{INSTANCE}.json"


def test_runtime_dir_ignores_tmpdir() -> None:
    env = {paths.AGENT_DIR_ENV: FIXTURE_AGENT_DIR, "TMPDIR": "/var/tmp", "XDG_RUNTIME_DIR": "/run"}
    assert environment.resolve(env=env, uid=1000).runtime_dir == "/tmp/pi-peers-1000-0012f3d496fe"


def test_socket_path_length_matches_the_spec_figure() -> None:
    # 65 bytes plus the uid's digits: far below the 104/108-byte AF_UNIX limit.
    loc = environment.resolve(env={paths.AGENT_DIR_ENV: FIXTURE_AGENT_DIR}, uid=1000)
    assert len(loc.socket_path(INSTANCE).encode()) == 69


def test_peers_dir_of_a_trailing_slash_agent_dir() -> None:
    loc = environment.resolve(env={paths.AGENT_DIR_ENV: "/tmp/x/"}, uid=0)
    assert loc.agent_dir == "/tmp/x/"
    assert loc.peers_dir == "/tmp/x/peers"
    assert loc.namespace != paths.namespace_for("/tmp/x")


def test_pipe_name_does_not_depend_on_the_user_name() -> None:
    base = {paths.AGENT_DIR_ENV: FIXTURE_AGENT_DIR}
    one = environment.resolve(env={**base, "USERNAME": "alice", "USER": "alice"}, uid=0)
    two = environment.resolve(env={**base, "USERNAME": "bob", "USER": "bob"}, uid=0)
    expected = "\\\\.\\pipe\\pi-peer-0012f3d496fe-" + INSTANCE
    assert one.pipe_name(INSTANCE) == two.pipe_name(INSTANCE) == expected
    assert expected.startswith(r"\\.\pipe\pi-peer-")


@pytest.mark.parametrize(
    "bad", ["", "../../etc/passwd", INSTANCE.upper(), INSTANCE + "\n", "a" * 31]
)
def test_endpoint_names_refuse_a_malformed_instance_id(bad: str) -> None:
    loc = environment.resolve(env={paths.AGENT_DIR_ENV: FIXTURE_AGENT_DIR}, uid=0)
    for method in (loc.socket_path, loc.registration_path, loc.pipe_name):
        with pytest.raises(ValueError, match="32 lowercase hex"):
            method(bad)


def test_instance_id_checks() -> None:
    assert paths.is_instance_id(INSTANCE)
    assert not paths.is_instance_id(INSTANCE + "\n")  # "$" would have let this through
    assert paths.instance_id_from_filename(f"{INSTANCE}.json") == INSTANCE
    for name in (
        f".{INSTANCE}.x.tmp",
        f"{INSTANCE}.json.tmp",
        f"{INSTANCE.upper()}.json",
        "x.json",
    ):
        assert paths.instance_id_from_filename(name) is None


def test_js_to_well_formed() -> None:
    assert paths.js_to_well_formed("ok \U0001f600") == "ok \U0001f600"
    assert paths.js_to_well_formed("a\ud800b\udc00") == "a\ufffdb\ufffd"
    # Two separate surrogates that form a pair are one character to JavaScript.
    assert paths.js_to_well_formed("\ud83d\ude00") == "\U0001f600"
