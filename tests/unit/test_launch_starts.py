"""launch_starts: each device task's launch call found by its correlation id, with ids that
calls share and ids that come out of order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis.profile import analyze_rank
from perfledger.analysis.steps import launch_keys, launch_starts
from perfledger.model import schema
from perfledger.sources import load_traces
from tests.paths import data_file
from tests.scenarios import US, Timeline


def _events(
    calls: Sequence[tuple[str, float, int]], kernels: Sequence[tuple[float, int]]
) -> pa.Table:
    """Runtime calls (name, start µs, correlation id) on one thread, then kernels (start µs,
    correlation id) on one stream, each 1 µs long."""
    t = Timeline()
    for name, start_us, correlation in calls:
        t.event(schema.RUNTIME, name, start_us, 1, correlation=correlation)
    for start_us, correlation in kernels:
        t.event(schema.KERNEL, "k", start_us, 1, device=0, stream=7, correlation=correlation)
    return t.table()


def _by_start(events: pa.Table) -> dict[int, int]:
    """Each row's launch start by the row's own start (the rows start apart)."""
    rows = events.column("start_ns").to_pylist()
    return dict(zip(rows, launch_starts(events).tolist(), strict=True))


def test_tasks_find_their_calls_by_id_whatever_the_order_of_the_ids() -> None:
    # ids counted down as the calls go, as no runtime does, and one id a request and its
    # reply share (different names): the earlier of the two is the launch; the last task's
    # call is not in the trace
    events = _events(
        [
            ("cudaLaunchKernel", 10, 30),
            ("cudaLaunchKernel", 20, 20),
            ("cuLaunchKernel", 30, 10),
            ("cudaStreamWait", 35, 10),
        ],
        [(50, 30), (60, 20), (70, 10), (80, 99)],
    )
    starts = _by_start(events)
    assert starts[50 * US] == 10 * US
    assert starts[60 * US] == 20 * US
    assert starts[70 * US] == 30 * US
    assert starts[80 * US] == -1
    # host rows have no launch
    assert starts[10 * US] == -1


def test_an_id_two_calls_of_one_name_carry_leaves_its_task_without_a_launch() -> None:
    events = _events(
        [
            ("cudaLaunchKernel", 10, 5),
            ("cudaLaunchKernel", 12, 5),
            ("cudaMemsetAsync", 14, 5),
            ("cudaLaunchKernel", 16, 6),
        ],
        [(50, 5), (60, 6)],
    )
    starts = _by_start(events)
    assert starts[50 * US] == -1
    assert starts[60 * US] == 16 * US


@pytest.mark.parametrize(
    "name",
    [
        "kineto/v100_rank1_ddp.json.gz",
        "kineto/mi250_rocm_minitoy.json.gz",
        "kineto/h200/ddp",
        "ascend/torch_npu_db/level1",
    ],
)
def test_the_keys_a_rank_keeps_for_its_replays_are_those_of_its_events(name: str) -> None:
    # found once by the analysis, narrowed to 4 bytes where they fit; the replays read them
    # instead of finding them again on the events with the steps assigned
    for trace in load_traces([data_file(name)]):
        rank = analyze_rank(trace)
        kept, found = rank.launch_keys, launch_keys(rank.events)
        assert kept is not None and found.task_rows.size > 0
        for field in ("task_rows", "task_key", "launch_rows", "bounds"):
            assert np.array_equal(getattr(kept, field), getattr(found, field)), field
            assert getattr(kept, field).dtype == np.int32
        launch_start = rank.events.column("start_ns").to_numpy()[found.launch_rows]
        assert np.array_equal(kept.starts(launch_start), found.starts(launch_start))


def test_no_call_is_kept_when_no_task_carries_an_id_of_theirs() -> None:
    events = _events([("cudaLaunchKernel", 10, 1), ("cudaEventQuery", 12, 3)], [(50, 2)])
    keys = launch_keys(events)
    assert keys.launch_rows.size == keys.bounds.size == keys.task_rows.size == 0
    assert launch_starts(events).tolist() == [-1, -1, -1]


def test_calls_that_launch_no_task_are_not_kept() -> None:
    # a stream wait and an event query carry correlation ids of their own, which no task
    # carries: the replays would map their starts for nothing
    events = _events(
        [
            ("cudaLaunchKernel", 10, 1),
            ("cudaStreamWaitEvent", 12, 2),
            ("cudaEventQuery", 14, 3),
            ("cudaLaunchKernel", 16, 4),
        ],
        [(50, 4), (60, 1)],
    )
    keys = launch_keys(events)
    start = events.column("start_ns").to_numpy()
    assert sorted(start[keys.launch_rows].tolist()) == [10 * US, 16 * US]
    assert keys.bounds.tolist() == [0, 1]
    assert sorted(keys.task_key.tolist()) == [0, 1]
    starts = _by_start(events)
    assert (starts[50 * US], starts[60 * US]) == (16 * US, 10 * US)


def test_the_launches_of_a_real_trace_are_the_earliest_call_of_each_task() -> None:
    # worked out here row by row: each task's (rank, correlation), the host calls carrying
    # it, none of one name twice, the earliest of them
    (trace,) = load_traces([data_file("kineto/v100_rank1_ddp.json.gz")])
    events = analyze_rank(trace).events
    rows = events.select(["kind", "name", "rank", "device", "correlation", "start_ns"]).to_pylist()
    calls: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for row in rows:
        if row["kind"] in schema.LAUNCH_KINDS and row["device"] < 0 and row["correlation"] >= 0:
            key = (row["rank"], row["correlation"])
            calls.setdefault(key, []).append((row["name"], row["start_ns"]))
    expected = []
    carried = set()
    for row in rows:
        launch = -1
        if row["kind"] in schema.DEVICE_TASK_KINDS and row["correlation"] >= 0:
            key = (row["rank"], row["correlation"])
            carried.add(key)
            names = [name for name, _ in calls.get(key, [])]
            if names and len(set(names)) == len(names):
                launch = min(start for _, start in calls[key])
        expected.append(launch)
    assert launch_starts(events).tolist() == expected
    # every key kept is some task's; no call kept of an id that no task carries, which the
    # trace has (stream waits, event queries ...)
    keys = launch_keys(events)
    assert np.unique(keys.task_key).size == keys.bounds.size
    kept = {(rows[r]["rank"], rows[r]["correlation"]) for r in keys.launch_rows.tolist()}
    assert kept <= carried
    assert set(calls) - carried
