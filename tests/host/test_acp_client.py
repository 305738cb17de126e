"""The extension as a user meets it: a real ACP client driving ``pi-agent-cli`` over stdio.

One agent process (``PI_USE_MOCK=1``, the canned "Hello from mock" model) per test, with the test's
agent dir and pi home; the extension is found through its entry point, as in a real install.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from acp import text_block

from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.reports import SendReport
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import PublicPeer
from tests.host.acp_agent import ACP_WAIT_S, POLL_S, AcpAgent, acp_agent

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OUR_COMMANDS = {
    "peers",
    "list-pi",
    "cross-session-status",
    "cross-session-resume",
    "cross-session-inbound",
}
MOCK_REPLY = "Hello from mock"


def files_of(locations: Locations, instance_id: str) -> list[str]:
    return [locations.registration_path(instance_id), locations.socket_path(instance_id)]


async def new_session(agent: AcpAgent, cwd: Path) -> str:
    """``session/new``, then wait for our commands to be advertised."""
    response = await agent.request(agent.conn.new_session(cwd=str(cwd)), "session/new")
    session = response.session_id
    await agent.client.wait_for(
        lambda: set(agent.client.commands(session) or ()) >= OUR_COMMANDS,
        "available_commands_update with our commands",
    )
    return session


def existing(paths: list[str]) -> list[str]:
    """Those of ``paths`` that exist (a quick stat; fine on the test's loop)."""
    return [path for path in paths if os.path.exists(path)]


async def the_only_peer(outbox: outbound.Outbox) -> PublicPeer:
    """The one live session the CLI identity sees (the agent's), once it is listed."""
    with anyio.fail_after(ACP_WAIT_S):
        while True:
            listing = await outbox.list_peers()
            if listing.peers:
                assert len(listing.peers) == 1, listing.peers
                return listing.peers[0]
            await anyio.sleep(0.1)


async def send_to(outbox: outbound.Outbox, peer: PublicPeer) -> SendReport:
    """Send to ``peer`` by its published name, as a user would."""
    with anyio.fail_after(ACP_WAIT_S):
        return await outbound.send(outbox, peer.name, "please say hello")


async def gone(paths: list[str]) -> bool:
    """Whether every path is gone within the deadline."""
    with anyio.move_on_after(ACP_WAIT_S):
        while existing(paths):  # noqa: ASYNC110
            await anyio.sleep(POLL_S)
        return True
    return False


@pytest.fixture
def agent_log(tmp_path: Path) -> Path:
    return tmp_path / "agent-stderr.log"


@pytest.fixture
def session_cwd(tmp_path: Path) -> Path:
    path = tmp_path / "acp-work"
    path.mkdir()
    return path


async def test_commands_an_idle_peer_turn_and_close_over_acp(
    private_agent_dir: Path,
    pi_home: Path,
    locations: Locations,
    agent_log: Path,
    session_cwd: Path,
) -> None:
    async with acp_agent(private_agent_dir, pi_home, agent_log) as agent:
        client = agent.client
        # (a) our commands are advertised after session/new
        session = await new_session(agent, session_cwd)

        # (c) a peer message to the idle session is submitted and streams a turn, no prompt pending
        async with cli_identity.publishing(locations) as outbox:
            peer = await the_only_peer(outbox)
            instance = peer.instance_id
            assert existing(files_of(locations, instance)) == files_of(locations, instance)
            before = len(client.of(session))
            report = await send_to(outbox, peer)
            assert report.ok, report
            assert report.status == "submitted", report
        await client.wait_for(
            lambda: MOCK_REPLY in client.message_text(session, before),
            "the peer turn's agent_message_chunk",
        )

        # (d) session/close removes the registration and the socket
        await agent.request(agent.conn.close_session(session_id=session), "session/close")
        assert await gone(files_of(locations, instance)), "files left after session/close"
        assert agent.process.returncode is None  # the agent itself is still serving


async def status_over_acp(agent: AcpAgent, session: str) -> str:
    """Prompt ``/cross-session-status`` and return the text the client was sent for it."""
    before = len(agent.client.of(session))
    answer = await agent.request(
        agent.conn.prompt(session_id=session, prompt=[text_block("/cross-session-status")]),
        "session/prompt /cross-session-status",
    )
    assert answer.stop_reason == "end_turn"
    return agent.client.message_text(session, before)


async def test_the_status_command_answers_over_acp(
    private_agent_dir: Path, pi_home: Path, agent_log: Path, session_cwd: Path
) -> None:
    async with acp_agent(private_agent_dir, pi_home, agent_log) as agent:
        session = await new_session(agent, session_cwd)
        status = await status_over_acp(agent, session)
        assert status.startswith("Inbox: "), status
        assert "\nPhase: " in status, status
        assert "Inbound: accept (set by the default)" in status, status
        assert MOCK_REPLY not in status  # a command, not a model turn


async def test_the_status_command_reports_an_idle_session_as_idle_over_acp(
    private_agent_dir: Path, pi_home: Path, agent_log: Path, session_cwd: Path
) -> None:
    async with acp_agent(private_agent_dir, pi_home, agent_log) as agent:
        session = await new_session(agent, session_cwd)
        status = await status_over_acp(agent, session)
        assert "\nPhase: idle; inbox open\n" in status, status


async def test_a_peer_message_after_a_slash_command_starts_a_turn_over_acp(
    private_agent_dir: Path,
    pi_home: Path,
    locations: Locations,
    agent_log: Path,
    session_cwd: Path,
) -> None:
    async with acp_agent(private_agent_dir, pi_home, agent_log) as agent:
        session = await new_session(agent, session_cwd)
        await status_over_acp(agent, session)
        async with cli_identity.publishing(locations) as outbox:
            peer = await the_only_peer(outbox)
            before = len(agent.client.of(session))
            report = await send_to(outbox, peer)
            # Actual: ok=False, status="busy" (the session stays in "preflight" after the command).
            assert report.status == "submitted", report
        await agent.client.wait_for(
            lambda: MOCK_REPLY in agent.client.message_text(session, before),
            "the peer turn's agent_message_chunk",
        )


async def test_files_are_gone_when_the_agent_process_ends(
    private_agent_dir: Path,
    pi_home: Path,
    locations: Locations,
    agent_log: Path,
    session_cwd: Path,
) -> None:
    async with acp_agent(private_agent_dir, pi_home, agent_log) as agent:
        await new_session(agent, session_cwd)
        async with cli_identity.publishing(locations) as outbox:
            instance = (await the_only_peer(outbox)).instance_id
        paths = files_of(locations, instance)
        assert existing(paths) == paths
        # The client goes away without session/close: stdin reaches EOF and the agent exits.
        assert agent.process.stdin is not None
        agent.process.stdin.close()
        with anyio.fail_after(ACP_WAIT_S):
            code = await agent.process.wait()
        assert code == 0, agent.stderr()
    assert existing(paths) == [], "files left after the process ended"
