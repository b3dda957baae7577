"""``perfledger diff BASE CURRENT``: what changed between two runs, and a CI regression gate.

BASE and CURRENT are profile directories or raw traces (analysed in memory, nothing written).
Writes diff.json and diff.html into ``-o DIR`` (the current folder by default) and prints the
comparison. With ``--fail-on`` thresholds the exit code is 1 when one is crossed beyond
run-to-run noise; diff.json is written either way.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from rich.text import Text

from perfledger.analysis import diff as diffing
from perfledger.cli import terminal_console
from perfledger.cli.diff_gates import parse_threshold
from perfledger.errors import EXIT_FAILED_CHECK, EXIT_OK, PerfledgerError
from perfledger.files import check_replaceable
from perfledger.render.diff_html import is_own_page
from perfledger.render.diff_json import diff_document, is_diff_document, write_diff_json
from perfledger.render.diff_terminal import print_diff
from perfledger.run.diff_inputs import load_run

DIFF_JSON: Final = "diff.json"
DIFF_HTML: Final = "diff.html"


def add_parser(subparsers: Any) -> None:
    """Register the ``diff`` subcommand."""
    parser = subparsers.add_parser(
        "diff",
        help="compare two runs (profile directories or traces); gate regressions in CI",
        description=(
            "Compare CURRENT against BASE: step time with a noise-aware verdict, the time "
            "account, idle gaps, operators and op classes, copies, communication, findings. "
            "Writes diff.json and diff.html. Exit code 1 when a --fail-on threshold is "
            "crossed beyond run-to-run noise, 2 for bad input."
        ),
    )
    parser.add_argument("base", type=Path, metavar="BASE", help="profile directory or trace")
    parser.add_argument("current", type=Path, metavar="CURRENT", help="profile directory or trace")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help=(
            "folder for diff.json and diff.html (default: the current folder; files of "
            "those names that perfledger did not write are never replaced)"
        ),
    )
    parser.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="EXPR",
        help=(
            "exit 1 when a change crosses a threshold beyond noise, e.g. 'step_time>+5%%', "
            "'throughput<-3%%', 'idle>+2pp', 'idle_sync>+1ms' (repeatable)"
        ),
    )
    parser.add_argument(
        "--ignore-noise",
        action="store_true",
        help="let a threshold fail even when the change is within run-to-run noise",
    )
    parser.add_argument(
        "--noise-floor",
        type=float,
        default=diffing.DiffOptions.noise_floor_pct,
        metavar="PCT",
        help="changes below this %% are always within noise (default: %(default)s)",
    )
    parser.add_argument(
        "--top", type=int, default=diffing.DiffOptions.top_movers, help="rows per op table"
    )
    parser.add_argument("--no-html", action="store_true", help="do not write diff.html")
    parser.add_argument(
        "--per-sample",
        action="store_true",
        help="also compare step time per sample (step time over the batch size), and give "
        "the verdict on it: for runs of different batch sizes",
    )
    parser.add_argument(
        "--batch-size",
        type=_batch_sizes,
        metavar="BASE,CURRENT",
        help="samples per step of each run, when the trace does not tell (implies --per-sample)",
    )
    parser.set_defaults(run=run)


def _batch_sizes(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected two batch sizes >= 1, BASE,CURRENT (e.g. 64,32)"
        )
    return values[0], values[1]


def _with_batch(run: diffing.RunTables, given: int | None) -> diffing.RunTables:
    """The run with its batch size from --batch-size, else the trace's; an error when
    neither knows it."""
    if given is not None:
        return replace(run, batch=diffing.BatchSize(given, "--batch-size", 0, 0))
    if run.batch is None:
        raise PerfledgerError(
            f"{run.path}: the batch size is unknown (no model layer with recorded input "
            "shapes): give it with --batch-size BASE,CURRENT"
        )
    return run


def run(args: argparse.Namespace) -> int:
    """Compare the runs, write diff.json (and diff.html), print, and apply the gate."""
    thresholds = [parse_threshold(e) for e in args.fail_on]
    if args.noise_floor < 0 or args.top < 1:
        raise PerfledgerError("--noise-floor must be >= 0 and --top >= 1")
    out: Path = args.output
    # a diff.json or diff.html of the user's is never replaced: checked before any work
    hint = "choose another folder with -o (nothing was written)"
    check_replaceable(out / DIFF_JSON, is_diff_document, hint)
    if not args.no_html:
        check_replaceable(out / DIFF_HTML, is_own_page, hint)
    console = terminal_console()
    base = load_run(args.base)
    current = load_run(args.current)
    per_sample = args.per_sample or args.batch_size is not None
    if per_sample:
        given: tuple[int | None, int | None] = args.batch_size or (None, None)
        base, current = _with_batch(base, given[0]), _with_batch(current, given[1])
    options = diffing.DiffOptions(noise_floor_pct=args.noise_floor, top_movers=args.top)
    result = diffing.diff_runs(base, current, options, per_sample=per_sample)
    checks = diffing.evaluate_gates(result, thresholds, ignore_noise=args.ignore_noise)
    document = diff_document(result, checks)
    out.mkdir(parents=True, exist_ok=True)
    write_diff_json(out / DIFF_JSON, document)
    written = [out / DIFF_JSON]
    if not args.no_html:
        from perfledger.render.diff_html import write_diff_html

        write_diff_html(out / DIFF_HTML, document)
        written.append(out / DIFF_HTML)
    print_diff(console, document)
    for path in written:
        console.print(Text(f"wrote {path}"))
    unknown = [c for c in checks if c.status == diffing.UNKNOWN]
    if unknown:
        names = ", ".join(c.threshold.expression for c in unknown)
        raise PerfledgerError(f"cannot evaluate --fail-on {names}: the runs lack that figure")
    return EXIT_FAILED_CHECK if any(c.crossed for c in checks) else EXIT_OK
