"""``python -m pi_cross_session`` is the ``pi-cross-session`` command."""

from pi_cross_session._internal.cli import main

raise SystemExit(main())
