"""Machines of a hub's deployment on one host, driven by the commands a person types.

Each :class:`HubHost` is an agent dir of its own, whose long-running commands (``remote hub``,
``remote join``, inboxes) are real processes it ends on :meth:`HubHost.close`; :func:`hub_hosts`
makes several and closes them all; the helpers read what those commands print and what ``peers``
lists.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import anyio

from pi_cross_session._internal.protocol.io import environment
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import CLI, InboxProcess, WatchedProcess, cli_env, run_cli
from tests.support.waiting import eventually

JOIN_LINE = re.compile(r"pi-cross-session remote join (\S+) (PIXS1-\S+)")


class HubHost:
    """One machine of the test: its own agent dir, the long-running commands it started."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.agent_dir = root / name / "agent"
        self.agent_dir.mkdir(parents=True)
        self.work = root / name / "work"
        self.work.mkdir()
        self.running: list[WatchedProcess] = []

    def start(self, *args: str) -> WatchedProcess:
        process = WatchedProcess(
            [*CLI, *args],
            env=cli_env(self.agent_dir),
            label=f"{self.name}: {args[:2]}",
            cwd=self.work,
        )
        self.running.append(process)
        return process

    def inbox(self, name: str) -> InboxProcess:
        inbox = InboxProcess(self.agent_dir, "--name", name, cwd=self.work)
        self.running.append(inbox)
        return inbox

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = run_cli(self.agent_dir, *args, cwd=self.work)
        return subprocess.CompletedProcess(args, result.returncode, result.stdout, result.stderr)

    def close(self) -> None:
        for process in reversed(self.running):
            if process.process.poll() is None:
                process.process.send_signal(signal.SIGTERM)
                try:
                    process.process.wait(timeout=MUST_HAPPEN_S)
                except subprocess.TimeoutExpired:
                    process.process.kill()
                    process.process.wait()
            process.close()
        locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(self.agent_dir)})
        shutil.rmtree(locations.runtime_dir, ignore_errors=True)


#: The name the tests import (``netns.py`` defines a ``Host`` class of its own).
Host = HubHost


@contextmanager
def hub_hosts(root: Path, *names: str) -> Iterator[dict[str, Host]]:
    """A :class:`Host` per name under ``root``; every one closed at the end."""
    made = {name: Host(root, name) for name in names}
    try:
        yield made
    finally:
        for host in made.values():
            host.close()


def wait_listed(host: Host, address: str) -> None:
    """Wait until ``peers`` on ``host`` lists ``address`` (its gateway made the proxy)."""

    def listed() -> bool:
        result = host.cli("peers", "--json")
        return result.returncode == 0 and address in result.stdout

    anyio.run(partial(eventually, listed))


def join_words(process: WatchedProcess) -> list[str]:
    """The two words after ``remote join`` in the line ``process`` printed."""
    match = process.wait_line(JOIN_LINE.pattern, timeout=MUST_HAPPEN_S)
    return [match.group(1), match.group(2)]
