"""Odd and damaged Kineto traces, each built from one clean synthetic run.

The clean run: one rank, four ``ProfilerStep#N`` of 10 ms on the main thread; in each step an
``aten::mm`` operator launches one 2 ms kernel (the launch 1 ms into the step, the kernel
0.5 ms later) and an ``aten::copy_`` launches one 0.5 ms host-to-device copy; step 2 also runs
a 3 ms NCCL all-reduce on a second stream. Every variant changes one thing; ``damaged`` says
whether the change is damage a quality report must flag (the rest is odd but valid).
Times are µs, as Kineto writes them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from tests.kineto_gen import Event, complete, cpu_op, device_task, runtime

STEPS = 4
STEP_US = 10_000
BASE_US = 1_700_000_000_000_000  # an epoch timestamp in µs, as recent traces have
YEAR_US = 365 * 24 * 3600 * 1_000_000


def clean_run() -> list[Event]:
    """The clean run's events (see the module docstring)."""
    events: list[Event] = []
    correlation = 1
    for step in range(STEPS):
        start = BASE_US + step * STEP_US
        events.append(complete("user_annotation", f"ProfilerStep#{step}", start, STEP_US))
        mm = start + 1_000
        events.append(cpu_op("aten::mm", mm, 200, external_id=correlation))
        events.append(runtime("cudaLaunchKernel", mm + 50, 20, correlation=correlation))
        events.append(
            device_task("kernel", "gemm_kernel", mm + 500, 2_000, correlation=correlation)
        )
        correlation += 1
        copy_op = start + 4_000
        events.append(cpu_op("aten::copy_", copy_op, 150, external_id=correlation))
        events.append(runtime("cudaMemcpyAsync", copy_op + 30, 20, correlation=correlation))
        events.append(
            device_task(
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                copy_op + 200,
                500,
                correlation=correlation,
                bytes=1 << 20,
            )
        )
        correlation += 1
        if step == 2:
            nccl = start + 6_000
            events.append(cpu_op("nccl:all_reduce", nccl, 100, external_id=correlation))
            events.append(runtime("cudaLaunchKernel", nccl + 20, 20, correlation=correlation))
            events.append(
                device_task(
                    "kernel",
                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                    nccl + 300,
                    3_000,
                    correlation=correlation,
                    stream=13,
                )
            )
            correlation += 1
    return events


def _kernels(events: list[Event], name: str = "gemm_kernel") -> list[Event]:
    return [e for e in events if e.get("cat") == "kernel" and e["name"] == name]


def _steps(events: list[Event]) -> list[Event]:
    return [e for e in events if str(e["name"]).startswith("ProfilerStep#")]


def _device(events: list[Event]) -> list[Event]:
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def zero_length_step(events: list[Event]) -> None:
    _steps(events)[1]["dur"] = 0


def kernel_100ms_late(events: list[Event]) -> None:
    late = _kernels(events)[0]
    late["ts"] += 100_000  # on a stream of its own, waiting for something
    late["tid"] = late["args"]["stream"] = 21


def kernel_out_of_stream_order(events: list[Event]) -> None:
    _kernels(events)[0]["ts"] += 100_000  # after the next steps' kernels on its own stream


def nccl_longer_than_two_steps(events: list[Event]) -> None:
    _kernels(events, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")[0]["dur"] = 25_000


def overlapping_steps(events: list[Event]) -> None:
    _steps(events)[2]["ts"] -= 4_000


def all_correlation_ids_equal(events: list[Event]) -> None:
    for event in events:
        if "args" in event and "correlation" in event["args"]:
            event["args"]["correlation"] = 1


def negative_step_duration(events: list[Event]) -> None:
    _steps(events)[1]["dur"] = -5_000


def all_durations_zero(events: list[Event]) -> None:
    for event in events:
        event["dur"] = 0


def device_in_ns_host_in_us(events: list[Event]) -> None:
    # times relative to the profile start (as with baseTimeNanoseconds), the device's in ns
    for event in events:
        event["ts"] -= BASE_US - 1_000
    for event in _device(events):
        event["ts"] *= 1_000
        event["dur"] *= 1_000


def collective_into_next_step(events: list[Event]) -> None:
    nccl = _kernels(events, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")[0]
    nccl["dur"] = 9_000  # from 6.3 ms into step 2 to 5.3 ms into step 3


def negative_kernel_durations(events: list[Event]) -> None:
    for kernel in _kernels(events)[:2]:
        kernel["dur"] = -kernel["dur"]


def duplicate_step_numbers(events: list[Event]) -> None:
    _steps(events)[2]["name"] = "ProfilerStep#1"


def outer_annotation(events: list[Event]) -> None:
    first = min(e["ts"] for e in events)
    last = max(e["ts"] + e["dur"] for e in events)
    start = first - 30_000_000  # 30 s before any work, as a100_alexnet's [param|cuda]
    events.insert(0, complete("user_annotation", "[param|cuda]", start, last - start))


def kernel_years_late(events: list[Event]) -> None:
    _kernels(events)[-1]["ts"] += 3 * YEAR_US


def non_nesting_slices(events: list[Event]) -> None:
    mm = [e for e in events if e["name"] == "aten::mm"][1]
    # an operator that starts inside aten::mm and ends after it, on the same thread
    events.append(cpu_op("aten::relu", mm["ts"] + 100, 500, external_id=9_999))


def step_marks_in_another_clock(events: list[Event]) -> None:
    for step in _steps(events):
        step["ts"] += 2 * YEAR_US


def tasks_without_launch(events: list[Event]) -> None:
    for kernel in _kernels(events):
        del kernel["args"]["correlation"]


def launches_without_task(events: list[Event]) -> None:
    events.remove(_kernels(events)[0])  # the profiler lost a kernel: its launch stays


def overlapping_tasks_on_one_stream(events: list[Event]) -> None:
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    kernel = _kernels(events)[0]
    copies[0]["ts"] = kernel["ts"] + 500  # starts while the kernel runs, on the same stream


def outer_annotation_without_steps(events: list[Event]) -> None:
    for step in _steps(events):
        events.remove(step)
    outer_annotation(events)


def external_id_of_another_operator(events: list[Event]) -> None:
    # every memcpy's launch names the id of the aten::mm of its step (as on a100_alexnet,
    # where ids collide): the call lies inside aten::copy_, which owns the copy
    mms = [e for e in events if e["name"] == "aten::mm"]
    copies = [e for e in events if e["name"] == "aten::copy_"]
    for mm, copy_op in zip(mms, copies, strict=True):
        copy_op["args"]["External id"] = 90_000 + mm["args"]["External id"]
    for event in events:
        if event["name"] == "cudaMemcpyAsync":
            launch_step = next(m for m in mms if m["ts"] <= event["ts"] < m["ts"] + STEP_US)
            event["args"]["External id"] = launch_step["args"]["External id"]


def step_without_device_work(events: list[Event]) -> None:
    step = _steps(events)[3]
    inside = [
        e
        for e in _device(events)
        if step["ts"] <= e["ts"] < step["ts"] + step["dur"] and e.get("cat") != "user_annotation"
    ]
    issued = {e["args"].get("correlation") for e in inside if "args" in e}
    launches = [
        e
        for e in events
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in issued
    ]
    for event in inside + launches:  # nothing issued, nothing run
        events.remove(event)


@dataclass(frozen=True)
class Variant:
    name: str
    change: Callable[[list[Event]], None]
    damaged: bool  # damage the quality report must flag (confidence below high)
    checks: tuple[str, ...] = ()  # the quality checks it must set off


VARIANTS: tuple[Variant, ...] = (
    Variant("zero_length_step", zero_length_step, False, ("empty_windows",)),
    Variant("kernel_100ms_late", kernel_100ms_late, False),
    Variant(
        "kernel_out_of_stream_order",
        kernel_out_of_stream_order,
        True,
        ("overlapping_stream_tasks",),
    ),
    Variant("nccl_longer_than_two_steps", nccl_longer_than_two_steps, False),
    Variant("overlapping_steps", overlapping_steps, True, ("overlapping_steps",)),
    Variant("all_correlation_ids_equal", all_correlation_ids_equal, True, ("shared_correlation",)),
    Variant("negative_step_duration", negative_step_duration, True, ("negative_durations",)),
    Variant("all_durations_zero", all_durations_zero, True, ("zero_length_tasks",)),
    Variant("device_in_ns_host_in_us", device_in_ns_host_in_us, True, ("device_time_unit",)),
    Variant("collective_into_next_step", collective_into_next_step, False),
    Variant("negative_kernel_durations", negative_kernel_durations, True, ("negative_durations",)),
    Variant("duplicate_step_numbers", duplicate_step_numbers, True, ("duplicate_step_numbers",)),
    Variant("outer_annotation", outer_annotation, False),
    Variant(
        "outer_annotation_without_steps",
        outer_annotation_without_steps,
        True,
        ("window_beyond_device",),
    ),
    Variant("kernel_years_late", kernel_years_late, True, ("outlying_events",)),
    Variant("non_nesting_slices", non_nesting_slices, True, ("non_nesting_slices",)),
    Variant("step_marks_in_another_clock", step_marks_in_another_clock, True, ("clock_domains",)),
    Variant("tasks_without_launch", tasks_without_launch, False, ("launchless_tasks",)),
    Variant(
        "overlapping_tasks_on_one_stream",
        overlapping_tasks_on_one_stream,
        True,
        ("overlapping_stream_tasks",),
    ),
    Variant(
        "external_id_of_another_operator",
        external_id_of_another_operator,
        False,
        ("relinked_tasks",),
    ),
    Variant("step_without_device_work", step_without_device_work, False, ("empty_windows",)),
    Variant("launches_without_task", launches_without_task, True, ("taskless_launches",)),
)


def variant_events(variant: Variant) -> list[Event]:
    """The clean run with one variant's change applied."""
    events = copy.deepcopy(clean_run())
    variant.change(events)
    return events
