"""The exchange's driver over an in-memory stream, on a virtual clock.

The exchanger connects (through its connector seam) to one end of a memory stream pair; a scripted
receiver plays the other end. The contract's real deadlines apply — 5 s for a send, 350 ms for a
probe, one deadline over vetting, connecting and both replies (spec §3.7) — and the moment each
exchange ends is asserted exactly. The same endings over real sockets, with short injected
deadlines, are in ``tests/sending/test_exchange_fake.py`` and ``test_exchange_real.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc
import pytest

from pi_cross_session._internal.protocol.codes import SenderState
from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Exchanger
from pi_cross_session._internal.protocol.limits import PROBE_DEADLINE_S, SEND_DEADLINE_S
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from tests.support.exchange_seams import StalledVetting
from tests.support.memory_streams import (
    EXACT,
    MemoryByteStream,
    clock_held,
    memory_stream_pair,
    read_line,
)
from tests.support.socket_peers import as_sender, make_message, make_registration

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    """This module runs on trio's virtual clock: when every task waits, the clock jumps to the
    next deadline, so the contract's real deadlines pass in no wall time."""
    from trio.testing import MockClock

    return ("trio", {"clock": MockClock(autojump_threshold=0)})


SAFE_QUEUE: Final = "cancel-safe-queue-v1"


@dataclass(frozen=True)
class Step:
    """How the receiver answers one line: ``status`` after ``after_s``, or never (``None``)."""

    status: str | None
    after_s: float = 0.0


SILENT: Final = Step(None)
READY: Final = Step("ready")


class LocalVetting:
    """Every socket is fine, and the runtime dir is local (so checks run on the loop)."""

    def on_local_filesystem(self, path: str) -> bool:
        return True

    def vet_socket(self, path: str) -> str | None:
        return None


class ScriptedPeer:
    """A receiver that serves its n-th connection by the n-th script, from a memory stream."""

    def __init__(
        self, group: anyio.abc.TaskGroup, peer: Registration, *scripts: list[Step]
    ) -> None:
        self._group = group
        self._peer = peer
        self._scripts = list(scripts)
        #: The lines each connection received, parsed.
        self.lines: list[list[dict[str, Any]]] = []

    async def connect(self, path: str) -> anyio.abc.ByteStream:
        client, server = memory_stream_pair()
        script = self._scripts[len(self.lines)]
        received: list[dict[str, Any]] = []
        self.lines.append(received)
        self._group.start_soon(self._serve, server, script, received)
        return client

    async def _serve(
        self, stream: MemoryByteStream, script: list[Step], received: list[dict[str, Any]]
    ) -> None:
        async with stream:
            for step in script:
                try:
                    frame = json.loads(await read_line(stream))
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                received.append(frame)
                if step.status is None:
                    await anyio.sleep_forever()
                await anyio.sleep(step.after_s)
                await stream.send(self._reply(frame["requestId"], step.status))

    def _reply(self, request_id: str, status: str) -> bytes:
        body = {
            "v": 1,
            "type": "response",
            "requestId": request_id,
            "ok": True,
            "status": status,
            "capabilities": [SAFE_QUEUE],
            "peer": {"id": self._peer.id, "instanceId": self._peer.instance_id, "pid": 7},
        }
        return json.dumps(body, separators=(",", ":")).encode() + b"\n"


@asynccontextmanager
async def exchanging(
    locations: Locations, script: list[Step]
) -> AsyncIterator[tuple[Exchanger, ScriptedPeer, Registration]]:
    """An exchanger whose next connection meets ``script``. Its first connection is a probe made
    with the clock held, so the one question an exchanger asks in a worker thread (whether the
    runtime dir is local) is behind it."""
    peer = make_registration(locations, "beta")
    async with anyio.create_task_group() as group:
        scripted = ScriptedPeer(group, peer, [READY], script)
        exchanger = Exchanger(locations, LocalVetting(), connect=scripted.connect)
        async with clock_held():
            await exchanger.probe(peer)
        yield exchanger, scripted, peer
        group.cancel_scope.cancel()


def assert_timeout(error: ExchangeError, frames: int, message_written: bool) -> None:
    assert error.code == "timeout"
    assert error.verdict.state is SenderState.RECEIPT_UNKNOWN
    assert (error.frames_written, error.message_written) == (frames, message_written)


async def test_a_silent_receiver_fails_a_probe_at_350_ms(locations: Locations) -> None:
    async with exchanging(locations, [SILENT]) as (exchanger, _, peer):
        started = anyio.current_time()
        with pytest.raises(ExchangeError) as caught:
            await exchanger.probe(peer)
        assert anyio.current_time() - started == pytest.approx(PROBE_DEADLINE_S, abs=EXACT)
        assert_timeout(caught.value, 1, False)


async def test_a_receiver_silent_after_the_hello_times_out_at_5_s_before_any_message(
    locations: Locations,
) -> None:
    sender = as_sender(make_registration(locations, "alpha"))
    async with exchanging(locations, [SILENT]) as (exchanger, scripted, peer):
        started = anyio.current_time()
        with pytest.raises(ExchangeError) as caught:
            await exchanger.send(peer, sender=sender, message=make_message("anyone?"))
        assert anyio.current_time() - started == pytest.approx(SEND_DEADLINE_S, abs=EXACT)
        assert_timeout(caught.value, 1, False)
        assert [frame["type"] for frame in scripted.lines[1]] == ["hello"]


async def test_item16_a_receiver_silent_after_the_message_times_out_at_5_s_one_message(
    locations: Locations,
) -> None:
    sender = as_sender(make_registration(locations, "alpha"))
    script = [Step("ready", after_s=4.0), SILENT]
    async with exchanging(locations, script) as (exchanger, scripted, peer):
        started = anyio.current_time()
        with pytest.raises(ExchangeError) as caught:
            await exchanger.send(peer, sender=sender, message=make_message("into the void"))
        # One deadline for the whole exchange: the 4 s the ready took count against it.
        assert anyio.current_time() - started == pytest.approx(SEND_DEADLINE_S, abs=EXACT)
        assert_timeout(caught.value, 2, True)
        assert [frame["type"] for frame in scripted.lines[1]] == ["hello", "message"]


async def test_a_receipt_just_inside_the_deadline_is_a_receipt(locations: Locations) -> None:
    sender = as_sender(make_registration(locations, "alpha"))
    script = [Step("ready", after_s=2.0), Step("queued", after_s=2.999)]
    async with exchanging(locations, script) as (exchanger, _, peer):
        started = anyio.current_time()
        receipt = await exchanger.send(peer, sender=sender, message=make_message("just in time"))
        assert receipt.status == "queued"
        assert anyio.current_time() - started == pytest.approx(4.999, abs=EXACT)


async def test_item18_a_stalled_vetting_times_out_and_its_late_answer_never_connects(
    locations: Locations,
) -> None:
    """The deadline covers the vetting step, which runs in a worker thread here (the vetting
    object cannot say its dir is local): the stall holds the thread, the virtual clock reaches
    the deadline, and the answer that comes later never leads to a connection."""
    peer = make_registration(locations, "beta")
    sender = as_sender(make_registration(locations, "alpha"))
    vetting = StalledVetting(max_stall_s=60.0)
    connects: list[str] = []

    async def connect(path: str) -> anyio.abc.ByteStream:
        connects.append(path)
        raise AssertionError("a late vetting answer must never connect")

    exchanger = Exchanger(locations, vetting, connect=connect)
    started = anyio.current_time()
    with pytest.raises(ExchangeError) as caught:
        await exchanger.send(peer, sender=sender, message=make_message("too late"))
    assert anyio.current_time() - started == pytest.approx(SEND_DEADLINE_S, abs=EXACT)
    assert_timeout(caught.value, 0, False)
    assert not vetting.returned.is_set(), "the exchange gave up while vetting still stalled"
    await vetting.finish()
    await anyio.sleep(1)  # a late continuation would have run by now
    assert connects == []
