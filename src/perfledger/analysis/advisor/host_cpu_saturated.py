"""host_cpu_saturated: the process that dispatches work to the device has no CPU to spare.

From the host counters ``perfledger record`` samples (``cpu_percent`` of each rank's process,
100 = one core; per-core busy percent of the machine): a process near one full core is a
dispatching thread at its limit (Python runs one thread at a time), and a machine whose cores
are all busy starves it. When the trace has host events, the share of each step the launching
thread spends inside recorded host work backs the counters up.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.intervals import union
from perfledger.model import schema
from perfledger.model.findings import Finding, Skipped, Threshold, ms, pct

ID: Final = "host_cpu_saturated"
PROCESS_TRACKS: Final = ("rank_process", "process_tree")
CORES_TRACK: Final = "cpu_cores"
CPU_PERCENT: Final = "cpu_percent"
# Host work on the launching thread: operators, runtime calls, Python frames, annotations.
HOST_WORK_KINDS: Final = (
    schema.CPU_OP,
    schema.RUNTIME,
    schema.SYNC,
    schema.PYTHON,
    schema.ANNOTATION,
    schema.DATALOADER,
)


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """The process CPU >= busy_pct of a core in >= samples_pct of the samples."""
    if not ctx.has_device_tasks:
        # the process is the whole run: there is no device waiting on it, and its advice
        # (CUDA Graphs, a core of its own for dispatch) does not apply
        return Skipped(ID, "no device activity: host-only profile")
    counters = ctx.analysis.counters
    is_cpu = pc.and_(
        pc.equal(counters["name"], CPU_PERCENT),
        pc.is_in(counters["track"], value_set=pa.array(list(PROCESS_TRACKS))),
    )
    cpu = counters.filter(is_cpu)
    if cpu.num_rows == 0:
        return Skipped(ID, "no host CPU counters in the profile (recorded by perfledger record)")
    windows = ctx.step_windows or ctx.host_windows
    if not windows:
        return Skipped(ID, "no step window")
    lo = min(w.start_ns for w in windows)
    hi = max(w.end_ns for w in windows)
    track = np.asarray(cpu["track"].to_numpy(zero_copy_only=False), dtype=object)
    ts = np.asarray(cpu["ts_ns"], dtype=np.int64)
    value = np.asarray(cpu["value"], dtype=np.float64)
    # per-rank process samples when recorded, else the whole process tree
    chosen = PROCESS_TRACKS[0] if (track == PROCESS_TRACKS[0]).any() else PROCESS_TRACKS[1]
    inside = (track == chosen) & (ts >= lo) & (ts <= hi)
    if not inside.any():
        return Skipped(ID, "no host CPU sample falls inside the profiled steps")
    samples = value[inside]
    saturated = pct(int((samples >= p["busy_pct"]).sum()), samples.size)
    if saturated < p["samples_pct"]:
        return None

    cores = _machine_saturation(counters, lo, hi, p["busy_pct"])
    dispatch_busy = _dispatch_thread_busy(ctx)
    dispatch_idle = sum(getattr(w, "idle_host_dispatch_ns", 0) for w in ctx.step_windows)
    severity_ms, severity_pct = ctx.severity(dispatch_idle)
    evidence: dict[str, Any] = {
        "steps": ctx.basis.describe(),
        "counter": f"{chosen}/{CPU_PERCENT} (100 = one core)",
        "samples": int(samples.size),
        "median_cpu_pct": round(float(np.median(samples)), 1),
        "p90_cpu_pct": round(float(np.percentile(samples, 90)), 1),
        "saturated_samples_pct": saturated,
        "machine_cores": cores,
        "dispatch_thread_busy_pct_of_step": dispatch_busy,
        "device_idle_host_dispatch_ms_per_step": (
            ms(dispatch_idle / len(ctx.step_windows)) if ctx.step_windows else None
        ),
    }
    return Finding(
        id=ID,
        title=(
            f"The dispatching process runs at {np.median(samples):.0f}% of a core: the host "
            "CPU is saturated"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Give the dispatching thread a core of its own and less to do: pin the training "
            "process away from data-loader workers (taskset/numactl, CPU_AFFINITY_CONF on "
            "Ascend), cut Python work per step (torch.compile, CUDA Graphs, fewer hooks and "
            "logging calls), lower num_workers if the workers oversubscribe the machine."
        ),
        verify=(
            "Re-record: the process CPU samples should fall below a full core and the "
            "device's host_dispatch idle time per step with them."
        ),
        estimate=(
            "Device idle time attributed to host_dispatch, per step: the time a faster host "
            "would give back."
        ),
    )


def _machine_saturation(
    counters: pa.Table, lo: int, hi: int, busy_pct: float
) -> dict[str, Any] | None:
    cores = counters.filter(pc.equal(counters["track"], CORES_TRACK))
    if cores.num_rows == 0:
        return None
    ts = np.asarray(cores["ts_ns"], dtype=np.int64)
    value = np.asarray(cores["value"], dtype=np.float64)
    inside = (ts >= lo) & (ts <= hi)
    if not inside.any():
        return None
    instants, index = np.unique(ts[inside], return_inverse=True)
    mean = np.bincount(index, weights=value[inside]) / np.bincount(index)
    return {
        "cores": int(np.unique(cores["name"].to_numpy(zero_copy_only=False)).size),
        "mean_busy_pct": round(float(mean.mean()), 1),
        "all_cores_busy_samples_pct": pct(int((mean >= busy_pct).sum()), instants.size),
    }


def _dispatch_thread_busy(ctx: AdvisorContext) -> float | None:
    """Share of the step windows the thread issuing most launches spends in host work."""
    events = ctx.analysis.events
    launch_rows = np.asarray(ctx.tasks["launch_row"], dtype=np.int64)
    launch_rows = launch_rows[launch_rows >= 0]
    if launch_rows.size == 0 or not ctx.step_windows:
        return None
    rank = columns.int64(events, "rank")
    pid = columns.int64(events, "pid")
    thread = columns.int64(events, "stream")
    keys = np.stack([rank[launch_rows], pid[launch_rows], thread[launch_rows]], axis=1)
    distinct, counts = np.unique(keys, axis=0, return_counts=True)
    r, process, tid = distinct[int(np.argmax(counts))]
    on_thread = (rank == r) & (pid == process) & (thread == tid)
    on_thread &= columns.isin(events, "kind", HOST_WORK_KINDS)
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    work = union(start[on_thread], end[on_thread])
    mine = {(w.step, w.start_ns, w.end_ns) for w in ctx.step_windows if w.rank == r}
    lo = np.array([s for _, s, _ in mine], dtype=np.int64)
    hi = np.array([e for _, _, e in mine], dtype=np.int64)
    return pct(int(work.covered(lo, hi).sum()), int((hi - lo).sum()))


RULE: Final = Rule(
    id=ID,
    title="the host CPU that dispatches work is saturated",
    checks="recorded process CPU % (and machine cores) during the profiled steps",
    thresholds=(
        Threshold(
            "busy_pct",
            90.0,
            "%",
            "a sample at or above this share of a core is saturated",
            "the msprof guides' checklist (dispatching thread near 100%)",
        ),
        Threshold(
            "samples_pct",
            50.0,
            "%",
            "share of saturated samples that flags",
            "perfledger",
        ),
    ),
    check=check,
)
