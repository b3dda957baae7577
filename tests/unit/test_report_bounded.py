"""The report reads only the events its step timelines draw: same payload, bounded rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.columns import dictionary_codes
from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.render.report.budgets import PayloadLimits
from perfledger.render.report.data import ReportData, report_data_from_profile
from perfledger.render.report.payload import report_payload
from perfledger.render.report.rows import (
    _overlap_window,
    held_codes,
    prepare_rows,
    take,
    take_ascending,
)
from perfledger.render.report.steps import timeline_spans
from tests.paths import DATA
from tests.synth import EventsBuilder, gaps_table

US = 1_000
BASE = 10_000 * US  # the steps start here; one event of rank 0 starts 5 ms before
STEPS = 10
RANKS = 3
KERNELS = 6


def hull(step: int) -> tuple[int, int]:
    """Step ``step`` over all ranks: rank r's window is [r*10, 900 + r*10) µs into it."""
    return BASE + step * 1000 * US, BASE + (step * 1000 + 900 + (RANKS - 1) * 10) * US


def rank_events(rank: int) -> pa.Table:
    """Per step a 900 µs step mark and kernels i = 0..5 of (i+1)*10 + rank µs, in 2 batches.

    Each rank has its own dictionary of names: ``only_r<rank>`` first appears in step 9, which
    the report never draws, and ``warmup`` (rank 0) lies before the first step.
    """
    b = EventsBuilder(rank=rank, pid=100 + rank)
    if rank == 0:
        b.cpu_op(BASE - 5_000 * US, 100 * US, "warmup")
    for step in range(STEPS):
        t0 = BASE + (step * 1000 + rank * 10) * US
        b.step_mark(t0, 900 * US, step, step=step)
        for i in range(KERNELS):
            name = f"only_r{rank}" if step == STEPS - 1 and i == 0 else f"gemm_{i}"
            b.kernel(t0 + (10 + i * 100) * US, ((i + 1) * 10 + rank) * US, name, step=step)
    return pa.Table.from_batches(b.table().to_batches(max_chunksize=40))


def windows() -> tuple[StepWindow, ...]:
    out = []
    for rank in range(RANKS):
        for step in range(STEPS):
            lo = BASE + (step * 1000 + rank * 10) * US
            out.append(StepWindow(rank, step, lo, lo + 900 * US, lo, lo + 900 * US))
    return tuple(out)


def gaps() -> pa.Table:
    # one gap per rank and step, 50 µs after the first kernel; the cause differs by rank
    causes = ("sync", "host_dispatch", "dataloader")
    return gaps_table(
        [
            {
                "rank": r,
                "step": s,
                "start_ns": BASE + (s * 1000 + r * 10 + 60) * US,
                "end_ns": BASE + (s * 1000 + r * 10 + 60 + 20 + r) * US,
                "cause": causes[r],
            }
            for s in range(STEPS)
            for r in range(RANKS)
        ]
    )


def profile() -> ReportData:
    events = pa.concat_tables([rank_events(r) for r in range(RANKS)])
    return ReportData(title="ranks", events=events, windows=windows(), gaps=gaps())


LIMITS = PayloadLimits(timeline_steps=2, timeline_events=5)


def cut(table: pa.Table, spans: list[tuple[int, int]], also_earliest: bool) -> pa.Table:
    """The rows overlapping ``spans`` (and the earliest row), batch by batch: dictionaries kept."""
    earliest = pc.min(table.column("start_ns")).as_py()
    kept = []
    for batch in table.to_batches():
        start = batch.column("start_ns").to_numpy()
        end = start + (
            batch.column("dur_ns").to_numpy()
            if "dur_ns" in batch.schema.names
            else batch.column("end_ns").to_numpy() - start
        )
        mask = np.zeros(batch.num_rows, dtype=bool)
        for lo, hi in spans:
            mask |= (start < hi) & (end > lo)
        if also_earliest:
            mask |= start == earliest
        kept.append(batch.filter(pa.array(mask)))
    return pa.Table.from_batches(kept, schema=table.schema)


def test_payload_equals_that_of_a_profile_holding_only_the_drawn_steps() -> None:
    data = profile()
    payload = report_payload(data, LIMITS)
    # every step is 920 µs over the ranks: the median, slowest and fastest are steps 4, 9, 0
    # (ties by step number); two timelines: steps 4 and 9
    assert [s["step"] for s in payload["steps"]] == [4, 9]
    spans = [hull(4), hull(9)]
    small = ReportData(
        title="ranks",
        events=cut(data.events, spans, also_earliest=True),
        windows=data.windows,
        gaps=cut(gaps(), spans, also_earliest=False),
    )
    assert small.events.num_rows == 2 * RANKS * (1 + KERNELS) + 1
    assert payload == report_payload(small, LIMITS)


def test_multi_rank_timeline_figures_by_hand() -> None:
    payload = report_payload(profile(), LIMITS)
    assert payload["origin_ns"] == BASE - 5_000 * US  # the warm-up op, outside every step
    t = payload["timelines"]["9"]
    # 3 ranks x (step mark + 6 kernels) overlap step 9; the 5 longest are drawn: the three
    # 900 µs marks and the 60+r µs kernels gemm_5 of ranks 2 and 1 (62 and 61 µs)
    assert t["events_total"] == RANKS * (1 + KERNELS) and t["events_shown"] == 5
    names = payload["timeline_names"]
    kinds = payload["timeline_kinds"]
    drawn = sorted(
        (names[n], kinds[k], d)
        for n, k, d in zip(t["name"], t["kind"], t["dur_us"], strict=True)
        if not names[n].startswith("idle")
    )
    assert drawn == [
        ("ProfilerStep#9", "step", 900.0),
        ("ProfilerStep#9", "step", 900.0),
        ("ProfilerStep#9", "step", 900.0),
        ("gemm_5", "kernel", 61.0),
        ("gemm_5", "kernel", 62.0),
    ]
    # one gap per rank, 20+r µs; each on its rank's device row
    gap_durs = sorted(
        d for n, d in zip(t["name"], t["dur_us"], strict=True) if names[n].startswith("idle")
    )
    assert gap_durs == [20.0, 21.0, 22.0]
    assert [r for r in t["rows"] if r.endswith("idle")] == [
        f"rank {r} device 0 idle" for r in range(RANKS)
    ]
    # names in the order of the whole profile's dictionary (rank 0's names as they first
    # appear: warmup, ProfilerStep#0, gemm_0..gemm_5, ProfilerStep#1..9), then the causes
    assert names == ["gemm_5", "ProfilerStep#4", "ProfilerStep#9"] + [
        "idle: sync",
        "idle: host_dispatch",
        "idle: dataloader",
    ]


def test_only_the_rows_a_timeline_can_draw_are_read() -> None:
    # one step of 3 ranks x 20 000 events; a timeline draws 5 of them
    tables = []
    for rank in range(RANKS):
        b = EventsBuilder(rank=rank)
        b.step_mark(0, 2_000_000, 0, step=0)
        for i in range(20_000):
            b.kernel(i * 100, 10 + (i * 7919 + rank) % 50, f"k{i % 300}", step=0)
        tables.append(b.table())
    events = pa.concat_tables(tables)
    data = ReportData(
        title="t", events=events, windows=(StepWindow(0, 0, 0, 2_000_000, 0, 2_000_000),)
    )
    spans = timeline_spans(data, LIMITS)
    prepared = prepare_rows(data, spans, LIMITS.timeline_events)
    assert prepared.start.size == 5  # not 60 003 rows
    assert prepared.events_total == {(0, 2_000_000): events.num_rows}
    # the same rows as selecting among all rows: the longest, ties by row order
    dur = events.column("dur_ns").to_numpy()
    start = events.column("start_ns").to_numpy()
    longest = np.sort(np.argsort(-dur, kind="stable")[:5])
    assert prepared.start.tolist() == start[longest].tolist()
    assert prepared.dur.tolist() == dur[longest].tolist()
    whole_names, names = dictionary_codes(events, "name")
    assert prepared.name.tolist() == whole_names[longest].tolist()
    assert prepared.labels[: len(names)] == names


def test_a_shrunk_payload_is_built_from_the_rows_held_for_the_full_one() -> None:
    data = profile()
    full = PayloadLimits(timeline_steps=4, timeline_events=8)
    prepared = prepare_rows(data, timeline_spans(data, full), full.timeline_events)
    shrunk = PayloadLimits(timeline_steps=2, timeline_events=3)
    assert prepared.covers(timeline_spans(data, shrunk), shrunk.timeline_events)
    assert report_payload(data, shrunk, prepared) == report_payload(data, shrunk)
    # a preparation that does not hold what a payload draws is replaced, not used
    small = prepare_rows(data, [hull(0)], 2)
    assert not small.covers(timeline_spans(data, full), full.timeline_events)
    assert report_payload(data, full, small) == report_payload(data, full)


def test_take_batch_by_batch_equals_arrow_take() -> None:
    rng = np.random.default_rng(7)
    table = pa.concat_tables([rank_events(r) for r in range(RANKS)]).drop_columns(["flops"])
    rows = rng.integers(0, table.num_rows, 50)
    assert take(table, rows).to_pylist() == table.take(rows).to_pylist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(-5, 40)), max_size=40),
    st.lists(st.tuples(st.integers(-10, 80), st.integers(0, 30)), min_size=1, max_size=5),
    st.booleans(),
)
def test_overlap_window_holds_every_row_that_overlaps_a_span(
    rows: list[tuple[int, int]], spans: list[tuple[int, int]], ascending: bool
) -> None:
    # starts ascending (a rank's rows: binary searches) or not (every row); durations of
    # any sign: whatever a row's end, the window never leaves out a row that overlaps
    if ascending:
        rows = sorted(rows)
    start = np.array([r[0] for r in rows], dtype=np.int64)
    end = start + np.array([r[1] for r in rows], dtype=np.int64)
    window = _overlap_window(start, end)
    for lo, length in spans:
        hi = lo + length
        first, last = window(lo, hi)
        assert 0 <= first <= last <= start.size
        overlapping = np.flatnonzero((start < hi) & (end > lo))
        assert all(first <= row < last for row in overlapping)


@pytest.mark.parametrize("dictionary", [False, True])
def test_codes_of_held_rows_equal_the_codes_of_the_whole_column(dictionary: bool) -> None:
    values = [["b", None, "c"], ["a", "d", "b"], ["e", "a", None]]
    chunks = [pa.array(v) for v in values]
    if dictionary:
        chunks = [c.dictionary_encode() for c in chunks]
    table = pa.Table.from_batches([pa.record_batch([c], names=["cause"]) for c in chunks])
    held = take_ascending(table, np.array([4, 7, 8]))  # "d", "a", null
    codes, distinct = held_codes(table, held, "cause")
    whole, whole_distinct = dictionary_codes(table, "cause")
    assert distinct == whole_distinct
    assert codes.tolist() == whole[[4, 7, 8]].tolist()
    if not dictionary:  # first appearance over all rows; a null takes the first value's code
        assert distinct == ["b", "c", "a", "d", "e"] and codes.tolist() == [3, 2, 0]


def test_counters_of_several_ranks_series_by_series() -> None:
    # two ranks, two series each, rows interleaved over three batches
    rows = [
        (rank, "host", name, (10 + i) * 1_000_000, float(i * 10 + rank))
        for i in range(6)
        for rank in (1, 0)
        for name in ("rss", "cpu")
    ]
    table = pa.Table.from_pylist(
        [dict(zip(("rank", "track", "name", "ts_ns", "value"), r, strict=True)) for r in rows],
        schema=schema.COUNTERS_SCHEMA,
    )
    counters = pa.Table.from_batches(table.to_batches(max_chunksize=8))
    events = EventsBuilder().cpu_op(9_000_000, 10, "op").table()
    series = report_payload(ReportData(title="t", events=events, counters=counters))["counters"]
    assert [(s["rank"], s["track"], s["name"]) for s in series] == [
        (0, "host", "cpu"),
        (0, "host", "rss"),
        (1, "host", "cpu"),
        (1, "host", "rss"),
    ]
    # seconds from the first event (9 ms): samples at 10..15 ms
    assert series[0]["t_s"] == [0.001, 0.002, 0.003, 0.004, 0.005, 0.006]
    assert series[3]["value"] == [1.0, 11.0, 21.0, 31.0, 41.0, 51.0]
    assert all(s["samples"] == 6 for s in series)


@pytest.mark.parametrize(
    "files",
    [
        ("sampled_2ranks/rank-0.json.gz", "sampled_2ranks/rank-1.json.gz"),
        ("v100_rank1_ddp.json.gz",),
    ],
)
def test_real_profile_payload_equals_that_of_its_drawn_rows(files: tuple[str, ...]) -> None:
    from perfledger.analysis.advisor import diagnose
    from perfledger.analysis.profile import analyze_traces
    from perfledger.sources import load_traces

    analysis = analyze_traces(load_traces([DATA / "kineto" / f for f in files]))
    summary = {"findings": [f.to_dict() for f in diagnose(analysis).findings]}
    data = report_data_from_profile(analysis, summary, title="real")
    assert data.gaps is not None
    limits = PayloadLimits()
    spans = timeline_spans(data, limits)
    small = replace(
        data,
        events=cut(data.events, spans, also_earliest=True),
        gaps=cut(data.gaps, spans, also_earliest=False),
    )
    for shrunk in (limits, limits.shrunk(), limits.shrunk().shrunk()):
        payload = report_payload(data, shrunk)
        assert payload == report_payload(small, shrunk)
    # the smallest payload draws only the longest events of some step: that choice was tested
    assert any(t["events_total"] > t["events_shown"] for t in payload["timelines"].values())
