"""The one test that waits for the contract's real deadlines (about 5 s of wall time).

Everything else injects small deadlines. Here three things run concurrently with the defaults:

* spec §10 item 16: a receiver that goes silent after the message — the send ends in ``timeout``
  after about 5 s, having written exactly one message frame;
* spec §10 item 18: a vetting step (the ``lstat``) that stalls past the deadline — the send ends
  in ``timeout`` after about 5 s, and the late answer never connects;
* spec §3.2: a client silent after a good hello is cut by the endpoint after about 5 s.
"""

from __future__ import annotations

import anyio
import pytest

from pi_cross_session.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session.protocol.limits import IDLE_AFTER_HELLO_S, SEND_DEADLINE_S
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.security.io import fs
from tests.support.exchange_seams import CountingConnect, StalledVetting
from tests.support.fake_receiver import SILENT, fake_receiver, ready
from tests.support.peers import make_message, make_registration
from tests.support.raw_client import RawClient, hello, line
from tests.support.sessions import as_sender, settled_peer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

#: Generous bounds around a 5 s deadline: never early, and not much late even on a loaded box.
EARLIEST = 4.9
LATEST = 5.6


async def test_slow_item16_silent_peer_item18_stalled_lstat_and_idle_cut_at_real_deadlines(
    locations: Locations,
) -> None:
    assert SEND_DEADLINE_S == IDLE_AFTER_HELLO_S == 5.0
    sender = as_sender(make_registration(locations, "sender"))
    elapsed: dict[str, float] = {}
    errors: dict[str, ExchangeError] = {}

    mute = make_registration(locations, "mute")
    async with (
        fake_receiver(locations, [ready(mute), SILENT], registration=mute) as fake,
        settled_peer(locations, "beta") as beta,
    ):
        vetting = StalledVetting(max_stall_s=10.0)
        connect = CountingConnect()

        async def silent_receiver() -> None:
            started = anyio.current_time()
            with pytest.raises(ExchangeError) as caught:
                await Exchanger(locations, fs).send(
                    mute, sender=sender, message=make_message("into the void")
                )
            elapsed["silent"] = anyio.current_time() - started
            errors["silent"] = caught.value

        async def stalled_lstat() -> None:
            started = anyio.current_time()
            with pytest.raises(ExchangeError) as caught:
                await Exchanger(locations, vetting, connect=connect).send(
                    beta.registration, sender=sender, message=make_message("too late")
                )
            elapsed["stalled"] = anyio.current_time() - started
            errors["stalled"] = caught.value

        async def idle_client() -> None:
            reg = beta.registration
            async with RawClient.connect(reg.socket_path) as client:
                await client.send(line(hello(reg)))
                assert (await client.read_reply()).status == "ready"
                started = anyio.current_time()
                client.limit_s = 10.0
                assert await client.read_to_eof() == b""
                elapsed["idle"] = anyio.current_time() - started

        async with anyio.create_task_group() as tg:
            tg.start_soon(silent_receiver)
            tg.start_soon(stalled_lstat)
            tg.start_soon(idle_client)

        await vetting.finish()
        await anyio.sleep(0.2)  # proving a negative: the late vetting answer never connects
        await fake.settled()

        assert connect.attempts == []
        stats = beta.endpoint.statistics()
        assert stats.accepted == 1  # the idle client only
        assert (stats.idle_cuts, stats.deadline_cuts) == (1, 0)
        assert fake.count("message") == 1

    for name in ("silent", "stalled", "idle"):
        assert EARLIEST <= elapsed[name] <= LATEST, (name, elapsed[name])
    silent, stalled = errors["silent"], errors["stalled"]
    assert (silent.code, silent.frames_written, silent.message_written) == ("timeout", 2, True)
    assert (stalled.code, stalled.frames_written, stalled.message_written) == ("timeout", 0, False)
    assert silent.verdict.state == stalled.verdict.state == "receipt_unknown"
