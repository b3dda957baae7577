"""The baseline table: label | step ms | Δ vs baseline | utilisation | note | workload, and its
exports.

``baseline_table`` is pure (runs in, rows out); the formatters lay the rows out as text cells,
Markdown or CSV. Δ is 100 x (step - baseline step) / baseline step, from the medians the ledger
holds, and only between runs of the same workload
(:func:`perfledger.analysis.diff.workload.same_workload`): every workload has its own
baseline, the oldest run of it with a step time, unless a baseline is named.
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from perfledger.analysis.diff.workload import Workload, program_of, same_workload
from perfledger.errors import PerfledgerError
from perfledger.ledger.store import RunRecord

HEADERS: Final = (
    "id",
    "time",
    "label",
    "step ms",
    "Δ vs baseline",
    "utilisation",
    "note",
    "workload",
)
CSV_HEADERS: Final = (
    "id",
    "time",
    "label",
    "step_ms",
    "step_p90_ms",
    "delta_pct",
    "utilization_pct",
    "device",
    "git_commit",
    "top_finding",
    "note",
    "workload",
    "baseline_id",
    "batch_size",
    "delta_per_sample_pct",
)
_RELATIVE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d|w)\s*$")
_UNIT_S: Final = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class BaselineRow:
    """One run of the table and its step time change against its baseline.

    Attributes:
        delta_pct: None for a baseline itself, when a step time is unknown, or when no run
            of the workload has one.
        workload: the name of the run's workload (program and device; ``#2``, ``#3`` for
            other workloads of the same name).
        baseline_id: the run Δ compares against (None: none).
        other_workload: the row is compared, on request, with a baseline of another workload.
        per_sample_delta_pct: Δ of the step time per sample, when the run's batch size and
            its baseline's are known and differ (the step Δ then compares unequal work).
    """

    run: RunRecord
    delta_pct: float | None
    is_baseline: bool
    workload: str = ""
    baseline_id: int | None = None
    other_workload: bool = False
    per_sample_delta_pct: float | None = None


def choose_baseline(runs: Sequence[RunRecord]) -> RunRecord | None:
    """The oldest run with a step time (the default baseline of the runs of one workload)."""
    return next((r for r in runs if r.step_median_ms is not None), None)


def workload_of(run: RunRecord) -> Workload:
    """The run's workload; rows registered before the ledger kept one have the recorded
    command as typed (record runs) and the device."""
    if run.workload is not None:
        return Workload.from_dict(run.workload)
    program = program_of(run.command) if run.kind == "record" else None
    return Workload(program=program, device=run.device, program_as_typed=program is not None)


def workload_groups(
    runs: Sequence[RunRecord], first: RunRecord | None = None
) -> tuple[list[int], list[Workload]]:
    """The workload of every run, as an index into the workloads found (in order of first
    appearance, ``first``'s workload first when given). A run joins the first workload whose
    first run it matches: runs are compared with that run, never chained."""
    founders: list[Workload] = [workload_of(first)] if first is not None else []
    groups = []
    for run in runs:
        workload = workload_of(run)
        index = next((i for i, f in enumerate(founders) if same_workload(f, workload)), None)
        if index is None:
            founders.append(workload)
            index = len(founders) - 1
        groups.append(index)
    return groups, founders


def _names(founders: Sequence[Workload]) -> list[str]:
    names: list[str] = []
    for founder in founders:
        name = founder.describe()
        repeats = sum(1 for n in names if n == name or n.startswith(f"{name} #"))
        names.append(f"{name} #{repeats + 1}" if repeats else name)
    return names


def baseline_table(
    runs: Sequence[RunRecord],
    baseline: RunRecord | None = None,
    *,
    across_workloads: bool = False,
) -> tuple[BaselineRow, ...]:
    """Every run with its change of median step time against its workload's baseline, in %.

    Args:
        runs: the runs, oldest first.
        baseline: the named baseline of its workload (other workloads keep their own), or
            None for the oldest run with a step time of each workload.
        across_workloads: compare every run with ``baseline``, whatever its workload (the
            rows of other workloads say so).
    """
    groups, founders = workload_groups(runs, baseline)
    names = _names(founders)
    chosen: dict[int, RunRecord | None] = {}
    for index in range(len(founders)):
        members = [run for run, group in zip(runs, groups, strict=True) if group == index]
        chosen[index] = choose_baseline(members)
    if baseline is not None:
        chosen[0] = baseline
    rows = []
    for run, group in zip(runs, groups, strict=True):
        other = across_workloads and baseline is not None and group != 0
        reference = baseline if other else chosen[group]
        is_baseline = reference is not None and run.id == reference.id
        base_ms = reference.step_median_ms if reference is not None else None
        delta = per_sample = None
        if not is_baseline and base_ms and run.step_median_ms is not None:
            delta = 100.0 * (run.step_median_ms - base_ms) / base_ms
            base_batch = reference.batch_size if reference is not None else None
            if run.batch_size and base_batch and run.batch_size != base_batch:
                base_per_sample = base_ms / base_batch
                per_sample = (
                    100.0 * (run.step_median_ms / run.batch_size - base_per_sample)
                ) / base_per_sample
        rows.append(
            BaselineRow(
                run=run,
                delta_pct=delta,
                is_baseline=is_baseline,
                workload=names[group],
                baseline_id=reference.id if reference is not None else None,
                other_workload=other,
                per_sample_delta_pct=per_sample,
            )
        )
    return tuple(rows)


def format_time(ns: int) -> str:
    """Local time of a registration, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def _delta(row: BaselineRow) -> str:
    if row.is_baseline:
        return "baseline"
    if row.delta_pct is None:
        return "-"
    delta = f"{row.delta_pct:+.2f}%"
    if row.per_sample_delta_pct is not None:
        # another batch size: the step compares unequal work, the sample does not
        delta += f" ({row.per_sample_delta_pct:+.2f}% per sample)"
    # compared on request with another workload's baseline: the cell itself says so
    return f"{delta} (other workload)" if row.other_workload else delta


def text_cells(row: BaselineRow) -> tuple[str, ...]:
    """The cells of one row as the terminal and Markdown show them."""
    run = row.run
    return (
        str(run.id),
        format_time(run.registered_ns),
        run.label,
        "-" if run.step_median_ms is None else f"{run.step_median_ms:.3f}",
        _delta(row),
        "-" if run.utilization_pct is None else f"{run.utilization_pct:.1f}%",
        run.note or "",
        row.workload,
    )


def markdown(rows: Sequence[BaselineRow]) -> str:
    """A GitHub-flavoured Markdown table."""

    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()

    lines = [
        "| " + " | ".join(HEADERS) + " |",
        "|" + "|".join(["---:", "---", "---", "---:", "---:", "---:", "---", "---"]) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in text_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def is_table_export(data: bytes) -> bool:
    """Whether ``data`` is a table :func:`markdown` or :func:`csv_text` wrote (its first line
    is one of their header lines)."""
    first = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    return first in (markdown(()).split("\n", 1)[0], csv_text(()).split("\n", 1)[0])


def csv_text(rows: Sequence[BaselineRow]) -> str:
    """CSV with plain numbers (ms, %), one row per run."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADERS)
    for row in rows:
        run = row.run
        writer.writerow(
            [
                run.id,
                datetime.fromtimestamp(run.registered_ns / 1e9).astimezone().isoformat("T"),
                run.label,
                _plain(run.step_median_ms),
                _plain(run.step_p90_ms),
                "0" if row.is_baseline else _plain(row.delta_pct, 4),
                _plain(run.utilization_pct),
                run.device or "",
                run.git_commit or "",
                run.top_finding or "",
                run.note or "",
                row.workload,
                "" if row.baseline_id is None else row.baseline_id,
                "" if run.batch_size is None else run.batch_size,
                _plain(row.per_sample_delta_pct, 4),
            ]
        )
    return out.getvalue()


def _plain(value: float | None, decimals: int = 3) -> str:
    return "" if value is None else str(round(float(value), decimals))


def parse_since(text: str, now_ns: int | None = None) -> int:
    """``--since``: a date (2026-11-29), a date and time (2026-11-29T08:00), or an age (3d,
    12h, 30m, 2w); returns epoch ns."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    match = _RELATIVE.match(text)
    if match:
        return now_ns - int(float(match.group(1)) * _UNIT_S[match.group(2)] * 1e9)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise PerfledgerError(
            f"--since {text!r}: expected a date (2026-11-29), a date and time "
            f"(2026-11-29T08:00) or an age (30m, 12h, 3d, 2w)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as the table prints it
    return int(moment.timestamp() * 1e9)
