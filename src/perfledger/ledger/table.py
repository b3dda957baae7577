"""The baseline table: label | step ms | Δ vs baseline | utilisation | note, and its exports.

``baseline_table`` is pure (runs in, rows out); the formatters lay the rows out as text cells,
Markdown or CSV. Δ is 100 x (step - baseline step) / baseline step, from the medians the ledger
holds.
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

from perfledger.errors import PerfledgerError
from perfledger.ledger.store import RunRecord

HEADERS: Final = ("id", "time", "label", "step ms", "Δ vs baseline", "utilisation", "note")
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
)
_RELATIVE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d|w)\s*$")
_UNIT_S: Final = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class BaselineRow:
    """One run of the table and its step time change against the baseline."""

    run: RunRecord
    delta_pct: float | None  # None for the baseline itself, or when a step time is unknown
    is_baseline: bool


def choose_baseline(runs: Sequence[RunRecord]) -> RunRecord | None:
    """The default baseline: the oldest run with a step time."""
    return next((r for r in runs if r.step_median_ms is not None), None)


def baseline_table(
    runs: Sequence[RunRecord], baseline: RunRecord | None
) -> tuple[BaselineRow, ...]:
    """Every run with its change of median step time against ``baseline``, in %."""
    base_ms = baseline.step_median_ms if baseline is not None else None
    rows = []
    for run in runs:
        is_baseline = baseline is not None and run.id == baseline.id
        delta = None
        if not is_baseline and base_ms and run.step_median_ms is not None:
            delta = 100.0 * (run.step_median_ms - base_ms) / base_ms
        rows.append(BaselineRow(run=run, delta_pct=delta, is_baseline=is_baseline))
    return tuple(rows)


def format_time(ns: int) -> str:
    """Local time of a registration, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def _delta(row: BaselineRow) -> str:
    if row.is_baseline:
        return "baseline"
    return "-" if row.delta_pct is None else f"{row.delta_pct:+.2f}%"


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
    )


def markdown(rows: Sequence[BaselineRow]) -> str:
    """A GitHub-flavoured Markdown table."""

    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()

    lines = [
        "| " + " | ".join(HEADERS) + " |",
        "|" + "|".join(["---:", "---", "---", "---:", "---:", "---:", "---"]) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in text_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


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
