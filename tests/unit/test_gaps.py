"""Gap histogram and worst gaps on hand-built gaps and host activity."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.gaps import GAP_BUCKETS, gap_report
from perfledger.model.accounts import IDLE_CAUSES
from perfledger.model.gaps import WORST_GAPS_SCHEMA
from tests.synth import EventsBuilder, gaps_table

US = 1_000
MS = 1_000_000


def test_histogram_buckets_and_causes() -> None:
    gaps = gaps_table(
        [
            {"start_ns": 0, "end_ns": 9_999, "cause": "launch_latency"},  # < 10 µs
            {"start_ns": 100_000, "end_ns": 110_000, "cause": "sync"},  # exactly 10 µs
            {"start_ns": 200_000, "end_ns": 299_999, "cause": "sync"},  # just under 100 µs
            {"start_ns": 1 * MS, "end_ns": 2 * MS, "cause": "host_dispatch"},  # exactly 1 ms
            {"start_ns": 3 * MS, "end_ns": 3 * MS + 500 * US, "cause": "dataloader"},
            {"start_ns": 10 * MS, "end_ns": 30 * MS, "cause": "other"},  # 20 ms
            {"start_ns": 40 * MS, "end_ns": 40 * MS, "cause": "other"},  # empty: ignored
        ]
    )
    report = gap_report(gaps, EventsBuilder().table())
    assert [b.label for b in report.buckets] == [label for label, _, _ in GAP_BUCKETS]
    counts = [(b.count, b.total_ns) for b in report.buckets]
    assert counts == [
        (1, 9_999),
        (2, 10_000 + 99_999),
        (1, 500 * US),
        (1, 1 * MS),
        (1, 20 * MS),
    ]
    assert report.count == 6
    assert report.total_ns == 9_999 + 10_000 + 99_999 + 500 * US + 1 * MS + 20 * MS
    second = report.buckets[1]
    assert [c.cause for c in second.by_cause] == list(IDLE_CAUSES)
    sync = {c.cause: (c.count, c.total_ns) for c in second.by_cause}
    assert sync == {
        "host_dispatch": (0, 0),
        "sync": (2, 109_999),
        "dataloader": (0, 0),
        "launch_latency": (0, 0),
        "other": (0, 0),
    }
    assert report.buckets[4].upper_ns is None
    assert (report.buckets[3].lower_ns, report.buckets[3].upper_ns) == (1 * MS, 10 * MS)


def test_worst_gaps_are_longest_first_with_host_context() -> None:
    # Host: step > forward (annotations); forward > aten::linear > aten::item, a second
    # thread running aten::copy_ that started earlier than aten::item.
    events = (
        EventsBuilder()
        .annotation(0, 1_000 * US, "ProfilerStep#1 region")
        .annotation(100 * US, 500 * US, "forward")
        .cpu_op(150 * US, 400 * US, "aten::linear")
        .cpu_op(200 * US, 100 * US, "aten::item")
        .cpu_op(120 * US, 800 * US, "aten::copy_", thread=2)
        .kernel(700 * US, 10 * US, "gemm")  # row 5 after sorting by start
        .annotation(0, 5_000 * US, "on another rank", rank=1)
        .table()
    )
    gemm_row = events["name"].to_pylist().index("gemm")
    gaps = gaps_table(
        [
            # during aten::item (running at 250 µs): the innermost host op and annotation
            {"start_ns": 250 * US, "end_ns": 700 * US, "cause": "sync", "next_task": gemm_row},
            # same length, later start: second
            {"start_ns": 800 * US, "end_ns": 1_250 * US, "cause": "host_dispatch", "step": 2},
            # host idle at the start of this one: no op, no annotation on rank 0
            {"start_ns": 2_000 * US, "end_ns": 2_100 * US, "cause": "other"},
            {"start_ns": 3_000 * US, "end_ns": 3_001 * US, "cause": "other"},
        ]
    )
    worst = gap_report(gaps, events, worst=3).worst
    assert worst.schema.equals(WORST_GAPS_SCHEMA)
    rows = worst.to_pylist()
    assert [(r["start_ns"], r["dur_ns"]) for r in rows] == [
        (250 * US, 450 * US),
        (800 * US, 450 * US),
        (2_000 * US, 100 * US),
    ]
    first, second, third = rows
    assert (first["host_op"], first["host_annotation"], first["next_task"]) == (
        "aten::item",
        "forward",
        "gemm",
    )
    assert first["cause"] == "sync"
    # at 800 µs only aten::copy_ (thread 2) runs; the step region is the only annotation
    assert (second["host_op"], second["host_annotation"]) == (
        "aten::copy_",
        "ProfilerStep#1 region",
    )
    assert (second["step"], second["next_task"]) == (2, None)
    assert (third["host_op"], third["host_annotation"]) == (None, None)


def test_default_keeps_the_twenty_longest() -> None:
    gaps = gaps_table(
        [{"start_ns": i * MS, "end_ns": i * MS + i + 1, "cause": "other"} for i in range(30)]
    )
    worst = gap_report(gaps, EventsBuilder().table()).worst
    assert worst["dur_ns"].to_pylist() == list(range(30, 10, -1))


def test_no_gaps() -> None:
    report = gap_report(gaps_table([]), EventsBuilder().table())
    assert report.count == 0
    assert report.total_ns == 0
    assert all(b.count == 0 for b in report.buckets)
    assert report.worst.num_rows == 0


def test_next_task_of_concatenated_ranks() -> None:
    # next_task is a row of each rank's own table; the profile concatenates the ranks' tables.
    rank0 = EventsBuilder(rank=0).kernel(0, 10, "r0_first").kernel(500, 10, "r0_second").table()
    rank1 = EventsBuilder(rank=1).kernel(0, 10, "r1_first").kernel(900, 10, "r1_second").table()
    events = pa.concat_tables([rank0, rank1])
    gaps = gaps_table(
        [
            {"rank": 0, "start_ns": 10, "end_ns": 500, "cause": "sync", "next_task": 1},
            {"rank": 1, "start_ns": 10, "end_ns": 900, "cause": "sync", "next_task": 1},
            {"rank": 1, "start_ns": 910, "end_ns": 2_000, "cause": "other", "next_task": -1},
        ]
    )
    worst = gap_report(gaps, events).worst.to_pylist()
    assert [(r["rank"], r["next_task"]) for r in worst] == [
        (1, None),  # 1090 ns, ended by no task
        (1, "r1_second"),
        (0, "r0_second"),
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 6), st.integers(0, 4)),
        max_size=40,
    ),
    st.integers(0, 45),
)
def test_the_worst_gaps_are_the_first_of_all_gaps_in_order(
    rows: list[tuple[int, int, int, int]], worst: int
) -> None:
    """Longest first, then by start, rank, device and row, as one sort of every gap (many
    share a length: the worst-th longest's ties are all weighed)."""
    gaps = gaps_table(
        [
            {"rank": r, "device": d, "start_ns": s, "end_ns": s + length, "cause": "other"}
            for r, d, s, length in rows
        ]
    )
    found = gap_report(gaps, EventsBuilder().table(), worst=worst).worst
    kept = [(i, row) for i, row in enumerate(rows) if row[3] > 0]
    expected = sorted(
        kept, key=lambda item: (-item[1][3], item[1][2], item[1][0], item[1][1], item[0])
    )
    picked = [(row[0], row[1], row[2], row[3]) for _, row in expected[:worst]]
    assert (
        list(
            zip(
                found["rank"].to_pylist(),
                found["device"].to_pylist(),
                found["start_ns"].to_pylist(),
                found["dur_ns"].to_pylist(),
                strict=True,
            )
        )
        == picked
    )


def _running_by_hand(ops: list[tuple[int, int, int, int]], rank: int, at: int) -> str | None:
    """The innermost op of ``rank`` running at ``at``, read one op at a time: the latest
    start, then the shortest, then the first in the table."""
    best: tuple[int, int, int] | None = None
    for row, (r, start, dur, _) in enumerate(ops):
        if r == rank and start <= at < start + dur:
            key = (-start, dur, row)
            best = key if best is None or key < best else best
    return None if best is None else f"op{best[2]}"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1), st.integers(0, 60), st.integers(0, 40), st.sampled_from([0, 1])
        ),
        max_size=30,
    ),
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 80)), min_size=1, max_size=8),
    st.booleans(),
)
def test_the_host_op_of_a_gap_is_the_innermost_running_at_its_start(
    ops: list[tuple[int, int, int, int]],
    gaps: list[tuple[int, int]],
    concatenated: bool,
) -> None:
    """Ops of two ranks (sorted by start, or two ranks' tables one after the other), some of
    zero length, some annotations: the host op at each gap's start as a reading
    of every op one by one finds it."""
    if concatenated:
        ops = sorted(ops, key=lambda op: (op[0], op[1]))
    else:
        ops = sorted(ops, key=lambda op: op[1])
    builder = EventsBuilder()
    for row, (rank, start, dur, annotated) in enumerate(ops):
        if annotated:
            builder.annotation(start, dur, f"op{row}", rank=rank)
        else:
            builder.cpu_op(start, dur, f"op{row}", rank=rank)
    events = builder.table(sort=False)
    table = gaps_table(
        [
            {"rank": r, "start_ns": at, "end_ns": at + 1 + i, "cause": "other"}
            for i, (r, at) in enumerate(gaps)
        ]
    )
    worst = gap_report(table, events, worst=len(gaps)).worst.to_pylist()
    for gap in worst:
        cpu = [op if not op[3] else (op[0], op[1], -1, 1) for op in ops]
        marks = [op if op[3] else (op[0], op[1], -1, 0) for op in ops]
        assert gap["host_op"] == _running_by_hand(cpu, gap["rank"], gap["start_ns"])
        assert gap["host_annotation"] == _running_by_hand(marks, gap["rank"], gap["start_ns"])
