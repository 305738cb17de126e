"""The gateway started again on SIGHUP (cli/gateway_cmd.py, ``remote rotate`` sends it): a
restart that fails before it could replace the running gateway leaves that one serving, and a
newer SIGHUP supersedes a restart stuck connecting. Fakes for the link and the gateway: what is
looked at is only the order of connecting, swapping and closing."""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import pytest

from pi_cross_session._internal.cli import gateway_cmd
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol.io import environment


class FakeLink:
    def __init__(self, name: str, *, stuck: bool = False) -> None:
        self.name = name
        self.stuck = stuck
        self.connected = False
        self.closed = False

    async def connect(self) -> None:
        if self.stuck:
            await anyio.sleep_forever()
        self.connected = True

    async def close(self) -> None:
        self.closed = True


async def until(condition: Callable[[], bool]) -> None:
    """Wait (the test's ``fail_after`` bounds it) until ``condition`` holds."""
    while True:
        if condition():
            return
        await anyio.sleep(0.01)


def setup_of(link: FakeLink) -> Any:
    return gateway_cmd._Setup(link.name, link, None, None)  # type: ignore[arg-type]


def serving(out: io.StringIO, err: io.StringIO) -> Any:
    made = gateway_cmd._Serving(
        argparse.Namespace(), Console(out, err), environment.resolve(), None
    )
    made._starting = anyio.Lock()

    async def start(setup: Any, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        running = gateway_cmd._Running(setup, None, anyio.CancelScope(), anyio.Event())  # type: ignore[arg-type]
        try:
            with running.scope:
                task_status.started(running)
                await anyio.sleep_forever()
        finally:
            running.done.set()

    made._start = start
    made._say_ready = lambda running: out.write(f"ready {running.setup.machine}\n")
    return made


@pytest.mark.anyio
async def test_files_that_fail_in_any_way_leave_the_running_gateway_serving() -> None:
    out, err = io.StringIO(), io.StringIO()
    gateway = serving(out, err)
    first = FakeLink("first")

    def broken() -> Any:
        raise ValueError("not a CrossSessionError")

    gateway._prepare = broken
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            gateway._start_soon(group, setup_of(first))
            await until(lambda: gateway.current is not None)
            gateway._start_soon(group, None)  # SIGHUP
            await until(lambda: "not started again" in err.getvalue())
            assert gateway.current.setup.link is first
            assert not first.closed
            assert "it runs on as it was" in err.getvalue()
            group.cancel_scope.cancel()
    assert not gateway.failed


@pytest.mark.anyio
async def test_a_newer_sighup_supersedes_a_restart_stuck_connecting() -> None:
    out, err = io.StringIO(), io.StringIO()
    gateway = serving(out, err)
    first, stuck, third = FakeLink("first"), FakeLink("stuck", stuck=True), FakeLink("third")
    prepared = iter([setup_of(stuck), setup_of(third)])
    gateway._prepare = lambda: next(prepared)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            gateway._start_soon(group, setup_of(first))
            await until(lambda: gateway.current is not None)
            gateway._start_soon(group, None)  # SIGHUP: its server never answers
            await anyio.sleep(0.1)
            # Still connecting: the running gateway serves on meanwhile.
            assert gateway.current.setup.link is first
            assert not first.closed
            gateway._start_soon(group, None)  # SIGHUP again
            await until(lambda: gateway.current is not None and gateway.current.setup.link is third)
            assert stuck.closed  # given up, its connection closed
            assert first.closed  # replaced
            assert not third.closed
            group.cancel_scope.cancel()
    assert out.getvalue().count("ready") == 2, out.getvalue()
