"""Fixtures for host tests: a private pi home, a scripted model, harnesses closed for sure.

Every test already has its own agent dir (the root conftest); here it also gets its own pi home
(``PI_HOME``), so nothing reads or writes ``~/.pi-python``, and no inherited
``PI_CROSS_SESSION_INBOUND`` or ``PI_CROSS_SESSION_NAME`` changes the default.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pi_agent_core.extensions import ExtensionAPI
from pi_agent_harness import AgentHarness

from pi_cross_session._internal.plugin.hosts import pi_python
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.paths import Locations
from tests.host.pi_harness import (
    ScriptedChat,
    langchain_stream,
    new_harness,
    scripted_model,
    settle,
)
from tests.support.bounds import MUST_HAPPEN_S

#: The test peer's liveness probe deadline. The contract's 350 ms is what a real session uses (and
#: our extension keeps it); on a loaded 2-core test machine the harness's loop can stall that long,
#: and a missed probe would hide the harness from the peer — not what these tests are about.
PEER_PROBE_S = MUST_HAPPEN_S


@pytest.fixture(autouse=True)
def pi_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``PI_HOME`` for the test."""
    home = tmp_path / "pi-home"
    home.mkdir()
    monkeypatch.setenv("PI_HOME", str(home))
    monkeypatch.delenv("PI_CROSS_SESSION_INBOUND", raising=False)
    monkeypatch.delenv("PI_CROSS_SESSION_NAME", raising=False)
    return home


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The sessions' working directory (not a git repository: listings stay fast)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> ScriptedChat:
    """The scripted model every harness of this test talks to (patched for this test only)."""
    chat = scripted_model()
    monkeypatch.setattr(langchain_stream, "resolve_chat_model", lambda *args, **kwargs: chat)
    return chat


@pytest.fixture
async def harnesses(workdir: Path, model: ScriptedChat) -> AsyncIterator[Callable[..., Any]]:
    """Build harnesses with our extension; all are settled and closed after the test."""
    made: list[AgentHarness] = []

    async def make(
        *extra: Callable[[ExtensionAPI], None], ours: bool = True, **kwargs: Any
    ) -> AgentHarness:
        extensions = ([pi_python.activate] if ours else []) + list(extra)
        harness = await new_harness(str(workdir), *extensions, **kwargs)
        made.append(harness)
        return harness

    yield make
    runtimes = []
    for harness in made:
        if not harness.closed:
            await harness.wait_for_idle()
            runtime = pi_python.runtime_for((await harness.session.get_metadata()).id)
            if runtime is not None:
                runtimes.append(runtime)
    await settle(*runtimes)
    for harness in made:
        await harness.close()


@asynccontextmanager
async def headless_peer(
    locations: Locations, name: str, *, busy_s: float = 0.05
) -> AsyncIterator[tuple[HeadlessHost, SessionRuntime]]:
    """A live model-less session in this process (the CLI inbox's host)."""
    host = HeadlessHost(name=name, busy_s=busy_s)
    options = RuntimeOptions(with_git=False, exchange=ExchangeConfig(probe_deadline_s=PEER_PROBE_S))
    runtime = SessionRuntime(host, locations=locations, options=options)
    async with anyio.create_task_group() as group:
        await group.start(serve_inbox, host, runtime)
        try:
            yield host, runtime
            await settle(runtime)
        finally:
            group.cancel_scope.cancel()


@pytest.fixture
async def peer(locations: Locations) -> AsyncIterator[tuple[HeadlessHost, SessionRuntime]]:
    """A headless peer named ``beta``."""
    async with headless_peer(locations, "beta") as pair:
        yield pair
