"""The extension as the host loads it: tools, commands, annotations, the entry point."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from pi_agent_cli.config import PermissionMode
from pi_agent_cli.permissions import needs_permission
from pi_agent_core.extensions import ExtensionLoader

from pi_cross_session._internal.plugin import commands, tools
from pi_cross_session._internal.plugin.hosts import pi_python
from tests.host.pi_harness import reply_text, runtime_of

pytestmark = pytest.mark.anyio

ASK: PermissionMode = "ask"


async def test_tools_and_commands_are_registered(harnesses: Callable[..., Any]) -> None:
    harness = await harnesses()
    registry = harness.extension_registry
    assert {"list_pi", "send_pi_message"} <= set(registry.get_tools())
    assert {spec.name for spec in commands.COMMAND_SPECS} <= set(registry.get_commands())
    assert {"list_pi", "send_pi_message"} <= set(harness.active_tool_names)
    definition = registry.get_tools()["send_pi_message"]
    assert definition.parameters is tools.SendPiMessageParams
    assert definition.prompt_guidelines
    assert harness.failed_extensions == []


async def test_ask_mode_lets_list_pi_through_and_asks_before_sending(
    harnesses: Callable[..., Any],
) -> None:
    # The CLI's own permission rule, fed the annotations exactly as the harness passes them.
    harness = await harnesses()
    definitions = harness.extension_registry.get_tools()
    assert not needs_permission(ASK, definitions["list_pi"].annotations)
    assert needs_permission(ASK, definitions["send_pi_message"].annotations)


async def test_the_runtime_is_registered_once_the_session_starts(
    harnesses: Callable[..., Any], locations: Any, workdir: Any
) -> None:
    harness = await harnesses()
    runtime = await runtime_of(harness)
    identity = runtime.identity
    assert identity is not None
    assert os.path.isfile(locations.registration_path(identity.instance_id))  # noqa: ASYNC240
    registration = runtime.registration()
    assert registration is not None
    assert registration.cwd == str(workdir)
    # pi-python's ids are UUIDv7: the published name uses their random tail, not the clock.
    assert registration.name == f"pi-{identity.session_id.replace('-', '')[-8:]}"


# pi-python 0.6 looks entry points up through the dict interface of ``entry_points()`` on Python
# 3.11, which warns; under this suite's ``filterwarnings = error`` the host would swallow the
# error and find nothing. The warning is the host's, so it is allowed here and only here.
@pytest.mark.filterwarnings("ignore:SelectableGroups dict interface:DeprecationWarning")
async def test_entry_point_discovery_loads_the_extension(harnesses: Callable[..., Any]) -> None:
    found = ExtensionLoader().discover_entry_points()
    assert pi_python.activate in found
    harness = await harnesses(ours=False, auto_discover=True)
    assert "list_pi" in harness.extension_registry.get_tools()
    assert harness.failed_extensions == []
    text = await reply_text(harness, "/cross-session-status")
    assert "Inbound: accept" in text
