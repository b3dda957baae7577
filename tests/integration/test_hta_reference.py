"""Whole-span accounting of the real Kineto traces against HTA 0.6.1's temporal breakdown.

Where the definitions agree, the figures must agree within 0.5% of the span (they are in fact
equal to the microsecond on most traces). Where they differ (docs/accounting.md, "Agreement with
HTA"), our figures are pinned here so that a change is seen.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

import pytest

from perfledger.analysis.profile import analyze_rank
from perfledger.model.accounts import WindowAccount
from perfledger.sources import load_traces
from tests.paths import data_file


@dataclass(frozen=True)
class Hta:
    span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float


def hta_rows(name: str) -> dict[int, Hta]:
    path = data_file(f"reference/hta-0.6.1/{name}/temporal_breakdown.csv")
    with path.open() as f:
        return {
            int(r["rank"]): Hta(
                float(r["kernel_time(us)"]),
                float(r["idle_time(us)"]),
                float(r["compute_time(us)"]),
                float(r["non_compute_time(us)"]),
            )
            for r in csv.DictReader(f)
        }


def span_rows(relative: str) -> dict[int, WindowAccount]:
    (trace,) = load_traces([data_file(f"kineto/{relative}")])
    analysis = analyze_rank(trace)
    rows = [w for w in analysis.accounting.windows if w.step == -1]
    for row in rows:
        row.self_check()
    return {row.rank: row for row in rows}


SAME_DEFINITION = [
    ("v100_rank1_ddp", "v100_rank1_ddp.json.gz"),
    ("a100_rank3_control", "a100_rank3_control.json.gz"),
    ("sampled_2ranks", "sampled_2ranks/rank-0.json.gz"),
    ("sampled_2ranks", "sampled_2ranks/rank-1.json.gz"),
]


@pytest.mark.parametrize(("reference", "trace"), SAME_DEFINITION)
def test_span_matches_hta_to_the_microsecond(reference: str, trace: str) -> None:
    ours = span_rows(trace)
    (rank,) = ours
    hta = hta_rows(reference)[rank]
    row = ours[rank]
    assert row.wall_ns / 1000 == pytest.approx(hta.span_us, abs=1)
    assert row.idle_ns / 1000 == pytest.approx(hta.idle_us, abs=1)
    assert row.compute_ns / 1000 == pytest.approx(hta.compute_us, abs=1)
    non_compute = row.communication_ns + row.memcpy_ns + row.memset_ns
    assert non_compute / 1000 == pytest.approx(hta.non_compute_us, abs=1)


# Traces where HTA differs by definition: our figures pinned (ns), and HTA's within the bound
# docs/accounting.md gives for each.
PINNED = {
    # reference, trace: (span, idle, compute) in ns, and the largest |idle - HTA idle| in % of span
    ("a100_alexnet", "a100_alexnet.json.gz"): ((12920244000, 12854103000, 10630000), 0.6),
    ("mi250_rocm_minitoy", "mi250_rocm_minitoy.json.gz"): (None, 0.5),
    ("v100_ns_timestamps", "v100_ns_timestamps.json.gz"): (None, 1.0),
    ("v100_rank1_test", "v100_rank1_test.json.gz"): ((629096000, 22514000, 462788000), 4.0),
    ("mtia_inference", "mtia_inference.json.gz"): (None, 0.5),
}


@pytest.mark.parametrize(("reference", "trace"), sorted(PINNED))
def test_explained_differences_stay_as_documented(reference: str, trace: str) -> None:
    pinned, idle_bound_pct = PINNED[(reference, trace)]
    ours = span_rows(trace)
    (rank,) = ours
    row = ours[rank]
    hta = hta_rows(reference)[rank]
    if pinned is not None:
        assert (row.wall_ns, row.idle_ns, row.compute_ns) == pinned
    assert abs(row.idle_ns / 1000 - hta.idle_us) <= idle_bound_pct / 100 * hta.span_us


def test_float_timestamps_keep_nanoseconds() -> None:
    # HTA truncates float timestamps to whole µs; ours keep the ns digits, so spans differ by
    # less than one µs per boundary
    row = span_rows("v100_ns_timestamps.json.gz")[0]
    assert abs(row.wall_ns / 1000 - hta_rows("v100_ns_timestamps")[0].span_us) < 1.0
    assert row.wall_ns % 1000 != 0


def test_tasks_without_launch_are_the_whole_v100_test_difference() -> None:
    import numpy as np

    from perfledger.analysis import columns
    from perfledger.analysis.intervals import union
    from perfledger.analysis.steps import launch_starts, step_annotations

    (trace,) = load_traces([data_file("kineto/v100_rank1_test.json.gz")])
    events = trace.events
    launches = launch_starts(events)
    is_task = columns.isin(events, "kind", ["kernel", "comm", "memcpy", "memset"])
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    last_step_start = step_annotations(events)[-1][1]
    linked = is_task & (launches >= 0) & (launches < last_step_start)
    busy = union(start[linked], end[linked])
    hta = hta_rows("v100_rank1_test")[1]
    assert busy.total / 1000 == pytest.approx(hta.compute_us + hta.non_compute_us, abs=1)
    assert (busy.ends[-1] - busy.starts[0]) / 1000 == pytest.approx(hta.span_us, abs=1)
    # ... and the tasks HTA leaves out all precede the first launch the trace holds
    orphans = is_task & (launches < 0)
    assert int(orphans.sum()) == 614
    assert start[orphans].max() < np.min(launches[launches >= 0]) + 40_000_000
