"""``pi-cross-session remote status``: this agent dir's remote plane at a glance (docs/remote.md).

The gateway (running or not, since when, ready), the NATS server it uses (connected, TLS,
JetStream), whether the deployment enforces permissions, the bucket, the machines it trusts with
when each was last heard of and how far its clock is from ours, the proxies and the cap, and the
gateway's recent warnings and errors. All of it from the gateway's snapshot file, so one file read:
no NATS connection, no probe. Without a gateway it says so and how to start one, and still shows
what is configured: the identity card, the trusted machines, the credentials.

Read-only, and without the remote extra (:mod:`pi_cross_session._internal.plugin.remote_state`). The
JSON (``--json``) has stable keys; the text
(:func:`pi_cross_session._internal.cli.words.remote_status`) is for people, every string another
machine chose escaped.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.plugin import remote_state
from pi_cross_session._internal.plugin.remote_state import GatewayState, RemoteFacts
from pi_cross_session._internal.protocol.io import environment


def run(args: argparse.Namespace, console: Console) -> int:
    """Print the status; exit 0 whenever it could be read."""
    facts = remote_state.read(environment.resolve())
    status = view(facts, now_ms=time.time_ns() // 1_000_000)
    if args.json:
        console.json(status)
    else:
        console.result(words.remote_status(status))
    return exits.EXIT_OK


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _seconds(value: object) -> float | None:
    if type(value) is not int and type(value) is not float:
        return None
    return float(value) if 0 <= value < 1e9 else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _machines(facts: RemoteFacts, snapshot: dict[str, Any] | None, now_ms: int) -> list[Any]:
    if snapshot is None:
        return [
            {
                "machine": name,
                "sessions": None,
                "proxies": None,
                "capped": None,
                "lastRecordAt": None,
                "lastRecordAgoS": None,
                "skewMs": None,
                "pausedForS": None,
            }
            for name in facts.trust.machines
        ]
    machines = []
    for entry in snapshot.get("machines", []):
        if not isinstance(entry, dict):
            continue
        at = _int(entry.get("lastRecordAt"))
        machines.append(
            {
                "machine": str(entry.get("machine")),
                "sessions": _int(entry.get("sessions")),
                "proxies": _int(entry.get("proxies")),
                "capped": _int(entry.get("capped")),
                "lastRecordAt": at,
                "lastRecordAgoS": None if at is None else round(max(0, now_ms - at) / 1000, 1),
                "skewMs": _int(entry.get("skewMs")),
                "pausedForS": _seconds(entry.get("pausedForS")),
            }
        )
    return machines


def _capped_sessions(snapshot: dict[str, Any]) -> list[str]:
    records = snapshot.get("records")
    return [
        f"{record.get('name')}@{record.get('machine')}"
        for record in (records if isinstance(records, list) else [])
        if isinstance(record, dict) and record.get("noProxy") == "cap"
    ]


def view(facts: RemoteFacts, *, now_ms: int) -> dict[str, Any]:
    """The status as one JSON object (stable keys; ``null`` where nothing is known)."""
    gateway = facts.gateway
    live = gateway.state in (GatewayState.RUNNING, GatewayState.STUCK)
    snapshot = gateway.snapshot if live else None
    left = gateway.snapshot if gateway.state is GatewayState.STOPPED else None
    credentials = facts.credentials
    inbound = facts.trust.inbound
    account = facts.trust.account
    if snapshot is not None:
        inbound = snapshot.get("inbound") == "on"
        account = _text(snapshot.get("account")) or account
    return {
        "setUp": facts.set_up,
        "extraInstalled": facts.extra,
        "machine": facts.machine,
        "publicKey": facts.public_key,
        "natsKey": facts.nats_key,
        "card": facts.card,
        "identityFiles": {f.name: str(f.state) for f in facts.files},
        "account": account,
        "inbound": None if inbound is None else ("on" if inbound else "off"),
        "trustFile": {"state": str(facts.trust.state), "problem": facts.trust.problem},
        "trusted": list(facts.trust.machines),
        "credentials": {
            "installed": credentials is not None and credentials.problem is None,
            "name": None if credentials is None else credentials.name,
            "issuer": None if credentials is None else credentials.issuer,
            "issuedAt": None if credentials is None else credentials.issued_at,
            "expiresAt": None if credentials is None else credentials.expires_at,
            "forThisMachine": None
            if credentials is None or credentials.subject is None or facts.nats_key is None
            else credentials.subject == facts.nats_key,
            "problem": None if credentials is None else credentials.problem,
        },
        "gateway": {
            "state": str(gateway.state),
            "pid": gateway.pid,
            "startedAt": None if snapshot is None else _int(snapshot.get("startedAt")),
            "ready": None if snapshot is None else snapshot.get("ready") is not False,
            "statusAgeS": None if gateway.age_s is None or not live else round(gateway.age_s, 1),
            "leftBehindAt": None if left is None else _int(left.get("writtenAt")),
        },
        "server": None if snapshot is None else _server(snapshot),
        "joinedServers": list(facts.joined_servers),
        "permissions": None if snapshot is None else _text(snapshot.get("permissions")),
        "bucket": None
        if snapshot is None
        else {
            "state": _text(_dict(snapshot.get("bucket")).get("state")),
            "detail": _text(_dict(snapshot.get("bucket")).get("detail")),
        },
        "machines": _machines(facts, snapshot, now_ms),
        "proxies": None
        if snapshot is None
        else {
            "held": _int(snapshot.get("proxies")),
            "cap": _int(snapshot.get("maxProxies")),
            "share": _int(snapshot.get("proxyShare")),
            "capped": _int(snapshot.get("capped")),
            "cappedSessions": _capped_sessions(snapshot),
        },
        "recentErrors": _recent_errors(snapshot or left),
    }


def _recent_errors(snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    entries = None if snapshot is None else snapshot.get("recentErrors")
    if not isinstance(entries, list):
        return []
    return [
        {
            "at": _int(entry.get("at")),
            "level": str(entry.get("level")),
            "where": str(entry.get("where")),
            "text": str(entry.get("text")),
        }
        for entry in entries
        if isinstance(entry, dict)
    ]


def _server(snapshot: dict[str, Any]) -> dict[str, Any]:
    server = _dict(snapshot.get("server"))
    urls = server.get("urls")
    jetstream = server.get("jetstream")
    return {
        "urls": [str(url) for url in urls] if isinstance(urls, list) else [],
        "connectedUrl": None if server.get("connectedUrl") is None else str(server["connectedUrl"]),
        "connected": snapshot.get("connected") is True,
        "tls": server.get("tls") is True,
        "jetstream": jetstream if jetstream in ("available", "unavailable") else "unknown",
        "reconnects": _int(server.get("reconnects")),
    }
