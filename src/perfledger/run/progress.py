"""What a long analysis shows while it runs: the import's progress bar, a status line naming
the phase that runs now, and the ranks done of a profile of several ranks.

Kept apart from the work: the pipeline and the rank tasks report to a :class:`Display`; this
module draws it with rich on a terminal (nothing on a pipe, so logs stay clean). Tests and
other front ends can pass their own display.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Final, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

# What the status line says while each phase runs.
PHASE_ANALYSIS: Final = "analysing: steps, time account, operators"
PHASE_MERGE: Final = "merging the ranks"
PHASE_ADVISOR: Final = "diagnosing: advisor rules"
PHASE_TABLES: Final = "writing: raw copies, tables, CSVs"

Report = Callable[[int, int], None]  # (done, total): bytes read, or ranks analysed


class Display(Protocol):
    """Where the progress of an analysis goes."""

    def importing(self, label: str) -> AbstractContextManager[Report]:
        """A progress bar of the import of ``label`` while the block runs."""
        ...

    def phases(self) -> AbstractContextManager[Callable[[str], None]]:
        """A status line while the block runs; the function names the phase starting now."""
        ...

    def ranks(self, description: str, total: int) -> AbstractContextManager[Report]:
        """A bar of the ranks analysed while the block runs."""
        ...


class ConsoleDisplay:
    """The display on a rich console: drawn on a terminal, silent on a pipe or a file."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextmanager
    def importing(self, label: str) -> Iterator[Report]:
        with Progress(
            TextColumn("[bold]importing[/] {task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        ) as bar:
            task = bar.add_task(label[:60], total=None)

            def report(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total or None)

            yield report

    @contextmanager
    def phases(self) -> Iterator[Callable[[str], None]]:
        with Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
            redirect_stderr=False,  # what goes to stderr meanwhile stays there (``2>file``)
        ) as bar:
            current: list[TaskID] = []

            def show(phase: str) -> None:
                for task in current:
                    bar.remove_task(task)
                current[:] = [bar.add_task(phase, total=None)]

            yield show

    @contextmanager
    def ranks(self, description: str, total: int) -> Iterator[Report]:
        with Progress(
            TextColumn("[bold]analysing ranks[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        ) as bar:
            task = bar.add_task(description, total=total)

            def report(done: int, count: int) -> None:
                bar.update(task, completed=done, total=count)

            yield report


class TaskReport:
    """The progress of one rank task run in this process, drawn on a display: the import's
    bar while it reads, then a status line that stays for the phases after it.

    Call :meth:`close` (or use it as a context manager) when the whole run is over.
    """

    def __init__(self, display: Display, label: str) -> None:
        self._display = display
        self._label = label
        self._stack = ExitStack()
        self._import: Report | None = None
        self._show: Callable[[str], None] | None = None

    def imported(self, done: int, total: int) -> None:
        """Bytes (or ranks) of the input read so far."""
        if self._show is not None:
            return
        if self._import is None:
            self._import = self._stack.enter_context(self._display.importing(self._label))
        self._import(done, total)

    def phase(self, name: str) -> None:
        """A phase starts: the import bar (if any) is gone, the status line names it."""
        if self._show is None:
            self._stack.close()
            self._stack = ExitStack()
            self._show = self._stack.enter_context(self._display.phases())
        self._show(name)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> TaskReport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
