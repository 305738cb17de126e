"""Bearer tokens and incarnation ids: how they are made and how a presented token is checked.

A token is the secret a receiver publishes in its 0600 registration; any process that can read the
file may speak to the receiver, and nothing else may (spec §1.3). Both values come from
:mod:`secrets` (the OS CSPRNG) and are lowercase hex, the only spelling the contract accepts.

:func:`tokens_match` is the single place where a presented token meets the expected one. It never
raises, whatever it is handed, and compares in constant time so a caller cannot learn a prefix of
the secret from how long a refusal takes. The format check that comes first only reveals what is
already public: whether the presented value *looks like* a token.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Final, TypeGuard

from pi_cross_session._internal.protocol.frames import TOKEN_RE

#: Random bytes behind a bearer token (64 hex characters on the wire).
TOKEN_BYTES: Final = 32
#: Random bytes behind an incarnation id (32 hex characters on the wire).
INSTANCE_ID_BYTES: Final = 16

# Length checked before the regex so a huge presented string costs nothing to refuse.
_TOKEN_CHARS: Final = 2 * TOKEN_BYTES


def new_token() -> str:
    """A fresh bearer token: 32 random bytes as 64 lowercase hex characters."""
    return secrets.token_hex(TOKEN_BYTES)


def new_instance_id() -> str:
    """A fresh incarnation id: 16 random bytes as 32 lowercase hex characters."""
    return secrets.token_hex(INSTANCE_ID_BYTES)


def _is_token(value: object) -> TypeGuard[str]:
    return (
        isinstance(value, str)
        and len(value) == _TOKEN_CHARS
        and TOKEN_RE.fullmatch(value) is not None
    )


def tokens_match(presented: object, expected: str) -> bool:
    """True only when both values are well-formed tokens and equal, compared in constant time.

    Anything that is not exactly 64 lowercase hex characters (another type, another length,
    uppercase, a trailing newline) is ``False``, on either side: a receiver with a malformed token
    of its own authenticates nobody. Never raises.
    """
    if not (_is_token(presented) and _is_token(expected)):
        return False
    # Both are pure ASCII now (checked above), so the encoding cannot fail. The unbound
    # ``str.encode`` keeps a str subclass's overrides out of the comparison.
    return hmac.compare_digest(str.encode(presented, "ascii"), str.encode(expected, "ascii"))
