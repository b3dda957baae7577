"""The step windows of a replay taken straight from its schedule are the windows that
``step_plan`` finds on the whole replayed events table (the reference: ``replayed_events``
then ``step_plan``), on every trace of tests/data and on hand-built ones, under several
changes."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis import columns, replay_windows
from perfledger.analysis.critical_path import RankReplay, prepare_rank
from perfledger.analysis.graph import StepGraph
from perfledger.analysis.graph_codes import TASK
from perfledger.analysis.profile import analyze_rank
from perfledger.analysis.replay import Schedule, replay, replayed_events
from perfledger.analysis.replay_windows import RankRows, RowTimes
from perfledger.analysis.steps import step_plan
from perfledger.model import schema
from perfledger.model.accounts import StepWindow
from perfledger.model.whatif import NO_CHANGE, Scale, TaskChange, WhatIf
from perfledger.sources import load_traces
from tests.paths import data_file
from tests.synth import EventsBuilder

US = 1_000

TRACES = [
    "kineto/a100_alexnet.json.gz",
    "kineto/a100_rank3_control.json.gz",
    "kineto/a100_triton.json.gz",
    "kineto/cpu_only_rank34.json.gz",
    "kineto/mi250_rocm_minitoy.json.gz",
    "kineto/mtia_inference.json.gz",
    "kineto/old_pt18_inference_rank1.json.gz",
    "kineto/resnet50_gpu_2021.json.gz",
    "kineto/v100_ns_timestamps.json.gz",
    "kineto/v100_rank1_ddp.json.gz",
    "kineto/v100_rank1_test.json.gz",
    "kineto/sampled_2ranks",
    "kineto/h200/train_cnn.json.gz",
    "kineto/h200/infer_cnn.json.gz",
    "kineto/h200/ddp",
    "kineto/h200/llm_graphs.json.gz",
    "ascend/torch_npu_text/level1",
    "ascend/torch_npu_db/level1",
]


def reference_windows(
    events: pa.Table, graph: StepGraph, schedule: Schedule
) -> dict[int, StepWindow]:
    """The windows as measured on the whole replayed events table."""
    return {w.step: w for w in step_plan(replayed_events(events, graph, schedule)).windows}


def changes(graph: StepGraph, events: pa.Table) -> list[WhatIf]:
    """Changes that move host and device times every way the replay can: faster and slower
    work, no waits, lanes of their own, no data loader, fused chains."""
    tasks = np.flatnonzero(graph.kind == TASK)
    rows = graph.row[tasks][: tasks.size // 2]
    fused = TaskChange(
        tuple(rows.tolist()),
        tuple([0.3] * rows.size),
        tuple(bool(i % 3) for i in range(rows.size)),
    )
    return [
        NO_CHANGE,
        WhatIf((Scale("compute", 0.5),)),
        WhatIf((Scale("launch", 0.1),)),
        WhatIf((Scale("host", 0.2), Scale("communication", 3.0))),
        WhatIf(no_sync=True, overlap_comm=True),
        WhatIf(no_dataloader=True, scales=(Scale("memcpy", 0.0001),)),
        WhatIf(tasks=(fused,)),
    ]


@cache
def prepared_ranks(name: str) -> tuple[RankReplay, ...]:
    traces = load_traces([data_file(name)])
    ranks = (analyze_rank(t) for t in traces)
    # as a rank task prepares them: with the launch keys its analysis found
    return tuple(prepare_rank(r.events, launches=r.launch_keys) for r in ranks)


def assert_same_windows(prepared: RankReplay) -> int:
    """Every change's windows both ways; how many steps were compared."""
    compared = 0
    for change in changes(prepared.graph, prepared.events):
        schedule = replay(prepared.graph, change)
        expected = reference_windows(prepared.events, prepared.graph, schedule)
        assert prepared.windows(schedule) == expected, change
        compared += len(expected)
    return compared


@pytest.mark.parametrize("name", TRACES)
def test_windows_from_the_schedule_are_the_replayed_tables_windows(name: str) -> None:
    for prepared in prepared_ranks(name):
        assert assert_same_windows(prepared) > 0
        assert prepared.baseline_windows == reference_windows(
            prepared.events, prepared.graph, prepared.baseline
        )


def assert_same_row_times(prepared: RankReplay, whatifs: list[WhatIf]) -> None:
    """Every row's replayed times both ways."""
    times = RowTimes(RankRows(prepared.events, prepared.graph), None)
    for change in whatifs:
        schedule = replay(prepared.graph, change)
        table = replayed_events(prepared.events, prepared.graph, schedule)
        start, end = times(schedule)
        assert np.array_equal(start, columns.int64(table, "start_ns")), change
        assert np.array_equal(end - start, columns.int64(table, "dur_ns")), change


@pytest.mark.parametrize("name", ["kineto/a100_alexnet.json.gz", "kineto/v100_rank1_ddp.json.gz"])
def test_every_rows_replayed_times_are_the_replayed_tables(name: str) -> None:
    for prepared in prepared_ranks(name):
        assert_same_row_times(prepared, changes(prepared.graph, prepared.events)[1:4])


def two_threads_step() -> pa.Table:
    """Three steps on the main thread (the second mark overlaps the first; the third has no
    task), an autograd thread launching too, a third thread with annotations only, host
    operators around the launches, a device annotation, a collective running past the next
    step's first task, a request and reply sharing one correlation id, two calls of one name
    sharing another, a synchronisation, and a step mark on a fourth thread (not driving)."""
    b = EventsBuilder(stream=7)
    b.step_mark(0, 400 * US, 1).step_mark(390 * US, 300 * US, 2).step_mark(700 * US, 50 * US, 3)
    b.step_mark(10 * US, 20 * US, 9, thread=4)
    b.cpu_op(5 * US, 200 * US, "aten::linear").cpu_op(450 * US, 100 * US, "aten::mm")
    b.annotation(0, 900 * US, "outer", thread=3)
    for i in range(4):
        b.launch(10 * US + i * 30 * US, 8 * US, 60 * US + i * 70 * US, 50 * US, f"gemm_{i}")
    for i in range(3):
        b.launch(400 * US + i * 40 * US, 6 * US, 420 * US + i * 60 * US, 40 * US, "bwd", thread=2)
    b.launch(300 * US, 10 * US, 330 * US, 200 * US, "ncclAllReduce", kind=schema.COMM, stream=13)
    # issued 1 ns before the first mark ends: in the first step (and the second)
    b.launch(400 * US - 1, 1 * US, 420 * US, 100 * US, "edge", stream=8)
    # the request (second mark) issues it, not the reply (third mark)
    shared = b.new_correlation()
    b.runtime(600 * US, 5 * US, "cudaMemcpyAsync", correlation=shared)
    b.sync(710 * US, 1 * US, "cudaStreamSynchronize", correlation=shared)
    b.memcpy(720 * US, 80 * US, correlation=shared)
    twice = b.new_correlation()
    b.runtime(500 * US, 2 * US, "cudaLaunchKernel", correlation=twice)
    b.runtime(510 * US, 2 * US, "cudaLaunchKernel", correlation=twice)
    b.kernel(640 * US, 10 * US, "late", correlation=twice)
    b.add(schema.DEVICE_ANNOTATION, "mark", 300 * US, 5 * US, device=0, stream=7)
    b.sync(560 * US, 120 * US, "cudaDeviceSynchronize")
    return b.table()


def no_marks_step() -> pa.Table:
    """Launches and kernels with host work far around them, no step mark: one window."""
    b = EventsBuilder(stream=7)
    b.cpu_op(0, 5_000 * US, "aten::outer")
    for i in range(5):
        b.launch(1_000 * US + i * 20 * US, 5 * US, 1_050 * US + i * 40 * US, 30 * US, f"k{i}")
    return b.table()


@pytest.mark.parametrize("table", [two_threads_step, no_marks_step])
def test_hand_built_windows_from_the_schedule(table: Callable[[], pa.Table]) -> None:
    prepared = prepare_rank(table())
    whatifs = changes(prepared.graph, prepared.events)
    assert assert_same_windows(prepared) >= len(whatifs)
    assert_same_row_times(prepared, whatifs)


def test_hand_built_windows_follow_the_replayed_launches() -> None:
    """What the fast path reads decides the windows here: the launch 1 ns before the first
    mark's end keeps its long kernel in the first step; the request, not the reply, issues
    the copy."""
    prepared = prepare_rank(two_threads_step())
    first, second = prepared.baseline_windows[1], prepared.baseline_windows[2]
    # the edge kernel's end (without it: the next step's first task, at 420 µs)
    assert first.end_ns == 520 * US
    # the copy's end (issued by the reply, it would be the third step's)
    assert (second.start_ns, second.end_ns) == (520 * US, 800 * US)


@pytest.mark.parametrize("name", ["kineto/a100_alexnet.json.gz", "kineto/v100_rank1_ddp.json.gz"])
def test_row_starts_prepared_without_the_ends_are_the_same(name: str) -> None:
    # GIVEN the launch calls' times prepared with and without their ends
    for prepared in prepared_ranks(name):
        rows = RankRows(prepared.events, prepared.graph)
        launches = columns.isin(prepared.events, "kind", schema.LAUNCH_KINDS)
        at = np.flatnonzero(launches | (columns.int64(prepared.events, "device") < 0))
        both, starts_only = RowTimes(rows, at), RowTimes(rows, at, ends=False)
        # WHEN replayed under changes that move host and device times
        for change in changes(prepared.graph, prepared.events)[:4]:
            schedule = replay(prepared.graph, change)
            # THEN the starts are the same; the ends cannot be asked for
            assert np.array_equal(starts_only.starts(schedule), both(schedule)[0]), change
        with pytest.raises(ValueError):
            starts_only(prepared.baseline)


def test_thread_times_worked_out_in_small_slices_are_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the host rows' times mapped through their threads a few rows at a time
    monkeypatch.setattr(replay_windows, "_SLICE", 7)
    # THEN every row's replayed times are still the replayed table's
    for prepared in prepared_ranks("kineto/v100_rank1_ddp.json.gz"):
        assert_same_row_times(prepared, changes(prepared.graph, prepared.events)[1:4])


def test_every_rows_node_spread_out_is_the_searched_one() -> None:
    # rows given several times (the last node wins), rows outside the table (before its
    # first row, past its last) and none at all: the spread table answers as the search does
    rng = np.random.default_rng(7)
    for _ in range(300):
        count, size = int(rng.integers(0, 40)), int(rng.integers(0, 50))
        rows = rng.integers(-3, size + 5, count).astype(np.int64)
        nodes = rng.integers(0, 1000, count).astype(np.int64)
        table = replay_windows._RowNodes(rows, nodes)
        spread = table.every(size)
        searched = table(np.arange(size, dtype=np.int64))
        assert spread.dtype == searched.dtype
        assert np.array_equal(spread, searched)
