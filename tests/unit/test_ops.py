"""Operator analyses on hand-built traces: every expected figure is derived by hand here."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.ops import (
    api_statistic,
    innermost_enclosing,
    kernel_details,
    op_statistic,
    op_summary,
    operator_nesting,
    self_time,
)
from perfledger.model.tables import (
    API_STATISTIC_SCHEMA,
    HOST_OP_SUMMARY_SCHEMA,
    KERNEL_DETAILS_SCHEMA,
    OP_STATISTIC_SCHEMA,
    OP_SUMMARY_SCHEMA,
)
from perfledger.render.csvs import csv_bytes
from tests.synth import EventsBuilder


def addmm_trace() -> EventsBuilder:
    """aten::linear > aten::addmm issues two kernels through two launch calls, then a copy.

    host:   linear [0, 50k) ext 6 > addmm [1k, 40k) ext 7
            cudaLaunchKernel [2k, 5k) corr 1 ext 7; cudaLaunchKernel [10k, 13k) corr 2 ext 7
    device: sgemm_a [20k, 30k) corr 1; sgemm_b [35k, 40k) corr 2 (waits 5k after sgemm_a);
            a 1 MiB copy [60k, 160k) with no launch call (waits 20k after sgemm_b)
    """
    return (
        EventsBuilder()
        .cpu_op(0, 50_000, "aten::linear", external_id=6)
        .cpu_op(1_000, 39_000, "aten::addmm", external_id=7, shapes="[[4, 8], [8, 16]]")
        .runtime(2_000, 3_000, correlation=1, external_id=7)
        .runtime(10_000, 3_000, correlation=2, external_id=7)
        .kernel(20_000, 10_000, "sgemm_a", correlation=1, step=3)
        .kernel(35_000, 5_000, "sgemm_b", correlation=2, step=3)
        .memcpy(60_000, 100_000, bytes=1 << 20, step=3)
    )


def test_op_summary_links_each_task_to_its_launch_and_host_op() -> None:
    summary = op_summary(addmm_trace().table())
    assert summary.schema.equals(OP_SUMMARY_SCHEMA)
    rows = summary.to_pylist()
    assert [r["name"] for r in rows] == ["sgemm_a", "sgemm_b", "Memcpy HtoD (Pageable -> Device)"]
    assert [r["host_op"] for r in rows] == ["aten::addmm", "aten::addmm", None]
    assert [r["launch_ns"] for r in rows] == [2_000, 10_000, -1]
    assert [r["wait_ns"] for r in rows] == [0, 35_000 - 30_000, 60_000 - 40_000]
    assert [r["shapes"] for r in rows] == ["[[4, 8], [8, 16]]"] * 2 + [None]
    assert [r["bytes"] for r in rows] == [-1, -1, 1 << 20]
    assert [r["step"] for r in rows] == [3, 3, 3]
    assert [r["kind"] for r in rows] == ["kernel", "kernel", "memcpy"]


def test_op_statistic_counts_kernels_under_the_launching_op() -> None:
    statistic = op_statistic(addmm_trace().table())
    assert statistic.schema.equals(OP_STATISTIC_SCHEMA)
    copy, addmm = statistic.to_pylist()  # sorted by total: 100k copy, then 15k addmm
    total = 100_000 + 15_000
    assert copy == {
        "name": "Memcpy HtoD (Pageable -> Device)",
        "kind": "memcpy",
        "count": 1,
        "total_ns": 100_000,
        "min_ns": 100_000,
        "avg_ns": 100_000.0,
        "max_ns": 100_000,
        "ratio": pytest.approx(100_000 / total),
    }
    assert addmm == {
        "name": "aten::addmm",
        "kind": "kernel",
        "count": 2,
        "total_ns": 15_000,
        "min_ns": 5_000,
        "avg_ns": 7_500.0,
        "max_ns": 10_000,
        "ratio": pytest.approx(15_000 / total),
    }


def test_op_statistic_ties_are_ordered_by_name() -> None:
    events = (
        EventsBuilder()
        .kernel(0, 1_000, "zeta")
        .kernel(2_000, 1_000, "alpha")
        .kernel(4_000, 3_000, "mid")
        .table()
    )
    assert op_statistic(events)["name"].to_pylist() == ["mid", "alpha", "zeta"]


def test_wait_is_per_stream_and_zero_when_overlapping() -> None:
    events = (
        EventsBuilder()
        .kernel(0, 10_000, "a", stream=7)
        .kernel(4_000, 2_000, "b", stream=8)  # first on stream 8
        .kernel(8_000, 5_000, "c", stream=7)  # starts before a ended
        .kernel(20_000, 1_000, "d", stream=7)  # previous tasks on 7 ended at 13k
        .kernel(30_000, 1_000, "e", stream=8)  # b ended at 6k
        .kernel(30_000, 1_000, "f", device=1, stream=7)  # first on device 1
        .table()
    )
    waits = {r["name"]: r["wait_ns"] for r in op_summary(events).to_pylist()}
    assert waits == {"a": 0, "b": 0, "c": 0, "d": 7_000, "e": 24_000, "f": 0}


def test_wait_counts_from_the_latest_end_not_the_previous_start() -> None:
    # a [0, 10k) covers b [1k, 2k); c at 12k waits from a's end (10k), not b's (2k).
    events = (
        EventsBuilder().kernel(0, 10_000, "a").kernel(1_000, 1_000, "b").kernel(12_000, 1, "c")
    ).table()
    waits = {r["name"]: r["wait_ns"] for r in op_summary(events).to_pylist()}
    assert waits["c"] == 2_000


def test_host_op_falls_back_to_the_innermost_op_running_at_the_launch() -> None:
    # Older traces: the launch call's external id matches no cpu_op.
    events = (
        EventsBuilder()
        .cpu_op(0, 100_000, "aten::linear", external_id=1)
        .cpu_op(1_000, 20_000, "aten::t", external_id=2)  # ended before the launch
        .cpu_op(30_000, 60_000, "aten::addmm", external_id=3)
        .cpu_op(40_000, 5_000, "aten::empty", external_id=4)  # ended exactly at the launch
        .runtime(45_000, 3_000, correlation=9, external_id=999)
        .kernel(50_000, 1_000, "gemm", correlation=9)
        # a launch on another thread: the ops of thread 1 do not count
        .runtime(46_000, 1_000, correlation=10, thread=2)
        .kernel(52_000, 1_000, "other_thread", correlation=10)
        .table()
    )
    host = {r["name"]: r["host_op"] for r in op_summary(events).to_pylist()}
    assert host == {"gemm": "aten::addmm", "other_thread": None}


def test_host_op_by_external_id_prefers_the_shortest_op() -> None:
    events = (
        EventsBuilder()
        .cpu_op(0, 10_000, "outer", external_id=5, thread=3)
        .cpu_op(1_000, 2_000, "inner", external_id=5, thread=3)
        # the launch runs on another thread than the ops: the id decides, not the time
        .runtime(4_000, 1_000, correlation=1, external_id=5, thread=4)
        .kernel(6_000, 1_000, "k", correlation=1)
        .table()
    )
    assert op_summary(events)["host_op"].to_pylist() == ["inner"]


def test_task_without_launch_call_uses_its_own_external_id() -> None:
    events = (
        EventsBuilder()
        .cpu_op(0, 10_000, "aten::mul", external_id=12)
        .kernel(20_000, 1_000, "mul_kernel", correlation=77, external_id=12)
        .table()
    )
    row = op_summary(events).to_pylist()[0]
    assert (row["host_op"], row["launch_ns"]) == ("aten::mul", -1)


def test_launches_without_any_cpu_op() -> None:
    events = (
        EventsBuilder().runtime(0, 1_000, correlation=1).kernel(2_000, 1_000, correlation=1)
    ).table()
    row = op_summary(events).to_pylist()[0]
    assert (row["host_op"], row["launch_ns"]) == (None, 0)


def test_correlations_are_matched_within_a_rank() -> None:
    b = EventsBuilder()
    for rank, op in ((0, "aten::add"), (1, "aten::sub")):
        b.cpu_op(0, 10_000, op, external_id=3, rank=rank)
        b.runtime(1_000, 1_000, correlation=4, external_id=3, rank=rank)
        b.kernel(5_000 + rank, 1_000, f"k{rank}", correlation=4, rank=rank)
    rows = op_summary(b.table()).to_pylist()
    assert [(r["rank"], r["name"], r["host_op"]) for r in rows] == [
        (0, "k0", "aten::add"),
        (1, "k1", "aten::sub"),
    ]


def test_names_are_codes_into_the_names_taken_across_ranks() -> None:
    # each rank's events a table of its own (its own dictionaries), joined as a profile does
    tables = []
    for rank, (op, kernel) in enumerate((("aten::add", "k_add"), ("aten::mul", "k_mul"))):
        b = EventsBuilder()
        b.cpu_op(0, 10_000, op, external_id=3, rank=rank)
        b.cpu_op(20_000, 1_000, f"unlaunched_{rank}", rank=rank)
        b.runtime(1_000, 1_000, correlation=4, external_id=3, rank=rank)
        b.kernel(5_000, 1_000, kernel, correlation=4, rank=rank)
        b.kernel(7_000, 1_000, kernel, correlation=9, rank=rank)  # no launch: no host op
        tables.append(b.table())
    events = pa.concat_tables(tables)
    assert events["name"].num_chunks == 2
    summary = op_summary(events)
    details = kernel_details(events)
    expected = [(0, "k_add", "aten::add"), (0, "k_add", None)]
    expected += [(1, "k_mul", "aten::mul"), (1, "k_mul", None)]
    for table in (summary, details):
        assert [(r["rank"], r["name"], r["host_op"]) for r in table.to_pylist()] == expected
        for column in ("kind", "name", "host_op"):
            assert table.schema.field(column).type == pa.dictionary(pa.int32(), pa.string())
        # the names of the tasks and their ops only, not every name of the trace
        assert table["name"].num_chunks == 1
        assert sorted(table["name"].chunk(0).dictionary.to_pylist()) == ["k_add", "k_mul"]
        assert sorted(table["host_op"].chunk(0).dictionary.to_pylist()) == [
            "aten::add",
            "aten::mul",
        ]
    # the CSV holds the same text as plain strings would give
    plain = summary.cast(
        pa.schema(
            [
                f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f
                for f in summary.schema
            ]
        )
    )
    assert csv_bytes(summary) == csv_bytes(plain)


def host_only_trace() -> EventsBuilder:
    """Two threads of a CPU run.

    thread 1: forward [0, 100) > linear [10, 60) > addmm [20, 50); relu [60, 90) (touches linear)
              self: forward 100 - 50 - 30 = 20; linear 50 - 30 = 20; addmm 30; relu 30
    thread 2: backward [40, 140) > addmm_bwd [50, 80) (not a child of thread 1's ops)
              self: backward 70; addmm_bwd 30
    """
    return (
        EventsBuilder()
        .cpu_op(0, 100, "forward", shapes="[[2]]", dtypes="[float]")
        .cpu_op(10, 50, "aten::linear")
        .cpu_op(20, 30, "aten::addmm")
        .cpu_op(60, 30, "aten::relu")
        .cpu_op(40, 100, "backward", thread=2)
        .cpu_op(50, 30, "aten::addmm", thread=2)
        .annotation(0, 500, "not an operator")
    )


def test_host_only_summary_has_self_time_per_cpu_op() -> None:
    summary = op_summary(host_only_trace().table())
    assert summary.schema.equals(HOST_OP_SUMMARY_SCHEMA)
    rows = [(r["stream"], r["name"], r["start_ns"], r["self_ns"]) for r in summary.to_pylist()]
    assert rows == [
        (1, "forward", 0, 20),
        (1, "aten::linear", 10, 20),
        (1, "aten::addmm", 20, 30),
        (2, "backward", 40, 70),
        (2, "aten::addmm", 50, 30),
        (1, "aten::relu", 60, 30),
    ]
    assert summary["shapes"].to_pylist()[0] == "[[2]]"
    assert set(summary["device"].to_pylist()) == {-1}


def test_host_only_statistic_uses_self_time() -> None:
    rows = op_statistic(host_only_trace().table()).to_pylist()
    total = 20 + 20 + 30 + 30 + 70 + 30
    assert [(r["name"], r["count"], r["total_ns"], r["min_ns"], r["max_ns"]) for r in rows] == [
        ("backward", 1, 70, 70, 70),
        ("aten::addmm", 2, 60, 30, 30),
        ("aten::relu", 1, 30, 30, 30),
        ("aten::linear", 1, 20, 20, 20),
        ("forward", 1, 20, 20, 20),
    ]
    assert rows[1]["ratio"] == pytest.approx(60 / total)
    assert sum(r["ratio"] for r in rows) == pytest.approx(1.0)


def test_kernel_details_reads_the_launch_configuration() -> None:
    config = {
        "grid": [24, 1, 1],
        "block": [128, 1, 1],
        "registers per thread": 16,
        "shared memory": 4096,
        "blocks per SM": 0.3,
        "warps per SM": 1.2,
        "est. achieved occupancy %": 25,
    }
    events = (
        addmm_trace()
        .kernel(200_000, 2_000, "configured", args=config)
        .comm(195_000, 3_000, "ncclAllReduce", stream=20, args="{not json")
        .table()
    )
    details = kernel_details(events)
    assert details.schema.equals(KERNEL_DETAILS_SCHEMA)
    rows = details.to_pylist()
    # kernels and comm only (no memcpy), sorted by start
    assert [r["name"] for r in rows] == ["sgemm_a", "sgemm_b", "ncclAllReduce", "configured"]
    configured = rows[3]
    assert configured["grid"] == "24,1,1"
    assert configured["block"] == "128,1,1"
    assert configured["registers_per_thread"] == 16
    assert configured["shared_memory_bytes"] == 4096
    assert configured["blocks_per_sm"] == pytest.approx(0.3)
    assert configured["warps_per_sm"] == pytest.approx(1.2)
    assert configured["occupancy_pct"] == 25.0
    # on stream 7 the configured kernel follows the copy [60k, 160k), which is not listed
    assert configured["wait_ns"] == 200_000 - 160_000
    broken = rows[2]
    assert broken["kind"] == "comm"
    assert [broken[c] for c in ("grid", "registers_per_thread", "occupancy_pct")] == [None] * 3
    assert rows[0]["host_op"] == "aten::addmm"


def test_kernel_details_reads_an_ascend_block_dim_as_the_grid() -> None:
    events = (
        EventsBuilder()
        .kernel(0, 5, "MatMulV2", args={"block_dim": 24})
        .kernel(10, 5, "TransData", args={"block_dim": 8.0})  # a CSV import gives floats
        .kernel(20, 5, "Cast", args={"block_dim": 2.5, "grid": [1.0, 10.0, 1]})
        .table()
    )
    rows = kernel_details(events).to_pylist()
    assert (rows[0]["grid"], rows[0]["block"], rows[0]["registers_per_thread"]) == (
        "24",
        None,
        None,
    )
    assert [r["grid"] for r in rows[1:]] == ["8", "1,10,1"]


def test_api_statistic_groups_runtime_and_sync_calls() -> None:
    events = (
        addmm_trace()
        .runtime(70_000, 8_000, "cudaMemcpyAsync")
        .sync(80_000, 50_000, "cudaStreamSynchronize")
        .sync(140_000, 10_000, "cudaStreamSynchronize")
        .table()
    )
    statistic = api_statistic(events)
    assert statistic.schema.equals(API_STATISTIC_SCHEMA)
    assert statistic.to_pylist() == [
        {
            "name": "cudaStreamSynchronize",
            "kind": "sync",
            "count": 2,
            "total_ns": 60_000,
            "avg_ns": 30_000.0,
            "min_ns": 10_000,
            "max_ns": 50_000,
        },
        {
            "name": "cudaMemcpyAsync",
            "kind": "runtime",
            "count": 1,
            "total_ns": 8_000,
            "avg_ns": 8_000.0,
            "min_ns": 8_000,
            "max_ns": 8_000,
        },
        {
            "name": "cudaLaunchKernel",
            "kind": "runtime",
            "count": 2,
            "total_ns": 6_000,
            "avg_ns": 3_000.0,
            "min_ns": 3_000,
            "max_ns": 3_000,
        },
    ]


def test_empty_inputs_give_empty_tables() -> None:
    empty = EventsBuilder().table()
    assert op_summary(empty).num_rows == 0
    assert op_statistic(empty).num_rows == 0
    assert kernel_details(empty).num_rows == 0
    assert api_statistic(empty).num_rows == 0


def test_missing_columns_are_reported() -> None:
    with pytest.raises(ValueError, match="correlation"):
        op_summary(EventsBuilder().kernel(0, 1).table().drop_columns(["correlation"]))


# Nesting: random properly nested intervals on a few threads, compared with the structure
# they were generated from.


@st.composite
def nested_threads(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int]]:
    """Intervals (group, start, end) built from a random open/close sequence, with true parents."""
    groups: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    parents: list[int] = []
    for group in range(draw(st.integers(1, 3))):
        now = draw(st.integers(0, 5))
        stack: list[int] = []
        for action in draw(st.lists(st.booleans(), max_size=30)) + [False] * 30:
            # a zero step lets intervals share a start or an end with their parent or sibling
            if action:
                now += draw(st.integers(0, 3))
                parents.append(stack[-1] if stack else -1)
                stack.append(len(starts))
                groups.append(group)
                starts.append(now)
                ends.append(-1)
            elif stack:
                now += draw(st.integers(1, 3))  # every interval lasts at least 1 ns
                ends[stack.pop()] = now
    return groups, starts, ends, parents


@settings(max_examples=200, deadline=None)
@given(nested_threads(), st.randoms(use_true_random=False))
def test_operator_nesting_recovers_the_true_parents(
    threads: tuple[list[int], list[int], list[int], list[int]], random: object
) -> None:
    groups, starts, ends, parents = threads
    shuffle = list(range(len(starts)))
    random.shuffle(shuffle)  # type: ignore[attr-defined]
    inverse = np.argsort(shuffle)
    g = np.array(groups, dtype=np.int64)[shuffle]
    s = np.array(starts, dtype=np.int64)[shuffle]
    e = np.array(ends, dtype=np.int64)[shuffle]
    # true parents relabelled to shuffled indices
    expected = np.array(
        [inverse[parents[i]] if parents[i] >= 0 else -1 for i in shuffle], dtype=np.int64
    )
    parent = operator_nesting(g, s, e)
    np.testing.assert_array_equal(parent, expected)

    children_ns = np.zeros(len(s), dtype=np.int64)
    for child, of in enumerate(expected):
        if of >= 0:
            children_ns[of] += e[child] - s[child]
    np.testing.assert_array_equal(self_time(s, e, parent), e - s - children_ns)

    # innermost interval running at every instant, by brute force over the true nesting
    depth = np.zeros(len(s), dtype=np.int64)
    for i in range(len(s)):
        j = expected[i]
        while j >= 0:
            depth[i] += 1
            j = expected[j]
    queries = [(group, t) for group in range(3) for t in range(0, 200, 1)]
    qg = np.array([q[0] for q in queries], dtype=np.int64)
    qt = np.array([q[1] for q in queries], dtype=np.int64)
    found = innermost_enclosing(g, s, e, parent, qg, qt)
    for k, (group, t) in enumerate(queries):
        running = [i for i in range(len(s)) if g[i] == group and s[i] <= t < e[i]]
        want = max(running, key=lambda i: depth[i]) if running else -1
        assert found[k] == want, (group, t)


def test_results_do_not_depend_on_input_row_order() -> None:
    events = (
        addmm_trace()
        .kernel(200_000, 2_000, "configured", stream=9, args={"grid": [2, 1, 1]})
        .sync(170_000, 30_000, "cudaStreamSynchronize")
        .table()
    )
    for table in (events, host_only_trace().table()):
        reversed_rows = table.take(pa.array(range(table.num_rows - 1, -1, -1)))
        for analysis in (op_summary, op_statistic, kernel_details, api_statistic):
            assert analysis(table).equals(analysis(reversed_rows)), analysis.__name__
            assert csv_bytes(analysis(table)) == csv_bytes(analysis(table)), analysis.__name__
