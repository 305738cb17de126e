"""Replies an owner writes again and again (protocol/frames.py, ``ReplyTemplates``): the same as
building each in full, validated once, bounded, and never shared between owners."""

from __future__ import annotations

import pydantic
import pytest

from pi_cross_session._internal.protocol.codes import Code
from pi_cross_session._internal.protocol.frames import PeerIdentity, ReplyTemplates, Response

PEER = PeerIdentity(id="session-a", instance_id="a" * 32, pid=4242)


@pytest.mark.parametrize(
    "fields",
    [
        {"ok": True, "status": Code.READY, "peer": PEER},
        {"ok": True, "status": Code.SUBMITTED, "peer": PEER},
        {"ok": False, "status": Code.RATE_LIMITED, "error": "slow down"},
        {"ok": False, "status": Code.AUTHENTICATION_FAILED, "peer": PEER},  # peer dropped
    ],
)
def test_a_kept_reply_with_a_new_id_is_what_building_it_gives(fields: dict[str, object]) -> None:
    replies = ReplyTemplates()
    first = replies.build(request_id="r-1", **fields)  # type: ignore[arg-type]
    again = replies.build(request_id="r-2", **fields)  # type: ignore[arg-type]
    fresh = Response.build(request_id="r-2", **fields)  # type: ignore[arg-type]
    assert again == fresh
    assert again.to_wire() == fresh.to_wire()
    assert again.model_fields_set == fresh.model_fields_set
    assert first.request_id == "r-1"  # the kept one is untouched


def test_an_invalid_id_is_validated_in_full_and_refused() -> None:
    replies = ReplyTemplates()
    replies.build(request_id="r-1", ok=True, status=Code.READY, peer=PEER)
    with pytest.raises(pydantic.ValidationError):
        replies.build(request_id="not valid!", ok=True, status=Code.READY, peer=PEER)


def test_the_table_is_bounded_and_owned() -> None:
    replies = ReplyTemplates(bound=2)
    for status in (Code.READY, Code.SUBMITTED, Code.QUEUED):
        replies.build(request_id="r", ok=True, status=status, peer=PEER)
    assert len(replies._kept) == 2  # the oldest went
    assert ReplyTemplates()._kept == {}  # another owner starts with nothing
