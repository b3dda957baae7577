"""``perfledger runs``: the baseline table of the experiments ledger, notes and the trend page.

perfledger runs [--baseline ID [--across-workloads]] [--since WHEN] [--format table|markdown|csv]
                [-o FILE]
perfledger runs note ID "what changed"
perfledger runs trend [-o trend.html] [--since WHEN]
perfledger runs import OLD_LEDGER

The ledger is the project's (:func:`perfledger.ledger.find_ledger`); Δ compares runs of one
workload only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfledger import ledger
from perfledger.cli import terminal_console
from perfledger.errors import EXIT_OK, PerfledgerError
from perfledger.files import check_replaceable, write_text
from perfledger.ledger import table as baseline
from perfledger.render.shown import escaped_lines, shown

FORMATS: Final = ("table", "markdown", "csv")
TREND_HTML: Final = "trend.html"
# what to do when the output file is someone else's (it is never replaced)
_OTHER_FILE: Final = "choose another name with -o (nothing was written)"


def _ledger_option(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: given before or after the sub-subcommand, the value is kept, never reset
    parser.add_argument(
        "--ledger",
        type=Path,
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="ledger file (default: $PERFLEDGER_LEDGER, else .perfledger/ledger.db at the "
        "root of the current git repository, else in the current folder)",
    )


def _list_options(parser: argparse.ArgumentParser) -> None:
    _ledger_option(parser)
    parser.add_argument(
        "--baseline",
        type=int,
        metavar="ID",
        default=argparse.SUPPRESS,
        help="run the Δ column of its workload compares against (default: the oldest run "
        "listed of each workload)",
    )
    parser.add_argument(
        "--across-workloads",
        action="store_true",
        default=argparse.SUPPRESS,
        help="with --baseline: compare every run with it, runs of other workloads too",
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        default=argparse.SUPPRESS,
        help="only runs registered since a date (2026-11-29), a time or an age (3d, 12h)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=argparse.SUPPRESS,
        help="table (terminal, the default), markdown or csv",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="write the table to FILE instead of the terminal (format from --format, or "
        "from the extension .md / .csv); a FILE perfledger did not write is never replaced",
    )


def add_parser(subparsers: Any) -> None:
    """Register the ``runs`` subcommand and its ``list``, ``note`` and ``trend`` actions."""
    parser = subparsers.add_parser(
        "runs",
        help="the experiments ledger: baseline table, notes, trend page",
        description=(
            "Every analysed or recorded profile is registered in the ledger. Without an "
            "action, print the baseline table: label | step ms | Δ vs baseline | "
            "utilisation | note."
        ),
    )
    _list_options(parser)
    actions = parser.add_subparsers(dest="runs_action", metavar="ACTION")
    listing = actions.add_parser("list", help="print or export the baseline table (default)")
    _list_options(listing)
    note = actions.add_parser("note", help="set the note of a run")
    _ledger_option(note)
    note.add_argument("id", type=int, metavar="ID", help="run id (first column of the table)")
    note.add_argument("text", metavar="TEXT", help="the note; an empty string clears it")
    trend = actions.add_parser("trend", help="write an HTML page of step time across runs")
    _ledger_option(trend)
    trend.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"page to write (default: {TREND_HTML}; a file perfledger did not write is never "
        "replaced)",
    )
    trend.add_argument("--since", metavar="WHEN", default=argparse.SUPPRESS)
    copy = actions.add_parser(
        "import",
        help="copy the runs of another ledger (an older per-folder one) into this one",
    )
    _ledger_option(copy)
    copy.add_argument("source", type=Path, metavar="OLD_LEDGER", help="the ledger to copy from")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; exit code 0 on success."""
    action = getattr(args, "runs_action", None) or "list"
    location = ledger.find_ledger(getattr(args, "ledger", None))
    path = location.path
    try:
        if action == "note":
            return _note(path, args.id, args.text)
        if action == "import":
            return _import(path, args.source)
        _point_at_folder_ledgers(location)
        if action == "trend":
            return _trend(path, args)
        return _list(path, args)
    except ledger.LedgerUnavailable as error:
        # e.g. --ledger or PERFLEDGER_LEDGER naming a folder, or a file the user cannot read
        raise PerfledgerError(f"cannot open the ledger {error}") from error


def _point_at_folder_ledgers(location: ledger.LedgerLocation) -> None:
    """Say where the ledgers of single folders written before the project's ledger are."""
    if location.explicit:
        return
    for older in ledger.folder_ledgers(location):
        print(
            f"perfledger: note: {older} holds runs of this project registered before its "
            f"ledger moved to {location.path}: read it with --ledger {older}, or copy its "
            f"runs with: perfledger runs import {older}",
            file=sys.stderr,
        )


def _import(path: Path, source: Path) -> int:
    if not source.is_file():
        raise PerfledgerError(f"{source}: no such ledger")
    if source.resolve() == path.resolve():
        raise PerfledgerError(f"{source}: this is the ledger the runs would be copied into")
    with ledger.connect(source, read_only=True) as connection:
        runs = ledger.list_runs(connection)
    with ledger.connect(path) as connection:
        copied, skipped = ledger.import_runs(connection, runs)
    already = f", {skipped} already there" if skipped else ""
    print(f"{path}: {copied} runs copied from {source}{already} ({source} is left as it was)")
    return EXIT_OK


def _since(args: argparse.Namespace) -> int | None:
    since = getattr(args, "since", None)
    return baseline.parse_since(since) if since else None


def _rows(path: Path, args: argparse.Namespace) -> tuple[baseline.BaselineRow, ...]:
    with ledger.connect(path, create=False) as connection:
        runs = ledger.list_runs(connection, since_ns=_since(args))
        baseline_id = getattr(args, "baseline", None)
        across = bool(getattr(args, "across_workloads", False))
        chosen = None
        if baseline_id is None:
            if across:
                raise PerfledgerError("--across-workloads compares with --baseline ID: name one")
        else:
            chosen = ledger.get_run(connection, baseline_id)
            if chosen is None:
                raise PerfledgerError(f"{path}: no run with id {baseline_id}")
            if chosen.step_median_ms is None:
                raise PerfledgerError(f"run {baseline_id} has no step time to compare against")
    return baseline.baseline_table(runs, chosen, across_workloads=across)


def _list(path: Path, args: argparse.Namespace) -> int:
    rows = _rows(path, args)
    output: Path | None = getattr(args, "output", None)
    fmt: str | None = getattr(args, "format", None)
    if fmt is None and output is not None:
        fmt = {".md": "markdown", ".csv": "csv"}.get(output.suffix.lower(), "markdown")
    fmt = fmt or "table"
    if fmt == "table":
        if output is not None:
            raise PerfledgerError("-o writes markdown or csv: choose --format markdown or csv")
        _print_table(terminal_console(), rows, path)
        return EXIT_OK
    text = baseline.markdown(rows) if fmt == "markdown" else baseline.csv_text(rows)
    if output is None:
        print(escaped_lines(text), end="")
    else:
        check_replaceable(output, baseline.is_table_export, _OTHER_FILE)
        _write_text(output, text)
        print(f"wrote {output}")
    return EXIT_OK


def _print_table(console: Console, rows: tuple[baseline.BaselineRow, ...], path: Path) -> None:
    if not rows:
        console.print(Text(f"no run in {path}"))
        return
    table = Table(title=f"runs in {path}", title_justify="left", box=box.SIMPLE_HEAD)
    for index, header in enumerate(baseline.HEADERS):
        right = index in (0, 3, 4, 5)
        table.add_column(header, justify="right" if right else "left", overflow="fold")
    for row in rows:
        cells = [shown(c) for c in baseline.text_cells(row)]
        if row.is_baseline:
            cells[4].stylize("bold")
        table.add_row(*cells)
    console.print(table)
    if len({row.workload for row in rows}) > 1:
        console.print(
            Text(
                "Δ compares each run with the baseline of its own workload (program, device, "
                "op types); --baseline ID --across-workloads compares every run with one run"
            )
        )


def _write_text(path: Path, text: str) -> None:
    try:
        write_text(path, text)
    except OSError as error:
        raise PerfledgerError(f"{path}: cannot write ({error})") from error


def _note(path: Path, run_id: int, text: str) -> int:
    with ledger.connect(path, create=False) as connection:
        if not ledger.set_note(connection, run_id, text):
            raise PerfledgerError(f"{path}: no run with id {run_id}")
    print(f"run {run_id}: note {'cleared' if not text else 'saved'}")
    return EXIT_OK


def _trend(path: Path, args: argparse.Namespace) -> int:
    from perfledger.render.diff_html import is_own_page, write_trend_html

    with ledger.connect(path, create=False) as connection:
        runs = ledger.list_runs(connection, since_ns=_since(args))
    if not runs:
        raise PerfledgerError(f"{path}: no run to draw")
    output: Path = getattr(args, "output", None) or Path(TREND_HTML)
    rows = baseline.baseline_table(runs)
    documents = [
        {
            **row.run.as_dict(),
            "workload": row.workload,
            "baseline_id": row.baseline_id,
            "time": baseline.format_time(row.run.registered_ns),
            "delta_pct": None if row.delta_pct is None else round(row.delta_pct, 2),
            "is_baseline": row.is_baseline,
        }
        for row in rows
    ]
    check_replaceable(output, is_own_page, _OTHER_FILE)
    write_trend_html(output, documents, title=f"{len(runs)} runs · {path}")
    print(f"wrote {output}")
    return EXIT_OK
