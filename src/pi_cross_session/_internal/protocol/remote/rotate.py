"""Rotating a machine's keys: what a machine asks its deployment's hub, and what it is told.

``pi-cross-session remote rotate`` (docs/remote.md, "Rotating a machine's keys") replaces a
joined machine's identity key (which signs its envelopes and records) and its NATS user key,
keeping its name. It takes two steps over two connections, so that neither a lost answer nor a
crash on the machine leaves it without a set of keys the deployment takes:

1. **rotate**, over the machine's current credentials, signed by its *current* identity key:
   "here is my new card". The hub keeps the card as pending and answers with a user JWT for the
   new NATS key. Nothing else changes: the old keys still work.
2. **confirm**, over the *new* credentials, signed by the *new* identity key: "I hold the new
   keys". The hub replaces the card, revokes the old NATS key on the servers, publishes the roster
   with the new identity key, and answers with that roster. Asked again (the answer was lost),
   it answers again.

Both travel as a request of the machine to ``_deployment``, on
``pi-xs.v1.to._deployment.from.<machine>``: every machine's credentials already let it publish on
``pi-xs.v1.to.*.from.<itself>`` and nowhere else, so the subject names the asking machine as the
deployment's servers vouch for it, with no new right (no machine is named ``_…``, so no gateway
serves that subject). The answer comes back on the machine's own inbox.

What is signed (:func:`signed_bytes`) starts with a context of its own, then binds the step, the
deployment key, the new card (whose first word is the machine's name) and the time the ask was
made (epoch ms): a signature made for one deployment, machine, card or step passes for no other,
and the hub refuses an ask outside its time window as stale, so a captured one cannot be played
back later.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pi_cross_session._internal.protocol.remote.envelope import SUBJECT_PREFIX, is_machine_name
from pi_cross_session._internal.protocol.remote.join import (
    MAX_JOIN_MESSAGE_BYTES,
    UNKNOWN_ANSWER,
    JoinError,
    Refusal,
    read_one_of,
)

#: Who a rotation ask is addressed to: not a machine name (those never start with ``_``).
DEPLOYMENT_TARGET: Final = "_deployment"
#: Where the hub hears every machine's rotation asks.
ROTATE_SUBJECTS: Final = f"{SUBJECT_PREFIX}.to.{DEPLOYMENT_TARGET}.from.*"
#: What a rotation ask's signature covers starts with this, so that no other signature made
#: with a machine's key (an envelope, a record) can pass for one.
ROTATE_CONTEXT: Final = b"pi-cross-session rotate v1\n"
#: The two steps of a rotation.
ROTATE: Final = "rotate"
CONFIRM: Final = "confirm"

Step = Literal["rotate", "confirm"]


def rotate_subject(machine: str) -> str:
    """Where ``machine`` sends its rotation asks."""
    if not is_machine_name(machine):
        raise JoinError("not a machine name")
    return f"{SUBJECT_PREFIX}.to.{DEPLOYMENT_TARGET}.from.{machine}"


def rotate_origin(subject: str) -> str | None:
    """The machine a rotation ask's subject names, or ``None`` when it names none."""
    head = f"{SUBJECT_PREFIX}.to.{DEPLOYMENT_TARGET}.from."
    if not subject.startswith(head):
        return None
    machine = subject[len(head) :]
    return machine if is_machine_name(machine) else None


def signed_bytes(step: Step, deployment: str, card: str, at: int) -> bytes:
    """What the machine signs: the step, the deployment key, the new card and the time, in
    their context (one per line: none of them holds a line break)."""
    lines = (step, f"deployment {deployment}", f"card {card}", f"at {at}")
    return ROTATE_CONTEXT + "\n".join(lines).encode("utf-8")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RotateAsk(_Strict):
    """One step of a rotation: the machine's new card, signed (base64) over
    :func:`signed_bytes` — by the current identity key to ``rotate``, by the new one to
    ``confirm``."""

    v: Literal[1] = 1
    ask: Step
    deployment: Annotated[str, Field(pattern=r"^A[A-Z2-7]{55}$")]
    card: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\r\n]+$")]
    at: Annotated[int, Field(ge=0)]
    signature: Annotated[str, Field(max_length=128)]

    @property
    def machine(self) -> str:
        """The machine the card names (its first word)."""
        words = self.card.split()
        return words[0] if words else ""

    @property
    def signed(self) -> bytes:
        return signed_bytes(self.ask, self.deployment, self.card, self.at)


class RotateAnswer(_Strict):
    """The hub took a step: the user JWT of the new NATS key and, once confirmed, the roster
    (base64 of its sealed bytes) that lists the machine with its new identity key."""

    v: Literal[1] = 1
    step: Step
    jwt: Annotated[str, Field(max_length=16_384)]
    roster: Annotated[str, Field(max_length=MAX_JOIN_MESSAGE_BYTES)] | None = None


def read_rotate_ask(data: bytes) -> RotateAsk:
    """A rotation ask as the hub reads it; :class:`JoinError` when it is none."""
    if len(data) > MAX_JOIN_MESSAGE_BYTES:
        raise JoinError("an ask over the size limit")
    try:
        return RotateAsk.model_validate_json(data)
    except ValidationError:
        raise JoinError("not a rotation ask") from None


def read_rotate_answer(data: bytes) -> RotateAnswer | Refusal:
    """The hub's answer as the machine reads it; :class:`JoinError` when it is neither."""
    models: tuple[type[RotateAnswer | Refusal], ...] = (RotateAnswer, Refusal)
    return read_one_of(data, models, what="the hub's answer", unknown=UNKNOWN_ANSWER)


__all__ = [
    "CONFIRM",
    "DEPLOYMENT_TARGET",
    "ROTATE",
    "ROTATE_CONTEXT",
    "ROTATE_SUBJECTS",
    "RotateAnswer",
    "RotateAsk",
    "Step",
    "read_rotate_answer",
    "read_rotate_ask",
    "rotate_origin",
    "rotate_subject",
    "signed_bytes",
]
