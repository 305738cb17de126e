"""Fixtures of the receiver tests: ``live``, one live receiving session per test in its own agent
dir (the endpoint fuzzer's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pi_cross_session._internal.protocol.paths import Locations
from tests.receiver.live import LiveReceiver, live_receiver


@pytest.fixture
def live(locations: Locations) -> Iterator[LiveReceiver]:
    """A real session receiving on its real socket, shared by every example of one test."""
    with live_receiver(locations) as receiver:
        yield receiver
