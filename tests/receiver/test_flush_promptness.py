"""A safe settle owes the queue one submission on the loop's next turn (spec §5.5), whatever
else the runtime is doing: until it is made, every newcomer meets an idle session with a queue
and is refused ``busy``."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io.discovery import Registrar
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.wire_session import eventually, running_receiver

pytestmark = pytest.mark.anyio


class HeldRefreshes:
    """Every registration refresh waits until the test lets it write."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()


@pytest.fixture
def held_refreshes(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldRefreshes]:
    held = HeldRefreshes()
    real = Registrar.refresh

    async def refresh(self: Registrar) -> bool:
        held.entered.set()
        await held.release.wait()
        return await real(self)

    monkeypatch.setattr(Registrar, "refresh", refresh)
    yield held
    held.release.set()


async def test_a_queued_message_is_submitted_while_a_registration_refresh_is_still_writing(
    locations: Locations, held_refreshes: HeldRefreshes
) -> None:
    async with running_receiver(locations) as rx:
        alpha = rx.sender("alpha")
        rx.turns.user_turn()  # busy: the registration is rewritten, and that write is held
        with anyio.fail_after(MUST_HAPPEN_S):
            await held_refreshes.entered.wait()
        assert (await alpha.send(message_id="waits")).status == Code.QUEUED
        rx.turns.end()  # a safe settle: the queue is owed one submission
        await eventually(lambda: bool(rx.host.submitted))  # while the refresh is still held
        assert [delivery.message_id for delivery in rx.host.submitted] == ["waits"]
        held_refreshes.release.set()
