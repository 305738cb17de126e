"""The remote plane's wire (docs/remote.md): machine names, NATS subjects and KV keys, envelopes.

Pure, like the rest of :mod:`pi_cross_session._internal.protocol`: bytes in, models out. Signing and
trust live in :mod:`pi_cross_session._internal.security.remote`; the gateway that moves envelopes
over NATS in
:mod:`pi_cross_session._internal.plugin.remote`.
"""
