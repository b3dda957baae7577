"""The timeline's passes over every event row read a block of rows at a time, and a column's
values at some rows from its chunks in place: with blocks and chunks of a few rows they give
what the passes over whole columns give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.intervals import crossing_intervals
from perfledger.render import timeline
from perfledger.render.timeline import grouping, layout, records, writer
from perfledger.render.timeline.grouping import ColumnValues, event_kinds, int64
from perfledger.render.timeline.layout import TrackLayout, event_tracks
from tests.unit.test_timeline_step_groups import (
    _counters,
    _findings,
    _parts,
    _rank_events,
    _windows,
)


def _small_blocks(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(grouping, "BLOCK_ROWS", rows)
    monkeypatch.setattr(layout, "BLOCK_ROWS", rows)


def _rechunked(table: pa.Table, rows: int) -> pa.Table:
    """The same table in chunks of ``rows`` rows (the last fewer)."""
    return pa.Table.from_batches(table.to_batches(max_chunksize=rows), table.schema)


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_column_values_at_any_rows_equal_the_whole_column(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grouping, "_VIEWED_CHUNK", 2)  # chunks of 1 row: copied whole
    table = _rechunked(pa.table({"v": pa.array(np.arange(50, dtype=np.int64) * 7 - 3)}), chunk)
    whole = int64(table, "v")
    rng = np.random.default_rng(3)
    values = ColumnValues(table, "v")
    for rows in (
        np.arange(50),
        np.array([], dtype=np.int64),
        np.array([49, 0, 7, 7, 3]),
        rng.integers(0, 50, 200),
        np.sort(rng.integers(0, 50, 30)).astype(np.int32),
    ):
        assert values.at(rows).tolist() == whole[rows].tolist()
        assert values.at(rows).dtype == np.int64


def test_event_tracks_in_small_blocks_equal_those_of_one_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = pa.concat_tables([_rank_events(0), _rank_events(3)])
    want_layout = TrackLayout(None)
    want = event_tracks(events, want_layout, event_kinds(events))
    for rows in (1, 2, 5, 17):
        _small_blocks(monkeypatch, rows)
        got_layout = TrackLayout(None)
        chunked = _rechunked(events, 3)
        got = event_tracks(chunked, got_layout, event_kinds(chunked))
        assert got[0].tolist() == want[0].tolist()
        assert got[1:] == want[1:]
        assert got_layout.threads == want_layout.threads
        assert got_layout.processes == want_layout.processes
    assert (want[0] >= 0).any() and (want[0] < 0).any() and want[2] > 0


def test_flows_and_busy_tasks_in_small_blocks_equal_those_of_one_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = pa.concat_tables([_rank_events(0), _rank_events(3)])
    kinds = event_kinds(events)
    want_flows = records.flows(events, kinds)
    want_tasks = records._device_tasks(events, kinds)
    _small_blocks(monkeypatch, 3)
    chunked = _rechunked(events, 2)
    got_flows = records.flows(chunked, event_kinds(chunked))
    got_tasks = records._device_tasks(chunked, event_kinds(chunked))
    assert [f.tolist() for f in got_flows] == [f.tolist() for f in want_flows]
    assert want_flows[0].size > 0
    assert got_tasks.to_pylist() == want_tasks.to_pylist()
    assert want_tasks.num_rows > 0


intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 25)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=0,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(intervals, st.integers(1, 8))
def test_laminar_in_small_blocks_equals_the_pass(items: list[tuple[int, int]], block: int) -> None:
    # a track's events by start, longer first: the order the check of one block tests
    ordered = sorted(items, key=lambda t: (t[0], -t[1]))
    start = np.array([s for s, _ in ordered], dtype=np.int64)
    end = np.array([e for _, e in ordered], dtype=np.int64)
    whole = layout._laminar(start, end)
    layout_block = layout.BLOCK_ROWS
    try:
        layout.BLOCK_ROWS = block  # type: ignore[misc]
        assert layout._laminar(start, end) == whole
    finally:
        layout.BLOCK_ROWS = layout_block  # type: ignore[misc]
    positive = end > start
    assert whole == (not crossing_intervals(start[positive], end[positive]).any())


def test_step_files_in_small_blocks_equal_those_of_one_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def written(out: Path, chunk: int | None) -> list[bytes]:
        parts = [
            timeline.TimelinePart(
                p.rank, _rechunked(p.events, chunk) if chunk else p.events, p.gaps
            )
            for p in _parts([0, 3])
        ]
        _, paths = timeline.write_profile_timelines(
            None,
            out,
            parts,
            _windows([0, 3]),
            counters=_counters([0, 3]),
            findings=_findings([0, 3]),
        )
        return [p.read_bytes() for p in paths]

    want = written(tmp_path / "one", None)
    monkeypatch.setattr(writer, "GROUP_ROWS", 1)
    _small_blocks(monkeypatch, 4)
    assert written(tmp_path / "small", 3) == want
    assert len(want) > 1
