"""The version-control state of a folder: the git commit, branch and dirtiness a run was
made from (the recorder's metadata and the ledger's records keep it)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def git_revision(directory: Path) -> dict[str, Any] | None:
    """Commit, branch and dirtiness of the git repository holding ``directory``, if any."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(directory), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(status),
        "root": git("rev-parse", "--show-toplevel"),
    }
