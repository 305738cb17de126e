"""Deprecated: only :mod:`pi_cross_session.protocol.sanitize` is left here, as a shim for programs
written against 0.1.0. Import :mod:`pi_cross_session.sanitize` instead (``CHANGELOG.md``)."""
