"""``accept`` failing: out of file descriptors (or buffers, or memory), or for any other reason.

Regression: anyio reports a failed ``accept`` as ``BrokenResourceError`` raised from the
``OSError``, which the accept loop did not catch, so one ``EMFILE`` ended the endpoint's task group
and the session left the network. Now no accept failure ends the endpoint:

* out of descriptors, the connections are held to what leaves ``descriptor_reserve`` free, the
  ones above give way by the fairness rule of the capacity limit, and accept runs again at once;
  with nobody to shed it pauses (growing, bounded, cut short when a connection closes);
* any other failure is counted and paused after, the same way;
* everything is counted by errno in the statistics, and the cap is lifted once a count of the
  free descriptors finds enough.

The failures are injected in front of the real listener (the endpoint still serves real sockets);
``tests/session/test_descriptors.py`` runs a real inbox under a real ``RLIMIT_NOFILE``.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from pi_cross_session._internal.protocol.io import sockets
from pi_cross_session._internal.protocol.io.endpoint import EndpointConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.receiver.test_shedding import holder, probe_ok, wait_open
from tests.support.raw_client import RawClient
from tests.support.socket_peers import PeerHandle, running_peer

pytestmark = pytest.mark.anyio

#: Injected pauses and counts: small, so that nothing here waits long.
CONFIG = EndpointConfig(
    max_connections=8,
    descriptor_reserve=1,
    descriptor_check_s=0.05,
    accept_backoff_s=0.01,
    accept_backoff_max_s=0.05,
)


def wrapped(number: int) -> BaseException:
    """What anyio's listener raises when ``accept(2)`` fails with ``number`` (ours raises the
    bare ``OSError``; the endpoint takes either)."""
    try:
        try:
            raise OSError(number, "injected")
        except OSError as exc:
            raise anyio.BrokenResourceError from exc
    except anyio.BrokenResourceError as caught:
        return caught


class FlakyListener:
    """The real listener, whose ``accept`` fails as armed while a connection is pending.

    Like the kernel out of descriptors: the connection waits in the queue, each ``accept`` raises
    the next armed failure, and once none is left the pending connection is returned.
    """

    def __init__(self, real: sockets.UnixListener) -> None:
        self.real = real
        self.failures: list[BaseException] = []
        self.pending: sockets.UnixStream | None = None

    def fileno(self) -> int:
        return self.real.fileno()

    async def accept(self) -> sockets.UnixStream:
        if self.pending is None:
            self.pending = await self.real.accept()
        if self.failures:
            await anyio.lowlevel.checkpoint()
            raise self.failures.pop(0)
        stream, self.pending = self.pending, None
        return stream

    def close(self) -> None:
        if self.pending is not None:
            self.pending.close()
        self.real.close()


@asynccontextmanager
async def flaky_peer(
    locations: Locations, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[PeerHandle, FlakyListener]]:
    listeners: list[FlakyListener] = []
    real_listen: Callable[..., sockets.UnixListener] = sockets.listen_unix

    def listen(path: str, *args: Any, **kwargs: Any) -> FlakyListener:
        listener = FlakyListener(real_listen(path, *args, **kwargs))
        listeners.append(listener)
        return listener

    monkeypatch.setattr(sockets, "listen_unix", listen)
    async with running_peer(locations, "beta", config=CONFIG) as beta:
        yield beta, listeners[0]


async def fail_next_accepts(
    beta: PeerHandle, listener: FlakyListener, failures: list[BaseException]
) -> None:
    """Arm ``failures`` and make the endpoint meet them: the next connection waits while
    ``accept`` fails once per failure, then it is served."""
    listener.failures.extend(failures)
    async with RawClient.connect(beta.registration.socket_path) as client:
        client.limit_s = 5.0
        await client.send(b"x\n")
        assert (await client.read_reply()).status == "invalid_frame"
    assert listener.failures == []


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
async def test_running_out_of_descriptors_never_ends_the_endpoint(
    locations: Locations, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    name = errno.errorcode[number]
    async with flaky_peer(locations, monkeypatch) as (beta, listener):
        # Nothing open to shed: the loop pauses after each failure, then serves the newcomer.
        await fail_next_accepts(beta, listener, [wrapped(number) for _ in range(3)])
        stats = beta.endpoint.statistics()
        assert dict(stats.accept_failures) == {name: 3}
        assert stats.last_accept_failure == name
        assert stats.last_accept_failure_age_s is not None
        assert stats.shed_for_descriptors == 0
        assert await probe_ok(beta)
        # The cap set by the shortage is lifted once a count finds descriptors free again.
        with anyio.fail_after(5):
            while beta.endpoint.statistics().descriptor_cap is not None:  # noqa: ASYNC110
                await anyio.sleep(0.01)


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(lambda: wrapped(errno.ECONNABORTED), id="ECONNABORTED"),
        pytest.param(lambda: OSError(errno.EPROTO, "injected"), id="EPROTO-bare"),
        pytest.param(anyio.BrokenResourceError, id="BrokenResourceError"),
    ],
)
async def test_any_other_accept_failure_is_counted_and_survived(
    locations: Locations, monkeypatch: pytest.MonkeyPatch, failure: Callable[[], BaseException]
) -> None:
    async with flaky_peer(locations, monkeypatch) as (beta, listener):
        made = failure()
        await fail_next_accepts(beta, listener, [made, failure()])
        stats = beta.endpoint.statistics()
        name = "BrokenResourceError" if type(made) is anyio.BrokenResourceError else None
        if name is None or made.__cause__ is not None:
            cause = made.__cause__ if made.__cause__ is not None else made
            assert isinstance(cause, OSError)
            assert cause.errno is not None
            name = errno.errorcode[cause.errno]
        assert dict(stats.accept_failures) == {name: 2}
        assert stats.descriptor_cap is None  # not a shortage: nothing held back
        assert await probe_ok(beta)


async def test_out_of_descriptors_the_heaviest_process_gives_way_at_once(
    locations: Locations, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        flaky_peer(locations, monkeypatch) as (beta, listener),
        holder(beta.registration.socket_path, 4),
    ):
        await wait_open(beta, 4)
        # accept fails with 4 open: held to 4 - 1 (the reserve), and the holder's oldest (one
        # process holding more than the newcomer would) closes first, so accept runs again at
        # once and this newcomer is served.
        # The probe waits while accept fails with 4 open: they are held to 4 - 1 (the reserve),
        # so the holder's oldest closes (one process holding more than the newcomer would), and
        # accept runs again at once; at the cap of 3 the probe then takes one more of the
        # holder's slots, by the capacity rule.
        listener.failures.append(wrapped(errno.EMFILE))
        assert await probe_ok(beta)
        stats = beta.endpoint.statistics()
        assert (stats.shed_for_descriptors, stats.shed, dict(stats.accept_failures)) == (
            1,
            2,
            {"EMFILE": 1},
        )
        assert stats.descriptor_cap == 3
        assert stats.refused_over_capacity == 0


async def test_held_to_the_cap_newcomers_are_served_by_the_capacity_rule(
    locations: Locations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While descriptors are short the cap is the capacity: a newcomer takes a slot of the
    process holding the most when it holds more than the newcomer's would, else is refused."""
    async with (
        flaky_peer(locations, monkeypatch) as (beta, listener),
        holder(beta.registration.socket_path, 6),
        AsyncExitStack() as mine,
    ):
        await wait_open(beta, 6)
        # Count nothing free from now on: the cap stays where the shortage puts it.
        monkeypatch.setattr(beta.endpoint._headroom, "on_count", lambda *_: None)
        listener.failures.append(wrapped(errno.EMFILE))
        assert await probe_ok(beta)  # held to 5: one shed to free it, one for the probe
        assert beta.endpoint.statistics().descriptor_cap == 5
        await anyio.sleep(CONFIG.descriptor_check_s * 3)  # counts pass; the cap holds
        assert beta.endpoint.statistics().descriptor_cap == 5
        await wait_open(beta, 4)  # the holder's 4 left (the probe has closed)
        path = beta.registration.socket_path
        ours = [await mine.enter_async_context(RawClient.connect(path)) for _ in range(3)]
        # 1st: room (5 open). 2nd: the holder (4) holds more than we would (2): it gives way.
        # 3rd: the holder (3) holds no more than we would (3): refused, as the contract says.
        assert await ours[2].read_to_eof() == b""
        stats = beta.endpoint.statistics()
        assert (stats.open_connections, stats.refused_over_capacity) == (5, 1)
        assert stats.shed == 3
