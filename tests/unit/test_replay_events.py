"""Cross-stream event edges in the step graph, on hand-built traces of known answers.

A data-parallel step: four backward kernels of 1 ms on the compute stream (7); the
communication stream (13) waits for the last of them (an event recorded on stream 7) before
its 2 ms all-reduce; the compute stream then waits for the all-reduce (an event recorded on
stream 13) before a 500 µs optimizer kernel. The host issues everything in the first 100 µs.
Every expected figure is derived by hand in the test from those times.
"""

from __future__ import annotations

import pyarrow as pa

from perfledger.analysis.critical_path import replay_rank
from perfledger.analysis.graph import build_graph
from perfledger.model import schema
from perfledger.model.whatif import NO_CHANGE, Scale, WhatIf
from tests.synth import EventsBuilder

US = 1_000
COMPUTE, NCCL = 7, 13
EVENT_GAP = 5 * US  # from the awaited task's end to the waiting task's start
FIRST_LATENCY = 20 * US  # the first kernel: launched at 10 µs, starts at 30 µs
BACKWARD_END = 30 * US + 4 * 1_000 * US
ALLREDUCE_START = BACKWARD_END + EVENT_GAP
ALLREDUCE_END = ALLREDUCE_START + 2_000 * US
OPTIMIZER_START = ALLREDUCE_END + EVENT_GAP
MEASURED = OPTIMIZER_START + 500 * US


def ddp_step(*, marks: bool) -> pa.Table:
    """The step above. With ``marks`` the trace carries each wait's device-side "Stream Wait
    Event" mark naming the recording stream and the record's call (newer Kineto); without,
    only the host's cudaStreamWaitEvent calls (older Kineto: no record, no ids)."""
    b = EventsBuilder(stream=COMPUTE).step_mark(0, 100 * US, 1)
    for i in range(4):
        b.launch(10 * US + i * 10 * US, 5 * US, 30 * US + i * 1_000 * US, 1_000 * US, f"gemm_{i}")

    def wait(at: int, waiting: int, recording: int) -> None:
        record, waited = b.new_correlation(), b.new_correlation()
        if marks:
            b.runtime(at, 2 * US, "cudaEventRecord", correlation=record)
        b.runtime(at + 3 * US, 1 * US, "cudaStreamWaitEvent", correlation=waited)
        if marks:
            b.add(
                schema.DEVICE_ANNOTATION,
                "Stream Wait Event",
                at + 4 * US,
                0,
                device=0,
                stream=waiting,
                correlation=waited,
                args={
                    "wait_on_stream": recording,
                    "wait_on_cuda_event_record_corr_id": record,
                    "stream": waiting,
                },
            )

    wait(50 * US, NCCL, COMPUTE)
    b.launch(
        60 * US,
        5 * US,
        ALLREDUCE_START,
        2_000 * US,
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        kind=schema.COMM,
        stream=NCCL,
    )
    wait(70 * US, COMPUTE, NCCL)
    b.launch(80 * US, 5 * US, OPTIMIZER_START, 500 * US, "adam_step")
    return b.table()


def _step(events: pa.Table, change: WhatIf = NO_CHANGE):  # type: ignore[no-untyped-def]
    report = replay_rank(events, change)
    assert report.dropped_edges == 0
    assert len(report.steps) == 1
    return report.steps[0]


def test_the_graph_has_one_edge_per_wait_from_the_awaited_task_to_the_waiting_one() -> None:
    for marks in (True, False):
        events = ddp_step(marks=marks)
        graph = build_graph(events)
        names = events.column("name").to_pylist()
        edges = sorted(
            (names[graph.row[s]], names[graph.row[d]], int(delay))
            for s, d, delay in zip(graph.event_src, graph.event_dst, graph.event_delay, strict=True)
        )
        assert edges == [
            ("gemm_3", "ncclKernel_AllReduce_RING_LL_Sum_float", EVENT_GAP),
            ("ncclKernel_AllReduce_RING_LL_Sum_float", "adam_step", EVENT_GAP),
        ]


def test_the_unchanged_replay_reproduces_the_step() -> None:
    for marks in (True, False):
        step = _step(ddp_step(marks=marks))
        assert step.measured_ns == step.baseline_ns == MEASURED
        assert step.predicted_ns == MEASURED
        assert sum(step.bound_by_ns.values()) == MEASURED
        # the path: host work up to the first launch call (10 µs), the latency from its start,
        # the backward, the two event waits (launch overhead), the all-reduce, the optimizer
        assert step.bound_by_ns["host"] == 10 * US
        assert step.bound_by_ns["launch"] == FIRST_LATENCY + 2 * EVENT_GAP
        assert step.bound_by_ns["compute:matmul"] == 4 * 1_000 * US
        assert step.bound_by_ns["communication"] == 2_000 * US


def test_the_all_reduce_moves_with_the_compute_it_waits_for() -> None:
    for marks in (True, False):
        step = _step(ddp_step(marks=marks), WhatIf((Scale("compute", 0.5),)))
        # backward 4 x 500 µs from 30 µs; the all-reduce 5 µs later for 2 ms; the optimizer
        # 5 µs after it for 250 µs
        backward_end = 30 * US + 4 * 500 * US
        expected = backward_end + EVENT_GAP + 2_000 * US + EVENT_GAP + 250 * US
        assert step.predicted_ns == expected


def test_overlapping_the_exposed_all_reduce_shrinks_the_step_by_its_exposure() -> None:
    for marks in (True, False):
        step = _step(ddp_step(marks=marks), WhatIf(overlap_comm=True))
        # the optimizer no longer waits for the all-reduce: it follows the backward on its
        # stream (queued tasks ran back to back: typical gap 0); the all-reduce starts at its
        # launch (60 µs) plus the typical launch latency (20 µs) and ends long before
        assert step.predicted_ns == BACKWARD_END + 500 * US
        assert step.predicted_ns == MEASURED - (2_000 * US + 2 * EVENT_GAP)


def test_communication_twice_as_fast_shortens_the_step_by_half_the_all_reduce() -> None:
    step = _step(ddp_step(marks=True), WhatIf((Scale("communication", 0.5),)))
    assert step.predicted_ns == MEASURED - 1_000 * US


def test_without_any_wait_in_the_trace_the_all_reduce_keeps_its_observed_latency() -> None:
    """No record, no wait call: nothing says what the all-reduce waited for, so it stays
    where it was when compute gets faster (its launch latency is kept)."""
    b = EventsBuilder(stream=COMPUTE).step_mark(0, 100 * US, 1)
    for i in range(4):
        b.launch(10 * US + i * 10 * US, 5 * US, 30 * US + i * 1_000 * US, 1_000 * US, f"gemm_{i}")
    b.launch(
        60 * US,
        5 * US,
        ALLREDUCE_START,
        2_000 * US,
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        kind=schema.COMM,
        stream=NCCL,
    )
    events = b.table()
    assert build_graph(events).event_src.size == 0
    step = _step(events, WhatIf((Scale("compute", 0.5),)))
    assert step.measured_ns == ALLREDUCE_END
    assert step.predicted_ns == ALLREDUCE_END
