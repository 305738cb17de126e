"""What several benchmarks share: a published sender identity a receiver can authenticate."""

from __future__ import annotations

import os
import time

from pi_cross_session.protocol.frames import Sender
from pi_cross_session.protocol.paths import Locations
from pi_cross_session.protocol.registration import Registration, build_registration, serialize
from pi_cross_session.security.io import fs
from pi_cross_session.security.tokens import new_instance_id, new_token


def publish_sender(locations: Locations, session_id: str) -> tuple[Registration, Sender]:
    """A new registration for this process (its pid, a fresh instance id and token), written to
    the peers dir so that a receiver can authenticate hellos naming it; and the matching sender."""
    instance_id = new_instance_id()
    now = time.time_ns() // 1_000_000
    registration = build_registration(
        session_id=session_id,
        session_name=session_id,
        instance_id=instance_id,
        cwd=os.getcwd(),
        pid=os.getpid(),
        started_at=now,
        updated_at=now,
        status="idle",
        inbound="refuse",
        socket_path=locations.socket_path(instance_id),
        token=new_token(),
    )
    fs.ensure_private_dir(locations.peers_dir)
    fs.write_registration(
        locations.peers_dir, instance_id, serialize(registration), still_current=lambda: True
    )
    sender = Sender(id=registration.id, instance_id=instance_id, token=registration.token)
    return registration, sender
