"""Fixtures for the goal tests that run a real pi-python harness: the host folder's own.

``pi_home`` is autouse: every test here gets its own ``PI_HOME``, so no harness reads or writes
``~/.pi-python``. ``harnesses``, ``model``, ``peer`` and ``workdir`` are the harness tests'.
"""

from tests.host.conftest import harnesses, model, peer, pi_home, workdir  # noqa: F401
