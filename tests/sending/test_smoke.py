"""Two peers in one process over real Unix sockets: probe, send, status query."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.protocol.io.exchange import ExchangeError, Receipt
from pi_cross_session._internal.protocol.paths import Locations
from tests.support.socket_peers import make_message, running_peer

pytestmark = pytest.mark.anyio


async def test_probe_send_and_status(locations: Locations) -> None:
    async with running_peer(locations, "alpha") as alpha, running_peer(locations, "beta") as beta:
        ready = await alpha.exchanger().probe(beta.registration)
        assert ready.status == "ready"
        message = make_message("hello beta")
        receipt = await alpha.exchanger().send(
            beta.registration, sender=alpha.sender, message=message
        )
        assert isinstance(receipt, Receipt)
        assert receipt.status == "submitted"
        assert [e.text for e in beta.inbox.entries] == ["hello beta"]
        status = await alpha.exchanger().query_status(
            beta.registration, sender=alpha.sender, message_id=message.message_id
        )
        assert status.status == "submitted"
        with pytest.raises(ExchangeError) as caught:
            await alpha.exchanger().send(beta.registration, sender=alpha.sender, message=message)
        assert caught.value.code == "duplicate"
