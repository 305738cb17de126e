"""A command-line sender that runs out of file descriptors just before it sends.

``python exhausted_sender.py TARGET TEXT`` publishes the command line's sender identity in the
agent dir of ``PI_CODING_AGENT_DIR`` (as ``pi-cross-session send`` does), then opens ``/dev/null``
until ``EMFILE`` so that every descriptor is in use, sends ``TEXT`` to ``TARGET`` the way the
command line does, gives the descriptors back, and prints one JSON line:

  ``{"held": n, "details": <send details>, "text": <the sentence a user reads>}``

It imports only the package, so it runs from any directory.
"""

from __future__ import annotations

import json
import os
import sys

import anyio

from pi_cross_session._internal.plugin import cli_identity, outbound
from pi_cross_session._internal.plugin.render import sending
from pi_cross_session._internal.protocol.io import environment


async def main(target: str, text: str) -> None:
    async with cli_identity.publishing(environment.resolve()) as outbox:
        held: list[int] = []
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        try:
            report = await outbound.send(outbox, target, text)
        finally:
            for fd in held:
                os.close(fd)
    print(
        json.dumps(
            {
                "held": len(held),
                "details": sending.send_details(report),
                "text": sending.send_result(report),
            }
        )
    )


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
