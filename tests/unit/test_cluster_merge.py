"""Per-rank pieces merged back give the whole-profile tables, row for row."""

from __future__ import annotations

import pyarrow as pa

from perfledger import schema
from perfledger.analysis import ops
from perfledger.analysis.gaps import gap_report
from perfledger.cluster.merge import merge_gap_reports, merge_kernel_details
from perfledger.pipeline import _profile_gaps, analyze_rank
from perfledger.render.csvs import csv_bytes
from perfledger.sources.base import Trace
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
    whole = gap_report(_profile_gaps(ranks), events, worst=5)
    merged = merge_gap_reports(
        [gap_report(r.accounting.gaps, r.events, worst=5) for r in ranks], worst=5
    )
    assert merged.buckets == whole.buckets
    assert (merged.count, merged.total_ns) == (whole.count, whole.total_ns)
    assert merged.worst.to_pylist() == whole.worst.to_pylist()
    assert len({row["rank"] for row in merged.worst.to_pylist()}) > 1  # ranks interleave


def test_merged_kernel_details_keep_the_profile_order_across_ranks() -> None:
    ranks = [analyze_rank(rank_trace(r, 0.0)) for r in (0, 1)]
    events = pa.concat_tables([r.events for r in ranks])
    whole = ops.kernel_details(events)
    merged = merge_kernel_details([ops.kernel_details(r.events) for r in ranks])
    assert csv_bytes(merged) == csv_bytes(whole)
    # same start on both ranks: rank 0's row first
    starts = merged["start_ns"].to_pylist()
    assert starts[0] == starts[1] and merged["rank"].to_pylist()[:2] == [0, 1]


def test_per_rank_op_summaries_concatenate_to_the_whole_summary() -> None:
    ranks = [analyze_rank(rank_trace(r, 10.0 * r)) for r in (0, 1, 2)]
    events = pa.concat_tables([r.events for r in ranks])
    parts = pa.concat_tables([ops.op_summary(r.events) for r in ranks])
    assert csv_bytes(parts) == csv_bytes(ops.op_summary(events))
