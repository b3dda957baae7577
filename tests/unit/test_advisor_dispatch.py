"""host_dispatch_bound, excessive_sync, small_op_explosion on hand-built steps."""

from __future__ import annotations

from perfledger.analysis.advisor import Skipped
from tests.advisor_synth import US, analyse, finding, host_bound_steps, outcome
from tests.synth import EventsBuilder

STEP = 1000 * US


def busy_steps(*, tail_sync: bool = False) -> EventsBuilder:
    """Three 1 ms steps whose four kernels, all launched at the start, fill 980 µs."""
    b = EventsBuilder()
    for s in range(3):
        t0 = s * STEP
        b.step_mark(t0, STEP, s + 1)
        starts = (10, 250, 500, 750)
        ends = (250, 500, 750, 990)
        for i, (k0, k1) in enumerate(zip(starts, ends, strict=True)):
            b.launch(t0 + 2 * i * US, 1 * US, t0 + k0 * US, (k1 - k0) * US, "gemm")
        if tail_sync:
            b.sync(t0 + 20 * US, 975 * US, "cudaDeviceSynchronize")
    return b


# --- host_dispatch_bound -----------------------------------------------------------------------


def test_host_dispatch_bound_fires_with_the_gaps_as_evidence() -> None:
    f = finding(analyse(host_bound_steps()), "host_dispatch_bound")
    # Per step: idle [0,20) + 3 x [120,270) host_dispatch = 470 µs, tail [870,1000) other.
    e = f.evidence
    assert e["idle_pct_of_step"] == 60.0
    assert e["host_caused_pct_of_idle"] == round(100 * 470 / 600, 2)
    assert e["idle_host_dispatch_ms_per_step"] == 0.47
    assert e["idle_sync_ms_per_step"] == 0.0
    gaps = e["host_caused_gaps"]
    assert (gaps["count"], gaps["per_step"], gaps["median_us"]) == (12, 4.0, 150.0)
    histogram = {b["bucket"]: b["count"] for b in gaps["histogram"]}
    assert histogram == {"<10us": 0, "10-100us": 3, "0.1-1ms": 9, "1-10ms": 0, ">10ms": 0}
    worst = e["worst_gaps"][0]
    assert (worst["dur_us"], worst["cause"], worst["host_op"], worst["step"]) == (
        150.0,
        "host_dispatch",
        "host_work",
        1,
    )
    assert (worst["start_ns"], worst["end_ns"]) == (120 * US, 270 * US)
    assert (f.severity_ms, f.severity_pct) == (0.47, 47.0)
    assert f.spans[0] == {"rank": 0, "start_ns": 120 * US, "end_ns": 270 * US}


def test_host_dispatch_bound_silent_when_the_device_is_busy() -> None:
    assert outcome(analyse(busy_steps()), "host_dispatch_bound") is None


def test_host_dispatch_bound_silent_when_idle_is_the_data_loader() -> None:
    # The same gaps, but the host spends them in the data loader: only [0, 20) is dispatch.
    assert outcome(analyse(host_bound_steps(loader=True)), "host_dispatch_bound") is None


def test_host_dispatch_bound_threshold_override() -> None:
    analysis = analyse(host_bound_steps())
    assert outcome(analysis, "host_dispatch_bound", thresholds={"idle_pct": 60.0}) is None
    assert outcome(analysis, "host_dispatch_bound", thresholds={"idle_pct": 59.9}) is not None


def test_host_dispatch_bound_skips_host_only_profiles() -> None:
    b = EventsBuilder().step_mark(0, STEP, 1).cpu_op(0, 500 * US, "aten::mm")
    result = outcome(analyse(b), "host_dispatch_bound")
    assert isinstance(result, Skipped) and "host-only" in result.reason


# --- excessive_sync ----------------------------------------------------------------------------


def test_excessive_sync_fires_with_call_sites() -> None:
    f = finding(analyse(host_bound_steps(with_sync=True)), "excessive_sync")
    e = f.evidence
    # Each launch is followed by a stream sync that runs until its kernel ends: the gap after
    # each kernel (150 µs, three per step) is caused by it; the step's last gap is the tail.
    assert e["sync_calls_per_step"] == 4.0
    assert e["item_like_ops_per_step"] == 0.0
    assert e["kernel_launches"] == 12
    assert e["launches_followed_by_sync_pct"] == 100.0
    assert e["idle_sync_ms_per_step"] == 0.45
    assert e["idle_sync_pct_of_step"] == 45.0
    (call,) = e["by_call"]
    assert call == {
        "call": "cudaStreamSynchronize",
        "count": 12,
        "per_step": 4.0,
        "host_ms": round(12 * 115 / 1000, 3),
        "device_idle_ms": round(9 * 150 / 1000, 3),
    }
    worst = e["worst_syncs"][0]
    assert worst["device_idle_us"] == 150.0
    assert worst["call_site"] == "train.py(42): train_step"
    assert (worst["start_ns"], worst["end_ns"]) == (10 * US, 125 * US)
    assert "call_site_note" not in e
    assert (f.severity_ms, f.severity_pct) == (0.45, 45.0)


def test_excessive_sync_counts_an_item_call_once() -> None:
    # .item() -> _local_scalar_dense -> cudaStreamSynchronize is one synchronisation point
    f = finding(analyse(host_bound_steps(with_sync=True, in_item=True)), "excessive_sync")
    e = f.evidence
    assert (e["sync_calls_per_step"], e["item_like_ops_per_step"]) == (4.0, 4.0)
    (call,) = e["by_call"]
    assert (call["call"], call["count"], call["device_idle_ms"]) == ("aten::item", 12, 1.35)
    assert call["host_ms"] == round(12 * 117 / 1000, 3)
    assert (f.severity_ms, f.severity_pct) == (0.45, 45.0)


def test_excessive_sync_silent_when_syncs_cost_nothing() -> None:
    # One sync per step while the device is busy; it never leaves the device idle.
    assert outcome(analyse(busy_steps(tail_sync=True)), "excessive_sync") is None


def test_excessive_sync_followed_share_needs_enough_launches() -> None:
    analysis = analyse(host_bound_steps(with_sync=True))
    # With the idle condition switched off, 4 launches per step are too few for the share ...
    quiet = {"sync_idle_pct": 100.0}
    assert outcome(analysis, "excessive_sync", thresholds=quiet) is None
    # ... unless the minimum is lowered.
    loud = {"sync_idle_pct": 100.0, "min_launches_per_step": 4.0}
    assert outcome(analysis, "excessive_sync", thresholds=loud) is not None


# --- small_op_explosion ------------------------------------------------------------------------


def many_small_kernels() -> EventsBuilder:
    """Two 10 ms steps of 1200 kernels of 5 µs at an 8 µs pitch (800 adds, then 400 muls)."""
    b = EventsBuilder()
    for s in range(2):
        t0 = s * 10_000 * US
        b.step_mark(t0, 10_000 * US, s + 1)
        for i in range(1200):
            name = "add_kernel" if i < 800 else "mul_kernel"
            b.launch(t0 + (8 * i + 6) * US, 2 * US, t0 + (8 * i + 10) * US, 5 * US, name)
    return b


def test_small_op_explosion_fires() -> None:
    f = finding(analyse(many_small_kernels()), "small_op_explosion")
    e = f.evidence
    assert e["tasks_per_step"] == 1200.0
    assert e["short_tasks_per_step"] == 1200.0
    assert e["short_task_share_pct"] == 100.0
    assert e["launch_calls_ms_per_step"] == 2.4  # 1200 calls of 2 µs
    # gaps ended by a short task: [0, 10) then 1199 gaps of 3 µs, per step
    assert e["idle_before_short_tasks_ms_per_step"] == 3.607
    top = e["top_ops_by_count"]
    assert [(o["op"], o["count"], o["per_step"], o["mean_us"]) for o in top] == [
        ("add_kernel", 1600, 800.0, 5.0),
        ("mul_kernel", 800, 400.0, 5.0),
    ]
    assert (f.severity_ms, f.severity_pct) == (3.607, 36.07)


def test_small_op_explosion_silent_under_thresholds() -> None:
    analysis = analyse(many_small_kernels())
    assert outcome(analysis, "small_op_explosion", thresholds={"min_tasks_per_step": 1201}) is None
    assert outcome(analysis, "small_op_explosion", thresholds={"short_task_us": 5}) is None
