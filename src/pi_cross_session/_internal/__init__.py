"""The implementation. Nothing in here is public: its modules move and change without notice.

What a program may import is what :mod:`pi_cross_session` exports (the library, its errors) and
:mod:`pi_cross_session.sanitize`; ``docs/api.md`` lists exactly that. Inside, three layers are
imported in one direction only, and two fronts sit on top (``docs/architecture.md``):

* :mod:`~pi_cross_session._internal.protocol` — the wire contract (sans-IO core) and thin I/O;
* :mod:`~pi_cross_session._internal.security` — who may do what, and how much;
* :mod:`~pi_cross_session._internal.plugin` — the host extension and the session runtime;
* :mod:`~pi_cross_session._internal.api` (the library) and :mod:`~pi_cross_session._internal.cli`
  (the command line).
"""
