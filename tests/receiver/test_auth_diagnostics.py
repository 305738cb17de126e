"""The authenticator's refusal record: counted by cause, the recent ones kept, and bounded.

These call :meth:`Authenticator.on_hello` directly with the credentials the endpoint would pass;
the socket tests beside this file cover the same refusals end to end.
"""

from __future__ import annotations

import os

import pytest

from pi_cross_session._internal.protocol.credentials import PeerCredentials
from pi_cross_session._internal.protocol.frames import Hello
from pi_cross_session._internal.protocol.paths import Locations
from pi_cross_session._internal.protocol.registration import Registration
from pi_cross_session._internal.security.auth import AUTH_FAILED_TEXT, Authenticator, LocalIdentity
from pi_cross_session._internal.security.io.sender_files import PeersDirFiles
from tests.support import raw_client
from tests.support.socket_peers import make_registration, published_sender

pytestmark = pytest.mark.anyio

KEPT = 3


def authenticator_for(locations: Locations, **kwargs: int) -> tuple[Authenticator, Registration]:
    me = make_registration(locations, "beta")
    identity = LocalIdentity(
        session_id=me.id, instance_id=me.instance_id, token=me.token, pid=me.pid
    )
    return Authenticator(identity, locations, files=PeersDirFiles(locations), **kwargs), me


def hello(target: Registration, sender: Registration | None, request_id: str) -> Hello:
    return Hello.model_validate(raw_client.hello(target, sender=sender, request_id=request_id))


def elsewhere() -> PeerCredentials:
    """A same-uid process that is not this one (the pid only has to differ)."""
    return PeerCredentials(pid=os.getpid() + 1, uid=os.geteuid(), gid=os.getegid())


@pytest.mark.parametrize("refusals", [KEPT - 1, KEPT, KEPT + 1])
async def test_recent_diagnostics_keep_the_last_few_and_counts_keep_them_all(
    locations: Locations, refusals: int
) -> None:
    auth, me = authenticator_for(locations, diagnostics_kept=KEPT)
    alpha = published_sender(locations, "alpha")
    for n in range(refusals):
        reply, caller = await auth.on_hello(hello(me, alpha, f"h-{n}"), peer=elsewhere())
        assert caller is None
        assert (reply.status, reply.error) == ("authentication_failed", AUTH_FAILED_TEXT)
    diagnostics = auth.diagnostics()
    assert dict(diagnostics.refusals) == {"pid_mismatch": refusals}
    assert len(diagnostics.recent) == min(refusals, KEPT)
    assert all(
        text == f"hello from {alpha.instance_id} refused: connecting pid {os.getpid() + 1} "
        f"is not the registered pid {os.getpid()}"
        for text in diagnostics.recent
    )


async def test_every_cause_is_counted_under_its_own_name(locations: Locations) -> None:
    auth, me = authenticator_for(locations)
    alpha = published_sender(locations, "alpha")
    unpublished = make_registration(locations, "ghost")
    impostor = make_registration(locations, "alpha", instance_id=alpha.instance_id)
    wrong_target = make_registration(locations, "other")
    myself = make_registration(locations, "beta", instance_id=me.instance_id, token=me.token)
    attempts = [
        (hello(wrong_target, None, "h-1"), None),
        (hello(me, myself, "h-2"), None),
        (hello(me, unpublished, "h-3"), None),
        (hello(me, impostor, "h-4"), None),
        (hello(me, alpha, "h-5"), elsewhere()),
    ]
    for frame, peer in attempts:
        reply, caller = await auth.on_hello(frame, peer=peer)
        assert (reply.error, caller) == (AUTH_FAILED_TEXT, None)
    diagnostics = auth.diagnostics()
    assert dict(diagnostics.refusals) == {
        "token_or_target": 1,
        "own_instance": 1,
        "registration_unreadable": 1,
        "sender_mismatch": 1,
        "pid_mismatch": 1,
    }
    assert diagnostics.recent[0] == "probe refused: token or target did not match"
    assert diagnostics.recent[1].startswith(f"hello from {me.instance_id} refused: ")


async def test_accepted_hellos_leave_no_record_and_probes_are_not_pid_checked(
    locations: Locations,
) -> None:
    auth, me = authenticator_for(locations)
    alpha = published_sender(locations, "alpha")
    ours = PeerCredentials(pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())
    for frame, peer in [
        (hello(me, alpha, "h-1"), ours),
        (hello(me, alpha, "h-2"), None),
        (hello(me, None, "h-3"), elsewhere()),
    ]:
        reply, caller = await auth.on_hello(frame, peer=peer)
        assert (reply.status, caller is not None) == ("ready", True)
    diagnostics = auth.diagnostics()
    assert (dict(diagnostics.refusals), diagnostics.recent) == ({}, ())


async def test_the_snapshot_is_a_copy(locations: Locations) -> None:
    auth, _ = authenticator_for(locations)
    before = auth.diagnostics()
    await auth.on_hello(hello(make_registration(locations, "x"), None, "h-1"))
    assert (dict(before.refusals), before.recent) == ({}, ())
    with pytest.raises(TypeError):
        before.refusals["token_or_target"] = 5  # type: ignore[index]
