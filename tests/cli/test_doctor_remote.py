"""``doctor`` on the remote plane: what it says of an identity, its credentials and trust file,
with and without the remote extra installed, and that it changes nothing there either. A live
gateway's side is in ``tests/remote/test_status.py``."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.file_state import mode_of, tree_state
from tests.support.processes import CLI, Result, run_cli

Cli = Callable[..., Result]

#: The command line as it runs where the ``[remote]`` extra is not installed: every import of
#: one of its modules fails, as it would there.
WITHOUT_THE_EXTRA = (
    sys.executable,
    "-c",
    "import sys\n"
    "class Missing:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.partition('.')[0] in ('nats', 'nkeys', 'nacl', 'cryptography'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
    "        return None\n"
    "sys.meta_path.insert(0, Missing())\n"
    "from pi_cross_session._internal.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n",
)


def _remote(findings: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        if finding["subject"].startswith(("remote", "gateway")):
            grouped.setdefault(finding["subject"], []).append(finding)
    return grouped


def _jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'typ': 'JWT', 'alg': 'ed25519-nkey'})}.{part(claims)}.c2ln"


def test_without_a_remote_setup_one_line_says_so(cli: Cli) -> None:
    checked = cli("doctor", "--json")
    assert checked.returncode == 0, checked
    assert _remote(checked.json()["findings"]) == {
        "remote plane": [
            {
                "severity": "ok",
                "subject": "remote plane",
                "detail": "not set up for this agent dir (nothing to check); to join other "
                "machines: pi-cross-session remote init --machine NAME (docs/remote.md)",
                "fix": "",
                "kind": "",
            }
        ]
    }


def test_a_set_up_machine_is_checked_without_the_extra_installed(
    locations: Locations, private_agent_dir: Path, tmp_path: Path
) -> None:
    files.init_identity(locations, "laptop")
    checked = run_cli(private_agent_dir, "doctor", "--json", command=WITHOUT_THE_EXTRA)
    assert checked.returncode == 0, checked
    report = checked.json()
    assert report["healthy"] is True
    found = _remote(report["findings"])
    [extra] = found["remote plane"]
    assert extra["severity"] == "warning"
    assert extra["detail"] == "the [remote] extra is not installed: the gateway cannot run here"
    assert extra["fix"] == "pip install 'pi-cross-session[remote]'"
    [identity] = found["remote identity"]
    assert identity["detail"] == "machine laptop; its key files are private (0600, ours)"
    [credentials] = found["remote credentials"]
    assert credentials["severity"] == "info"
    assert "no NATS credentials installed" in credentials["detail"]
    [trust] = found["remote trust"]
    assert trust["severity"] == "info"
    assert trust["detail"].startswith("no trust file")
    [gateway] = found["gateway"]
    assert gateway["detail"] == "no gateway runs for this agent dir"

    status = run_cli(private_agent_dir, "remote", "status", command=WITHOUT_THE_EXTRA)
    assert status.returncode == 0, status
    assert "extra" in [line.split(" ", 1)[0] for line in status.stdout.splitlines()]
    assert "not installed: the gateway cannot run here" in status.stdout
    as_json = run_cli(private_agent_dir, "remote", "status", "--json", command=WITHOUT_THE_EXTRA)
    assert as_json.json()["extraInstalled"] is False
    assert as_json.json()["machine"] == "laptop"
    # With the extra, the same agent dir: no such warning.
    with_extra = run_cli(private_agent_dir, "doctor", "--json", command=CLI)
    assert "remote plane" not in _remote(with_extra.json()["findings"])


def test_a_readable_key_expired_or_foreign_credentials_and_a_broken_trust_file_are_errors(
    locations: Locations, private_agent_dir: Path, cli: Cli
) -> None:
    identity = files.init_identity(locations, "laptop")
    remote_dir = Path(files.remote_dir(locations))
    key = remote_dir / "machine.key"
    key.chmod(0o644)
    now = int(time.time())
    expired = {"name": "laptop", "iss": "AEXAMPLE", "sub": identity.nats.public_key}
    expired |= {"iat": now - 86_400, "exp": now - 60}
    (remote_dir / "nats-user.jwt").write_text(_jwt(expired))
    (remote_dir / "nats-user.jwt").chmod(0o600)
    (remote_dir / "trust.json").write_text('{"version": 1, "machines": []}')
    (remote_dir / "trust.json").chmod(0o600)
    before = tree_state(private_agent_dir, locations.runtime_dir)

    checked = cli("doctor", "--json")
    assert checked.returncode == 1, checked  # broken: the gateway would not start
    found = _remote(checked.json()["findings"])
    [loose] = found["remote identity"]
    assert loose["severity"] == "error"
    assert loose["detail"] == f"{key}: mode 0644 gives others access; the gateway refuses it"
    assert loose["fix"].startswith(f"chmod 600 {key}; others could read it meanwhile")
    [credentials] = found["remote credentials"]
    assert credentials["severity"] == "error"
    assert "expired on" in credentials["detail"]
    assert "user laptop, issued by AEXAMPLE" in credentials["detail"]
    [trust] = found["remote trust"]
    assert trust["severity"] == "error"
    assert "the gateway does not start" in trust["detail"]
    assert tree_state(private_agent_dir, locations.runtime_dir) == before  # nothing repaired
    assert mode_of(key) == 0o644

    key.chmod(0o600)
    foreign = {"name": "laptop", "iss": "AEXAMPLE", "sub": "UNOTTHISMACHINE", "iat": now}
    (remote_dir / "nats-user.jwt").write_text(_jwt(foreign))
    [credentials] = _remote(cli("doctor", "--json").json()["findings"])["remote credentials"]
    assert credentials["severity"] == "error"
    assert f"but this machine's is {identity.nats.public_key}" in credentials["detail"]
    assert "remote show" in credentials["fix"]
