"""How a send that did not get through is told: people get words, scripts get codes in ``--json``.

* A message that never left (the receiver hung up before it could be written) says "not sent",
  and why, and exits 1: certainly not delivered, safe to send again — never "refused by" the
  session, nor exit 3 ("ask with status, never resend blindly").
* An error of the command line itself is a sentence, not ``code: sentence``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from pi_cross_session._internal.cli import exits
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from tests.support.fake_receiver import Reply, fake_receiver, ready
from tests.support.processes import Result, run_cli
from tests.support.socket_peers import make_registration, publish


def hangs_up_on_senders(registration: Registration) -> Reply:
    """``ready`` to a probe (so listings show the session live), and nothing but a closed
    connection to an authenticated hello: the sender never gets to write its message."""
    probe = ready(registration)

    def make(frame: Any) -> bytes:
        if isinstance(frame, dict) and "from" in frame:
            return b""
        return probe.make(frame)

    return Reply(make, close=True)


@pytest.mark.anyio
async def test_a_message_never_written_is_not_sent_and_says_why(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    registration = make_registration(locations, "hangup")
    async with fake_receiver(
        locations, [hangs_up_on_senders(registration)], registration=registration
    ) as fake:
        publish(locations, registration)
        run = partial(run_cli, private_agent_dir, cwd=tmp_path)
        text: Result = await anyio.to_thread.run_sync(run, "send", "hangup", "hello?")
        as_json: Result = await anyio.to_thread.run_sync(run, "send", "hangup", "hi?", "--json")
        assert fake.count("message") == 0  # neither message was ever written
    assert text.returncode == exits.EXIT_LOCAL, text
    assert text.stderr.startswith(
        f"Message not sent to hangup [{registration.ref}]: it closed the connection before the "
        "message could be written ("
    ), text
    assert "refused" not in text.stderr
    assert "may or may not" not in text.stderr
    assert "status" not in text.stderr  # nothing to ask about
    assert "messageId" not in text.stderr
    assert as_json.returncode == exits.EXIT_LOCAL, as_json
    report = as_json.json()
    assert (report["status"], report["messageWritten"]) == ("connection_closed", False)
    assert report["receipt"] is None


def test_an_error_of_the_command_line_is_words_without_its_code(
    private_agent_dir: Path, tmp_path: Path
) -> None:
    trusted = run_cli(private_agent_dir, "remote", "trust", "bob", "ed25519:xyz", cwd=tmp_path)
    assert trusted.returncode == 1, trusted
    assert trusted.stderr == "pi-cross-session: the public key is not base64\n", trusted
    assert "invalid_frame" not in trusted.stderr
