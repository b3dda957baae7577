"""The split of communication tasks into waiting and transfer, and the arrivals across ranks,
on hand-built tasks whose figures are worked out in the comments."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfledger.analysis.cluster.arrivals import align_arrivals
from perfledger.analysis.comm_split import (
    ESTIMATED,
    MEASURED,
    UNKNOWN,
    bus_factor,
    collective_type,
    comm_split,
    stored_comm_waits,
)
from perfledger.model import schema
from perfledger.model.cluster import COLLECTIVES_SCHEMA
from perfledger.model.devices import device_from_meta, peer_link_gbps
from tests.scenarios import US, Timeline

MS = 1_000_000


def test_bus_factors_are_nccl_tests_definitions() -> None:
    # nccl-tests' PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for
    # all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert bus_factor("all_to_all", 2) == pytest.approx(0.5)
    assert bus_factor("broadcast", 8) == bus_factor("send_recv", 8) == 1.0
    assert collective_type("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "all_reduce"
    assert collective_type("hcom_allGather__12_3_1") == "all_gather"
    assert collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv"
    assert collective_type("nccl:_reduce_scatter_base") == "reduce_scatter"


def _comm(t: Timeline, start_us: float, dur_us: float, **args: object) -> None:
    t.event(schema.COMM, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", start_us, dur_us,
            device=0, stream=20, args=dict(args))  # fmt: skip


def test_hccl_figures_are_laid_over_the_task() -> None:
    t = Timeline().step(1, 0, 1000)
    # HCCL: 80 ms elapsed, 2 ms of it transit: the task of 40 ms waits 40 x 78/80 = 39 ms
    _comm(t, 10, 40_000, hccl={"elapse_ns": 80 * MS, "transit_ns": 2 * MS})
    split = comm_split(t.table())
    assert split.source == (MEASURED,)
    assert split.wait_ns.tolist() == [39 * MS]


def test_an_estimate_needs_the_message_the_group_and_the_link() -> None:
    t = Timeline().step(1, 0, 10_000)
    # 150 MB of floats over 8 ranks on a 300 GB/s link: 150e6 x 1.75 / 300 = 875 µs of
    # transfer; the 2000 µs task waited the other 1125 µs
    _comm(t, 10, 2000, **{"In msg nelems": 37_500_000, "dtype": "Float", "Group size": 8})
    # the same message in a task shorter than its transfer: no wait, never negative
    _comm(t, 3000, 500, **{"In msg nelems": 37_500_000, "dtype": "Float", "Group size": 8})
    # no message size: unknown, all transfer
    _comm(t, 5000, 100, **{"Group size": 8})
    split = comm_split(t.table(), link_gbps=300.0)
    assert split.source == (ESTIMATED, ESTIMATED, UNKNOWN)
    assert split.wait_ns.tolist() == [1125 * US, 0, 0]
    assert split.bytes.tolist()[:2] == [150_000_000, 150_000_000]
    assert split.group_size.tolist() == [8, 8, 8]
    unknown_link = comm_split(t.table(), link_gbps=math.nan)
    assert set(unknown_link.source) == {UNKNOWN}


def test_the_fields_read_are_found_however_the_args_spell_them() -> None:
    t = Timeline().step(1, 0, 10_000)
    # a CUDA kernel's own args beside the fields: 4 ranks listed, 1000 halves = 2000 bytes,
    # 2000 x 2 x 3/4 / 1 = 3000 ns of transfer in a 10 µs task
    _comm(t, 10, 10, **{"grid": [2, 1, 1], "Process Group Ranks": "[0, 1, 2, 3]",
                        "Out msg nelems": 1000, "dtype": "Half"})  # fmt: skip
    # the same keys, written with JSON escapes
    t.event(schema.COMM, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100, 10, device=0,
            stream=20, args={})  # fmt: skip
    t.rows[-1]["args"] = (
        '{"Group\\u0020size": 4, "\\u0064type": "Half", "Out msg nelems": 1000, "x": "\\""}'
    )
    # a kernel's args alone, and args that are not an object
    _comm(t, 200, 10, **{"grid": [2, 1, 1], "registers per thread": 96})
    t.event(schema.COMM, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, 10, device=0,
            stream=20)  # fmt: skip
    t.rows[-1]["args"] = '["Group size", 4]'
    split = comm_split(t.table(), link_gbps=1.0)
    assert split.group_size.tolist() == [4, 4, 0, 0]
    assert split.bytes.tolist() == [2000, 2000, -1, -1]
    assert split.source == (ESTIMATED, ESTIMATED, UNKNOWN, UNKNOWN)
    assert split.wait_ns.tolist() == [7 * US, 7 * US, 0, 0]


def test_the_message_of_an_older_trace_comes_from_its_nccl_annotation() -> None:
    t = Timeline().step(1, 0, 10_000)
    # nccl:all_reduce [100, 200) holds the launch at 150 of a 1000 µs task; its first input is
    # 1024 x 1024 bf16: 2 MiB
    t.event(schema.ANNOTATION, "nccl:all_reduce", 100, 100)
    t.rows[-1]["shapes"], t.rows[-1]["dtypes"] = "[[1024, 1024]]", '["c10::BFloat16"]'
    t.launch(150, 300, 1000, kind=schema.COMM, name="ncclKernel_AllReduce_RING_LL_Sum_bf16")
    # a launch outside any nccl annotation keeps an unknown message
    t.launch(2000, 2100, 100, kind=schema.COMM, name="ncclKernel_AllReduce_RING_LL_Sum_bf16")
    split = comm_split(t.table(), link_gbps=math.nan, default_group=2)
    assert split.bytes.tolist() == [2 * 1024 * 1024, -1]
    assert split.collective == ("all_reduce", "all_reduce")


def test_an_annotated_all_gather_moves_every_rank_s_shard_and_absurd_shapes_say_nothing() -> None:
    t = Timeline().step(1, 0, 10_000)
    # nccl:all_gather [100, 200): a 256 x 1024 float shard (1 MiB) from each of 4 ranks; the
    # 1000 µs task it launched moves 3/4 of the 4 MiB over 1 GB/s (1 byte a ns): 3,145,728 ns
    t.event(schema.ANNOTATION, "nccl:all_gather", 100, 100)
    t.rows[-1]["shapes"], t.rows[-1]["dtypes"] = "[[256, 1024]]", '["float"]'
    t.launch(150, 300, 5000, kind=schema.COMM, name="ncclDevKernel_AllGather_RING_LL")
    # a shape whose bytes no int64 holds (2^62 floats), alone and gathered by 4: unknown,
    # where it used to stop the analysis
    for start, name in ((6000, "all_reduce"), (8000, "all_gather")):
        t.event(schema.ANNOTATION, f"nccl:{name}", start, 100)
        t.rows[-1]["shapes"], t.rows[-1]["dtypes"] = f"[[{2**31}, {2**31}]]", '["float"]'
        t.launch(start + 50, start + 200, 1000, kind=schema.COMM, name="ncclDevKernel_Generic")
    split = comm_split(t.table(), link_gbps=1.0, default_group=4)
    assert split.collective == ("all_gather", "all_reduce", "all_gather")
    assert split.bytes.tolist() == [4 * 1024 * 1024, -1, -1]
    assert split.source == (ESTIMATED, UNKNOWN, UNKNOWN)
    assert split.wait_ns.tolist() == [5000 * US - 3 * 1024 * 1024, 0, 0]


def _tasks(rows: list[tuple[int, str, int, int]], groups: list[str] | None = None) -> pa.Table:
    """(rank, name, start µs, end µs) rows as COLLECTIVES_SCHEMA, in ``groups`` (default "")."""
    groups = groups or [""] * len(rows)
    return pa.Table.from_pylist(
        [
            {"rank": r, "device": 0, "step": 1, "name": n, "start_ns": s * US,
             "dur_ns": (e - s) * US, "wait_ns": -1, "row": i, "group": g}
            for i, ((r, n, s, e), g) in enumerate(zip(rows, groups, strict=True))
        ],
        schema=COLLECTIVES_SCHEMA,
    )  # fmt: skip


def test_arrivals_on_skewed_clocks() -> None:
    # true clock: rank 0 arrives at 100, rank 1 at 400 (late), all end at 500; rank 1's clock
    # runs 1000 µs ahead, so its raw times are 1400 and 1500; a second all-reduce repeats it
    # at +1000
    tasks = _tasks(
        [
            (0, "ar", 100, 500), (1, "ar", 1400, 1500),
            (0, "ar", 1100, 1500), (1, "ar", 2400, 2500),
        ]
    )  # fmt: skip
    arrivals = align_arrivals(tasks, [0, 1])
    assert arrivals.offsets_ns == {0: 0, 1: 1000 * US}
    assert arrivals.matched == 2
    rows0, waits0 = arrivals.waits[0]
    rows1, waits1 = arrivals.waits[1]
    assert dict(zip(rows0.tolist(), waits0.tolist(), strict=True)) == {0: 300 * US, 2: 300 * US}
    assert waits1.tolist() == [0, 0]


def test_ranks_of_one_clock_are_not_set_apart_by_their_collectives_ends() -> None:
    # three ranks on one machine, its clock: the broadcast's root (rank 0) leaves before its
    # receivers, which end 175 us later, as two NCCL ranks over sockets do; the ends alone
    # put the receivers' clocks 175 us ahead
    rows = [
        (0, "bc", 100, 110), (1, "bc", 90, 285), (2, "bc", 80, 285),
        (0, "bc", 1100, 1110), (1, "bc", 1090, 1285), (2, "bc", 1080, 1285),
    ]  # fmt: skip
    estimated = align_arrivals(_tasks(rows), [0, 1, 2])
    assert estimated.offsets_ns == {0: 0, 1: 175 * US, 2: 175 * US}
    same = {0: "boot-a", 1: "boot-a", 2: "boot-a"}
    shared = align_arrivals(_tasks(rows), [0, 1, 2], same)
    assert shared.offsets_ns == {0: 0, 1: 0, 2: 0}
    # the root arrived last on the one clock: the receivers waited for it
    waits = {r: w.tolist() for r, (_, w) in shared.waits.items()}
    assert waits == {0: [0, 0], 1: [10 * US, 10 * US], 2: [20 * US, 20 * US]}
    # two machines: ranks 1 and 2 share one clock and take the median of their estimates
    two = align_arrivals(_tasks(rows), [0, 1, 2], {1: "boot-b", 2: "boot-b"})
    assert two.offsets_ns == {0: 0, 1: 175 * US, 2: 175 * US}


def test_collectives_are_matched_per_process_group() -> None:
    # 4 ranks on one clock: an all-reduce of the whole group ("dp") ends at 100 everywhere, and
    # the same kernel in two tensor-parallel pairs: ranks 0-1 ("tp0") end at 200, rank 1 late
    # by 30; ranks 2-3 ("tp1") end at 300, rank 2 late by 50. By name alone the pairs would be
    # one collective of four ranks whose last arrival is rank 2's
    rows = [
        (0, "ar", 10, 100), (1, "ar", 20, 100), (2, "ar", 30, 100), (3, "ar", 40, 100),
        (0, "ar", 150, 200), (1, "ar", 180, 200),
        (2, "ar", 260, 300), (3, "ar", 210, 300),
    ]  # fmt: skip
    groups = ["dp"] * 4 + ["tp0"] * 2 + ["tp1"] * 2
    arrivals = align_arrivals(_tasks(rows, groups), [0, 1, 2, 3])
    assert arrivals.offsets_ns == {0: 0, 1: 0, 2: 0, 3: 0}
    assert arrivals.matched == 3
    waits = {
        row: wait
        for rows_, waits_ in arrivals.waits.values()
        for row, wait in zip(rows_.tolist(), waits_.tolist(), strict=True)
    }
    # dp: the last arrives at 40; tp0: rank 0 waits 30 for rank 1; tp1: rank 3 waits 50
    assert [waits[i] // US for i in range(8)] == [30, 20, 10, 0, 30, 0, 0, 50]


def test_collectives_not_taken_by_every_rank_alike_are_left_out() -> None:
    # "ag" ran twice on rank 0 and once on rank 1: which pairs with which is unknown
    tasks = _tasks([(0, "ag", 0, 10), (0, "ag", 20, 30), (1, "ag", 5, 30)])
    arrivals = align_arrivals(tasks, [0, 1])
    assert arrivals.matched == 0 and arrivals.offsets_ns == {}
    assert align_arrivals(_tasks([(0, "ar", 0, 10)]), [0]).matched == 0


def test_a_wait_never_exceeds_the_task() -> None:
    # rank 1 arrives after rank 0's task ended (clock noise): the wait is capped at its length
    tasks = _tasks([(0, "ar", 0, 10), (1, "ar", 50, 60), (0, "ar", 100, 150), (1, "ar", 100, 150)])
    arrivals = align_arrivals(tasks, [0, 1])
    for rows, waits in arrivals.waits.values():
        durations = np.asarray(tasks["dur_ns"])[rows]
        assert (waits >= 0).all() and (waits <= durations).all()


def test_a_stored_profile_s_waits_are_split_per_rank_wherever_its_rows_lie() -> None:
    # two ranks of 8: the same 150 MB all-reduce (875 µs of transfer on 300 GB/s, as above)
    # in a 2000 µs task on rank 0 and a 1000 µs one on rank 1; rank 1's meta names no device
    # (no link, all transfer). Rows rank by rank (a file per rank) and interleaved give the
    # same waits, row for row.
    ranks = []
    for rank, dur in ((0, 2000), (1, 1000)):
        t = Timeline(rank=rank).step(1, 0, 10_000)
        _comm(t, 10, dur, **{"In msg nelems": 37_500_000, "dtype": "Float", "Group size": 8})
        _comm(t, 5000, dur, **{"In msg nelems": 37_500_000, "dtype": "Float", "Group size": 8})
        ranks.append(t.table())
    together = pa.concat_tables(ranks)
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 80 * 2**30, "numSms": 108}
    meta = {"0": {"device_properties": [a100]}}
    link = peer_link_gbps(device_from_meta(meta["0"]))
    waits = stored_comm_waits(together, meta)
    comm = np.asarray(pc.equal(together["kind"], schema.COMM))
    transfer_us = 150e6 * 1.75 / (link * 1e3)  # bytes x bus factor / (bytes per µs)
    assert waits[comm].tolist() == pytest.approx([(2000 - transfer_us) * US] * 2 + [0, 0], abs=1)
    order = np.argsort(np.arange(together.num_rows) % ranks[0].num_rows, kind="stable")
    interleaved = together.take(pa.array(order))
    assert stored_comm_waits(interleaved, meta).tolist() == waits[order].tolist()
