"""What ``pi-cross-session mcp`` tells the model and the user, as a real process behind the SDK's
stdio client: where a listing looked (and the start-up line on stderr), what a message from a
sender that takes no messages says instead of a reply address, a summary cut to what a message
carries, and where the status prompt says the name and the inbound setting came from."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.plugin.render import host_tools, listings, mcp_host, peer_text
from pi_cross_session._internal.protocol.limits import MAX_SUMMARY_CODE_POINTS
from tests.mcp.test_process import mcp_process
from tests.support.processes import Inboxes, run_cli
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio


async def status_prompt(host: object) -> str:
    result = await host.session.get_prompt("cross-session-status")  # type: ignore[attr-defined]
    return str(result.messages[0].content.text)


async def test_an_empty_listing_says_where_it_looked_and_the_server_says_it_on_start(
    tmp_path: Path,
) -> None:
    # An agent dir whose name a terminal would act on: every place that names it escapes it.
    agent_dir = tmp_path / "agent\x1b[2Jdir"
    agent_dir.mkdir()
    workdir = tmp_path / "mcp-alone"
    workdir.mkdir()
    errlog = tmp_path / "err.log"
    async with mcp_process(agent_dir, workdir, errlog) as host:
        text, is_error = await host.call("list_pi")
        ref = host.server().ref
    assert not is_error
    assert listings.no_peers(str(agent_dir)) in text
    assert (
        "This server's agent dir comes from PI_CODING_AGENT_DIR in its environment. To list the "
        "sessions of another agent dir, set PI_CODING_AGENT_DIR in this server's env in the MCP "
        "host's configuration"
    ) in text
    assert "\x1b" not in text
    stderr = errlog.read_text()
    assert "\x1b" not in stderr
    started = mcp_host.mcp_started("mcp-alone", ref, "pull", str(agent_dir), from_env=True)
    assert started in stderr.splitlines()
    assert json.dumps(str(agent_dir)) in started  # named, quoted and escaped as JSON


async def test_a_variable_of_the_hosts_own_environment_does_not_reach_the_server(
    private_agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Why the listing and the start-up line name the agent dir: what the host has in its own
    # environment is not what the server gets (the SDK's client passes on only a few variables).
    monkeypatch.setenv("PI_CROSS_SESSION_NAME", "mcp-from-the-shell")
    workdir = tmp_path / "mcp-project"
    workdir.mkdir()
    async with mcp_process(private_agent_dir, workdir, tmp_path / "err.log") as host:
        assert host.server().name == "mcp-project"


async def test_a_message_from_the_command_line_names_no_reply_address(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "mcp-listener"
    workdir.mkdir()
    async with mcp_process(private_agent_dir, workdir, tmp_path / "err.log") as host:
        sent = await anyio.to_thread.run_sync(
            partial(run_cli, private_agent_dir, "send", "mcp-listener", "build 12 is green")
        )
        assert sent.returncode == 0, sent
        text, is_error = await host.call("read_pi_messages")
        assert not is_error
        assert peer_text.fenced_text(text) == "build 12 is green"
        assert "Reply address" not in text
        assert f"No reply address: {mcp_host.NO_REPLY}." in text
        # What it would have been told to do fails, as the note says.
        answer, is_error = await host.call(
            "send_pi_message", {"target": "pi-cross-session-cli", "message": "thanks"}
        )
        assert is_error, answer


async def test_a_pushed_message_from_the_command_line_carries_no_reply_to(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with mcp_process(
        private_agent_dir, workdir, tmp_path / "err.log", "--delivery", "push", "--name", "mcp-c"
    ) as host:
        sent = await anyio.to_thread.run_sync(
            partial(run_cli, private_agent_dir, "send", "mcp-c", "deploy done")
        )
        assert sent.returncode == 0, sent
        await eventually(lambda: len(host.channel) == 1)
        [event] = host.channel
        assert event.meta is not None
        assert "reply_to" not in event.meta
        assert event.meta["no_reply"] == mcp_host.NO_REPLY
        assert event.meta["sender"] == "pi-cross-session-cli"


async def test_a_summary_longer_than_a_message_carries_is_cut_and_the_result_says_so(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "mcp-sender"
    workdir.mkdir()
    inboxes = Inboxes(private_agent_dir, tmp_path)
    try:
        bob = inboxes.start("bob")
        async with mcp_process(private_agent_dir, workdir, tmp_path / "err.log") as host:
            summary = "s" * 150 + " " + "t" * 149  # 300 characters, within the tool's 400
            text, is_error = await host.call(
                "send_pi_message", {"target": "bob", "message": "hi", "summary": summary}
            )
            assert not is_error, text
            assert host_tools.summary_cut(300) in text
            listed, _ = await host.call("list_pi")
        received = await anyio.to_thread.run_sync(partial(bob.wait_event, "message"))
        assert received["summary"] == summary[:MAX_SUMMARY_CODE_POINTS]
        # With a peer listed, the listing still names the agent dir it looked in.
        assert f"Agent dir: {json.dumps(str(private_agent_dir))}" in listed
    finally:
        inboxes.close()


async def test_a_summary_that_fits_gets_no_note(private_agent_dir: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "mcp-sender"
    workdir.mkdir()
    inboxes = Inboxes(private_agent_dir, tmp_path)
    try:
        inboxes.start("bob")
        async with mcp_process(private_agent_dir, workdir, tmp_path / "err.log") as host:
            # 204 characters, 200 once its whitespace is folded: nothing is cut.
            summary = "  a summary\tof   exactly two hundred after folding " + "x" * 153
            text, is_error = await host.call(
                "send_pi_message", {"target": "bob", "message": "hi", "summary": summary}
            )
        assert not is_error, text
        assert "Note: the summary" not in text
    finally:
        inboxes.close()


@pytest.mark.parametrize(
    ("args", "env", "name_line", "inbound_line"),
    [
        (
            ("--name", "mcp-named", "--inbound", "accept"),
            {},
            "Name: mcp-named (set by the --name option)",
            "Inbound: accept (set by the --inbound option)",
        ),
        (
            (),
            {"PI_CROSS_SESSION_NAME": "mcp-from-env", "PI_CROSS_SESSION_INBOUND": "refuse"},
            "Name: mcp-from-env (set by the environment variable PI_CROSS_SESSION_NAME)",
            "Inbound: refuse (set by the environment variable PI_CROSS_SESSION_INBOUND)",
        ),
        (
            (),
            {},
            "Name: mcp-project (set by the name of the working directory the host started this "
            "server in)",
            "Inbound: accept (set by the default)",
        ),
    ],
)
async def test_the_status_prompt_says_where_the_name_and_the_inbound_setting_came_from(
    private_agent_dir: Path,
    tmp_path: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    name_line: str,
    inbound_line: str,
) -> None:
    workdir = tmp_path / "mcp-project"
    workdir.mkdir()
    async with mcp_process(
        private_agent_dir, workdir, tmp_path / "err.log", *args, env=env
    ) as host:
        shown = (await status_prompt(host)).splitlines()
    assert name_line in shown
    assert inbound_line in shown
