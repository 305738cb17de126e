"""What a session publishes in its registration: status per turn (spec §1.3), start-up reaping
(spec §1.5), and the summary a sender derives (spec §3.5)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pi_cross_session._internal.plugin.outbound import summary_for
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.security.provenance import Provenance
from tests.support.socket_peers import make_registration, publish
from tests.support.wire_session import Receiver, running_receiver

pytestmark = pytest.mark.anyio


def published_status(rx: Receiver) -> str:
    path = rx.locations.registration_path(rx.registration.instance_id)
    with open(path, encoding="utf-8") as file:
        status: str = json.load(file)["status"]
    return status


async def test_status_is_busy_from_a_turns_start_to_its_end_only(locations: Locations) -> None:
    async with running_receiver(locations) as rx:
        assert published_status(rx) == "idle"
        rx.turns.preparing()  # a prompt arrived; no turn yet
        await rx.maintenance_pass()
        assert published_status(rx) == "idle"
        rx.turns.start(Provenance.USER)
        await rx.maintenance_pass()
        assert published_status(rx) == "busy"
        rx.turns.end()
        await rx.maintenance_pass()
        assert published_status(rx) == "idle"


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_a_dead_sessions_registration_is_reaped_at_start_up(locations: Locations) -> None:
    dead = make_registration(locations, "gone", pid=dead_pid())
    publish(locations, dead)
    path = locations.registration_path(dead.instance_id)
    async with running_receiver(locations) as rx:
        # No one lists: the runtime's own listing after start-up removes it.
        await rx.maintenance_pass()
        for _ in range(200):
            if not _exists(path):
                break
            await rx.maintenance_pass()
        assert not _exists(path)


def _exists(path: str) -> bool:
    try:
        with open(path, "rb"):
            return True
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("summary", "text", "expected"),
    [
        (None, "first line\nsecond", "first line"),
        (None, "\n\nsecond line", "message"),  # the first line is empty, as the reference sees it
        (None, "a\x1cb\nc", "a b"),
        ("  given  ", "text", "given"),
        (" ", "fallback line", "fallback line"),
        (None, "x" * 300, "x" * 200),
    ],
)
def test_the_summary_is_built_as_the_reference_builds_it(
    summary: str | None, text: str, expected: str
) -> None:
    assert summary_for(summary, text) == expected
