"""The baseline table: Δ against the baseline, its text, Markdown and CSV forms, --since."""

from __future__ import annotations

import csv
import io
from datetime import datetime

import pytest

from perfledger.errors import PerfledgerError
from perfledger.ledger.store import RunRecord
from perfledger.ledger.table import (
    baseline_table,
    choose_baseline,
    csv_text,
    markdown,
    parse_since,
    text_cells,
)

NS = 1_000_000_000


def record(run_id: int, step_ms: float | None, note: str | None = None, **kw: object) -> RunRecord:
    return RunRecord(
        id=run_id,
        label=f"run{run_id}",
        registered_ns=1_800_000_000 * NS + run_id * NS,
        step_median_ms=step_ms,
        note=note,
        **kw,  # type: ignore[arg-type]
    )


RUNS = [
    record(1, None, note="no steps"),
    record(2, 12.5, utilization_pct=61.25),
    record(3, 10.0, note="bucket_cap_mb=50 | fused adam"),
    record(4, 13.75),
]


def test_default_baseline_is_oldest_with_a_step_time() -> None:
    assert choose_baseline(RUNS) == RUNS[1]
    assert choose_baseline(RUNS[:1]) is None


def test_delta_is_exact() -> None:
    rows = baseline_table(RUNS, RUNS[1])
    assert [r.is_baseline for r in rows] == [False, True, False, False]
    assert rows[0].delta_pct is None
    assert rows[1].delta_pct is None
    assert rows[2].delta_pct == 100 * (10.0 - 12.5) / 12.5  # -20 %
    assert rows[3].delta_pct == 100 * (13.75 - 12.5) / 12.5  # +10 %
    against_third = baseline_table(RUNS, RUNS[2])
    assert against_third[1].delta_pct == 25.0
    assert against_third[3].delta_pct == 37.5


def test_text_cells() -> None:
    rows = baseline_table(RUNS, RUNS[1])
    assert text_cells(rows[1])[2:6] == ("run2", "12.500", "baseline", "61.2%")
    assert text_cells(rows[2])[3:5] == ("10.000", "-20.00%")
    assert text_cells(rows[3])[4] == "+10.00%"
    assert text_cells(rows[0])[3:5] == ("-", "-")


def test_markdown_escapes_pipes() -> None:
    text = markdown(baseline_table(RUNS, RUNS[1]))
    lines = text.splitlines()
    assert lines[0] == (
        "| id | time | label | step ms | Δ vs baseline | utilisation | note | workload |"
    )
    assert len(lines) == 2 + len(RUNS)
    assert lines[4].endswith("| -20.00% | - | bucket_cap_mb=50 \\| fused adam | trace |")
    # every row has the header's column count once escaped pipes are set aside
    assert {line.replace("\\|", "").count("|") for line in lines} == {9}


def test_csv_plain_numbers() -> None:
    rows = list(csv.DictReader(io.StringIO(csv_text(baseline_table(RUNS, RUNS[1])))))
    assert [r["delta_pct"] for r in rows] == ["", "0", "-20.0", "10.0"]
    assert rows[1]["step_ms"] == "12.5"
    assert rows[1]["utilization_pct"] == "61.25"
    assert rows[2]["note"] == "bucket_cap_mb=50 | fused adam"
    assert datetime.fromisoformat(rows[0]["time"]).timestamp() == 1_800_000_001


def test_since_ages_and_dates() -> None:
    now = 1_800_000_000 * NS
    assert parse_since("3d", now) == now - 3 * 86400 * NS
    assert parse_since("12h", now) == now - 12 * 3600 * NS
    assert parse_since("30m", now) == now - 30 * 60 * NS
    assert parse_since("1.5w", now) == now - int(1.5 * 7 * 86400) * NS
    local = datetime(2026, 11, 29, 8, 0).astimezone()
    assert parse_since("2026-11-29T08:00", now) == int(local.timestamp()) * NS
    with pytest.raises(PerfledgerError, match="--since 'yesterday'"):
        parse_since("yesterday", now)
