"""``pi-cross-session peers``: the live sessions, never a token, never the command line itself."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin import cli_identity
from pi_cross_session._internal.plugin.render import listings
from pi_cross_session._internal.protocol.io import discovery, environment
from pi_cross_session._internal.protocol.io.exchange import Exchanger
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.io import fs
from pi_cross_session._internal.security.io.fs import NotedLock
from tests.support.file_state import exists, tree_state
from tests.support.processes import Inboxes, Result, run_cli

Cli = Callable[..., Result]

PEER_KEYS = [
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


def token_of(locations: Locations, instance_id: str) -> str:
    data = json.loads(Path(locations.registration_path(instance_id)).read_bytes())
    token = data["token"]
    assert isinstance(token, str)
    assert len(token) == 64
    return token


def test_no_sessions(cli: Cli, private_agent_dir: Path) -> None:
    # Issue 24 item 3: an empty listing says which agent dir it looked in, and how to look in
    # another.
    text = cli("peers")
    assert text.returncode == 0, text
    looked_in = f'No other live sessions in the agent dir "{private_agent_dir}". '
    assert text.stdout.startswith(looked_in)
    assert "set PI_CODING_AGENT_DIR to that dir" in text.stdout
    assert text.stdout == listings.no_peers(str(private_agent_dir)) + "\n"
    assert text.stderr == ""
    as_json = cli("peers", "--json")
    assert as_json.returncode == 0, as_json
    assert as_json.json() == {"peers": [], "unread": 0, "unchecked": 0, "capped": []}


def test_listing_has_every_public_field_and_no_token(
    inboxes: Inboxes, cli: Cli, locations: Locations, tmp_path: Path
) -> None:
    alpha = inboxes.start("alpha").wait_event("ready")
    beta = inboxes.start("beta", "--refuse").wait_event("ready")
    tokens = [token_of(locations, r["instanceId"]) for r in (alpha, beta)]

    listed = cli("peers", "--json")
    assert listed.returncode == 0, listed
    peers = {peer["name"]: peer for peer in listed.json()["peers"]}
    assert set(peers) == {"alpha", "beta"}
    for ready in (alpha, beta):
        peer = peers[ready["name"]]
        assert list(peer) == PEER_KEYS
        assert peer["version"] == 2
        assert peer["protocol"] == 1
        assert peer["id"] == ready["sessionId"]
        assert peer["instanceId"] == ready["instanceId"]
        assert peer["ref"] == ready["ref"]
        assert peer["pid"] == ready["pid"]
        assert peer["status"] == "idle"
        assert peer["inbound"] == ready["inbound"]
        assert peer["socketPath"] == locations.socket_path(ready["instanceId"])
        assert peer["startedAt"] <= peer["updatedAt"]
        assert peer["git"] is None  # the inboxes run in a temporary dir outside any repository
    assert peers["beta"]["inbound"] == "refuse"
    for token in tokens:
        assert token not in listed.stdout
        assert token not in listed.stderr
    assert "token" not in listed.stdout

    text = cli("peers")
    assert text.returncode == 0, text
    cwd = tmp_path / "work"
    header, *rows = text.stdout.splitlines()
    assert header.split() == ["ADDRESS", "STATUS", "INBOUND", "SESSION", "GIT", "CWD"]
    assert sorted(row.split() for row in rows) == [
        [f"{r['name']}", f"[{r['ref']}]", "idle", r["inbound"], r["sessionId"], "-", str(cwd)]
        for r in (alpha, beta)
    ]
    # Aligned columns: each column starts where its header does, on every line.
    for column in ("STATUS", "INBOUND", "SESSION", "GIT", "CWD"):
        start = header.index(column)
        assert all(row[start - 2 : start] == "  " and row[start] != " " for row in rows), column
    for token in tokens:
        assert token not in text.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_metadata_of_an_advertised_cwd(inboxes: Inboxes, cli: Cli, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q", "-b", "topic")
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    head = git("rev-parse", "HEAD")
    inboxes.start("in-repo", "--cwd", str(repo))
    listed = cli("peers", "--json")
    assert listed.returncode == 0, listed
    [peer] = listed.json()["peers"]
    assert peer["git"] == {"worktree": str(repo), "branch": "topic", "head": head}
    text = cli("peers")
    assert f"topic@{head[:8]}  {repo}" in text.stdout


def test_the_command_line_never_lists_itself(
    inboxes: Inboxes, cli: Cli, private_agent_dir: Path
) -> None:
    inboxes.start("delta", busy=0)
    sent = cli("send", "delta", "make an identity")
    assert sent.returncode == 0, sent
    identity = json.loads((private_agent_dir / "cross-session" / "cli-identity.json").read_text())
    listed = cli("peers", "--json")
    assert listed.returncode == 0, listed
    assert [p["name"] for p in listed.json()["peers"]] == ["delta"]
    assert identity["instanceId"] not in listed.stdout
    assert identity["token"] not in listed.stdout
    assert "pi-cross-session-cli" not in listed.stdout


@pytest.mark.anyio
async def test_other_listers_hide_the_command_line_while_it_is_published(
    inboxes: Inboxes, locations: Locations
) -> None:
    """The command line's registration exists while it sends, but nobody lists it: it has no
    socket, and its process lives, so a listing hides it without reaping it."""
    ready = inboxes.start("epsilon").wait_event("ready")
    async with cli_identity.publishing(locations) as outbox:
        mine = locations.registration_path(outbox.sender.instance_id)
        assert exists(mine)
        listing = await discovery.list_peers(
            locations, fs, Exchanger(locations, fs).is_live, self_instance_id=None, with_git=False
        )
        assert [p.instance_id for p in listing.peers] == [ready["instanceId"]]
        assert listing.hidden == 1
        assert exists(mine)  # hidden, not reaped: its process is alive
    assert not exists(mine)


# -- read-only, and never waiting for an identity ---------------------------------------------


def test_peers_with_a_mistyped_agent_dir_creates_nothing(tmp_path: Path) -> None:
    """The tracker's case: a typo in PI_CODING_AGENT_DIR used to create that whole tree."""
    typo = tmp_path / "agnet" / "dir"
    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": str(typo)}).runtime_dir
    for args in (("peers",), ("peers", "--json")):
        listed = run_cli(typo, *args, cwd=tmp_path)
        assert listed.returncode == 0, listed
        assert listed.stderr == ""
    assert listed.json() == {"peers": [], "unread": 0, "unchecked": 0, "capped": []}
    assert not (tmp_path / "agnet").exists()
    assert not exists(runtime_dir)


@pytest.mark.hostile
def test_an_empty_listing_names_the_dir_it_looked_in_escaped(tmp_path: Path) -> None:
    """The typo shows, quoted exactly (a trailing slash counts), and a control character in it
    is an escape, never sent to the terminal."""
    typo = f"{tmp_path}/agnet\x1b]0;owned\x07/"
    listed = run_cli(typo, "peers", cwd=tmp_path)
    assert listed.returncode == 0, listed
    assert f'"{tmp_path}/agnet\\u001b]0;owned\\u0007/"' in listed.stdout
    assert listed.stdout == listings.no_peers(typo) + "\n"
    assert "\x1b" not in listed.stdout
    assert "\x07" not in listed.stdout
    assert listed.stdout.count("\n") == 1
    assert not (tmp_path / "agnet\x1b]0;owned\x07").exists()


def test_peers_changes_nothing_in_an_existing_agent_dir(
    inboxes: Inboxes, cli: Cli, private_agent_dir: Path, locations: Locations
) -> None:
    inboxes.start("watched")
    before = tree_state(private_agent_dir, locations.runtime_dir)
    listed = cli("peers", "--json")
    assert listed.returncode == 0, listed
    assert [p["name"] for p in listed.json()["peers"]] == ["watched"]
    assert tree_state(private_agent_dir, locations.runtime_dir) == before
    assert not exists(cli_identity.state_dir(locations))  # no identity, no lock, no note


def test_peers_does_not_wait_for_busy_identities(
    inboxes: Inboxes, cli: Cli, locations: Locations
) -> None:
    """Every command-line identity is held (as by four sends waiting for receipts): a listing
    needs none of them, so it neither waits nor says it waits."""
    inboxes.start("still-visible")
    state = Path(cli_identity.state_dir(locations))
    state.mkdir(mode=0o700)
    locks = [
        NotedLock(str(state / cli_identity.slot_files(slot).lock))
        for slot in cli_identity.ALL_SLOTS
    ]
    try:
        for lock in locks:
            assert lock.try_acquire()
        listed = cli("peers")
    finally:
        for lock in locks:
            lock.release()
    assert listed.returncode == 0, listed
    assert listed.stderr == ""
    assert "still-visible [" in listed.stdout
