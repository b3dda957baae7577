"""``perfledger analyze TRACE... [-o DIR]``: import traces and write a profile directory."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from perfledger.cli import count_argument, terminal_console
from perfledger.cli.advisor_options import add_advisor_arguments, config_from_args
from perfledger.cli.ledger_options import add_ledger_arguments, register_from_args
from perfledger.duck import duck
from perfledger.heap import keep_freed_heap
from perfledger.memory import holding_freed_memory
from perfledger.profiledir.layout import default_profile_name
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.vcs import revision_beside


def add_parser(subparsers: Any) -> None:
    """Register the ``analyze`` subcommand."""
    parser = subparsers.add_parser(
        "analyze",
        help="analyse existing traces (Kineto JSON, Ascend torch_npu / msprof output)",
        description=(
            "Import traces and write a profile directory: the time account of every step, "
            "op summaries and statistics, transfers, idle gaps, timeline and report."
        ),
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        type=Path,
        metavar="TRACE",
        help="a trace file (.json, .json.gz), a folder of rank traces, or Ascend output",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="profile directory to write (default: prof_<date>_<time> in the current folder)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the output directory if it exists"
    )
    parser.add_argument(
        "--step-mark",
        metavar="NAME",
        help=(
            "take the host events named NAME (a record_function or annotation repeated once "
            "per iteration) as the steps, instead of the trace's ProfilerStep or Ascend step "
            "marks; without step marks the whole device span is one window"
        ),
    )
    ranks = parser.add_argument_group("many ranks, large traces")
    ranks.add_argument(
        "--workers",
        type=count_argument,
        metavar="N",
        help=(
            "analyse the ranks in N local processes, one rank per task; a single trace of "
            "64 MB or more is decoded by N processes (default: one per core; 0: everything "
            "in this process)"
        ),
    )
    ranks.add_argument(
        "--dask",
        metavar="ADDRESS",
        help=(
            "run the rank tasks on the Dask cluster whose scheduler is at ADDRESS "
            "(tcp://host:8786), or 'local' for a LocalCluster of --workers processes; "
            "needs the [cluster] extra"
        ),
    )
    add_ledger_arguments(parser)
    add_advisor_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Analyse the traces; the exit code is 0 on success."""
    # freed memory kept in glibc's one heap for the next phase (the command line set the heap
    # up before the process started a thread; again here for a caller that did not)
    keep_freed_heap()
    out = args.output or Path(default_profile_name())
    config = config_from_args(args)
    # DuckDB's database opened first: opening it hands the heap's free memory back
    duck().close()
    # the ledger's record reads the folder's git state: read beside the analysis
    here = _working_folder() if not getattr(args, "no_ledger", False) else None
    with revision_beside(here) if here is not None else contextlib.nullcontext():
        # the freed memory handed back at the end, unless the process ends with the command
        with holding_freed_memory(release=not getattr(args, "process_ends", False)):
            result = build_profile(
                args.inputs,
                out,
                force=args.force,
                console=terminal_console(),
                advisor_config=config,
                execution=Execution(workers=args.workers, dask=args.dask),
                step_mark=args.step_mark,
            )
        register_from_args(result.stored, args)
    return 0


def _working_folder() -> Path | None:
    """The current folder; None where it is gone (removed while the shell stood in it)."""
    try:
        return Path.cwd()
    except OSError:
        return None
