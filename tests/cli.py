"""The ``perfledger`` command run as users run it, in a child process."""

from __future__ import annotations

import contextlib
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
        cwd: the working folder; by default a new one, removed after the run, so that
            the run's ledger (``.perfledger/`` in the working folder) is its own.
        inherit_env: keep this process's environment (else only PATH and COLUMNS).
    """
    base = dict(os.environ) if inherit_env else {"PATH": "/usr/bin:/bin"}
    with contextlib.ExitStack() as stack:
        if cwd is None:
            cwd = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="perfledger-cli-")))
        return subprocess.run(
            [sys.executable, "-m", "perfledger", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**base, "COLUMNS": str(columns)},
            timeout=timeout,
        )
