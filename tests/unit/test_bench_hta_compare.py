"""Unit conversions of the HTA reference check, with figures worked out by hand."""

from __future__ import annotations

from tests.paths import bench_module

hta_compare = bench_module("hta_compare")

STEP_TRACE_ROW = {
    "rank": "1",
    "device": "0",
    "step": "-1",
    "start_ns": "1000",
    "end_ns": "10001000",
    "wall_ns": "10000000",
    "compute_ns": "4000500",
    "communication_ns": "1500000",
    "overlapped_communication_ns": "700000",
    "memcpy_ns": "250000",
    "memset_ns": "1000",
    "idle_ns": "4248500",
    "idle_host_dispatch_ns": "4248500",
    "idle_sync_ns": "0",
    "idle_dataloader_ns": "0",
    "idle_launch_latency_ns": "0",
    "idle_other_ns": "0",
}


def test_step_trace_row_in_microseconds() -> None:
    mine = hta_compare.from_step_trace_row("perfledger", STEP_TRACE_ROW)
    assert mine.rank == 1
    assert mine.idle_us == 4248.5
    assert mine.compute_us == 4000.5
    # Exposed communication + memcpy + memset; overlapped communication is under compute.
    assert mine.non_compute_us == 1751.0
    assert mine.span_us == 10000.0


def test_hta_row_and_difference() -> None:
    hta_row = {
        "rank": 1,
        "idle_time(us)": 4248.0,
        "compute_time(us)": 4001.0,
        "non_compute_time(us)": 1751.0,
        "kernel_time(us)": 10000.0,
    }
    ref = hta_compare.from_hta_row("HTA", hta_row)
    assert ref.span_us == 10000.0
    mine = hta_compare.from_step_trace_row("perfledger", STEP_TRACE_ROW)
    assert hta_compare.largest_difference_us(mine, ref) == 0.5
    assert hta_compare.largest_difference_us(ref, ref) == 0.0
