"""The wire contract: frames, framing, codes, capabilities, registrations, paths and addressing.

The modules named in :data:`SANS_IO_MODULES` are pure: they never touch sockets, files or clocks, so
every rule of the contract can be tested by feeding values in and looking at what comes out.
"""

SANS_IO_MODULES = (
    "addressing",
    "bridge",
    "capabilities",
    "codec",
    "codes",
    "errors",
    "fairness",
    "frames",
    "limits",
    "paths",
    "pressure",
    "registration",
    "sanitize",
    "shape",
    "text",
)

__all__ = ["SANS_IO_MODULES"]
