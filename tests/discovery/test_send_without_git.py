"""A send finds its target without git metadata; the listings people read keep it.

Resolving a target reads names, refs and ids only, so the listing a send makes skips the git
lookup of every live peer's cwd (the session's ``send_pi_message``, the command line's ``send``
and ``status``). ``list_pi``, ``/peers`` and ``peers`` still show each peer's branch and HEAD.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.plugin import cli_identity
from pi_cross_session._internal.plugin.hosts.headless import HeadlessHost, serve_inbox
from pi_cross_session._internal.plugin.runtime import RuntimeOptions, SessionRuntime
from pi_cross_session._internal.protocol.io.exchange import ExchangeConfig
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import GitInfo
from tests.discovery.conftest import git, make_repo, needs_git
from tests.support.bounds import MUST_HAPPEN_S

pytestmark = [pytest.mark.anyio, needs_git, pytest.mark.usefixtures("git_env")]


@asynccontextmanager
async def session(locations: Locations, name: str, cwd: Path) -> AsyncIterator[SessionRuntime]:
    """A headless session in ``cwd`` that reads git in its listings (the default)."""
    host = HeadlessHost(name=name, cwd=str(cwd), busy_s=0)
    patient = ExchangeConfig(probe_deadline_s=MUST_HAPPEN_S)
    runtime = SessionRuntime(host, locations=locations, options=RuntimeOptions(exchange=patient))
    async with anyio.create_task_group() as group:
        await group.start(serve_inbox, host, runtime)
        try:
            yield runtime
        finally:
            group.cancel_scope.cancel()


def expected_git(repo: Path) -> GitInfo:
    head = git(repo, "rev-parse", "HEAD").strip()
    return GitInfo(worktree=str(repo.resolve()), branch="main", head=head)


async def test_a_session_sends_without_reading_git_and_lists_with_it(
    locations: Locations, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    async with session(locations, "alpha", tmp_path) as alpha, session(locations, "beta", repo):
        [listed] = (await alpha.list_peers()).peers
        assert listed.git == expected_git(repo)

        report = await alpha.send("beta", "hello")
        assert report.ok, report
        assert report.target is not None
        assert report.target.instance_id == listed.instance_id
        assert report.target.git is None  # the send's listing never looked


async def test_the_command_lines_send_listing_reads_no_git(
    locations: Locations, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    async with (
        session(locations, "beta", repo),
        cli_identity.holding(locations, [0]) as held,
    ):
        [peer] = (await held.outbox.list_peers()).peers
        assert peer.name == "beta"
        assert peer.git is None
