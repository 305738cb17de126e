"""The wire's I/O drivers: sockets, files and processes, around the pure modules of
:mod:`pi_cross_session._internal.protocol`. Nothing outside this package in ``protocol`` does I/O (a
test
checks it by folder)."""
