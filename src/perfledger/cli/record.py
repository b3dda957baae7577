"""``perfledger record [options] -- COMMAND...``: profile a program without changing its code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfledger.cli import terminal_console
from perfledger.cli.ledger_options import add_ledger_arguments, register_from_args
from perfledger.errors import PerfledgerError
from perfledger.record.inprocess import LEVELS
from perfledger.record.launcher import RecordOptions, record


def add_parser(subparsers: Any) -> None:
    """Register the ``record`` subcommand."""
    defaults = RecordOptions()
    parser = subparsers.add_parser(
        "record",
        help="run a PyTorch program under the profiler and analyse it",
        description=(
            "Run COMMAND (python script.py, python -m module, torchrun ...) with profiling "
            "activated in every Python worker that imports torch, then analyse the traces into a "
            "profile directory and print the step table. Steps come from Optimizer.step, else "
            "DataLoader batches, or perfledger.mark_step(). The exit code is the program's."
        ),
        usage="%(prog)s [options] -- COMMAND [ARGS...]",
    )
    parser.add_argument(
        "-o", "--output", type=Path, help="profile directory (default: prof_YYYYmmdd_HHMMSS)"
    )
    parser.add_argument("--label", help="a label for this run, kept in meta.json (e.g. 'bs=64')")
    parser.add_argument(
        "--skip",
        type=int,
        default=defaults.skip,
        metavar="N",
        help=f"steps run before profiling starts; the last one warms the profiler up "
        f"(default {defaults.skip})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=defaults.steps,
        metavar="M",
        help=f"steps profiled after the skipped ones, 0 for all (default {defaults.steps})",
    )
    parser.add_argument(
        "--flush-steps",
        type=int,
        default=defaults.flush_steps,
        metavar="K",
        help=f"write the trace out every K recorded steps, so that a program killed meanwhile "
        f"keeps the steps already written; 0: once, when the window ends (default "
        f"{defaults.flush_steps})",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="follow each recorded step by an unprofiled step and a warm-up step, so that the "
        "profiler overhead compares each recorded step with the next one (robust to a machine "
        "whose load changes); the trace's span then covers unrecorded steps too",
    )
    parser.add_argument(
        "--level",
        choices=LEVELS,
        default=defaults.level,
        help="light: device tasks, runtime calls and annotations; default: + CPU operators with "
        "shapes and FLOPs; full: + Python stacks and memory (default: %(default)s)",
    )
    parser.add_argument(
        "--host-interval",
        type=float,
        default=defaults.host_interval_s * 1000,
        metavar="MS",
        help="host counter sampling period in milliseconds (default %(default)g)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing profile")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    add_ledger_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Record the program; return its exit code."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    options = RecordOptions(
        output=args.output,
        label=args.label,
        skip=args.skip,
        steps=args.steps,
        level=args.level,
        host_interval_s=args.host_interval / 1000.0,
        force=args.force,
        flush_steps=args.flush_steps,
        interleave=args.interleave,
    )
    result = record(command, options, console=terminal_console())
    if result.stored is not None:
        register_from_args(result.stored, args)
    return result.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m perfledger.cli.record [options] -- COMMAND``: the command on its own."""
    parser = argparse.ArgumentParser(prog="perfledger")
    add_parser(parser.add_subparsers(dest="command_name", required=True))
    args = parser.parse_args(["record", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except PerfledgerError as error:
        print(f"perfledger: error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
