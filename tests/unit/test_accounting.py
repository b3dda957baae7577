"""Device accounting on hand-built timelines: every figure derived by hand in the test."""

from __future__ import annotations

from perfledger.analysis.accounting import device_accounting
from perfledger.analysis.steps import assign_steps, step_windows
from perfledger.model import schema
from perfledger.model.accounts import Accounting, WindowAccount
from tests.scenarios import US, Timeline


def account(timeline: Timeline) -> Accounting:
    events = timeline.table()
    return device_accounting(events, step_windows(events))


def row(result: Accounting, step: int, device: int = 0) -> WindowAccount:
    (match,) = [w for w in result.windows if w.step == step and w.device == device]
    return match


def per_op_sync(with_sync: bool) -> Timeline:
    """Five 10 µs kernels, one every 30 µs; the host syncs after each launch when asked.

    launch i: [30i, 30i+2); kernel i: [30i+8, 30i+18); sync i: [30i+5, 30i+19).
    """
    t = Timeline().step(1, 0, 150)
    for i in range(5):
        t.launch(30 * i, 30 * i + 8, 10)
        if with_sync:
            t.event(schema.SYNC, "cudaDeviceSynchronize", 30 * i + 5, 14)
    return t


def test_per_op_sync_gaps_are_sync() -> None:
    step = row(account(per_op_sync(with_sync=True)), 1)
    # window [0, 150): 5 kernels x 10 µs busy
    assert (step.start_ns, step.end_ns) == (0, 150 * US)
    assert step.compute_ns == 50 * US
    # [0, 8): launched at 0, host not syncing -> host_dispatch
    assert step.idle_host_dispatch_ns == 8 * US
    # [18+30i, 38+30i) for i < 4: the sync of kernel i runs until 19+30i -> sync
    assert step.idle_sync_ns == 4 * 20 * US
    # [138, 150): no task ends it inside the window
    assert step.idle_other_ns == 12 * US
    assert step.idle_ns == 100 * US
    assert step.idle_launch_latency_ns == step.idle_dataloader_ns == 0


def test_host_too_slow_without_sync_is_host_dispatch() -> None:
    step = row(account(per_op_sync(with_sync=False)), 1)
    assert step.idle_host_dispatch_ns == (8 + 4 * 20) * US
    assert step.idle_sync_ns == 0
    assert step.idle_other_ns == 12 * US


def test_queued_work_is_launch_latency() -> None:
    # all five launches issued in the first 10 µs; kernels run later with 5 µs holes between
    t = Timeline().step(1, 0, 100)
    for i in range(5):
        t.launch(2 * i, 20 + 15 * i, 10)
    step = row(account(t), 1)
    assert step.compute_ns == 50 * US
    # [0, 20): first kernel launched at 0, not before the device went idle at 0 -> host_dispatch
    assert step.idle_host_dispatch_ns == 20 * US
    # four 5 µs holes: each next kernel was launched long before -> launch_latency
    assert step.idle_launch_latency_ns == 4 * 5 * US
    # [90, 100): tail
    assert step.idle_other_ns == 10 * US


def test_overlapping_streams_are_a_union() -> None:
    t = Timeline().step(1, 0, 50)
    t.launch(0, 10, 20, stream=7)  # [10, 30)
    t.launch(1, 20, 20, stream=8)  # [20, 40)
    step = row(account(t), 1)
    assert step.compute_ns == 30 * US
    assert step.idle_ns == 20 * US


def test_nccl_partly_under_compute() -> None:
    t = Timeline().step(1, 0, 60)
    t.launch(0, 10, 20, stream=7)  # kernel [10, 30)
    t.launch(1, 20, 30, kind=schema.COMM, name="ncclKernel_AllReduce", stream=20)  # [20, 50)
    step = row(account(t), 1)
    assert step.compute_ns == 20 * US
    assert step.communication_ns == 20 * US  # exposed: [30, 50)
    assert step.overlapped_communication_ns == 10 * US  # [20, 30)
    assert step.idle_ns == 20 * US


def test_priority_memcpy_over_memset() -> None:
    t = Timeline().step(1, 0, 40)
    t.launch(0, 0, 20, kind=schema.MEMCPY, name="Memcpy HtoD (Pageable -> Device)", nbytes=1 << 20)
    t.launch(1, 10, 20, kind=schema.MEMSET, name="Memset (Device)", stream=8)
    step = row(account(t), 1)
    assert (step.memcpy_ns, step.memset_ns, step.idle_ns) == (20 * US, 10 * US, 10 * US)


def test_device_work_of_one_step_runs_into_the_next() -> None:
    t = Timeline().step(1, 0, 100).step(2, 100, 100)
    t.launch(90, 95, 35)  # issued in step 1, runs [95, 130)
    t.launch(110, 130, 20)  # issued in step 2, runs [130, 150)
    events = t.table()
    windows = step_windows(events)
    assert [(w.step, w.start_ns, w.end_ns) for w in windows] == [
        (1, 0, 130 * US),
        (2, 130 * US, 200 * US),
    ]
    result = device_accounting(events, windows)
    assert row(result, 1).compute_ns == 35 * US
    assert row(result, 2).compute_ns == 20 * US
    # the second kernel belongs to step 2 although its window starts at 130
    stepped = assign_steps(events, windows)
    kernels = [r for r in stepped.to_pylist() if r["kind"] == schema.KERNEL]
    assert [k["step"] for k in kernels] == [1, 2]


def test_dataloader_wait() -> None:
    t = Timeline().step(1, 0, 100)
    t.launch(0, 0, 10)  # [0, 10)
    t.event(
        schema.DATALOADER, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 12, 40
    )
    t.launch(60, 62, 10)  # device idle [10, 62); host in the loader 40 of the 50 µs [10, 60)
    step = row(account(t), 1)
    assert step.idle_dataloader_ns == 52 * US
    assert step.idle_other_ns == 28 * US


def test_unknown_launch_is_other() -> None:
    t = Timeline().step(1, 0, 30)
    t.event(schema.KERNEL, "orphan", 10, 10, device=0, stream=7)  # no correlation
    step = row(account(t), 1)
    assert step.idle_other_ns == 20 * US


def test_span_row_cuts_work_issued_in_the_last_step() -> None:
    t = Timeline().step(1, 0, 100).step(2, 100, 100)
    t.launch(10, 20, 30)  # [20, 50)
    t.launch(60, 70, 10)  # [70, 80)
    t.launch(120, 125, 50)  # issued in the last step: not in the span row
    span = row(account(t), -1)
    assert (span.start_ns, span.end_ns) == (20 * US, 80 * US)
    assert span.compute_ns == 40 * US
    assert span.idle_ns == 20 * US


def test_no_steps_one_window_from_first_to_last_event() -> None:
    t = Timeline()
    t.launch(0, 5, 10)
    (window,) = step_windows(t.table())
    assert (window.step, window.start_ns, window.end_ns) == (0, 0, 15 * US)
    step = row(account(t), 0)
    assert step.compute_ns == 10 * US and step.idle_ns == 5 * US


def test_gap_table_matches_the_idle_columns() -> None:
    result = account(per_op_sync(with_sync=True))
    gaps = result.gaps.to_pylist()
    assert sum(g["dur_ns"] for g in gaps) == row(result, 1).idle_ns
    assert [g["cause"] for g in gaps] == ["host_dispatch"] + ["sync"] * 4 + ["other"]
    assert gaps[1]["launch_start_ns"] == 30 * US


def test_host_only_phases_and_coverage() -> None:
    from perfledger.analysis.accounting import host_accounting

    t = Timeline()
    t.step(1, 0, 100).step(2, 100, 100)
    for base in (0, 100):
        loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
        t.event(schema.DATALOADER, loader, base + 0, 10)
        t.event(schema.CPU_OP, "aten::conv2d", base + 12, 30)  # forward op
        t.event(schema.CPU_OP, "autograd::engine::evaluate_function: ConvBackward0", base + 50, 20)
        t.event(schema.CPU_OP, "autograd::engine::evaluate_function: AddBackward0", base + 75, 5)
        t.event(schema.ANNOTATION, "Optimizer.step#SGD.step", base + 85, 10)
        t.event(schema.CPU_OP, "aten::add_", base + 86, 4)
    events = t.table()
    windows = step_windows(events)
    result = device_accounting(events, windows)
    assert result.windows == ()  # no device at all: the host is accounted
    by_step = {h.step: h for h in result.host}
    one = by_step[1]
    assert (one.start_ns, one.end_ns) == (0, 100 * US)
    assert one.dataloader_ns == 10 * US
    assert one.optimizer_ns == 10 * US
    assert one.backward_ns == 30 * US  # [50, 80): first to last backward operator
    assert one.forward_ns == 50 * US  # the rest
    assert one.operator_ns == (30 + 20 + 5 + 4) * US
    assert one.overhead_ns == 100 * US - 10 * US - 59 * US
    # the whole-trace row holds the phases of both steps, not one hull across them
    span = by_step[-1]
    assert (span.start_ns, span.end_ns) == (0, 200 * US)
    assert span.backward_ns == 60 * US
    assert span.dataloader_ns == 20 * US
    assert host_accounting(events, ()) == ()
