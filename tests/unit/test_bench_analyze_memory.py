"""The two-tree benchmark: its paired ratios, against figures worked out by hand; its digest
of the outputs (a Parquet file by its table, not its bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import bench_module

analyze_memory = bench_module("analyze_memory")


def _run(wall_s: float, total_s: float | None = None) -> dict[str, object]:
    phases = {} if total_s is None else {"total_s": total_s}
    return {"wall_s": wall_s, "cpu_s": 2 * wall_s, "peak_rss_mb": 100.0, "phases": phases}


def test_each_run_is_compared_with_the_other_trees_run_beside_it() -> None:
    # the machine's speed moves between rounds: the second tree's runs against the first's
    # run beside each, 9/10, 30/20, 27/30 (median 0.9), where the medians of each tree's runs
    # would give 27/20 = 1.35
    before = [_run(10.0, 8.0), _run(20.0, 16.0), _run(30.0, 24.0)]
    after = [_run(9.0, 8.0), _run(30.0, 12.0), _run(27.0, 24.0)]
    median, least, largest = analyze_memory.paired_ratios(before, after, "wall_s")
    assert (median, least, largest) == pytest.approx((0.9, 0.9, 1.5))
    # a phase is looked up among the run's phases: 8/8, 12/16, 24/24
    paired = analyze_memory.paired_ratios(before, after, "total_s")
    assert paired == pytest.approx((1.0, 0.75, 1.0))


def test_runs_without_the_figure_are_left_out() -> None:
    before = [_run(10.0), _run(10.0, 5.0)]
    after = [_run(8.0, 4.0), _run(12.0, 6.0)]
    # only the second pair has total_s on both sides: 6/5
    paired = analyze_memory.paired_ratios(before, after, "total_s")
    assert paired == pytest.approx((1.2, 1.2, 1.2))
    assert analyze_memory.paired_ratios(before, after, "import_s") is None
    # a tree that made fewer runs (an interrupted bench): the pairs both made
    assert analyze_memory.paired_ratios(before[:1], after, "wall_s") == pytest.approx(
        (0.8, 0.8, 0.8)
    )


def test_a_parquet_output_is_compared_by_its_table(tmp_path: Path) -> None:
    # the same table stored in two encodings digests the same; a changed value does not
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"start_ns": pa.array([10, 20, 35, 35, 90], pa.int64())})
    folders = [tmp_path / name for name in ("plain", "delta", "other")]
    for folder in folders:
        folder.mkdir()
    pq.write_table(table, folders[0] / "events.parquet", use_dictionary=False)
    pq.write_table(
        table,
        folders[1] / "events.parquet",
        use_dictionary=False,
        column_encoding={"start_ns": "DELTA_BINARY_PACKED"},
    )
    pq.write_table(
        table.set_column(0, "start_ns", pa.array([10, 20, 35, 36, 90])),
        folders[2] / "events.parquet",
    )
    assert (folders[0] / "events.parquet").read_bytes() != (
        folders[1] / "events.parquet"
    ).read_bytes()
    digests = [analyze_memory._digest(folder) for folder in folders]
    assert digests[0] == digests[1] != digests[2]
