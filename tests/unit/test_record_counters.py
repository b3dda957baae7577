"""Host counters: the samples laid out as COUNTERS_SCHEMA rows, sums computed by hand."""

from __future__ import annotations

import pytest

from perfledger.model.schema import COUNTERS_SCHEMA
from perfledger.record.counters import HostSamples, counters_table, descendants

MIB = 1 << 20


def samples() -> HostSamples:
    """Two samples of a tree: launcher child 100 -> worker 101 -> data-loader worker 102."""
    s = HostSamples()
    for ts, figures in (
        (
            1_000,
            [(100, 99, 1.0, 50 * MIB), (101, 100, 80.0, 300 * MIB), (102, 101, 15.0, 90 * MIB)],
        ),
        (2_000, [(100, 99, 0.0, 50 * MIB), (101, 100, 95.0, 310 * MIB), (102, 101, 5.0, 91 * MIB)]),
    ):
        for pid, parent, cpu, rss in figures:
            s.process_ts.append(ts)
            s.process_pid.append(pid)
            s.process_parent.append(parent)
            s.process_cpu.append(cpu)
            s.process_rss.append(rss)
        for core, busy in enumerate((60.0, 40.0)):
            s.core_ts.append(ts)
            s.core_index.append(core)
            s.core_busy.append(busy + ts / 1000)
    s.gpu_ts.append(1_500)
    s.gpu_index.append(0)
    s.gpu_utilization.append(87.0)
    s.gpu_memory.append(4096 * MIB)
    return s


def series(table: object, rank: int, track: str, name: str) -> list[tuple[int, float]]:
    rows = table.to_pylist()  # type: ignore[attr-defined]
    return [
        (r["ts_ns"], r["value"])
        for r in rows
        if (r["rank"], r["track"], r["name"]) == (rank, track, name)
    ]


def test_tree_rank_core_and_gpu_counters() -> None:
    table = counters_table(samples(), rank_pids={0: 101})
    assert table.schema == COUNTERS_SCHEMA
    # The whole tree: 1 + 80 + 15 = 96 %, then 0 + 95 + 5 = 100 %.
    assert series(table, 0, "process_tree", "cpu_percent") == [(1_000, 96.0), (2_000, 100.0)]
    assert series(table, 0, "process_tree", "rss_bytes") == [
        (1_000, float(440 * MIB)),
        (2_000, float(451 * MIB)),
    ]
    # Rank 0's worker and its data-loader child, without the launcher's direct child.
    assert series(table, 0, "rank_process", "cpu_percent") == [(1_000, 95.0), (2_000, 100.0)]
    assert series(table, 0, "rank_process", "rss_bytes") == [
        (1_000, float(390 * MIB)),
        (2_000, float(401 * MIB)),
    ]
    assert series(table, 0, "cpu_cores", "cpu0") == [(1_000, 61.0), (2_000, 62.0)]
    assert series(table, 0, "cpu_cores", "cpu1") == [(1_000, 41.0), (2_000, 42.0)]
    assert series(table, 0, "gpu0", "utilization_percent") == [(1_500, 87.0)]
    assert series(table, 0, "gpu0", "memory_used_bytes") == [(1_500, float(4096 * MIB))]
    assert table.num_rows == 2 * 6 + 2


def test_each_rank_gets_its_own_worker_tree() -> None:
    s = HostSamples()
    # torchrun agent 10 with workers 11 (rank 0) and 12 (rank 1).
    for pid, parent, cpu in ((10, 1, 2.0), (11, 10, 90.0), (12, 10, 70.0)):
        s.process_ts.append(5)
        s.process_pid.append(pid)
        s.process_parent.append(parent)
        s.process_cpu.append(cpu)
        s.process_rss.append(MIB)
    table = counters_table(s, rank_pids={0: 11, 1: 12})
    assert series(table, 0, "rank_process", "cpu_percent") == [(5, 90.0)]
    assert series(table, 1, "rank_process", "cpu_percent") == [(5, 70.0)]
    assert series(table, 0, "process_tree", "cpu_percent") == [(5, 162.0)]


def test_no_samples_give_an_empty_table() -> None:
    assert counters_table(HostSamples()).equals(COUNTERS_SCHEMA.empty_table())


@pytest.mark.parametrize(("root", "expected"), [(1, {1, 2, 3, 4}), (2, {2, 4}), (3, {3}), (9, {9})])
def test_descendants_follow_parent_links(root: int, expected: set[int]) -> None:
    assert descendants(root, {2: 1, 3: 1, 4: 2, 5: 0}) == expected
