"""Per-rank pieces merged back give the whole-profile tables, row for row."""

from __future__ import annotations

import pyarrow as pa

from perfledger.analysis import ops
from perfledger.analysis.cluster.merge import merge_gap_reports
from perfledger.analysis.gaps import gap_report
from perfledger.analysis.profile import analyze_rank, profile_gaps
from perfledger.analysis.transfers import copy_spellings, transfers, transfers_from_spellings
from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.render.csvs import csv_bytes
from tests.scenarios import Timeline


def rank_trace(rank: int, shift_us: float) -> Trace:
    """Two steps; kernels at the same instants on every rank (ties across ranks), idle gaps
    whose length depends on ``shift_us`` (so the worst gaps mix ranks)."""
    t = Timeline(rank=rank)
    for step, base in ((1, 0.0), (2, 1000.0)):
        t.step(step, base, 900)
        t.launch(base + 10, base + 100, 200, name="gemm")
        t.launch(base + 20, base + 300 + shift_us, 100, name="relu")
        t.launch(base + 30, base + 600, 50 + shift_us, name="ncclKernel_AllReduce", stream=20)
        t.launch(base + 40, base + 700, 30, kind=schema.MEMCPY, name="Memcpy HtoD", nbytes=4096)
    return Trace(events=t.table(), counters=schema.empty_counters(), source_kind="synthetic")


def test_merged_gap_report_equals_the_report_over_all_ranks() -> None:
    ranks = [analyze_rank(rank_trace(r, shift)) for r, shift in ((0, 40.0), (1, 5.0), (2, 90.0))]
    events = pa.concat_tables([r.events for r in ranks])
    whole = gap_report(profile_gaps(ranks), events, worst=5)
    merged = merge_gap_reports(
        [gap_report(r.accounting.gaps, r.events, worst=5) for r in ranks], worst=5
    )
    assert merged.buckets == whole.buckets
    assert (merged.count, merged.total_ns) == (whole.count, whole.total_ns)
    assert merged.worst.to_pylist() == whole.worst.to_pylist()
    assert len({row["rank"] for row in merged.worst.to_pylist()}) > 1  # ranks interleave


def test_per_rank_kernel_details_concatenate_to_the_whole_table() -> None:
    ranks = [analyze_rank(rank_trace(r, 0.0)) for r in (0, 1)]
    events = pa.concat_tables([r.events for r in ranks])
    whole = ops.kernel_details(events)
    parts = pa.concat_tables([ops.kernel_details(r.events) for r in ranks])
    assert csv_bytes(parts) == csv_bytes(whole)
    # rank by rank, by start within a rank: the same instants on both ranks
    starts = whole["start_ns"].to_pylist()
    ranks_of_rows = whole["rank"].to_pylist()
    half = len(starts) // 2
    assert ranks_of_rows == [0] * half + [1] * half
    assert starts[:half] == starts[half:] == sorted(starts[:half])


def test_per_rank_api_statistics_and_copies_merge_to_the_whole_tables() -> None:
    ranks = [analyze_rank(rank_trace(r, 10.0 * r)) for r in (0, 1, 2)]
    events = pa.concat_tables([r.events for r in ranks])
    merged = ops.merge_api_statistics([ops.api_statistic(r.events) for r in ranks])
    whole = ops.api_statistic(events)
    assert csv_bytes(merged) == csv_bytes(whole)
    # 3 ranks x 2 steps x 4 launches of each runtime call name the scenario uses
    assert sum(merged["count"].to_pylist()) == 3 * 2 * 4
    copies = transfers_from_spellings([copy_spellings(r.events) for r in ranks])
    assert csv_bytes(copies) == csv_bytes(transfers(events))
    # one 4096-byte host-to-device copy per step and rank
    assert copies.to_pylist()[0]["direction"] == "HtoD"
    assert (copies["count"][0].as_py(), copies["bytes"][0].as_py()) == (6, 6 * 4096)


def test_per_rank_op_summaries_concatenate_to_the_whole_summary() -> None:
    ranks = [analyze_rank(rank_trace(r, 10.0 * r)) for r in (0, 1, 2)]
    events = pa.concat_tables([r.events for r in ranks])
    parts = pa.concat_tables([ops.op_summary(r.events) for r in ranks])
    assert csv_bytes(parts) == csv_bytes(ops.op_summary(events))
