"""The Chrome trace export on hand-built tables: every expected figure derived in the test."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import intervals
from perfledger.analysis.busy import device_busy
from perfledger.errors import PerfledgerError
from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.render.timeline import (
    device_busy_counters,
    layout,
    text,
    write_step_timelines,
    write_timeline,
)
from perfledger.render.timeline.layout import track_lanes
from tests.synth import EventsBuilder, gaps_table
from tests.timeline_check import Summary, load, perfetto_ns, validate

US = 1_000
MS = 1_000_000
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def two_steps() -> EventsBuilder:
    """Two steps of one rank: step 1 [0, 100 µs), step 2 [100, 200 µs).

    Each step: an op with one launch, a kernel on stream 7 and a memcpy on stream 8; step 2's
    kernel overlaps the memcpy by 5 µs. The host syncs in step 2.
    """
    b = EventsBuilder()
    b.step_mark(0, 100 * US, 1, step=1)
    b.cpu_op(1 * US, 40 * US, "aten::mm", external_id=1, step=1)
    b.launch(2 * US, 5 * US, 10 * US, 20 * US, "gemm", external_id=1, step=1)
    b.launch(
        50 * US,
        3 * US,
        60 * US,
        10 * US,
        "copy",
        kind=schema.MEMCPY,
        api="cudaMemcpyAsync",
        stream=8,
        step=1,
        bytes=4096,
    )
    b.step_mark(100 * US, 100 * US, 2, step=2)
    b.cpu_op(101 * US, 30 * US, "aten::add", external_id=2, step=2)
    b.launch(102 * US, 4 * US, 110 * US, 30 * US, "add_kernel", external_id=2, step=2)
    b.launch(
        107 * US,
        2 * US,
        135 * US,
        20 * US,
        "copy",
        kind=schema.MEMCPY,
        api="cudaMemcpyAsync",
        stream=8,
        step=2,
        bytes=8192,
    )
    b.sync(140 * US, 20 * US, "cudaDeviceSynchronize", step=2)
    return b


def gaps() -> pa.Table:
    return gaps_table(
        [
            {"start_ns": 0, "end_ns": 10 * US, "cause": "host_dispatch", "step": 1},
            {"start_ns": 30 * US, "end_ns": 60 * US, "cause": "launch_latency", "step": 1},
            {"start_ns": 70 * US, "end_ns": 110 * US, "cause": "sync", "step": 2},
            {"start_ns": 155 * US, "end_ns": 200 * US, "cause": "other", "step": 2},
        ]
    )


def update_golden(request: pytest.FixtureRequest) -> bool:
    """``--update-golden`` (when the suite registers it) or PERFLEDGER_UPDATE_GOLDEN=1."""
    flag = request.config.getoption("--update-golden", default=False)
    return bool(flag) or os.environ.get("PERFLEDGER_UPDATE_GOLDEN") == "1"


def write(tmp_path: Path, events: pa.Table, name: str = "t.json.gz", **kw: Any) -> Summary:
    path = tmp_path / name
    write_timeline(path, events, **kw)
    return validate(load(path))


def slices_named(summary: Summary, name: str) -> list[dict[str, Any]]:
    return [ev for items in summary.by_track.values() for ev in items if ev["name"] == name]


def test_times_are_microseconds_from_profile_start_with_exact_ns(tmp_path: Path) -> None:
    b = EventsBuilder()
    base = 1_700_000_000_000_000_000  # epoch ns, as real traces have
    b.cpu_op(base + 0, 5_000, "first")
    b.cpu_op(base + 1_001, 2_777, "a")  # 1.001 µs: 1.001 * 1000 is 1000.999... in doubles
    b.cpu_op(base + 123_456_789, 1, "b")
    summary = write(tmp_path, b.table())
    (a,) = slices_named(summary, "a")
    (b_,) = slices_named(summary, "b")
    assert perfetto_ns(a["ts"]) == 1_001 and perfetto_ns(a["dur"]) == 2_777
    assert perfetto_ns(b_["ts"]) == 123_456_789 and perfetto_ns(b_["dur"]) == 1
    assert b_["ts"] == 123456.789
    # the one value Perfetto would truncate gets the fourth decimal
    assert a["ts"] == 1.0011
    assert summary.other["origin_ns"] == base


def test_tracks_and_sort_order_host_then_device_then_counters(tmp_path: Path) -> None:
    b = two_steps()
    b.cpu_op(5 * US, 3 * US, "worker_op", thread=2)
    counters = pa.table(
        {
            "rank": [0, 0],
            "track": ["host", "host"],
            "name": ["cpu %", "cpu %"],
            "ts_ns": [0, 100 * US],
            "value": [50.0, 75.5],
        },
        schema=schema.COUNTERS_SCHEMA,
    )
    summary = write(tmp_path, b.table(), gaps=gaps(), counters=counters)
    by_sort = [
        summary.processes[p] for p in sorted(summary.process_sort, key=summary.process_sort.get)
    ]
    assert by_sort == ["rank 0 host (pid 100)", "rank 0 device 0", "rank 0 analysis"]
    threads = sorted(summary.tracks, key=summary.thread_sort.get)
    names = [summary.tracks[t] for t in threads]
    # the main thread (it holds the step marks) first, gaps above the streams
    assert names == ["thread 1", "thread 2", "idle gaps", "stream 7", "stream 8"]
    # two samples, one device busy bucket (the profile lasts < 1 ms) and its closing 0
    assert summary.counters == 2 + 2


def test_every_launch_flows_to_its_device_task(tmp_path: Path) -> None:
    summary = write(tmp_path, two_steps().table())
    # four launches with a correlation: two kernels and two copies; the sync has none
    assert summary.flows == 4


def test_idle_gaps_are_slices_named_and_coloured_by_cause(tmp_path: Path) -> None:
    summary = write(tmp_path, two_steps().table(), gaps=gaps())
    (track,) = [t for t, n in summary.tracks.items() if n == "idle gaps"]
    got = [
        (ev["name"], perfetto_ns(ev["ts"]), perfetto_ns(ev["dur"]), ev["cname"])
        for ev in summary.by_track[track]
    ]
    assert got == [
        ("idle: host_dispatch", 0, 10 * US, "terrible"),
        ("idle: launch_latency", 30 * US, 30 * US, "olive"),
        ("idle: sync", 70 * US, 40 * US, "bad"),
        ("idle: other", 155 * US, 45 * US, "grey"),
    ]


def test_partial_overlap_moves_to_an_overflow_lane_keeping_durations(tmp_path: Path) -> None:
    b = EventsBuilder()
    b.cpu_op(0, 10 * US, "outer")
    b.cpu_op(2 * US, 3 * US, "inner")
    b.cpu_op(8 * US, 10 * US, "crossing")  # starts inside outer, ends after it
    b.kernel(0, 10 * US, "k1")
    b.kernel(9 * US, 5 * US, "k2")  # 1 µs of clock jitter on one stream
    summary = write(tmp_path, b.table())
    lanes = {summary.tracks[t]: [ev["name"] for ev in evs] for t, evs in summary.by_track.items()}
    assert lanes == {
        "thread 1": ["outer", "inner"],
        "thread 1 (overlap 1)": ["crossing"],
        "stream 7": ["k1"],
        "stream 7 (overlap 1)": ["k2"],
    }
    (crossing,) = slices_named(summary, "crossing")
    assert perfetto_ns(crossing["dur"]) == 10 * US
    assert summary.other["overlapping_moved"] == 2


def test_window_keeps_overlapping_events_and_the_profile_origin(tmp_path: Path) -> None:
    counters = pa.table(
        {
            "rank": [0, 0, 0],
            "track": ["host"] * 3,
            "name": ["rss"] * 3,
            "ts_ns": [0, 90 * US, 150 * US],
            "value": [1.0, 2.0, 3.0],
        },
        schema=schema.COUNTERS_SCHEMA,
    )
    summary = write(
        tmp_path,
        two_steps().table(),
        gaps=gaps(),
        counters=counters,
        window=(100 * US, 200 * US),
        device_busy=False,
    )
    names = {ev["name"] for evs in summary.by_track.values() for ev in evs}
    # step 1's kernel and copy ended before 100 µs; its gap [70, 110) overlaps the window
    assert "gemm" not in names and "ProfilerStep#1" not in names
    assert {"ProfilerStep#2", "add_kernel", "aten::add", "idle: sync", "idle: other"} <= names
    (step2,) = slices_named(summary, "ProfilerStep#2")
    assert perfetto_ns(step2["ts"]) == 100 * US  # still relative to the profile start
    # the flows of step 2 only: both ends inside
    assert summary.flows == 2
    # rss held 2.0 when the window opened, then 3.0 at 150 µs
    assert summary.counters == 2


def test_window_counter_carry_in_values(tmp_path: Path) -> None:
    counters = pa.table(
        {
            "rank": [0, 0, 0],
            "track": ["host"] * 3,
            "name": ["rss"] * 3,
            "ts_ns": [0, 90 * US, 150 * US],
            "value": [1.0, 2.0, 3.0],
        },
        schema=schema.COUNTERS_SCHEMA,
    )
    path = tmp_path / "w.json"
    write_timeline(
        path, two_steps().table(), counters=counters, window=(100 * US, 200 * US), device_busy=False
    )
    doc = load(path)
    samples = [
        (perfetto_ns(e["ts"]), e["args"]["rss"]) for e in doc["traceEvents"] if e["ph"] == "C"
    ]
    assert samples == [(100 * US, 2.0), (150 * US, 3.0)]


def test_max_events_keeps_the_earliest_and_says_where_it_cut(tmp_path: Path) -> None:
    events = two_steps().table()
    path = tmp_path / "cut.json.gz"
    stats = write_timeline(path, events, max_events=5)
    summary = validate(load(path))
    # in start order: step1 0, mm 1, launch 2, gemm 10, launch 50 | copy 60 ...
    assert stats.events_total == events.num_rows == 13
    assert stats.events_written == summary.slices == 5
    assert stats.truncated_at_ns == 60 * US == summary.other["truncated_at_ns"]
    assert summary.flows == 1  # the memcpy launched at 50 µs runs at 60 µs: cut off


def test_instants_are_thread_scoped(tmp_path: Path) -> None:
    b = EventsBuilder().cpu_op(0, 10 * US, "op").add(schema.INSTANT, "mark", 5 * US, 0)
    path = tmp_path / "i.json"
    write_timeline(path, b.table())
    (mark,) = [e for e in load(path)["traceEvents"] if e.get("name") == "mark"]
    assert mark["ph"] == "i" and mark["s"] == "t" and "dur" not in mark


def test_numbers_of_every_size_keep_their_value(tmp_path: Path) -> None:
    """Small numbers and large ones, in one file and on one record, side by side: ids and
    byte counts on both sides of 4096, absent ones left out, steps of -1, times past 4 s."""
    values = [0, 1, 4095, 4096, 4097, 999_999, 1_000_000, 2**40 + 7]
    b = EventsBuilder()
    expected: dict[str, dict[str, int]] = {}
    for i, value in enumerate(values):
        name = f"op{i}"
        fields: dict[str, int] = {"step": value if i % 3 and value < 2**31 else -1}
        if i % 2:
            fields["external_id"] = value
        if i % 4 == 1:
            fields["bytes"] = values[-1 - i]
        # far apart, so the same thread holds them side by side (no overlap)
        b.cpu_op(i * 700 * MS + 3, (value % 9_000 + 1) * US, name, **fields)
        expected[name] = fields
    b.add(schema.INSTANT, "mark", 5 * 700 * MS + 10 * MS, 0)
    summary = write(tmp_path, b.table(), device_busy=False)
    for name, fields in expected.items():
        (record,) = slices_named(summary, name)
        args = {k: v for k, v in record["args"].items() if k in ("step", "external_id", "bytes")}
        assert args == fields, name
        i = int(name[2:])
        assert perfetto_ns(record["ts"]) == i * 700 * MS
        assert perfetto_ns(record["dur"]) == (values[i] % 9_000 + 1) * US
    (mark,) = [e for e in load(tmp_path / "t.json.gz")["traceEvents"] if e.get("name") == "mark"]
    assert "dur" not in mark and perfetto_ns(mark["ts"]) == 5 * 700 * MS + 10 * MS - 3


def test_trace_strings_are_escaped_json(tmp_path: Path) -> None:
    evil = '</script><img src=x onerror=alert(1)> "quoted" \\ \n\t\x01 é 中文'
    b = EventsBuilder().cpu_op(0, 10 * US, evil, shapes='[[1, "2"]]')
    summary = write(tmp_path, b.table(), name="e.json")
    (ev,) = slices_named(summary, evil)
    assert ev["args"]["shapes"] == '[[1, "2"]]'


def test_findings_spans_become_an_analysis_track(tmp_path: Path) -> None:
    findings = [
        {
            "id": "excessive_sync",
            "title": "sync after every op",
            "severity_ms": 1.0,
            "spans": [{"rank": 0, "start_ns": 140 * US, "end_ns": 160 * US}],
        },
        {
            "id": "host_dispatch_bound",
            "title": "slow dispatch",
            "spans": [{"rank": 0, "start_ns": 150 * US, "end_ns": 190 * US}],
        },
        {"id": "no_spans", "title": "nothing to show"},
    ]
    summary = write(tmp_path, two_steps().table(), findings=findings)
    lanes = {
        summary.tracks[t]: [ev["name"] for ev in evs]
        for t, evs in summary.by_track.items()
        if summary.tracks[t].startswith("findings")
    }
    assert lanes == {
        "findings": ["excessive_sync"],
        "findings (overlap 1)": ["host_dispatch_bound"],
    }


def test_device_busy_is_the_union_over_streams_per_bucket() -> None:
    b = EventsBuilder()
    b.kernel(0, 600 * US, "a", stream=7)
    b.kernel(400 * US, 400 * US, "b", stream=8)  # [400, 800) µs: overlaps a by 200 µs
    b.memcpy(1_500 * US, 1_000 * US, stream=9)  # [1.5, 2.5) ms
    b.cpu_op(0, 3 * MS, "host op")  # host work is not device time
    busy = device_busy_counters(device_busy(b.table()))
    assert busy.column("ts_ns").to_pylist() == [0, MS, 2 * MS, 3 * MS]
    # bucket 0: union [0, 800) µs = 80 %; bucket 1: [1.5, 2) ms = 50 %; bucket 2: 50 %;
    # then idle after the last task
    assert busy.column("value").to_pylist() == [80.0, 50.0, 50.0, 0.0]
    assert set(busy.column("track").to_pylist()) == {"device 0"}


def test_device_busy_widens_buckets_on_long_profiles() -> None:
    b = EventsBuilder().kernel(0, 10 * MS, "a")
    busy = device_busy_counters(device_busy(b.table(), max_buckets=4))
    # 10 buckets of 1 ms would exceed 4: buckets of 3 ms, the last one partly past the end
    assert busy.column("ts_ns").to_pylist() == [0, 3 * MS, 6 * MS, 9 * MS, 12 * MS]
    assert busy.column("value").to_pylist() == [
        100.0,
        100.0,
        100.0,
        pytest.approx(100 / 3, 1e-3),
        0.0,
    ]
    assert busy.column("name").to_pylist()[0] == "busy % (3 ms)"


def test_step_timelines_one_file_per_step_sharing_the_origin(tmp_path: Path) -> None:
    events = two_steps().table()
    windows = [
        StepWindow(0, 1, 0, 100 * US, 0, 100 * US),
        StepWindow(0, 2, 100 * US, 200 * US, 100 * US, 200 * US),
    ]
    paths = write_step_timelines(tmp_path / "timeline", events, windows, gaps(), None)
    assert [p.name for p in paths] == ["step_1.json.gz", "step_2.json.gz"]
    step2 = validate(load(paths[1]))
    (mark,) = slices_named(step2, "ProfilerStep#2")
    assert perfetto_ns(mark["ts"]) == 100 * US
    assert step2.other["window_ns"] == [100 * US, 200 * US]
    assert "ProfilerStep#1" not in {ev["name"] for evs in step2.by_track.values() for ev in evs}


def test_output_is_deterministic_and_gzip_has_no_timestamp(tmp_path: Path) -> None:
    events = two_steps().table()
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    write_timeline(a, events, gaps=gaps())
    write_timeline(b, events, gaps=gaps())
    raw = a.read_bytes()
    assert raw == b.read_bytes()
    assert raw[4:8] == b"\0\0\0\0"  # gzip MTIME
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_missing_columns_raise_perfledger_error(tmp_path: Path) -> None:
    events = two_steps().table().drop_columns(["correlation"])
    with pytest.raises(PerfledgerError, match="correlation"):
        write_timeline(tmp_path / "x.json.gz", events)


def test_the_args_text_and_the_flops_are_not_read(tmp_path: Path) -> None:
    # what `perfledger timeline` leaves on disk: the same bytes without those columns
    events = two_steps().table()
    at = events.schema.get_field_index("args")  # texts the slices never show
    texts = pa.array(['{"grid": [1, 1, 1], "queued": 7}'] * events.num_rows, pa.string())
    events = events.set_column(at, events.schema.field(at), texts)
    whole, bare = tmp_path / "whole.json.gz", tmp_path / "bare.json.gz"
    write_timeline(whole, events, gaps=gaps())
    write_timeline(bare, events.drop_columns(["args", "flops"]), gaps=gaps())
    assert gzip.decompress(whole.read_bytes()) == gzip.decompress(bare.read_bytes())


def test_empty_events_give_a_valid_empty_trace(tmp_path: Path) -> None:
    summary = write(tmp_path, schema.empty_events())
    assert summary.slices == 0 and summary.flows == 0


@pytest.fixture(params=["compiled", "pieces"])
def record_builder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of writing records: the compiled formatter's rows, else the pieces joined."""
    if request.param == "compiled" and text._records is None:
        pytest.skip("no C compiler where the project was installed")
    if request.param == "pieces":
        monkeypatch.setattr(text, "_records", None)


@pytest.mark.usefixtures("record_builder")
def test_golden_small_timeline(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    events = two_steps().table()
    findings = [
        {
            "id": "excessive_sync",
            "title": "sync",
            "spans": [{"rank": 0, "start_ns": 140 * US, "end_ns": 160 * US}],
        }
    ]
    counters = pa.table(
        {"rank": [0], "track": ["host"], "name": ["cpu %"], "ts_ns": [50 * US], "value": [12.5]},
        schema=schema.COUNTERS_SCHEMA,
    )
    path = tmp_path / "small.json"
    write_timeline(path, events, gaps=gaps(), counters=counters, findings=findings)
    golden = GOLDEN / "timeline_small.json"
    if update_golden(request):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(path.read_bytes())
    assert golden.exists(), f"{golden} missing: run pytest with --update-golden"
    assert path.read_bytes() == golden.read_bytes()
    validate(load(golden))


# --- the lane assignment on its own ---------------------------------------------------------


def laminar(intervals: list[tuple[int, int]]) -> bool:
    """No two intervals overlap without one holding the other (checked pairwise)."""
    for i, (s1, e1) in enumerate(intervals):
        for s2, e2 in intervals[i + 1 :]:
            if e1 <= s1 or e2 <= s2:
                continue
            overlap = s1 < e2 and s2 < e1
            nested = (s1 <= s2 and e2 <= e1) or (s2 <= s1 and e1 <= e2)
            if overlap and not nested:
                return False
    return True


intervals_strategy = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=0,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(intervals_strategy)
def test_lanes_are_laminar_and_hold_everything(items: list[tuple[int, int]]) -> None:
    start = np.array([s for s, _ in items], dtype=np.int64)
    end = np.array([e for _, e in items], dtype=np.int64)
    lanes = track_lanes(start, end)
    assert (lanes >= 0).all()
    for k in np.unique(lanes):
        members = [items[i] for i in np.flatnonzero(lanes == k)]
        assert laminar(members), (k, members)
    if laminar(items):
        assert (lanes == 0).all()


@settings(max_examples=400, deadline=None)
@given(intervals_strategy, st.booleans())
def test_the_compiled_laminar_test_answers_as_the_numpy_one(
    items: list[tuple[int, int]], ordered: bool
) -> None:
    if intervals._laminar is None:
        pytest.skip("no C compiler where the project was installed")
    if ordered:  # the order tracks come in (by start, longer first): both test crossings
        items = sorted(items, key=lambda t: (t[0], -t[1]))
    start = np.array([s for s, _ in items], dtype=np.int64)
    end = np.array([e for _, e in items], dtype=np.int64)
    answer = layout.is_laminar(start, end)
    assert answer == layout._laminar(start, end)
    if answer:  # never a track that crosses
        assert laminar(items)
    elif ordered:
        assert not laminar(items)


def test_the_compiled_laminar_test_refuses_other_arrays() -> None:
    if intervals._laminar is None:
        pytest.skip("no C compiler where the project was installed")
    with pytest.raises(ValueError, match="int64 arrays of one length"):
        intervals._laminar(np.zeros(3, np.int64), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="int64 arrays of one length"):
        intervals._laminar(np.zeros(3, np.int32), np.zeros(3, np.int32))


@settings(max_examples=100, deadline=None)
@given(intervals_strategy)
def test_nested_families_stay_on_one_lane(items: list[tuple[int, int]]) -> None:
    # build a laminar family: intervals clipped into a binary hierarchy of [0, 64)
    family = []
    for s, e in items:
        size = 1 << max(0, (e - s).bit_length() - 1)
        lo = (s // size) * size
        family.append((lo, lo + size))
    start = np.array([s for s, _ in family], dtype=np.int64)
    end = np.array([e for _, e in family], dtype=np.int64)
    assert laminar(family)
    assert (track_lanes(start, end) == 0).all()


@settings(max_examples=300, deadline=None)
@given(intervals_strategy)
def test_tracks_in_start_order_get_the_lanes_of_any_order(items: list[tuple[int, int]]) -> None:
    # a track's events come by start, longer first: the order its lanes' pass is checked in
    ordered = sorted(items, key=lambda t: (t[0], -t[1]))
    start = np.array([s for s, _ in ordered], dtype=np.int64)
    end = np.array([e for _, e in ordered], dtype=np.int64)
    lanes = track_lanes(start, end)
    assert (lanes >= 0).all()
    for k in np.unique(lanes):
        members = [ordered[i] for i in np.flatnonzero(lanes == k)]
        assert laminar(members), (k, members)
    assert (lanes == 0).all() == laminar(ordered)
    # reversed (the general pass, not the check of ordered tracks): the same verdict
    reversed_lanes = track_lanes(start[::-1].copy(), end[::-1].copy())
    assert (reversed_lanes == 0).all() == laminar(ordered)


def test_counter_values_are_finite_numbers(tmp_path: Path) -> None:
    counters = pa.table(
        {
            "rank": [0, 0],
            "track": ["host", "host"],
            "name": ["x", "x"],
            "ts_ns": [0, 10],
            "value": [math.nan, 1.5],
        },
        schema=schema.COUNTERS_SCHEMA,
    )
    path = tmp_path / "c.json"
    write_timeline(
        path, EventsBuilder().cpu_op(0, 100, "op").table(), counters=counters, device_busy=False
    )
    text = path.read_text()
    assert "NaN" not in text and "nan" not in text
    assert [e["args"] for e in json.loads(text)["traceEvents"] if e["ph"] == "C"] == [{"x": 1.5}]


def test_gzip_content_matches_plain(tmp_path: Path) -> None:
    events = two_steps().table()
    write_timeline(tmp_path / "a.json.gz", events)
    write_timeline(tmp_path / "a.json", events)
    assert (
        gzip.decompress((tmp_path / "a.json.gz").read_bytes()) == (tmp_path / "a.json").read_bytes()
    )


def test_flows_never_go_back_in_time_even_with_clock_skew(tmp_path: Path) -> None:
    b = EventsBuilder()
    # the kernel starts 1 µs into a 10 µs launch and lasts 1 µs: both middles would cross
    b.launch(0, 10 * US, 1 * US, 1 * US, "early")
    # clock skew: the kernel [20, 30) starts before its launch [25, 27) began
    b.launch(25 * US, 2 * US, 20 * US, 10 * US, "skewed")
    # the kernel [40, 41) ended before its launch [50, 52) began: no flow can be drawn
    b.launch(50 * US, 2 * US, 40 * US, 1 * US, "impossible")
    path = tmp_path / "skew.json"
    write_timeline(path, b.table())
    summary = validate(load(path))  # every flow leaves its launch and goes forward in time
    assert summary.flows == 2
    assert summary.other["flows_unplaceable"] == 1
    doc = load(path)
    points = {
        (e["ph"], e["id"]): perfetto_ns(e["ts"])
        for e in doc["traceEvents"]
        if e["ph"] in ("s", "f")
    }
    # early: leaves at the kernel start (1 µs), enters at the kernel middle (1.5 µs)
    assert points[("s", 1)] == 1 * US and points[("f", 1)] == 1_500
    # skewed: leaves at the launch start (25 µs), enters at the kernel middle (25 µs)
    assert points[("s", 2)] == 25 * US and points[("f", 2)] == 25 * US
