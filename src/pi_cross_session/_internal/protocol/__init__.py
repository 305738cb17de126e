"""The wire contract: frames, framing, codes, capabilities, registrations, paths and addressing.

Every module directly in this package is pure: it never touches sockets, files, processes or
clocks, so each rule of the contract can be tested by feeding values in and looking at what comes
out. The I/O drivers that carry those rules to sockets and files live in :mod:`.io`; a test checks
the split by folder (``tests/package/test_package.py``).
"""
