"""Subcommands of the ``perfledger`` command, one module each."""

from __future__ import annotations

import sys

from rich.console import Console

# Written to a file or a pipe, tables keep this width instead of being cut at 80 columns.
UNATTENDED_WIDTH = 140


def terminal_console() -> Console:
    """The console every subcommand prints to."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=UNATTENDED_WIDTH)
