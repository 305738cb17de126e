"""NATS subject matching as the server applies it to subscriptions and permissions.

``*`` stands for exactly one token and ``>``, last, for one token or more; anything else matches
only itself. Unit tests use it to check which of our subjects a wildcard (a gateway's
subscription, a machine's permission) covers, without a server.
"""

from __future__ import annotations


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether ``subject`` is one of the subjects ``pattern`` names."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or token not in ("*", tokens[index]):
            return False
    return len(wanted) == len(tokens)
