"""Who may speak across machines, and how much (docs/remote.md): machine keys and signatures,
the allow-list and the ordered checks on every envelope, replay protection, per-machine bounds and
the local identities of remote senders. Pure: no clock (``now`` is an argument), no files, no I/O.
"""
