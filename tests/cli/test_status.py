"""``pi-cross-session status`` and the command line's persistent sender identity.

A receiver keys its message rows by the sender's instance id, so ``status`` finds a message sent
by an *earlier* invocation only if every invocation is the same sender: these tests prove the
identity file makes it so, and that a damaged or loosened identity file is replaced, never trusted.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_cross_session._internal.plugin import cli_identity
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.file_state import mode_of
from tests.support.processes import HOLD_S, Inboxes, Result

Cli = Callable[..., Result]


def identity_path(agent_dir: Path) -> Path:
    return agent_dir / "cross-session" / "cli-identity.json"


def read_identity(agent_dir: Path) -> dict[str, object]:
    data = json.loads(identity_path(agent_dir).read_text())
    assert isinstance(data, dict)
    return data


# -- status ------------------------------------------------------------------------------------


def test_status_of_a_message_sent_by_an_earlier_invocation_and_of_a_random_one(
    inboxes: Inboxes, cli: Cli
) -> None:
    inbox = inboxes.start("receiver", busy=0)
    sent = cli("send", "receiver", "remember me")
    assert sent.returncode == 0, sent
    message_id = sent.message_id()
    inbox.wait_event("state", messageId=message_id, state="submitted")
    # The inbox's simulated turn shows the message, so this command line (which understands
    # delivery receipts) is told it was delivered.

    inbox.wait_event("state", messageId=message_id, state="delivered")

    asked = cli("status", "receiver", message_id)
    assert asked.returncode == 0, asked  # 0: delivered
    ref = inbox.wait_event("ready")["ref"]
    assert asked.stdout.startswith(f"Message {message_id} at receiver [{ref}]: delivered — ")
    assert "not a sign it was read or acted on" in asked.stdout

    as_json = cli("status", "receiver", message_id, "--json")
    assert as_json.returncode == 0, as_json
    report = as_json.json()
    assert report["ok"] is True
    assert report["status"] == "delivered"
    assert report["messageId"] == message_id
    assert report["target"]["ref"] == ref
    assert report["deliveryConfirmable"] is True
    # The receiver's own note on the row comes along, as what it is: not an error.
    assert "error" not in report
    assert report["diagnostic"] == "The host confirmed the message entered the conversation"

    # The same receiver, asked about a message it never saw.
    random_id = str(uuid.uuid4())
    unknown = cli("status", "receiver", random_id)
    assert unknown.returncode == 3, unknown  # 3: unknown
    assert unknown.stdout.startswith(f"Message {random_id} at receiver [{ref}]: unknown — ")
    # "unknown" is not "not delivered": the text says the receiver may simply have forgotten.
    assert "has no record of it" in unknown.stdout
    assert "does not mean it was not delivered" in unknown.stdout
    unknown_json = cli("status", "receiver", random_id, "--json")
    assert unknown_json.returncode == 3, unknown_json
    assert unknown_json.json()["ok"] is True
    assert unknown_json.json()["status"] == "unknown"


def test_status_of_a_queued_message(inboxes: Inboxes, cli: Cli) -> None:
    inbox = inboxes.start("occupied", busy=HOLD_S)
    first = cli("send", "occupied", "keeps it busy")
    assert first.returncode == 0, first
    inbox.wait_event("message", messageId=first.message_id())
    second = cli("send", "occupied", "waits its turn")
    assert second.returncode == 0, second
    asked = cli("status", "occupied", second.message_id(), "--json")
    assert asked.returncode == 6, asked  # 6: still queued
    assert asked.json()["status"] == "queued"


def test_a_restarted_receiver_no_longer_knows_a_delivered_message(
    inboxes: Inboxes, cli: Cli
) -> None:
    old = inboxes.start("phoenix", busy=0)
    sent = cli("send", "phoenix", "before the restart")
    assert sent.returncode == 0, sent
    old.wait_event("message", messageId=sent.message_id())
    assert old.stop() == 0
    inboxes.start("phoenix", busy=0)
    asked = cli("status", "phoenix", sent.message_id(), "--json")
    assert asked.returncode == 3, asked
    assert asked.json()["status"] == "unknown"  # delivered, yet unknown to the new incarnation


def test_status_of_an_unknown_target_is_not_found(cli: Cli) -> None:
    asked = cli("status", "nobody", str(uuid.uuid4()), "--json")
    assert asked.returncode == 4, asked
    assert asked.json()["status"] == "not_found"
    text = cli("status", "nobody", str(uuid.uuid4()))
    assert text.returncode == 4, text
    assert text.stderr.startswith('Could not ask: no live session matches "nobody"')


@pytest.mark.parametrize(
    "message_id", ["not a message id!", "not-an-id", "0B7C6F1E-3D2A-4C1B-9E8F-5A6B7C8D9E0F"]
)
def test_a_malformed_message_id_is_a_clean_usage_error(
    inboxes: Inboxes, cli: Cli, message_id: str
) -> None:
    """A MESSAGE_ID no send of ours can have printed (every one is a lowercase UUID) is a usage
    error (exit 1, the command line's), never asked about and answered "unknown" (exit 3)."""
    inboxes.start("strict")
    asked = cli("status", "strict", message_id)
    assert asked.returncode == 1, asked
    assert f'"{message_id}" is not a message id: give the messageId a send printed' in (
        asked.stderr
    ), asked
    assert "Traceback" not in asked.stderr, asked
    assert "ValidationError" not in asked.stderr, asked


# -- the identity file -------------------------------------------------------------------------


def ask_nobody(cli: Cli) -> Result:
    """A status question to nobody: it holds (so loads, or creates) the first identity."""
    return cli("status", "nobody", str(uuid.uuid4()))


def test_identity_is_kept_private_and_reused_across_invocations(
    cli: Cli, private_agent_dir: Path
) -> None:
    assert ask_nobody(cli).returncode == 4
    path = identity_path(private_agent_dir)
    assert mode_of(path.parent) == 0o700
    assert mode_of(path) == 0o600
    first = read_identity(private_agent_dir)
    assert set(first) == {"version", "sessionId", "instanceId", "token"}
    assert str(first["sessionId"]).startswith("cli-")
    assert ask_nobody(cli).returncode == 4
    assert read_identity(private_agent_dir) == first


def corrupt(path: Path) -> None:
    path.write_text("{ this is not json")


def too_long_token(path: Path) -> None:
    data = json.loads(path.read_text())
    data["token"] += "0"
    path.write_text(json.dumps(data))


def loosened(path: Path) -> None:
    os.chmod(path, 0o644)


@pytest.mark.parametrize("damage", [corrupt, too_long_token, loosened], ids=lambda f: f.__name__)
def test_a_damaged_identity_file_is_replaced_not_trusted(
    cli: Cli, private_agent_dir: Path, locations: Locations, damage: Callable[[Path], None]
) -> None:
    cli_identity.load_or_create(locations)  # what an earlier invocation left
    path = identity_path(private_agent_dir)
    old = read_identity(private_agent_dir)
    damage(path)
    done = ask_nobody(cli)
    assert done.returncode == 4, done
    assert mode_of(path) == 0o600
    new = read_identity(private_agent_dir)
    assert new["instanceId"] != old["instanceId"]
    assert new["token"] != old["token"]
    assert new["sessionId"] != old["sessionId"]


def test_a_symlinked_identity_file_is_replaced_and_its_target_left_alone(
    cli: Cli, private_agent_dir: Path, locations: Locations, tmp_path: Path
) -> None:
    cli_identity.load_or_create(locations)
    path = identity_path(private_agent_dir)
    planted = tmp_path / "planted.json"
    planted.write_bytes(path.read_bytes())
    os.chmod(planted, 0o600)
    planted_before = planted.read_bytes()
    old = read_identity(private_agent_dir)
    path.unlink()
    path.symlink_to(planted)
    assert ask_nobody(cli).returncode == 4
    assert not path.is_symlink()
    assert mode_of(path) == 0o600
    assert read_identity(private_agent_dir)["instanceId"] != old["instanceId"]
    assert planted.read_bytes() == planted_before
