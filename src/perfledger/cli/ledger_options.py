"""The experiments ledger's options of ``analyze`` and ``record``: ``--ledger PATH``,
``--label``, ``--note`` and ``--no-ledger``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfledger.ledger import NOT_REGISTERED, register_profile
from perfledger.profiledir import StoredProfile


def add_ledger_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--ledger PATH``, ``--label``, ``--note`` and ``--no-ledger`` to a subcommand."""
    group = parser.add_argument_group("experiments ledger")
    group.add_argument(
        "--ledger",
        type=Path,
        metavar="PATH",
        help="ledger file to register the run in (default: $PERFLEDGER_LEDGER, else "
        ".perfledger/ledger.db at the root of the current git repository, else here)",
    )
    if not any("--label" in action.option_strings for action in parser._actions):
        group.add_argument("--label", help="name of the run in the ledger (default: the profile's)")
    group.add_argument("--note", help="a note kept with the run (what changed, and why)")
    group.add_argument(
        "--no-ledger", action="store_true", help="do not register the run in the ledger"
    )


def register_from_args(profile: Path | StoredProfile, args: argparse.Namespace) -> int:
    """:func:`register_profile` with the options of :func:`add_ledger_arguments`."""
    if getattr(args, "no_ledger", False):
        return NOT_REGISTERED
    ledger: Any = getattr(args, "ledger", None)
    return register_profile(
        profile,
        ledger_path=Path(ledger) if ledger is not None else None,
        label=getattr(args, "label", None),
        note=getattr(args, "note", None),
    )
