"""The step graph, its replay and what-if predictions on hand-built traces of known answers.

Every expected figure is derived by hand in the test from the trace it builds.
"""

from __future__ import annotations

import numpy as np
import pytest

from perfledger.analysis.critical_path import replay_rank
from perfledger.analysis.graph import build_graph
from perfledger.analysis.replay import replay
from perfledger.analysis.replay_gaps import gap_offset
from perfledger.errors import PerfledgerError
from perfledger.model.whatif import MAX_PATH_SPANS, Scale, WhatIf
from tests.synth import EventsBuilder

US = 1_000


def _one_step(report_steps):  # type: ignore[no-untyped-def]
    assert len(report_steps) == 1
    return report_steps[0]


def device_bound() -> EventsBuilder:
    """The host issues 10 kernels of 1 ms in 100 µs; they run back to back."""
    b = EventsBuilder().step_mark(0, 200 * US, 1)
    for i in range(10):
        host = 10 * US + i * 10 * US
        b.launch(host, 5 * US, 30 * US + i * 1_000 * US, 1_000 * US, f"gemm_{i}")
    return b


def test_device_bound_step_shrinks_by_half_its_compute_when_compute_is_twice_as_fast() -> None:
    events = device_bound().table()
    measured = 30 * US + 10 * 1_000 * US  # from the step's start to the last kernel's end
    step = _one_step(replay_rank(events, WhatIf((Scale("compute", 0.5),))).steps)
    assert step.measured_ns == measured
    assert step.baseline_ns == measured
    assert step.predicted_ns == measured - 10 * 500 * US


def test_device_bound_step_does_not_shrink_when_the_host_is_twice_as_fast() -> None:
    events = device_bound().table()
    step = _one_step(replay_rank(events, WhatIf((Scale("host", 0.5),))).steps)
    assert step.predicted_ns == step.measured_ns
    # the critical path is the kernels: 10 ms of compute
    assert step.bound_by_ns["compute:matmul"] == 10 * 1_000 * US


def test_kernel_glob_scales_only_the_kernels_it_names() -> None:
    events = device_bound().table()
    step = _one_step(replay_rank(events, WhatIf((Scale("kernel:gemm_[0-4]", 0.5),))).steps)
    assert step.predicted_ns == step.measured_ns - 5 * 500 * US


def host_bound() -> EventsBuilder:
    """20 kernels of 2 µs, each launched 50 µs after the previous one (45 µs of host work
    between 5 µs launch calls); each starts 10 µs after its launch call began."""
    b = EventsBuilder().step_mark(0, 965 * US, 1)
    for i in range(20):
        host = 10 * US + i * 50 * US
        b.launch(host, 5 * US, host + 10 * US, 2 * US, "elementwise_add")
    return b


def test_host_bound_step_of_tiny_kernels_does_not_shrink_when_kernels_get_faster() -> None:
    events = host_bound().table()
    measured = 10 * US + 19 * 50 * US + 10 * US + 2 * US  # the last kernel's end: 972 µs
    step = _one_step(replay_rank(events, WhatIf((Scale("compute", 0.5),))).steps)
    assert step.measured_ns == step.baseline_ns == measured
    # only the last kernel's own microsecond comes off
    assert step.predicted_ns == measured - 1 * US


def test_host_bound_step_shrinks_with_the_host() -> None:
    events = host_bound().table()
    step = _one_step(replay_rank(events, WhatIf((Scale("host", 0.5),))).steps)
    # host work 22.5 µs and calls 2.5 µs: the last launch at 10 + 19 * 25 µs, its kernel
    # 10 µs later for 2 µs
    assert step.predicted_ns == 10 * US + 19 * 25 * US + 10 * US + 2 * US


def test_host_bound_critical_path_is_the_host() -> None:
    step = _one_step(replay_rank(host_bound().table()).steps)
    assert step.bound_by_ns["compute:elementwise"] == 2 * US
    assert step.bound_by_ns["launch"] == 10 * US + 19 * 5 * US  # latency + 19 calls
    # host work between the calls, and before the first call
    assert step.bound_by_ns["host"] == 19 * 45 * US + 10 * US
    assert sum(step.bound_by_ns.values()) == step.predicted_ns


def sync_bound() -> EventsBuilder:
    """5 times: launch a 10 µs kernel, synchronise (the call returns 2 µs after the kernel
    ends), 20 µs of host work."""
    b = EventsBuilder()
    for i in range(5):
        t = 10 * US + i * 42 * US
        b.launch(t, 5 * US, t + 10 * US, 10 * US, "relu")
        b.sync(t + 5 * US, 17 * US, "cudaStreamSynchronize")
    b.step_mark(0, 10 * US + 5 * 42 * US, 1)
    return b


def test_removing_syncs_predicts_the_step_the_host_alone_takes() -> None:
    events = sync_bound().table()
    report = replay_rank(events, WhatIf(no_sync=True))
    step = _one_step(report.steps)
    assert step.measured_ns == step.baseline_ns == 220 * US
    # the host alone: per iteration a 5 µs call, the sync's 2 µs return, 20 µs of work
    assert step.predicted_ns == 10 * US + 5 * 27 * US


def test_sync_bound_critical_path_counts_the_waits_as_device_time() -> None:
    step = _one_step(replay_rank(sync_bound().table()).steps)
    assert step.bound_by_ns["sync"] == 5 * 2 * US
    assert step.bound_by_ns["compute:elementwise"] == 5 * 10 * US
    assert sum(step.bound_by_ns.values()) == step.measured_ns


def exposed_collective() -> EventsBuilder:
    """A 1 ms kernel, a 0.5 ms all-reduce and a 1 ms kernel queued on one stream."""
    b = EventsBuilder().step_mark(0, 100 * US, 1)
    b.launch(10 * US, 5 * US, 20 * US, 1_000 * US, "gemm")
    b.launch(20 * US, 5 * US, 1_020 * US, 500 * US, "ncclKernel_AllReduce", kind="comm")
    b.launch(30 * US, 5 * US, 1_520 * US, 1_000 * US, "gemm")
    return b


def test_overlapping_an_exposed_collective_shrinks_the_step_by_the_overlap() -> None:
    events = exposed_collective().table()
    step = _one_step(replay_rank(events, WhatIf(overlap_comm=True)).steps)
    assert step.measured_ns == step.baseline_ns == 2_520 * US
    assert step.predicted_ns == 2_520 * US - 500 * US


def test_changes_combine() -> None:
    events = exposed_collective().table()
    change = WhatIf((Scale("compute", 0.5), Scale("communication", 0.5)))
    step = _one_step(replay_rank(events, change).steps)
    assert step.predicted_ns == 20 * US + 500 * US + 250 * US + 500 * US


def test_host_only_run_replays_its_operators() -> None:
    b = EventsBuilder().step_mark(0, 1_000 * US, 1)
    b.dataloader(0, 300 * US).cpu_op(300 * US, 600 * US, "aten::conv2d")
    b.cpu_op(350 * US, 100 * US, "aten::add")  # nested: not a node of its own
    step = _one_step(replay_rank(b.table(), WhatIf((Scale("host", 0.5),))).steps)
    assert step.baseline_ns == step.measured_ns == 1_000 * US
    # data loader and operator halve; the 100 µs after them is the annotation's own tail
    assert step.predicted_ns == 150 * US + 300 * US + 100 * US
    base = _one_step(replay_rank(b.table()).steps)
    assert base.bound_by_ns["dataloader"] == 300 * US


@pytest.mark.parametrize(
    ("scale", "message"),
    [
        (Scale("gpu", 0.5), "unknown selector"),
        (Scale("compute", 0.0), "above 0"),
        (Scale("compute", -2.0), "above 0"),
        (Scale("kernel:", 0.5), "unknown selector"),
    ],
)
def test_bad_changes_are_refused(scale: Scale, message: str) -> None:
    with pytest.raises(PerfledgerError, match=message):
        replay_rank(device_bound().table(), WhatIf((scale,)))


def test_critical_path_spans_lay_the_path_on_the_measured_step() -> None:
    step = _one_step(replay_rank(device_bound().table()).steps)
    spans = step.path_spans
    # the host until the first launch (10 µs), its launch latency (20 µs), then the kernels
    assert [(s.start_ns, s.end_ns, s.category) for s in spans[:2]] == [
        (0, 10 * US, "host"),
        (10 * US, 30 * US, "launch"),
    ]
    kernels = spans[2:]
    assert [s.label for s in kernels] == [f"gemm_{i}" for i in range(10)]
    assert all(s.category == "compute:matmul" and s.lane.startswith("stream ") for s in kernels)
    assert [s.start_ns for s in kernels] == [30 * US + i * 1_000 * US for i in range(10)]
    assert spans[-1].end_ns == step.measured_ns


def test_long_critical_paths_are_capped_without_holes() -> None:
    b = EventsBuilder().step_mark(0, 100 * US + 400 * 50 * US, 1)
    for i in range(400):  # 400 launches: about 1,200 pieces on the path
        host = 10 * US + i * 50 * US
        b.launch(host, 5 * US, host + 10 * US, 2 * US, "elementwise_add")
    step = _one_step(replay_rank(b.table()).steps)
    spans = step.path_spans
    assert len(spans) <= MAX_PATH_SPANS
    assert spans[0].start_ns == 0 and spans[-1].end_ns == step.measured_ns
    assert all(a.end_ns == b.start_ns for a, b in zip(spans, spans[1:], strict=False))
    assert any(s.label.endswith("pieces: host work") for s in spans)


def test_a_path_of_equal_pieces_is_capped_too() -> None:
    from perfledger.analysis.critical_path import _capped
    from perfledger.model.whatif import PathSpan

    # 1,000 kernels of 10 µs back to back: no shorter piece to merge first
    pieces = [
        PathSpan(i * 10, (i + 1) * 10, "compute:matmul", "gemm", "stream 7") for i in range(1000)
    ]
    capped = _capped(pieces, MAX_PATH_SPANS)
    assert len(capped) <= MAX_PATH_SPANS
    assert capped[0].start_ns == 0 and capped[-1].end_ns == 10_000
    assert all(a.end_ns == b.start_ns for a, b in zip(capped, capped[1:], strict=False))
    assert {s.category for s in capped} == {"compute:matmul"}


def two_threads() -> EventsBuilder:
    """Main thread: a 2 ms operator issuing a kernel at 0 and at 1,995 µs (5 µs calls, 10 µs
    kernels 10 µs later). Second thread: a launch at 50 µs, then nothing until 2,100 µs (it
    waits for the main thread), a launch then; the step mark ends with its kernel (2,120 µs)."""
    b = EventsBuilder().step_mark(0, 2_120 * US, 1)
    b.cpu_op(0, 2_000 * US, "forward")
    b.launch(0, 5 * US, 10 * US, 10 * US, "k_main")
    b.launch(1_995 * US, 5 * US, 2_005 * US, 10 * US, "k_main")
    b.launch(50 * US, 5 * US, 60 * US, 10 * US, "k_side", thread=2)
    b.launch(2_100 * US, 5 * US, 2_110 * US, 10 * US, "k_side", thread=2)
    return b


def test_a_waiting_thread_is_woken_earlier_when_the_thread_it_waits_for_is_faster() -> None:
    step = _one_step(replay_rank(two_threads().table(), WhatIf((Scale("host", 0.5),))).steps)
    assert step.measured_ns == step.baseline_ns == 2_120 * US
    # main thread: 2.5 µs call, 995 µs of its operator's work, the second call at 997.5 µs;
    # the second thread follows it by the 105 µs observed (2,100 - 1,995), its kernel 10 µs
    # after its call: [1,112.5, 1,122.5] µs. Its 2 ms wait is not host work: it does not scale.
    assert step.predicted_ns == 1_122_500


def test_a_thread_waiting_with_nothing_to_wake_it_keeps_its_wait() -> None:
    b = EventsBuilder().step_mark(0, 2_120 * US, 1)
    b.launch(50 * US, 5 * US, 60 * US, 10 * US, "k_side", thread=2)
    b.launch(2_100 * US, 5 * US, 2_110 * US, 10 * US, "k_side", thread=2)
    step = _one_step(replay_rank(b.table(), WhatIf((Scale("host", 0.5),))).steps)
    # the first call shrinks by 2.5 µs, the 2,045 µs wait after it does not (host work would
    # halve): the second call, its kernel 10 µs later and the step end 2.5 µs earlier
    assert step.predicted_ns == step.measured_ns - 2_500


def test_launch_overhead_scales_calls_dispatch_and_latency() -> None:
    events = host_bound().table()
    step = _one_step(replay_rank(events, WhatIf((Scale("launch", 0.5),))).steps)
    # 2.5 µs calls, 22.5 µs of dispatch between them, 5 µs latency: the last call at
    # 10 + 19 x 25 µs, its kernel 5 µs later for 2 µs (the host scale keeps the 10 µs latency)
    assert step.predicted_ns == 10 * US + 19 * 25 * US + 5 * US + 2 * US


def test_without_the_data_loader_a_host_only_step_keeps_its_operators() -> None:
    b = EventsBuilder().step_mark(0, 1_000 * US, 1)
    b.dataloader(0, 300 * US).cpu_op(300 * US, 600 * US, "aten::conv2d")
    step = _one_step(replay_rank(b.table(), WhatIf(no_dataloader=True)).steps)
    # the operator at once (600 µs), then the annotation's own 100 µs tail
    assert step.predicted_ns == 700 * US


def test_lanes_are_the_chains_themselves_where_no_stream_runs_both() -> None:
    # GIVEN a collective queued with kernels on one stream, and kernels alone
    shared = build_graph(exposed_collective().table())
    alone = build_graph(device_bound().table())
    # THEN the lanes of its own of the collective are arrays of their own; without one, the
    # lanes are the chains' very arrays, with the same replay either way
    assert not np.array_equal(shared.lane_pred, shared.chain_pred)
    assert alone.lane_pred is alone.chain_pred and alone.lane_delay is alone.chain_delay
    overlapped = replay(alone, WhatIf(overlap_comm=True))
    assert np.array_equal(overlapped.start, replay(alone).start)


def test_a_threads_wait_in_a_gap_keeps_its_length_and_its_work_scales() -> None:
    # a gap of 100: a wait of 80, then 20 of work; offsets 0, 50 (in the wait), 90 (half the
    # work done), 100 (the end)
    offset = np.array([0, 50, 90, 100])
    old, wait = np.full(4, 100), np.full(4, 80)
    # unchanged: every offset stays
    assert gap_offset(offset, old, old, wait).tolist() == [0, 50, 90, 100]
    # the work gone: the wait stays, the work's offsets collapse onto its end
    assert gap_offset(offset, np.full(4, 80), old, wait).tolist() == [0, 50, 80, 80]
    # twice the work
    assert gap_offset(offset, np.full(4, 120), old, wait).tolist() == [0, 50, 100, 120]
    # a replayed gap shorter than the wait (the thread woken earlier): in proportion
    assert gap_offset(offset, np.full(4, 50), old, wait).tolist() == [0, 25, 45, 50]
    # no wait: in proportion, as before
    no_wait = np.zeros(4, dtype=np.int64)
    assert gap_offset(offset, np.full(4, 50), old, no_wait).tolist() == [0, 25, 45, 50]
