"""Where the experiments ledger is: one per project, found the way git finds its repository.

In order: ``--ledger PATH``; the environment variable :data:`LEDGER_ENV`; the ``.perfledger``
folder at the root of the git repository holding the current folder (the nearest folder
upwards with a ``.git`` entry, so that runs launched from any subfolder of a project land in
one ledger); outside any repository, ``.perfledger`` in the current folder.

Ledgers written before the ledger moved to the project's root stay where they are, in the
``.perfledger`` folder of the folder a run was launched from: :func:`folder_ledgers` finds
those between the current folder and the root, so that ``perfledger runs`` can point at them
(and ``perfledger runs import`` copy their runs into the project's ledger).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

LEDGER_ENV: Final = "PERFLEDGER_LEDGER"
LEDGER_DIR: Final = ".perfledger"
LEDGER_FILE: Final = "ledger.db"

BY_OPTION: Final = "--ledger"
BY_ENVIRONMENT: Final = LEDGER_ENV
BY_GIT_ROOT: Final = "git root"
BY_WORKING_FOLDER: Final = "working folder"


@dataclass(frozen=True)
class LedgerLocation:
    """The ledger a command uses, and how it was found.

    Attributes:
        path: the ledger file.
        how: :data:`BY_OPTION`, :data:`BY_ENVIRONMENT`, :data:`BY_GIT_ROOT` or
            :data:`BY_WORKING_FOLDER`.
        root: the git repository's root holding the current folder, None outside one.
    """

    path: Path
    how: str
    root: Path | None

    @property
    def explicit(self) -> bool:
        """The user named the file (option or environment): its faults are theirs to see."""
        return self.how in (BY_OPTION, BY_ENVIRONMENT)


def git_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` with a ``.git`` entry (a folder, or the file
    of a worktree or submodule); None outside any repository."""
    folder = start.resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def find_ledger(
    explicit: Path | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LedgerLocation:
    """The ledger file for a command run in ``cwd`` (the current folder by default)."""
    cwd = cwd if cwd is not None else Path.cwd()
    environ = environ if environ is not None else os.environ
    root = git_root(cwd)
    if explicit is not None:
        return LedgerLocation(explicit, BY_OPTION, root)
    named = environ.get(LEDGER_ENV, "").strip()
    if named:
        return LedgerLocation(cwd / Path(named).expanduser(), BY_ENVIRONMENT, root)
    if root is not None:
        return LedgerLocation(root / LEDGER_DIR / LEDGER_FILE, BY_GIT_ROOT, root)
    return LedgerLocation(cwd / LEDGER_DIR / LEDGER_FILE, BY_WORKING_FOLDER, None)


def folder_ledgers(location: LedgerLocation, cwd: Path | None = None) -> list[Path]:
    """Older per-folder ledgers: ``.perfledger/ledger.db`` files in the current folder and the
    folders above it, up to the project's root, other than ``location``'s own."""
    if location.root is None:
        return []
    folder = (cwd if cwd is not None else Path.cwd()).resolve()
    found = []
    for candidate in (folder, *folder.parents):
        ledger = candidate / LEDGER_DIR / LEDGER_FILE
        if ledger.is_file() and ledger.resolve() != location.path.resolve():
            found.append(ledger)
        if candidate == location.root:
            break
    return found
