"""The headline figures, each defined once (perfledger.analysis.figures), on hand-built accounts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfledger.analysis import figures
from perfledger.model import schema
from perfledger.model.accounts import (
    HostWindowAccount,
    StepWindow,
    WindowAccount,
    host_step_trace_table,
    step_trace_table,
)
from tests.synth import EventsBuilder

MS = 1_000_000


def window(
    rank: int, device: int, step: int, start_ms: int, wall_ms: int, idle_ms: int
) -> WindowAccount:
    """A window whose busy time is all compute: wall - idle."""
    wall, idle = wall_ms * MS, idle_ms * MS
    return WindowAccount(
        rank=rank,
        device=device,
        step=step,
        start_ns=start_ms * MS,
        end_ns=start_ms * MS + wall,
        compute_ns=wall - idle,
        communication_ns=0,
        overlapped_communication_ns=0,
        memcpy_ns=0,
        memset_ns=0,
        idle_ns=idle,
        idle_host_dispatch_ns=idle,
        idle_sync_ns=0,
        idle_dataloader_ns=0,
        idle_launch_latency_ns=0,
        idle_other_ns=0,
    )


def two_ranks() -> list[WindowAccount]:
    # rank 0: steps of 10 and 30 ms on two devices (idle 2 and 6 ms on each);
    # rank 1: steps of 20 and 40 ms on one device (idle 10 and 0 ms);
    # span rows (step -1) of 100 ms, all idle: they must not count in any figure
    rows = []
    for device in (0, 1):
        rows += [window(0, device, 1, 0, 10, 2), window(0, device, 2, 10, 30, 6)]
        rows.append(window(0, device, -1, 0, 100, 100))
    rows += [window(1, 0, 1, 0, 20, 10), window(1, 0, 2, 20, 40, 0), window(1, 0, -1, 0, 100, 100)]
    return rows


def test_step_time_is_the_median_of_one_wall_per_rank_and_step() -> None:
    table = step_trace_table(two_ranks())
    # walls: rank 0 -> 10, 30 (both devices share them); rank 1 -> 20, 40
    assert list(figures.step_walls_ms(table, step_count=2)) == [10.0, 30.0, 20.0, 40.0]
    assert figures.step_time_ms(table, step_count=2) == 25.0  # median of 10, 20, 30, 40


def test_no_step_annotation_no_step_time() -> None:
    table = step_trace_table([window(0, 0, 0, 0, 50, 5), window(0, 0, -1, 0, 50, 5)])
    assert figures.step_time_ms(table, step_count=0) is None
    assert figures.step_walls_ms(table, step_count=0).size == 0
    # the one window still has a utilisation
    assert figures.utilization_pct(table) == pytest.approx(90.0)


def test_utilization_is_busy_over_the_windows_of_every_rank_and_device() -> None:
    table = step_trace_table(two_ranks())
    # walls: 2 x (10 + 30) + 20 + 40 = 140 ms; idle: 2 x (2 + 6) + 10 + 0 = 26 ms
    assert figures.utilization_pct(table) == pytest.approx(100.0 * (140 - 26) / 140)
    assert figures.category_share_pct(table, "idle") == pytest.approx(100.0 * 26 / 140)
    assert figures.category_share_pct(table, "compute") == pytest.approx(100.0 * 114 / 140)
    assert figures.category_share_pct(table, "no_such_category") is None


def test_host_only_profile_has_a_step_time_and_no_utilization() -> None:
    span = HostWindowAccount(
        rank=0,
        step=-1,
        start_ns=0,
        end_ns=8 * MS,
        dataloader_ns=1 * MS,
        forward_ns=3 * MS,
        backward_ns=3 * MS,
        optimizer_ns=1 * MS,
        operator_ns=5 * MS,
        overhead_ns=2 * MS,
    )
    table = host_step_trace_table([span, replace(span, step=4)])
    assert figures.is_host_only(table)
    assert figures.step_time_ms(table, step_count=1) == 8.0
    assert figures.utilization_pct(table) is None
    assert figures.category_share_pct(table, "forward") == pytest.approx(37.5)


def test_step_hulls_span_every_rank_of_a_step() -> None:
    # rank 0: step 1 at [0, 10) ms, step 2 at [10, 40); rank 1 (skewed): [2, 22), [22, 62)
    windows = [
        StepWindow(0, 1, 0, 10 * MS, 0, 10 * MS),
        StepWindow(0, 2, 10 * MS, 40 * MS, 10 * MS, 40 * MS),
        StepWindow(1, 2, 22 * MS, 62 * MS, 22 * MS, 62 * MS),
        StepWindow(1, 1, 2 * MS, 22 * MS, 2 * MS, 22 * MS),
    ]
    assert figures.step_hulls(windows, schema.empty_events()) == [
        (1, 0, 22 * MS),
        (2, 10 * MS, 62 * MS),
    ]


def test_without_step_windows_the_events_span_one_step() -> None:
    events = EventsBuilder().cpu_op(5 * MS, MS, "a").kernel(3 * MS, 4 * MS, "k").table()
    # the kernel starts first (3 ms) and ends last (7 ms; the op ends at 6 ms)
    assert figures.step_hulls([], events) == [(0, 3 * MS, 7 * MS)]
    assert figures.step_hulls([], schema.empty_events()) == []


def test_representative_steps_by_wall_time() -> None:
    # walls of steps 3, 4, 5, 6: 30, 10, 20, 10 ms; sorted (wall, step): 4, 6, 5, 3
    walls = [30 * MS, 10 * MS, 20 * MS, 10 * MS]
    chosen = figures.representative_steps([3, 4, 5, 6], walls)
    # four steps: the lower median is the 2nd of the sorted, step 6 (a tie with step 4 at
    # 10 ms goes to the lower step, 4, as the fastest)
    assert chosen == {"median": 6, "slowest": 3, "fastest": 4}
    assert list(chosen) == list(figures.REPRESENTATIVE_STEPS)
    assert figures.representative_steps([7], [MS]) == {"median": 7, "slowest": 7, "fastest": 7}
    assert figures.representative_steps([], []) == {}
