"""The experiments ledger: every analysed or recorded profile, registered in SQLite.

``perfledger analyze`` and ``perfledger record`` call :func:`register_profile` when a profile
is written; ``perfledger runs`` reads the ledger back as the baseline table. There is one ledger per
project: ``.perfledger/ledger.db`` at the root of the git repository holding the working
directory (the working directory itself outside a repository), unless ``--ledger PATH`` or the
``PERFLEDGER_LEDGER`` environment variable names another file (:mod:`perfledger.ledger.locate`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from perfledger.errors import PerfledgerError
from perfledger.ledger.locate import LEDGER_ENV, LedgerLocation, find_ledger, folder_ledgers
from perfledger.ledger.record import profile_workload, run_record
from perfledger.ledger.store import (
    LedgerCorrupt,
    LedgerUnavailable,
    RunRecord,
    connect,
    default_ledger_path,
    get_run,
    import_runs,
    insert_run,
    list_runs,
    set_note,
)
from perfledger.profiledir import StoredProfile

NOT_REGISTERED: Final = -1

__all__ = [
    "LEDGER_ENV",
    "NOT_REGISTERED",
    "LedgerCorrupt",
    "LedgerLocation",
    "LedgerUnavailable",
    "RunRecord",
    "connect",
    "default_ledger_path",
    "find_ledger",
    "folder_ledgers",
    "get_run",
    "import_runs",
    "list_runs",
    "profile_workload",
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
        PerfledgerError: the ledger was named (``ledger_path``, or the ``PERFLEDGER_LEDGER``
            environment variable) and is not a ledger (a corrupt or foreign file): the user
            named it, so the mistake is theirs to see.
    """
    location = find_ledger(ledger_path)
    try:
        record = run_record(profile, label=label, note=note)
        with connect(location.path) as connection:
            return insert_run(connection, record)
    except LedgerCorrupt as error:
        if location.explicit:
            raise
        _warn(f"run not registered: {error}")
    except LedgerUnavailable as error:
        _warn(f"run not registered: the ledger cannot be written ({error})")
    except PerfledgerError as error:
        _warn(f"run not registered: {error}")
    return NOT_REGISTERED


def _warn(message: str) -> None:
    print(f"perfledger: warning: {message}", file=sys.stderr)
