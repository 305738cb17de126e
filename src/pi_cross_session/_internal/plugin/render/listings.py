"""What a listing of the live sessions reads: ``list_pi``, ``/peers`` and ``pi-cross-session
peers``, with the lines a listing adds when it could not read or check every session or when the
gateway keeps remote sessions without a proxy, what an empty one says (where it looked, and how to
look elsewhere), and the address a peer is named by."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pi_cross_session._internal.plugin.capped import Capped
from pi_cross_session._internal.plugin.render.peer_text import shown_name
from pi_cross_session._internal.protocol import sanitize
from pi_cross_session._internal.protocol.limits import (
    DISPLAY_CWD_CODE_POINTS,
    MAX_LISTED_REGISTRATIONS,
)
from pi_cross_session._internal.protocol.registration import PublicPeer, Registration, display_line

NO_PEERS: Final = "No other live sessions."


def no_peers(agent_dir: str) -> str:
    """What an empty listing says (``peers``, ``list_pi``, ``/peers``, and any other surface that
    lists): that it found no other live session, in which agent dir it looked (quoted as JSON and
    escaped, so a trailing slash or space shows), and how to look in another one. Sessions see
    each other only within one agent dir string (spec §1.1)."""
    where = sanitize.dumps(agent_dir[:DISPLAY_CWD_CODE_POINTS])
    return (
        f"No other live sessions in the agent dir {where}. A session that uses another agent "
        "dir is not seen from here: set PI_CODING_AGENT_DIR to that dir (exactly as that "
        "session has it) to list it."
    )


INBOX_UNAVAILABLE: Final = "This session: cross-session inbox unavailable"


def listing(
    me: PublicPeer | None,
    peers: Sequence[PublicPeer],
    *,
    unread: int = 0,
    unchecked: int = 0,
    capped: Capped | None = None,
    agent_dir: str | None = None,
    closed: str | None = None,
) -> str:
    """The text of ``list_pi`` and ``/peers``: this session first (and ``closed``, the line
    saying its inbox is closed, while it is), then one line per peer, or :func:`no_peers` of
    ``agent_dir``, then a line for the registrations the listing left unread, for the sessions
    it could not check, and for the remote sessions the gateway keeps no proxy for, if any."""
    first = f"This session: {display_line(me)}" if me is not None else INBOX_UNAVAILABLE
    lines = [first] if closed is None else [first, closed]
    lines.extend(peer_lines(peers, unread=unread, unchecked=unchecked, agent_dir=agent_dir))
    if capped is not None:
        lines.append(capped_line(capped))
    return "\n".join(lines)


#: Remote sessions named at most in a line about the proxy cap.
_CAPPED_NAMED: Final = 5


def capped_line(capped: Capped) -> str:
    """The remote sessions the local gateway keeps no proxy for because of its cap."""
    count = len(capped.names)
    named = ", ".join(shown_name(name) for name in capped.names[:_CAPPED_NAMED])
    more = f" and {count - _CAPPED_NAMED} more" if count > _CAPPED_NAMED else ""
    return (
        f"{count} session{'s' if count != 1 else ''} of other machines "
        f"{'have' if count != 1 else 'has'} no proxy here, so cannot be listed or messaged from "
        f"this machine until a slot frees: its gateway keeps at most {capped.cap} proxies, "
        f"{capped.share} guaranteed to each machine it trusts, and their machine has its share "
        f"({named}{more})."
    )


def capped_hint(target: str, capped: Capped) -> str:
    """What a send by name adds when no live session matched while the gateway keeps some
    remote sessions without a proxy: the target may be one of them."""
    if target in capped.names:
        return (
            f"{shown_name(target)} is a session of another machine that this machine's gateway "
            f"keeps no proxy for: it keeps at most {capped.cap} proxies, {capped.share} "
            "guaranteed to each machine it trusts, and that machine has its share; it cannot be "
            "reached from here until a slot frees."
        )
    return capped_line(capped)


def address(peer: PublicPeer | Registration) -> str:
    """How to name a peer unambiguously: ``name [ref]`` (from its public view or registration)."""
    return f"{shown_name(peer.name)} [{peer.ref}]"


def runtime_ids(peers: Sequence[PublicPeer]) -> str | None:
    """The full runtime id of each peer, which ``peer_goal`` bind takes (the listing shows only
    the ref); ``None`` without peers."""
    if not peers:
        return None
    ids = "; ".join(f"{address(peer)} = {peer.instance_id}" for peer in peers)
    return f"Runtime ids (for peer_goal bind): {ids}"


def peer_lines(
    peers: Sequence[PublicPeer],
    *,
    unread: int = 0,
    unchecked: int = 0,
    agent_dir: str | None = None,
) -> list[str]:
    """One display line per live peer, or a line saying there is none (:func:`no_peers` when
    the ``agent_dir`` looked in is given; never when sessions went unchecked); then the
    :func:`unread_line` and the :func:`unchecked_line`, if they apply."""
    lines = [display_line(peer) for peer in peers]
    if not lines and not unchecked:
        lines = [NO_PEERS if agent_dir is None else no_peers(agent_dir)]
    note = unread_line(unread)
    if note is not None:
        lines.append(note)
    if unchecked:
        lines.append(unchecked_line(unchecked))
    return lines


def unread_line(unread: int) -> str | None:
    """What a listing that left registrations unread must say: a live session may be among them.

    ``None`` when it read every one.
    """
    if unread <= 0:
        return None
    return (
        f"{unread} more registration{'s were' if unread != 1 else ' was'} left unread: a listing "
        f"reads only the first {MAX_LISTED_REGISTRATIONS} in the peers dir, so a live session "
        "among the rest is not shown. `pi-cross-session doctor` says what fills the peers dir."
    )


def unchecked_line(unchecked: int) -> str:
    """A listing could not look at every session: say so, rather than "no peers"."""
    return (
        f"{unchecked} session(s) could not be checked: this process ran out of file descriptors "
        "(or buffers, or memory) while listing; the list is incomplete, try again shortly."
    )


__all__ = [
    "INBOX_UNAVAILABLE",
    "NO_PEERS",
    "address",
    "capped_hint",
    "capped_line",
    "listing",
    "no_peers",
    "peer_lines",
    "runtime_ids",
    "unchecked_line",
    "unread_line",
]
