"""Fixtures of the hostile suite: one live receiving session per test, in its own agent dir."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pi_cross_session._internal.protocol.paths import Locations
from tests.hostile.live import LiveReceiver, live_receiver


@pytest.fixture
def live(locations: Locations) -> Iterator[LiveReceiver]:
    """A real session receiving on its real socket, shared by every example of one test."""
    with live_receiver(locations) as receiver:
        yield receiver
