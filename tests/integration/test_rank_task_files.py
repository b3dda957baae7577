"""The rank task's events.parquet: the events table itself, a dictionary only for the columns
of few distinct values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from perfledger.run.tasks import RankResult, RankTask, run_rank_task

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"


def test_events_parquet_reads_back_as_the_events_table(tmp_path: Path) -> None:
    task = RankTask(0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "task", spill=False)
    result = run_rank_task(task)
    assert isinstance(result, RankResult)
    events = result.tables["events"]
    stored = pq.read_table(result.events_parquet)
    assert stored.schema.equals(events.schema)
    for name in events.column_names:
        if name == "flops":  # NaN where unknown: equal as numbers, NaN included
            assert np.array_equal(
                stored.column(name).to_numpy(), events.column(name).to_numpy(), equal_nan=True
            )
        else:
            assert stored.column(name).equals(events.column(name)), name
    metadata = pq.ParquetFile(result.events_parquet).metadata
    assert metadata.num_rows == events.num_rows > 0
    chunks = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    coded = {
        name
        for position, name in enumerate(events.column_names)
        if any("DICTIONARY" in e for g in chunks for e in g.column(position).encodings)
    }
    # few distinct values: a dictionary; times, ids, sizes and args: none tried
    assert {"kind", "name", "rank", "device", "step"} <= coded
    unique = {"start_ns", "dur_ns", "correlation", "external_id", "bytes", "flops", "args"}
    assert not coded & unique, coded
