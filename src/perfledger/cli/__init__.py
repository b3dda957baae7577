"""Subcommands of the ``perfledger`` command, one module each."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

# Written to a file or a pipe, tables keep this width instead of being cut at 80 columns.
UNATTENDED_WIDTH = 140


def terminal_console() -> Console:
    """The console every subcommand prints to."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=UNATTENDED_WIDTH)


def count_argument(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {value}")
    return value
