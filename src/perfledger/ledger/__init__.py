"""The experiments ledger: every analysed or recorded profile, registered in SQLite.

``perfledger analyze`` and ``perfledger record`` call :func:`register_profile` when a profile
is written; ``perfledger runs`` reads the ledger back as the baseline table. The ledger is
``.perfledger/ledger.db`` in the working directory unless ``--ledger PATH`` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

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

NOT_REGISTERED: Final = -1

__all__ = [
    "NOT_REGISTERED",
    "LedgerCorrupt",
    "LedgerUnavailable",
    "RunRecord",
    "add_ledger_arguments",
    "connect",
    "default_ledger_path",
    "get_run",
    "list_runs",
    "register_from_args",
    "register_profile",
    "run_record",
    "set_note",
]


def register_profile(
    profile_dir: Path,
    *,
    ledger_path: Path | None = None,
    label: str | None = None,
    note: str | None = None,
) -> int:
    """Register a written profile directory in the ledger; returns the run id.

    A ledger that cannot be written (read-only folder, full disk, a profile it cannot read)
    costs a warning on stderr and returns :data:`NOT_REGISTERED`: the profile itself is
    already written and must not be lost to bookkeeping.

    Raises:
        PerfledgerError: ``ledger_path`` was given explicitly and is not a ledger (a corrupt
            or foreign file): the user named it, so the mistake is theirs to see.
    """
    path = ledger_path if ledger_path is not None else default_ledger_path()
    try:
        record = run_record(Path(profile_dir), label=label, note=note)
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


def add_ledger_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--ledger PATH``, ``--label``, ``--note`` and ``--no-ledger`` to a subcommand."""
    group = parser.add_argument_group("experiments ledger")
    group.add_argument(
        "--ledger",
        type=Path,
        metavar="PATH",
        help="ledger file to register the run in (default: .perfledger/ledger.db here)",
    )
    if not any("--label" in action.option_strings for action in parser._actions):
        group.add_argument("--label", help="name of the run in the ledger (default: the profile's)")
    group.add_argument("--note", help="a note kept with the run (what changed, and why)")
    group.add_argument(
        "--no-ledger", action="store_true", help="do not register the run in the ledger"
    )


def register_from_args(profile_dir: Path, args: argparse.Namespace) -> int:
    """:func:`register_profile` with the options of :func:`add_ledger_arguments`."""
    if getattr(args, "no_ledger", False):
        return NOT_REGISTERED
    ledger: Any = getattr(args, "ledger", None)
    return register_profile(
        profile_dir,
        ledger_path=Path(ledger) if ledger is not None else None,
        label=getattr(args, "label", None),
        note=getattr(args, "note", None),
    )
