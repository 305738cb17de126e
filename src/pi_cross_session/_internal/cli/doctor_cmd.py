"""``pi-cross-session doctor``: what keeps sessions from seeing or reaching each other.

The findings and their text come from :mod:`pi_cross_session._internal.plugin.doctor`; this module
only runs it and prints. Like every read-only command it creates nothing.
"""

from __future__ import annotations

import argparse

import anyio

from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.cli.exits import EXIT_LOCAL, EXIT_OK
from pi_cross_session._internal.plugin import doctor


def run(args: argparse.Namespace, console: Console) -> int:
    """Diagnose and print the findings; exit 1 when something is broken."""
    findings = anyio.run(doctor.diagnose)
    console.result(doctor.report_json(findings) if args.json else doctor.report_text(findings))
    return EXIT_LOCAL if doctor.is_broken(findings) else EXIT_OK
