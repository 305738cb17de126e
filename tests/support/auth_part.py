"""Reading a NATS server configuration's authorization part (what a deployment writes into
``auth.conf``): its operator, its system account and the account JWTs it preloads."""

from __future__ import annotations


def auth_parts(text: str) -> tuple[str, str, dict[str, str]]:
    """The operator JWT, the system account and the preloaded account JWTs of an auth part."""
    lines = text.splitlines()
    values = dict(
        line.split(": ", 1) for line in lines if not line.startswith(" ") and ": " in line
    )
    start = lines.index("resolver_preload: {")
    end = lines.index("}", start)
    preload = dict(line.strip().split(": ", 1) for line in lines[start + 1 : end])
    return values["operator"], values["system_account"], preload
