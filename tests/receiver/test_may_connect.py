"""Which uid an endpoint serves (protocol/credentials.py, ``may_connect``, the rule the endpoint
applies before it reads or writes a byte), as a table."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.credentials import PeerCredentials, may_connect

OURS = 1000


@pytest.mark.parametrize(
    ("peer", "served"),
    [
        (PeerCredentials(pid=42, uid=OURS, gid=OURS), True),
        (PeerCredentials(pid=42, uid=0, gid=0), False),  # not even root: only our uid
        (PeerCredentials(pid=42, uid=OURS + 1, gid=OURS), False),
        (PeerCredentials(pid=None, uid=OURS, gid=None), True),  # macOS reports no pid
        (PeerCredentials(pid=42, uid=None, gid=None), True),  # nothing to compare: the modes guard
        (None, True),  # the platform reports nothing at all
    ],
)
def test_only_our_uid_is_served_where_the_kernel_says_who_it_is(
    peer: PeerCredentials | None, served: bool
) -> None:
    assert may_connect(peer, OURS) is served
