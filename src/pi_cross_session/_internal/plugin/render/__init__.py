"""Every text a model or a person reads, one module per surface; nothing is re-exported here.

Every peer-controlled string (a name, a summary, a cwd, a session id, a git branch, a receiver's
reply word or text) passes :mod:`~pi_cross_session._internal.protocol.sanitize` before it is shown:
a single-line field through :func:`~pi_cross_session._internal.protocol.sanitize.line` (escaped,
folded, cut), so a peer can neither drive the terminal nor forge extra lines, headers or
instructions in a listing, a report or a status display. A message body goes through
:func:`~pi_cross_session._internal.protocol.sanitize.block` and is fenced between two marker lines
that carry a nonce chosen after the text arrived
(:func:`~pi_cross_session._internal.plugin.render.peer_text.peer_message`), so no line of the
peer's can pass for one of ours. JSON for people and scripts is written with
:func:`~pi_cross_session._internal.protocol.sanitize.dumps`. The table of every sink and its rule is
in ``docs/security.md``.

The framing and the helpers that show a name, a word, a diagnostic or a message id live in
:mod:`.peer_text`, which every other module imports, so each kind of string has one rule:

* :mod:`.peer_text` — a peer's message as the model reads it, and the shared helpers;
* :mod:`.listings` — listings of the live sessions and how a peer is addressed;
* :mod:`.sending` — what a sender reads about a send or a status query;
* :mod:`.receiving` — this session's inbox to its own user (``inbox``, status, resume);
* :mod:`.remote_plane` — sends to other machines, the NATS connection, key rotation;
* :mod:`.host_tools` — the host extension's tools as the model meets them;
* :mod:`.host_commands` — the host extension's slash commands and settings warnings;
* :mod:`.host_status` — a host session's notices and ``/cross-session-status``;
* :mod:`.mcp_host` — the MCP host's instructions, tools, prompts and errors.

Callers import the module a text belongs to.
"""
