"""The terminal view of a run comparison: diff.json's fields, formatted as rich tables.

The figures are the document's (:func:`perfledger.render.diff_json.diff_document`): the terminal
shows the same numbers as diff.json and diff.html because it reads the same fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfledger.render.shown import escaped, shown


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
            escaped(base["label"]),
            (" -> ", "bold"),
            escaped(current["label"]),
        )
    )
    for key in ("workload_warning", "quality_warning"):
        warning = document.get(key)
        if warning:
            console.print(shown(f"warning: {warning}", style="bold yellow"))
    note = (document.get("workload") or {}).get("batch_note")
    if note:
        console.print(shown(f"note: {note}", style="yellow"))
    console.print(shown(document["verdict"], style="bold"))
    width = console.width
    per_sample = document.get("per_sample")
    if per_sample:
        console.print(_per_sample_table(per_sample, width))
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
                Text(_short(escaped(row["name"]))),
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


def _per_sample_table(per_sample: Mapping[str, Any], width: int) -> Table:
    table = _table("per sample", ["", "base", "current", "change", ""], width)
    table.add_row(
        "samples per step",
        str(per_sample["base_batch_size"]),
        str(per_sample["current_batch_size"]),
        "",
        "",
    )
    for label, key, digits in (
        ("time per sample, ms", "time_ms", 4),
        ("samples per second", "throughput_samples_per_s", 1),
    ):
        figure = per_sample[key]
        table.add_row(
            label,
            _num(figure["base"], digits),
            _num(figure["current"], digits),
            _pct(figure["change_pct"]),
            _noise_cell(figure["within_noise"]),
        )
    return table


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
                f"{f['id']}: {escaped(f['title'])} ({_num(f['base_severity_ms'])} ms -> "
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
    return f"{finding['id']}: {escaped(finding['title'])} ({_num(finding['severity_ms'])} ms)"


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _pct(value: Any, sign: bool = True) -> str:
    return "-" if value is None else (f"{value:+.1f}%" if sign else f"{value:.1f}%")


def _mb(value: Any) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _unit(unit: str) -> str:
    return {"%": "%", "pp": " pp", "ms": " ms"}.get(unit, unit)
