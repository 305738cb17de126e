"""``pi-cross-session mcp`` started as a host starts it, through the installed console script:
its name from ``PI_CROSS_SESSION_NAME``, its inbound policy from ``--inbound`` or the
environment (an invalid value refuses, and says so on stderr), its tools' parameters the
pi-python extension's, and SIGINT withdrawing it as SIGTERM does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from pi_cross_session._internal.plugin import tools
from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.io import environment
from pi_cross_session._internal.protocol.registration import Registration
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.raw_client import CAPABILITIES
from tests.support.socket_peers import published_sender
from tests.support.wire_session import Ledger, WireSender, eventually, on_disk

pytestmark = pytest.mark.anyio

#: The console script the package installs beside this interpreter.
SCRIPT = Path(sys.executable).parent / "pi-cross-session"

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-host", "version": "0"},
    },
}


def registrations(peers_dir: str) -> list[Registration]:
    return [
        Registration.model_validate_json(path.read_text())
        for path in Path(peers_dir).glob("*.json")
    ]


@pytest.mark.parametrize(
    ("args", "env_inbound", "stderr_says"),
    [
        (["--inbound", "refuse"], None, None),
        ([], "sometimes", "sometimes"),
    ],
    ids=["flag", "invalid-env"],
)
async def test_the_console_script_takes_its_name_from_the_environment_and_can_refuse(
    private_agent_dir: Path,
    tmp_path: Path,
    args: list[str],
    env_inbound: str | None,
    stderr_says: str | None,
) -> None:
    assert SCRIPT.exists(), SCRIPT
    env = {"PI_CODING_AGENT_DIR": str(private_agent_dir), "PI_CROSS_SESSION_NAME": "from-env"}
    if env_inbound is not None:
        env["PI_CROSS_SESSION_INBOUND"] = env_inbound
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(private_agent_dir)})
    workdir = tmp_path / "not-the-name"
    workdir.mkdir()
    errlog = tmp_path / "err.log"
    params = StdioServerParameters(command=str(SCRIPT), args=["mcp", *args], env=env, cwd=workdir)
    with errlog.open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await eventually(lambda: bool(registrations(locations.peers_dir)))
            [registration] = registrations(locations.peers_dir)
            assert registration.name == "from-env"

            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            for spec in (tools.LIST_PI_SPEC, tools.SEND_PI_MESSAGE_SPEC):
                tool = listed[spec.name]
                assert tool.input_schema == spec.parameters.model_json_schema(by_alias=True)
                assert tool.description == spec.description

            alice = WireSender(
                published_sender(locations, "alice"),
                lambda: registration,
                ledger=Ledger(),
                wall_ms=lambda: time.time_ns() // 1_000_000,
                capabilities=CAPABILITIES,
            )
            reply = await alice.send("are you there?")
            assert (reply.ok, reply.status) == (False, Code.REFUSED)
            status = await session.get_prompt("cross-session-status")
            shown = status.messages[0].content.text  # type: ignore[union-attr]
            assert "refuse" in shown
    assert not on_disk(locations.registration_path(registration.instance_id))
    if stderr_says is not None:
        assert stderr_says in errlog.read_text()


def test_sigint_withdraws_the_peer_as_sigterm_does(private_agent_dir: Path, tmp_path: Path) -> None:
    locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(private_agent_dir)})
    process = subprocess.Popen(
        [str(SCRIPT), "mcp", "--name", "interrupted"],
        env={**os.environ, "PI_CODING_AGENT_DIR": str(private_agent_dir)},
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1
        deadline = time.monotonic() + MUST_HAPPEN_S
        while not registrations(locations.peers_dir) and time.monotonic() < deadline:
            time.sleep(0.02)
        [registration] = registrations(locations.peers_dir)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=MUST_HAPPEN_S) == 0
        assert not on_disk(locations.registration_path(registration.instance_id))
        assert not on_disk(registration.socket_path)
        assert process.stdout.read() == b""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
