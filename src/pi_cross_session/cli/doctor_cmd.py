"""``pi-cross-session doctor``: what keeps sessions from seeing or reaching each other.

The findings come from :mod:`pi_cross_session.plugin.doctor`; this module only runs it and prints.
"""

from __future__ import annotations

import argparse
import json

import anyio

from pi_cross_session.cli.console import Console
from pi_cross_session.cli.exits import EXIT_LOCAL, EXIT_OK
from pi_cross_session.plugin import doctor


def run(args: argparse.Namespace, console: Console) -> int:
    """Diagnose and print the findings; exit 1 when something is broken."""
    del console  # the doctor prints its own findings (see _doctor)
    return anyio.run(_doctor, args)


async def _doctor(args: argparse.Namespace) -> int:
    findings = await doctor.diagnose()
    bad = any(f.severity is doctor.Severity.ERROR for f in findings)
    if args.json:
        data = [
            {"severity": f.severity, "subject": f.subject, "detail": f.detail, "fix": f.fix}
            for f in findings
        ]
        print(json.dumps({"findings": data, "healthy": not bad}, ensure_ascii=False, indent=2))
    else:
        for finding in findings:
            print(f"{finding.severity:<8}{finding.subject}: {finding.detail}")
            if finding.fix:
                print(f"{'':<8}fix: {finding.fix}")
    return EXIT_LOCAL if bad else EXIT_OK
