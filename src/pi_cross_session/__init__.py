"""pi-cross-session: authenticated local messaging between agent sessions on one machine.

The package has three layers, imported in one direction only:

* :mod:`pi_cross_session.protocol` — the wire contract (sans-IO core) and thin I/O around it;
* :mod:`pi_cross_session.security` — who may do what, and how much;
* :mod:`pi_cross_session.plugin` — the host extension and the session runtime.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
