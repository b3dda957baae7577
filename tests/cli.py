"""The ``perfledger`` command run as users run it, in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def perfledger(
    *args: str | Path,
    cwd: Path | None = None,
    inherit_env: bool = False,
    columns: int = 160,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """``python -m perfledger ARGS``: output captured, a terminal ``columns`` wide.

    Args:
        cwd: the working folder; a new one by default, so that the run's ledger
            (``.perfledger/`` in the working folder) is its own.
        inherit_env: keep this process's environment (else only PATH and COLUMNS).
    """
    base = dict(os.environ) if inherit_env else {"PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "perfledger", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or tempfile.mkdtemp(prefix="perfledger-cli-"),
        env={**base, "COLUMNS": str(columns)},
        timeout=timeout,
    )
