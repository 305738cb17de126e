"""Two headless sessions in one process: the runtime end to end over real sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.waiting import eventually

pytestmark = pytest.mark.anyio

#: A simulated turn that lasts until the test ends it (``HeadlessHost.end_turn``).
HOLD_S = 3600.0


@asynccontextmanager
async def session(
    locations: Locations, name: str, *, busy_s: float = 0.05
) -> AsyncIterator[tuple[HeadlessHost, SessionRuntime]]:
    host = HeadlessHost(name=name, busy_s=busy_s)
    # A patient probe: on a loaded machine a live peer may answer after the contract's 350 ms.
    patient = ExchangeConfig(probe_deadline_s=MUST_HAPPEN_S)
    options = RuntimeOptions(with_git=False, exchange=patient)
    runtime = SessionRuntime(host, locations=locations, options=options)
    async with anyio.create_task_group() as group:
        await group.start(serve_inbox, host, runtime)
        try:
            yield host, runtime
        finally:
            group.cancel_scope.cancel()


async def test_send_list_and_queue(locations: Locations) -> None:
    async with (
        session(locations, "alpha") as (_, alpha),
        session(locations, "beta", busy_s=HOLD_S) as (beta_host, beta),
    ):
        listing = await alpha.list_peers()
        assert [p.name for p in listing.peers] == ["beta"]
        first = await alpha.send("beta", "first message")
        assert first.ok, first
        assert first.status == "submitted"
        await eventually(lambda: not beta_host.is_idle())  # beta's turn has started
        second = await alpha.send("beta", "second message")
        assert second.status == "queued", second
        assert beta_host.end_turn()
        await eventually(lambda: len(beta_host.delivered) == 2)
        assert [d.text for d in beta_host.delivered] == ["first message", "second message"]
        status = await alpha.query_status("beta", second.message_id or "")
        assert status.status == "delivered"  # beta's simulated turn showed it
        assert alpha.remaining_budget() == 254
        snapshot = beta.snapshot()
        assert snapshot is not None
        assert snapshot.admitted == 2
        self_send = await alpha.send("alpha", "to myself")
        assert self_send.status == "invalid_target"
        missing = await alpha.send("gamma", "nobody")
        assert missing.status == "not_found"
    assert not list(Path(locations.peers_dir).glob("*.json"))  # noqa: ASYNC240 (test only)


async def test_end_turn_ends_only_a_running_turn(locations: Locations) -> None:
    async with (
        session(locations, "alpha") as (_, alpha),
        session(locations, "beta", busy_s=HOLD_S) as (beta_host, _),
    ):
        assert not beta_host.end_turn()  # no turn yet: nothing is latched for the next one
        assert (await alpha.send("beta", "one")).status == "submitted"
        await eventually(lambda: not beta_host.is_idle())
        assert beta_host.end_turn()
        await eventually(beta_host.is_idle)
        assert (await alpha.send("beta", "two")).status == "submitted"
        await eventually(lambda: not beta_host.is_idle())
        assert (await alpha.send("beta", "three")).status == "queued"  # "two" holds the turn
