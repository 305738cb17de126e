"""Fixtures of the remote-plane tests: a fleet of machines on 127.0.0.1, torn down whatever
happens (every gateway, inbox and NATS server stopped, every runtime dir removed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.remote import Fleet, fleet_at


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with fleet_at(tmp_path / "fleet") as made:
        yield made
