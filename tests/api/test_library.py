"""The library's three calls over real sessions: real sockets, files and identities, in a
temporary agent dir (the root conftest points ``PI_CODING_AGENT_DIR`` at it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
import pytest

import pi_cross_session as pxs
from pi_cross_session._internal.plugin import cli_identity
from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

Callback = Callable[[pxs.InboxMessage], Awaitable[None] | None]


@asynccontextmanager
async def inbox(
    handle: Callback, name: str = "reviewer", **options: object
) -> AsyncIterator[pxs.PublicPeer]:
    """A library inbox, running until the block ends."""
    async with anyio.create_task_group() as group:
        me: pxs.PublicPeer = await group.start(partial(pxs.run_inbox, handle, name=name, **options))
        try:
            yield me
        finally:
            group.cancel_scope.cancel()


async def test_an_inbox_is_listed_and_reached(locations: Locations, tmp_path: Path) -> None:
    received: list[pxs.InboxMessage] = []
    async with inbox(received.append, cwd=str(tmp_path)) as me:
        assert me.name == "reviewer"
        listing = await pxs.list_peers(with_git=False)
        assert [peer.instance_id for peer in listing.peers] == [me.instance_id]
        assert listing.peers[0].name == "reviewer"
        assert listing.peers[0].cwd == str(tmp_path)
        assert listing.complete

        report = await pxs.send(f"reviewer [{me.ref}]", "first line\nsecond", name="builder")
        assert report.ok, report
        assert report.outcome is pxs.SendOutcome.SUBMITTED
        assert report.target is not None
        assert report.target.instance_id == me.instance_id
        await eventually(lambda: bool(received))
    [message] = received
    assert message.message_id == report.message_id
    assert message.text == "first line\nsecond"
    assert message.summary == "first line"
    assert message.sender.name == "builder"
    assert message.sender.cwd == os.getcwd()
    # The library's send went out as a command-line identity, which remembers the message.
    assert cli_identity.senders_of(locations, report.message_id or "") == [0]


async def test_messages_come_one_at_a_time_while_the_callback_runs(locations: Locations) -> None:
    seen: list[str] = []
    release = anyio.Event()
    both = anyio.Event()

    async def handle(message: pxs.InboxMessage) -> None:
        seen.append(message.text)
        if len(seen) == 1:
            await release.wait()  # the session stays busy until the callback returns
        else:
            both.set()

    async with inbox(handle):
        first = await pxs.send("reviewer", "one")
        assert first.outcome is pxs.SendOutcome.SUBMITTED, first
        await eventually(lambda: bool(seen))
        second = await pxs.send("reviewer", "two")
        assert second.outcome is pxs.SendOutcome.QUEUED, second
        assert seen == ["one"]
        release.set()
        with anyio.fail_after(MUST_HAPPEN_S):
            await both.wait()
    assert seen == ["one", "two"]


async def test_a_callback_that_raises_does_not_stop_the_inbox(
    locations: Locations, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def handle(message: pxs.InboxMessage) -> None:  # a plain function works too
        seen.append(message.text)
        if message.text == "boom":
            raise ValueError("the tool's own bug")

    async with inbox(handle):
        assert (await pxs.send("reviewer", "boom")).ok
        await eventually(lambda: bool(seen))
        report = await pxs.send("reviewer", "still there?", wait_s=MUST_HAPPEN_S)
        assert report.ok, report
        assert report.delivery is pxs.DeliveryOutcome.DELIVERED
    assert seen == ["boom", "still there?"]
    assert any("the inbox callback failed" in r.getMessage() for r in caplog.records)


async def test_a_refusing_inbox_and_a_missing_target(locations: Locations) -> None:
    async with inbox(lambda message: None, accept=False):
        refused = await pxs.send("reviewer", "hello")
        assert not refused.ok
        assert refused.status == Code.REFUSED
        assert refused.outcome is pxs.SendOutcome.REFUSED
        assert refused.message_written
    missing = await pxs.send("reviewer", "hello")
    assert missing.status == Code.NOT_FOUND
    assert missing.outcome is pxs.SendOutcome.REFUSED
    assert not missing.message_written


async def test_an_agent_dir_given_outright(tmp_path: Path) -> None:
    # Not the environment's agent dir: a session there is invisible from here, and back.
    other = tmp_path / "other-agent"
    other.mkdir()
    runtime_dir = environment.resolve(env={paths.AGENT_DIR_ENV: str(other)}).runtime_dir
    try:
        async with inbox(lambda message: None, name="elsewhere", agent_dir=str(other)) as me:
            assert (await pxs.list_peers()).peers == ()
            there = await pxs.list_peers(agent_dir=str(other), with_git=False)
            assert [peer.instance_id for peer in there.peers] == [me.instance_id]
            report = await pxs.send("elsewhere", "hi", agent_dir=str(other))
            assert report.ok, report
            assert me.socket_path.startswith(runtime_dir + "/")
    finally:
        await anyio.to_thread.run_sync(partial(shutil.rmtree, runtime_dir, ignore_errors=True))


async def test_bad_input_is_reported_before_anything_is_created(private_agent_dir: Path) -> None:
    report = await pxs.send("reviewer", "   ")
    assert report.status == Code.INVALID_MESSAGE
    assert not report.message_written
    listing = await pxs.list_peers()
    assert listing == pxs.Peers(())
    assert await anyio.to_thread.run_sync(os.listdir, private_agent_dir) == []
