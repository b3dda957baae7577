"""The ``perfledger`` command: one subcommand per module under :mod:`perfledger.cli`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from perfledger.errors import PerfledgerError
from perfledger.version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    from perfledger.cli import analyze, diff, query, record, runs, timeline

    parser = argparse.ArgumentParser(
        prog="perfledger",
        description="Where do the milliseconds of a training or inference step go?",
    )
    parser.add_argument("--version", action="version", version=f"perfledger {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (record, analyze, query, timeline, diff, runs):
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code: int = args.run(args)
    except PerfledgerError as error:
        print(f"perfledger: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("perfledger: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug of ours: one line, the traceback on request
        if os.environ.get("PERFLEDGER_DEBUG"):
            raise
        print(
            f"perfledger: internal error: {type(error).__name__}: {error} "
            "(set PERFLEDGER_DEBUG=1 to see where)",
            file=sys.stderr,
        )
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
