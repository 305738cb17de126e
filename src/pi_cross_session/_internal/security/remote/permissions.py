"""What a machine's NATS credentials let it do: the subject permissions in its user JWT.

Everything not listed is denied by the server (docs/remote.md, "Who may do what"; each row is
tried by ``tests/remote/test_permissions.py`` with another machine's valid credentials):

* publish: requests to any machine, **only as itself** (``pi-xs.v1.to.*.from.<M>``); records and
  tombstones **only under its own keys**; the two JetStream reads a gateway makes of the bucket
  (its configuration, and the current records through the stream's direct get);
* subscribe: requests **addressed to it** (``pi-xs.v1.to.<M>.from.*``), **its own inbox**
  (replies, JetStream answers), and the bucket's record subjects (signed, public within the
  deployment);
* one reply to each request it receives (``allow_responses``), and nothing else on another
  machine's inbox.

Asking the hub to rotate the machine's keys (``remote rotate``) needs no right of its own: the
ask is a request of the machine to ``_deployment`` (``pi-xs.v1.to._deployment.from.<M>``, which
the request right above already covers, and only as itself), answered on its own inbox. So a
machine that joined before rotation existed can rotate with the JWT it has; no gateway serves
that subject (no machine is named ``_…``), only the hub, as the account's administrator.

No machine may create, change, purge or delete the bucket, delete a message from it, or create a
consumer (a push consumer's delivery subject is not checked against its creator's rights, so that
right alone would let it deliver into another machine's subjects): a gateway reads the bucket
through the stream's direct get and a plain subscription to the record subjects instead.
"""

from __future__ import annotations

from pi_cross_session._internal.protocol.remote.envelope import (
    KV_STREAM,
    RECORD_PREFIX,
    inbox_prefix,
    records_of,
    requests_from,
    requests_to,
)
from pi_cross_session._internal.protocol.remote.join import JOIN_INBOX_PREFIX, JOIN_SUBJECT
from pi_cross_session._internal.security.remote.nats_jwt import Permissions

#: The JetStream API subjects a machine may publish to (requests answered on its own inbox).
BUCKET_INFO_SUBJECT = f"$JS.API.STREAM.INFO.{KV_STREAM}"
BUCKET_READ_SUBJECT = f"$JS.API.DIRECT.GET.{KV_STREAM}"


def machine_permissions(machine: str) -> Permissions:
    """The permissions of ``machine``'s user in the deployment's account."""
    return Permissions(
        publish=(
            requests_from(machine),
            records_of(machine),
            BUCKET_INFO_SUBJECT,
            BUCKET_READ_SUBJECT,
        ),
        subscribe=(
            requests_to(machine),
            f"{inbox_prefix(machine)}.>",
            f"{RECORD_PREFIX}.>",
        ),
        responses=1,
    )


def join_permissions() -> Permissions:
    """What a user signed by an invitation may do, whatever its JWT says (the invitation is a
    scoped signing key): ask to join, and hear the answer under its own user key (the server
    puts the user's key where the template says ``{{subject()}}``)."""
    return Permissions(
        publish=(JOIN_SUBJECT,),
        subscribe=(f"{JOIN_INBOX_PREFIX}.{{{{subject()}}}}.>",),
    )
