"""``perfledger diff BASE CURRENT``: what changed between two runs, and a CI regression gate.

BASE and CURRENT are profile directories or raw traces (analysed in memory, nothing written).
Writes diff.json and diff.html into ``-o DIR`` (the current folder by default) and prints the
comparison. With ``--fail-on`` thresholds the exit code is 1 when one is crossed beyond
run-to-run noise; diff.json is written either way.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfledger.analysis import diff as diffing
from perfledger.cli import terminal_console
from perfledger.errors import EXIT_BAD_INPUT, EXIT_FAILED_CHECK, EXIT_OK, PerfledgerError
from perfledger.files import write_json
from perfledger.model.accounts import GAPS_SCHEMA
from perfledger.model.tables import (
    COMMUNICATION_SCHEMA,
    HOST_OP_SUMMARY_SCHEMA,
    OP_SUMMARY_SCHEMA,
    TRANSFERS_SCHEMA,
)
from perfledger.profiledir import is_profile, load_profile
from perfledger.profiledir.layout import (
    COMMUNICATION_CSV,
    GAPS_TABLE,
    OP_SUMMARY_CSV,
    STEP_TRACE_CSV,
    TRANSFERS_CSV,
)

if TYPE_CHECKING:
    from perfledger.model.profile import ProfileAnalysis

DIFF_JSON: Final = "diff.json"
DIFF_HTML: Final = "diff.html"
_OP_SUMMARY_COLUMNS: Final = ("step", "kind", "name", "host_op", "dur_ns", "self_ns")


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
        help="folder for diff.json and diff.html (default: the current folder)",
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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Compare the runs, write diff.json (and diff.html), print, and apply the gate."""
    thresholds = [diffing.parse_threshold(e) for e in args.fail_on]
    if args.noise_floor < 0 or args.top < 1:
        raise PerfledgerError("--noise-floor must be >= 0 and --top >= 1")
    console = terminal_console()
    base = load_run(args.base)
    current = load_run(args.current)
    options = diffing.DiffOptions(noise_floor_pct=args.noise_floor, top_movers=args.top)
    result = diffing.diff_runs(base, current, options)
    checks = diffing.evaluate_gates(result, thresholds, ignore_noise=args.ignore_noise)
    document = diffing.diff_document(result, checks)
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    write_diff_json(document, out / DIFF_JSON)
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


def write_diff_json(document: Mapping[str, Any], path: Path) -> None:
    """Write diff.json atomically and deterministically."""
    write_json(path, document)


# --------------------------------------------------------------------------------------------
# Reading a run


def load_run(path: Path) -> diffing.RunTables:
    """The tables of a profile directory, or of traces analysed in memory."""
    if not path.exists():
        raise PerfledgerError(f"{path}: no such profile directory or trace")
    if is_profile(path):
        return read_profile_run(path)
    return analyze_run(path)


def analyze_run(path: Path) -> diffing.RunTables:
    """Import and analyse traces in memory (nothing is written)."""
    from perfledger.analysis.advisor import advise
    from perfledger.analysis.profile import analyze_traces
    from perfledger.sources import load_traces

    traces = load_traces([path])
    if not traces:
        raise PerfledgerError(f"{path}: no trace found")
    analysis = analyze_traces(traces)
    findings = [f.to_dict() for f in advise(analysis)]
    return run_tables(analysis, label=path.name, path=str(path), findings=findings)


def run_tables(
    analysis: ProfileAnalysis,
    *,
    label: str,
    path: str,
    findings: Sequence[Mapping[str, Any]] = (),
) -> diffing.RunTables:
    """The compared tables of an in-memory analysis (the same tables a profile's files hold)."""
    from perfledger.analysis.profile import step_trace

    return diffing.RunTables(
        label=label,
        path=path,
        source_kind=analysis.source_kind,
        step_count=analysis.step_count,
        step_trace=step_trace(analysis),
        gaps=analysis.gaps,
        op_summary=analysis.op_summary,
        transfers=analysis.transfers,
        communication=analysis.communication,
        findings=tuple(_plain_finding(f) for f in findings),
    )


def _plain_finding(finding: Any) -> Mapping[str, Any]:
    if isinstance(finding, Mapping):
        return finding
    return {
        key: getattr(finding, key, None) for key in ("id", "title", "severity_ms", "severity_pct")
    }


def read_profile_run(path: Path) -> diffing.RunTables:
    """The compared tables of a profile directory (its CSVs, gaps table and summary.json)."""
    profile = load_profile(path)
    header = profile.csv_header(OP_SUMMARY_CSV)
    op_schema = HOST_OP_SUMMARY_SCHEMA if "self_ns" in header else OP_SUMMARY_SCHEMA
    op_columns = [c for c in _OP_SUMMARY_COLUMNS if c in op_schema.names]
    gaps = profile.read_table(GAPS_TABLE, columns=["dur_ns", "cause", "step"])
    assert gaps is not None
    return diffing.RunTables(
        label=profile.label,
        path=str(path),
        source_kind=profile.source_kind,
        step_count=profile.step_count,
        step_trace=profile.read_csv(STEP_TRACE_CSV),
        gaps=gaps.cast(pa.schema([GAPS_SCHEMA.field(n) for n in gaps.column_names])),
        op_summary=profile.read_csv(
            OP_SUMMARY_CSV, pa.schema([op_schema.field(c) for c in op_columns]), op_columns
        ),
        transfers=profile.read_csv(TRANSFERS_CSV, TRANSFERS_SCHEMA),
        communication=profile.read_csv(COMMUNICATION_CSV, COMMUNICATION_SCHEMA),
        findings=tuple(profile.findings),
    )


# --------------------------------------------------------------------------------------------
# The terminal view: fields of diff.json, formatted


def _num(value: Any, decimals: int = 3, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


def _noise_cell(within: Any) -> Text:
    if within is None:
        return Text("-")
    return Text("within noise", style="dim") if within else Text("beyond noise", style="bold")


def _table(title: str, columns: Sequence[str], width: int) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=False,
    )
    for index, name in enumerate(columns):
        table.add_column(name, justify="left" if index == 0 else "right", overflow="fold")
    return table


def print_diff(console: Console, document: Mapping[str, Any]) -> None:
    """Print diff.json's figures: headline, step time, account, gaps, classes, ops, findings."""
    base, current = document["base"], document["current"]
    console.print(
        Text.assemble(
            ("perfledger diff ", "bold"),
            str(base["label"]),
            (" -> ", "bold"),
            str(current["label"]),
        )
    )
    console.print(Text(str(document["verdict"]), style="bold"))
    width = console.width
    step = document["step_time_ms"]
    steps = _table("step time, ms", ["", "base", "current", "change"], width)
    steps.add_row("median", _num(step["base"]), _num(step["current"]), _pct(step["change_pct"]))
    steps.add_row(
        "p90", _num(step["base_p90"]), _num(step["current_p90"]), _pct(step["p90_change_pct"])
    )
    steps.add_row(
        "spread",
        _pct(step["base_spread_pct"], sign=False),
        _pct(step["current_spread_pct"], sign=False),
        "",
    )
    steps.add_row(
        "steps",
        str(step["base_distribution"]["steps"]),
        str(step["current_distribution"]["steps"]),
        "",
    )
    console.print(steps)
    if document["categories"]:
        account = _table(
            "time account per step (mean ms, share of the step)",
            ["category", "base ms", "current ms", "change", "base %", "current %", "pp", ""],
            width,
        )
        for name, c in document["categories"].items():
            account.add_row(
                name,
                _num(c["base_ms"]),
                _num(c["current_ms"]),
                _pct(c["change_pct"]),
                _num(c["base_pct"], 2),
                _num(c["current_pct"], 2),
                _num(c["change_pp"], 2, sign=True),
                _noise_cell(c["within_noise_pp"]),
            )
        console.print(account)
    gaps = document["gaps"]
    if gaps["count_per_step"]["base"] or gaps["count_per_step"]["current"]:
        console.print(_gap_table(gaps, width))
    if document["op_classes"]:
        classes = _table(
            "op classes per step",
            ["class", "base ms", "current ms", "change ms", "base %", "current %", "pp"],
            width,
        )
        for row in document["op_classes"]:
            classes.add_row(
                row["class"],
                _num(row["base_ms"]),
                _num(row["current_ms"]),
                _num(row["change_ms"], sign=True),
                _num(row["base_share_pct"], 2),
                _num(row["current_share_pct"], 2),
                _num(row["change_pp"], 2, sign=True),
            )
        console.print(classes)
    ops = document["ops"]
    for key, title in (
        ("movers_by_time", "top op movers by time per step"),
        ("movers_by_count", "top op movers by count per step"),
        ("new", "new ops"),
        ("vanished", "vanished ops"),
    ):
        rows = ops[key]
        if not rows:
            continue
        table = _table(
            title, ["op", "class", "base ms", "current ms", "change ms", "count change"], width
        )
        for row in rows:
            table.add_row(
                Text(_short(str(row["name"]))),
                row["class"],
                _num(row["base_ms"], 4),
                _num(row["current_ms"], 4),
                _num(row["change_ms"], 4, sign=True),
                _num(row["change_count"], 2, sign=True),
            )
        console.print(table)
    if document["transfers"]:
        transfers = _table(
            "memory copies per step", ["direction", "base ms", "current ms", "MB/step"], width
        )
        for t in document["transfers"]:
            transfers.add_row(
                t["direction"],
                _num(t["time_ms"]["base"]),
                _num(t["time_ms"]["current"]),
                f"{_mb(t['bytes']['base'])} -> {_mb(t['bytes']['current'])}",
            )
        console.print(transfers)
    comm = document["communication"]
    if comm["total_ms"]["base"] is not None:
        table = _table("communication per step, ms", ["", "base", "current", "change"], width)
        for key in ("total_ms", "exposed_ms", "overlapped_ms"):
            figure = comm[key]
            table.add_row(
                key.removesuffix("_ms"),
                _num(figure["base"]),
                _num(figure["current"]),
                _pct(figure["change_pct"]),
            )
        console.print(table)
    _print_findings(console, document["findings"])
    for check in document["checks"]:
        style = {"crossed": "bold red", "within_noise": "yellow"}.get(check["status"], "green")
        label = {
            "crossed": "FAILED",
            "within_noise": "within noise",
            "ok": "ok",
            "unknown": "unknown",
        }[check["status"]]
        console.print(
            Text.assemble(
                (f"{label:>12} ", style),
                f"{check['threshold']}: change {_num(check['value'], 2, sign=True)}"
                f"{_unit(check['unit'])} (noise ±{_num(check['noise'], 2)}{_unit(check['unit'])})",
            )
        )


def _gap_table(gaps: Mapping[str, Any], width: int) -> Table:
    gap_table = _table("idle gaps", ["", "base", "current", "change"], width)
    for key, label in (
        ("median_us", "median gap, µs"),
        ("mean_us", "mean gap, µs"),
        ("p90_us", "p90 gap, µs"),
        ("count_per_step", "gaps per step"),
        ("idle_ms_per_step", "idle ms per step"),
    ):
        figure = gaps[key]
        gap_table.add_row(
            label, _num(figure["base"]), _num(figure["current"]), _pct(figure["change_pct"])
        )
    return gap_table


def _print_findings(console: Console, findings: Mapping[str, Any]) -> None:
    lines = [
        *(Text.assemble(("  resolved ", "green"), _finding_text(f)) for f in findings["resolved"]),
        *(Text.assemble(("       new ", "red"), _finding_text(f)) for f in findings["new"]),
        *(
            Text.assemble(
                ("   changed ", "yellow"),
                f"{f['id']}: {f['title']} ({_num(f['base_severity_ms'])} ms -> "
                f"{_num(f['current_severity_ms'])} ms)",
            )
            for f in findings["changed"]
        ),
    ]
    if lines:
        console.print(Text("findings", style="bold"))
        for line in lines:
            console.print(line)


def _finding_text(finding: Mapping[str, Any]) -> str:
    return f"{finding['id']}: {finding['title']} ({_num(finding['severity_ms'])} ms)"


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _pct(value: Any, sign: bool = True) -> str:
    return "-" if value is None else (f"{value:+.1f}%" if sign else f"{value:.1f}%")


def _mb(value: Any) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _unit(unit: str) -> str:
    return {"%": "%", "pp": " pp", "ms": " ms"}.get(unit, unit)


__all__ = ["EXIT_BAD_INPUT", "add_parser", "load_run", "print_diff", "run"]
