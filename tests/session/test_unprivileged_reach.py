"""The skip condition of the tests that run processes as an unprivileged uid.

Run as root from a checkout in a private dir (0700, as ``mktemp -d`` makes), ``nobody`` cannot
reach the checkout's venv, package or scripts, and those tests once failed with "No module named
pi_cross_session". Their fixture now asks a probe run as that uid first
(:func:`tests.session.conftest.unrunnable_by`) and skips with its reason. Here the probe itself:
a module and a file in a dir that uid cannot enter are reported, with the error the uid met; the
same dir opened is reported runnable.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tests.session.conftest import drop_privileges, unrunnable_by


def test_the_probe_names_what_the_unprivileged_uid_cannot_reach_and_passes_once_it_can() -> None:
    prefix, _uid, _gid = drop_privileges()
    parent = Path(tempfile.mkdtemp(prefix="pi-reach-"))
    private = parent / "checkout"
    try:
        parent.chmod(0o755)
        private.mkdir()
        (private / "probe_target.py").write_text("")
        script = private / "script.py"
        script.write_text("")
        env = {**os.environ, "PYTHONPATH": str(private), "PYTHONDONTWRITEBYTECODE": "1"}
        # What mktemp -d makes, for root; for another user, a dir closed to its own owner.
        private.chmod(0o700 if prefix else 0o000)

        missing = unrunnable_by(prefix, env, module="probe_target", files=())
        assert missing == "ModuleNotFoundError: No module named 'probe_target'"
        unreadable = unrunnable_by(prefix, env, module="json", files=(script,))
        assert unreadable is not None
        assert unreadable.startswith("PermissionError: [Errno 13] Permission denied"), unreadable

        private.chmod(0o755)
        assert unrunnable_by(prefix, env, module="probe_target", files=(script,)) is None
    finally:
        if private.exists():
            private.chmod(0o755)
        shutil.rmtree(parent, ignore_errors=True)
