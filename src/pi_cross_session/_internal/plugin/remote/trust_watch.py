"""What a running gateway trusts, kept current: its trust file and its deployment's roster.

``remote trust``, ``untrust`` and ``inbound`` edit the trust file; the hub publishes a new roster
when it admits or revokes a machine. Either reaches a running gateway within seconds: the file is
looked at every ``REMOTE_TRUST_POLL_S`` (a ``stat``, read again only when it changed), and the
roster is followed on its subject in the bucket (and read once at start). The gateway then
follows the machines added and forgets those removed (:meth:`Gateway.apply_trust`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from nats.aio.msg import Msg

from pi_cross_session._internal.plugin.remote import files
from pi_cross_session._internal.plugin.remote.link import (
    BucketError,
    Link,
    PermissionDeniedError,
    UnreachableError,
)
from pi_cross_session._internal.plugin.remote_state import TRUST_FILE
from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.protocol.paths import Locations, node_join
from pi_cross_session._internal.protocol.remote.join import ROSTER_SUBJECT
from pi_cross_session._internal.protocol.remote.settings import REMOTE_TRUST_POLL_S
from pi_cross_session._internal.security.remote.identity import PublicKey
from pi_cross_session._internal.security.remote.roster import (
    MAX_ROSTER_BYTES,
    RosterKeeper,
    merged_trust,
    open_roster,
)
from pi_cross_session._internal.security.remote.trust import TrustConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeploymentKey:
    """The deployment a machine joined: its account key, which signs the roster."""

    deployment: str
    key: PublicKey


class TrustWatch:
    """Keeps ``apply`` told of what the gateway of ``machine`` should trust."""

    def __init__(
        self,
        locations: Locations,
        *,
        machine: str,
        own: TrustConfig,
        deployment: DeploymentKey | None,
        apply: Callable[[TrustConfig], Awaitable[None]],
        poll_s: float = REMOTE_TRUST_POLL_S,
    ) -> None:
        self._locations = locations
        self._machine = machine
        self._own = own
        self._deployment = deployment
        self._apply = apply
        self._poll_s = poll_s
        self._roster = RosterKeeper()
        self._file_state = self._stat()
        if deployment is not None:
            kept = files.load_roster(locations, MAX_ROSTER_BYTES)
            if kept is not None:
                roster = open_roster(kept, deployment.key, deployment.deployment)
                if roster is not None:
                    self._roster.offer(roster)

    @property
    def trust(self) -> TrustConfig:
        """What the gateway should trust now."""
        return merged_trust(self._own, self._roster.current, self._machine)

    @property
    def roster_seq(self) -> int | None:
        current = self._roster.current
        return None if current is None else current.seq

    async def start(self, link: Link, group: anyio.abc.TaskGroup) -> None:
        """Follow the roster (when this machine joined a deployment) and poll the trust file."""
        if self._deployment is not None:
            await link.serve(ROSTER_SUBJECT, self._on_roster)
            try:
                for record in await link.read_records(ROSTER_SUBJECT, 1, MAX_ROSTER_BYTES):
                    if record.operation is None:
                        await self._take_roster(record.data)
            except (BucketError, UnreachableError, PermissionDeniedError) as exc:
                logger.info("reading the deployment's roster: %s", exc)
        group.start_soon(self._poll_file)

    async def _on_roster(self, msg: Msg) -> None:
        await self._take_roster(msg.data)

    async def _take_roster(self, data: bytes) -> None:
        assert self._deployment is not None
        roster = open_roster(data, self._deployment.key, self._deployment.deployment)
        if roster is None or not self._roster.offer(roster):
            return
        try:
            await anyio.to_thread.run_sync(files.save_roster, self._locations, data)
        except CrossSessionError as exc:
            logger.info("could not keep the roster: %s", exc)
        await self._apply(self.trust)

    def _stat(self) -> tuple[int, int, int] | None:
        path = node_join(files.remote_dir(self._locations), TRUST_FILE)
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    async def _poll_file(self) -> None:
        while True:
            await anyio.sleep(self._poll_s)
            state = self._stat()
            if state == self._file_state:
                continue
            self._file_state = state
            try:
                own = await anyio.to_thread.run_sync(files.load_trust, self._locations)
            except CrossSessionError as exc:
                logger.warning("the trust file cannot be read, so nothing changes: %s", exc)
                continue
            # Applied even when equal: the person who edited the file hears that it was taken.
            self._own = own
            await self._apply(self.trust)


__all__ = ["DeploymentKey", "TrustWatch"]
