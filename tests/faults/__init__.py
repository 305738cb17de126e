"""Fault injection: real files, sockets and processes failing under a running session."""
