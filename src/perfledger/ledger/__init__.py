"""The experiments ledger: every analysed or recorded profile, registered in SQLite.

``perfledger analyze`` and ``perfledger record`` call :func:`register_profile` when a profile
is written; ``perfledger runs`` reads the ledger back as the baseline table. The ledger is
``.perfledger/ledger.db`` in the working directory unless ``--ledger PATH`` says otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from perfledger.errors import PerfledgerError
from perfledger.ledger.record import run_record
from perfledger.ledger.store import (
    LedgerCorrupt,
    LedgerUnavailable,
    RunRecord,
    connect,
    default_ledger_path,
    get_run,
    insert_run,
    list_runs,
    set_note,
)
from perfledger.profiledir import StoredProfile

NOT_REGISTERED: Final = -1

__all__ = [
    "NOT_REGISTERED",
    "LedgerCorrupt",
    "LedgerUnavailable",
    "RunRecord",
    "connect",
    "default_ledger_path",
    "get_run",
    "list_runs",
    "register_profile",
    "run_record",
    "set_note",
]


def register_profile(
    profile: Path | StoredProfile,
    *,
    ledger_path: Path | None = None,
    label: str | None = None,
    note: str | None = None,
) -> int:
    """Register a written profile in the ledger (its directory, or the profile as just
    written, whose documents need no reading again); returns the run id.

    A ledger that cannot be written (read-only folder, full disk, a profile it cannot read)
    costs a warning on stderr and returns :data:`NOT_REGISTERED`: the profile itself is
    already written and must not be lost to bookkeeping.

    Raises:
        PerfledgerError: ``ledger_path`` was given explicitly and is not a ledger (a corrupt
            or foreign file): the user named it, so the mistake is theirs to see.
    """
    path = ledger_path if ledger_path is not None else default_ledger_path()
    try:
        record = run_record(profile, label=label, note=note)
        with connect(path) as connection:
            return insert_run(connection, record)
    except LedgerCorrupt as error:
        if ledger_path is not None:
            raise
        _warn(f"run not registered: {error}")
    except LedgerUnavailable as error:
        _warn(f"run not registered: the ledger cannot be written ({error})")
    except PerfledgerError as error:
        _warn(f"run not registered: {error}")
    return NOT_REGISTERED


def _warn(message: str) -> None:
    print(f"perfledger: warning: {message}", file=sys.stderr)
