"""Suite-wide guards: a private agent dir per test (never ~/.pi), no runtime dir left, nothing read
from beside the checkout (``tests/confinement.py``), and the hypothesis profile this run asked for
(``tests/hypothesis_profiles.py``)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_cross_session._internal.protocol import paths
from pi_cross_session._internal.protocol.io import environment
from tests import hypothesis_profiles

pytest_plugins = ["tests.confinement", "tests.scratch"]

hypothesis_profiles.load_from_environment()


#: Folders whose tests start other programs (NATS servers, several gateways) and take seconds.
_LONG_FOLDERS = frozenset({"remote"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the long tests first: the remote plane's, and those marked ``slow`` (real deadlines).
    Split over workers that steal from each other's queues, a run ends when its last test does:
    with the long ones ahead, the short ones fill the end. The order of the rest is kept (a test
    must not depend on order anyway)."""

    def long_first(item: pytest.Item) -> int:
        folder = item.path.parent.name
        return 0 if folder in _LONG_FOLDERS or item.get_closest_marker("slow") else 1

    items.sort(key=long_first)


@pytest.fixture(autouse=True)
def private_agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the agent dir at a fresh temporary dir, so nothing reads or writes ``~/.pi``.

    The runtime dir under ``/tmp`` that this agent dir maps to is removed afterwards, whether or
    not the test created it: the namespace is unique to this test's agent dir.
    """
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent_dir))
    yield agent_dir
    runtime_dir = environment.resolve(env={"PI_CODING_AGENT_DIR": str(agent_dir)}).runtime_dir
    shutil.rmtree(runtime_dir, ignore_errors=True)


@pytest.fixture
def locations(private_agent_dir: Path) -> paths.Locations:
    """Where this test's sessions register and listen."""
    return environment.resolve(env={"PI_CODING_AGENT_DIR": str(private_agent_dir)})


def _is_anyio_unix_socket_race(context: dict[str, Any]) -> bool:
    """The one loop error we tolerate: anyio's Unix sockets (asyncio) wait for readiness on a
    future whose reader or writer is removed only by a done callback, so a cancelled wait can
    still be resolved once by the selector: ``Future.set_result`` on a cancelled future raises
    ``InvalidStateError`` inside the loop. Nothing of ours runs there and nothing is lost; the
    loop would just log it. Anything else still fails the test."""
    callback = getattr(context.get("handle"), "_callback", None)
    future = getattr(callback, "__self__", None)
    return (
        isinstance(context.get("exception"), asyncio.InvalidStateError)
        and getattr(callback, "__name__", "") == "set_result"
        and isinstance(future, asyncio.Future)
        and future.cancelled()
    )


class _TestLoop(asyncio.SelectorEventLoop):
    """The default loop, minus the anyio race described above."""

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if not _is_anyio_unix_socket_race(context):
            super().call_exception_handler(context)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """Async tests run on asyncio, the loop every supported host uses."""
    return ("asyncio", {"loop_factory": _TestLoop})
