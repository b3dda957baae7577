"""Step slices of a profile written without a whole timeline are prepared a few steps at a
time (the rows near a group of windows): every file holds the bytes of a preparation of
every row."""

from __future__ import annotations

import gzip
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.model.accounts import StepWindow
from perfledger.render import timeline
from perfledger.render.timeline import writer
from perfledger.render.timeline.file import TimelineFile, overlaps
from perfledger.render.timeline.layout import MAX_LANES
from tests.synth import EventsBuilder, gaps_table

US = 1_000
STEPS = 8
# slices on one thread that each cross the one before: the track needs this many lanes
STAIRCASE = MAX_LANES + 3


def _rank_events(rank: int) -> pa.Table:
    """Steps of 100 µs: per step an op and a launch whose kernel runs into the next step
    (so it belongs to two windows), an instant, and over the whole trace a long annotation
    (in every window) and, in step 1, a staircase of crossing ops (3 rows left out)."""
    b = EventsBuilder(rank=rank)
    b.annotation(0, (STEPS + 2) * 100 * US, "whole run", thread=2)
    for step in range(1, STEPS + 1):
        t0 = step * 100 * US
        b.step_mark(t0, 100 * US, step, step=step)
        b.cpu_op(t0 + US, 50 * US, f"aten::mm{step % 3}", external_id=step, step=step)
        b.launch(
            t0 + 2 * US,
            5 * US,
            t0 + 70 * US,
            60 * US,  # ends 30 µs into the next step
            f"k{step}",
            external_id=step,
            step=step,
        )
        b.add("instant", "mark", t0 + 40 * US, 0, stream=1, step=step)
    for i in range(STAIRCASE):
        b.cpu_op(100 * US + 2 * US + i * 100, 20 * US, "stair", thread=3, step=1)
    return b.table()


def _windows(ranks: list[int]) -> list[StepWindow]:
    return [
        StepWindow(rank, step, *(step * 100 * US, (step + 1) * 100 * US) * 2)
        for rank in ranks
        for step in range(1, STEPS + 1)
    ]


def _gaps(rank: int) -> pa.Table:
    return gaps_table(
        [
            {
                "rank": rank,
                "device": 0,
                "stream": 7,
                "step": step,
                "start_ns": step * 100 * US + 30 * US,
                "end_ns": step * 100 * US + 70 * US,
                "cause": "host_dispatch",
            }
            for step in range(1, STEPS + 1)
        ]
    )


def _parts(ranks: list[int]) -> list[timeline.TimelinePart]:
    return [timeline.TimelinePart(r, _rank_events(r), _gaps(r)) for r in ranks]


def _findings(ranks: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "id": "slow_step",
            "title": "a slow step",
            "spans": [{"rank": r, "start_ns": 300 * US, "end_ns": 420 * US} for r in ranks],
        }
    ]


def _counters(ranks: list[int]) -> pa.Table:
    ts = [t * 50 * US for t in range(2 * STEPS + 4)]
    return pa.table(
        {
            "rank": pa.array([r for r in ranks for _ in ts], pa.int32()),
            "track": pa.array(["host"] * (len(ranks) * len(ts)), pa.string()),
            "name": pa.array(["cpu %"] * (len(ranks) * len(ts)), pa.string()),
            "ts_ns": pa.array(ts * len(ranks), pa.int64()),
            "value": pa.array([float(i % 7) for i in range(len(ranks) * len(ts))], pa.float64()),
        }
    )


def _grouped(
    out: Path, ranks: list[int], monkeypatch: pytest.MonkeyPatch, group_rows: int, cap: int | None
) -> list[Path]:
    """The step files as analyze writes them without a whole timeline, groups of at most
    ``group_rows`` rows, of one file at least."""
    monkeypatch.setattr(writer, "GROUP_ROWS", group_rows)
    monkeypatch.setattr(writer, "STEP_WRITERS", 1)
    _, paths = timeline.write_profile_timelines(
        None,
        out,
        _parts(ranks),
        _windows(ranks),
        counters=_counters(ranks),
        findings=_findings(ranks),
        step_max_events=cap,
    )
    return paths


def _one_file_each(out: Path, ranks: list[int], cap: int | None) -> list[Path]:
    """Each step file written on its own from the preparation of every row of each rank."""
    parts = {p.rank: p for p in _parts(ranks)}
    origin = min(pc.min(p.events["start_ns"]).as_py() for p in parts.values())
    paths = []
    for step in range(1, STEPS + 1):
        path = out / f"step_{step}.json.gz"
        timeline.write_ranks_timeline(
            path,
            ranks,
            lambda i: parts[ranks[i]],
            origin_ns=origin,
            window=(step * 100 * US, (step + 1) * 100 * US),
            counters=_counters(ranks),
            findings=_findings(ranks),
            max_events=cap,
        )
        paths.append(path)
    return paths


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def _counted_preparations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows of each preparation the writer makes from here on (in order)."""
    seen: list[int] = []
    prepare_rows = writer.prepare_rows

    def counted(placement: Any, events: pa.Table, rows: Any, **options: Any) -> Any:
        seen.append(int(rows.size))
        return prepare_rows(placement, events, rows, **options)

    monkeypatch.setattr(writer, "prepare_rows", counted)
    return seen


@pytest.mark.parametrize("ranks", [[0], [0, 3]])
@pytest.mark.parametrize("cap", [None, 9])
def test_step_files_prepared_a_step_at_a_time_equal_those_of_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranks: list[int], cap: int | None
) -> None:
    seen = _counted_preparations(monkeypatch)
    grouped = _grouped(tmp_path / "grouped", ranks, monkeypatch, group_rows=1, cap=cap)
    monkeypatch.undo()
    alone = _one_file_each(tmp_path / "alone", ranks, cap)
    # one preparation per step and rank, of the rows that overlap its window only: the
    # annotation over the run, the step's mark, op, runtime call, kernel and instant, the
    # kernel of the step before; in step 1 no kernel before, the staircase's placed ops
    assert seen == [1 + 5 + MAX_LANES, *[1 + 5 + 1] * (STEPS - 1)] * len(ranks)
    assert [p.name for p in grouped] == [p.name for p in alone]
    assert [p.read_bytes() for p in grouped] == [p.read_bytes() for p in alone]
    # what the comparison covers: a kernel in two windows, the long annotation in every
    # file, flows, counters, rows left out counted in every file, the cap per rank
    docs = [_doc(p) for p in grouped]
    names = [{e.get("name") for e in d["traceEvents"]} for d in docs]
    assert all("whole run" in n for n in names)
    assert all(d["otherData"]["dropped"] == len(ranks) * (STAIRCASE - MAX_LANES) for d in docs)
    assert all(any(e["ph"] == "C" for e in d["traceEvents"]) for d in docs)
    if cap is None:
        assert all({f"k{s}", f"k{s - 1}"} <= names[s - 1] for s in range(2, STEPS + 1))
        assert all(any(e["ph"] == "s" for e in d["traceEvents"]) for d in docs)
    else:  # step 1's staircase fills the cap
        assert docs[0]["otherData"]["truncated_at_ns"] is not None


def test_groups_of_several_steps_equal_groups_of_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = _grouped(tmp_path / "one", [0, 3], monkeypatch, group_rows=1, cap=None)
    several = _grouped(tmp_path / "several", [0, 3], monkeypatch, group_rows=40, cap=None)
    everything = _grouped(tmp_path / "all", [0, 3], monkeypatch, group_rows=10**9, cap=None)
    assert [p.read_bytes() for p in one] == [p.read_bytes() for p in several]
    assert [p.read_bytes() for p in one] == [p.read_bytes() for p in everything]


def test_a_group_of_scattered_steps_prepares_the_rows_of_its_windows_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # analyze of a large trace writes a few chosen steps: one group of steps 2, 5 and 8
    # prepares the rows that overlap those three windows, not those of the steps between
    chosen = [2, 5, 8]
    seen = _counted_preparations(monkeypatch)
    monkeypatch.setattr(writer, "GROUP_ROWS", 10**9)
    _, grouped = timeline.write_profile_timelines(
        None,
        tmp_path / "grouped",
        _parts([0]),
        [w for w in _windows([0]) if w.step in chosen],
        counters=_counters([0]),
        findings=_findings([0]),
    )
    monkeypatch.undo()
    # the annotation over the run once; per step its mark, op, runtime call, kernel and
    # instant, and the kernel of the step before
    assert seen == [1 + len(chosen) * (5 + 1)]
    alone = {p.name: p for p in _one_file_each(tmp_path / "alone", [0], None)}
    assert [p.name for p in grouped] == [f"step_{s}.json.gz" for s in chosen]
    assert [p.read_bytes() for p in grouped] == [alone[p.name].read_bytes() for p in grouped]


def test_a_preparation_of_rows_holds_no_row_left_out() -> None:
    events = _rank_events(0)
    placement = timeline.place_timeline(events)
    left_out = int((placement.row_thread < 0).argmax())
    assert placement.dropped == STAIRCASE - MAX_LANES
    with pytest.raises(ValueError, match="left out"):
        timeline.prepare_rows(placement, events, pa.array([left_out]).to_numpy())


def test_step_files_closed_as_written_go_when_a_later_group_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # groups of one step: the first steps' files are closed before the third group fails
    calls: list[int] = []
    prepare_rows = writer.prepare_rows

    def failing(placement: Any, events: pa.Table, rows: Any, **options: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return prepare_rows(placement, events, rows, **options)

    monkeypatch.setattr(writer, "prepare_rows", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        _grouped(tmp_path / "out", [0], monkeypatch, group_rows=1, cap=None)
    assert len(calls) == 3
    assert list((tmp_path / "out").iterdir()) == []


def test_a_closed_timeline_file_closes_again_to_the_same_figures(tmp_path: Path) -> None:
    events = _rank_events(0)
    origin = pc.min(events["start_ns"]).as_py()
    out = TimelineFile(tmp_path / "t.json.gz", origin=origin, window=None, max_events=None)
    out.add(timeline.prepare_timeline(events, origin_ns=origin))
    first = out.close()
    written = out.path.read_bytes()
    assert out.close() == first
    assert out.path.read_bytes() == written


def test_a_window_file_written_whole_stays_when_the_write_fails_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the file a user asked for is closed with its last rank's part; a failure (Ctrl-C) in
    # what follows must not take the whole file away (with --force, their only copy)
    ranks = [0, 1]
    parts = {p.rank: p for p in _parts(ranks)}
    origin = min(pc.min(p.events["start_ns"]).as_py() for p in parts.values())
    path = tmp_path / "window.json.gz"
    drops = writer.drop_mapped_pages
    written: list[bool] = []

    def interrupted(*tables: Any, **options: Any) -> None:
        drops(*tables, **options)
        if path.exists():  # after the last group, the file closed
            written.append(True)
            raise KeyboardInterrupt

    monkeypatch.setattr(writer, "drop_mapped_pages", interrupted)
    with pytest.raises(KeyboardInterrupt):
        timeline.write_ranks_timeline(
            path, ranks, lambda i: parts[ranks[i]], origin_ns=origin, window=None
        )
    assert written
    document = json.loads(gzip.decompress(path.read_bytes()))
    assert {e["pid"] for e in document["traceEvents"] if e.get("ph") == "X"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["window.json.gz"]


def test_a_closed_timeline_file_goes_on_abort_only_when_asked(tmp_path: Path) -> None:
    events = _rank_events(0)
    origin = pc.min(events["start_ns"]).as_py()
    for remove in (False, True):
        out = TimelineFile(
            tmp_path / f"{remove}.json.gz", origin=origin, window=None, max_events=None
        )
        out.add(timeline.prepare_timeline(events, origin_ns=origin))
        out.close()
        out.abort(remove_closed=remove)
        assert out.path.exists() != remove


def test_a_group_is_written_while_the_next_is_prepared_one_group_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # groups of one step, four writers: the next group's rows are prepared while a group's
    # file is written, but a group's files start only once the group before is written
    # (never two adds to one file at once, two groups' rows held at most)
    lock = threading.Lock()
    prepared = threading.Condition(lock)
    in_flight: list[str] = []
    most = [0]
    preparations = [0]
    overlapped: list[bool] = []  # per add: the next group's preparation began meanwhile
    add = TimelineFile.add
    prepare_rows = writer.prepare_rows

    def watched_add(self: TimelineFile, *args: Any, **kwargs: Any) -> None:
        with lock:
            assert self.path.name not in in_flight
            in_flight.append(self.path.name)
            most[0] = max(most[0], len(in_flight))
            # this group's preparation is the rank's (the second rank's come after the
            # first's) step-th; a rank's last group has no next one: the wait runs out
            step = int(self.path.name.split("_")[1].split(".")[0])
            mine = step + (STEPS if kwargs["rank"] == 3 else 0)
            # long for a next group that comes (a loaded machine), short where none comes
            waited = 0.5 if step == STEPS else 10.0
            overlapped.append(prepared.wait_for(lambda: preparations[0] > mine, timeout=waited))
        try:
            add(self, *args, **kwargs)
        finally:
            with lock:
                in_flight.remove(self.path.name)

    def watched_prepare(placement: Any, events: pa.Table, rows: Any, **options: Any) -> Any:
        with lock:
            preparations[0] += 1
            prepared.notify_all()
        return prepare_rows(placement, events, rows, **options)

    monkeypatch.setattr(TimelineFile, "add", watched_add)
    monkeypatch.setattr(writer, "prepare_rows", watched_prepare)
    monkeypatch.setattr(writer, "_step_pool", lambda files: ThreadPoolExecutor(4))
    paths = _grouped(tmp_path / "out", [0, 3], monkeypatch, group_rows=1, cap=None)
    monkeypatch.undo()
    assert most[0] == 1  # groups of one file: one add at a time
    # each group's add saw the next group's preparation begin, but each rank's last
    assert overlapped == [*[True] * (STEPS - 1), False] * 2
    one = _grouped(tmp_path / "one", [0, 3], monkeypatch, group_rows=1, cap=None)
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in one]


slices = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 25)), min_size=1, max_size=40
)  # (start, dur)
windows = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(slices, windows)
def test_the_rows_near_a_group_are_those_overlapping_one_of_its_windows(
    rows: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> None:
    # windows that overlap, touch or lie apart; slices of every length, instants among them
    start = np.array([s for s, _ in rows], dtype=np.int64)
    dur = np.array([d for _, d in rows], dtype=np.int64)
    group = [(lo, lo + width) for lo, width in spans]
    lo, hi = writer._joined_windows(group)
    assert np.all(lo[1:] > hi[:-1])  # disjoint, apart, ascending
    near = writer._overlapping_one(start, dur, start + dur, lo, hi)
    each = np.zeros(start.size, dtype=bool)
    for a, b in group:
        each |= overlaps(start, dur, a, b)
    assert near.tolist() == each.tolist()
