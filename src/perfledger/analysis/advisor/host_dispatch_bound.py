"""host_dispatch_bound: the device waits for the host to issue work.

The msprof guides' case 1: a 410 ms step whose device sits idle in 0.5-2.1 ms gaps while the host is
busy — the host cannot issue kernels as fast as the device runs them (Python and framework
overhead per op, a synchronisation after each launch). The accounting attributes each idle
gap to its cause; this rule reads the share of the step the device is idle and how much of
that idle time is ``host_dispatch`` or ``sync``, less the time the host spent in the data
loader within those gaps (dataloader_bound's).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.gaps import gap_report
from perfledger.model.accounts import IDLE_HOST_DISPATCH, IDLE_SYNC
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us
from perfledger.model.whatif import LAUNCH, Scale, WhatIf

ID: Final = "host_dispatch_bound"
HOST_CAUSES: Final = (IDLE_HOST_DISPATCH, IDLE_SYNC)


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Device idle > idle_pct of the step and most of it caused by the host."""
    windows = ctx.step_windows
    if not windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    wall = sum(w.wall_ns for w in windows)
    idle = sum(w.idle_ns for w in windows)
    dispatch = sum(w.idle_host_dispatch_ns for w in windows)
    sync = sum(w.idle_sync_ns for w in windows)
    # the host's time in the data loader within those gaps is the data loader's
    # (dataloader_bound): issuing work faster does not fetch the batch sooner
    in_loader = ctx.idle_in_loader(HOST_CAUSES)
    host = max(dispatch + sync - in_loader, 0)
    if pct(idle, wall) <= p["idle_pct"] or pct(host, idle) <= p["host_share_pct"]:
        return None

    gaps = ctx.analysis.gaps
    host_gaps = gaps.filter(pc.is_in(gaps["cause"], value_set=pa.array(list(HOST_CAUSES))))
    report = gap_report(host_gaps, ctx.analysis.events, worst=TOP_OFFENDERS)
    durations = np.asarray(host_gaps["dur_ns"], dtype=np.int64)
    durations = durations[durations > 0]
    worst = report.worst.to_pylist()
    per_step = sorted(windows, key=lambda w: -(w.idle_host_dispatch_ns + w.idle_sync_ns))
    severity_ms, severity_pct = ctx.severity(host)
    evidence = {
        "steps": ctx.basis.describe(),
        "idle_pct_of_step": pct(idle, wall),
        "host_caused_pct_of_idle": pct(host, idle),
        "idle_host_dispatch_ms_per_step": ms(dispatch / len(windows)),
        "idle_sync_ms_per_step": ms(sync / len(windows)),
        "idle_in_data_loader_ms_per_step": ms(in_loader / len(windows)),
        "host_caused_gaps": {
            "count": int(durations.size),
            "per_step": round(durations.size / len(windows), 1),
            "median_us": us(float(np.median(durations))) if durations.size else 0.0,
            "p90_us": us(float(np.percentile(durations, 90))) if durations.size else 0.0,
            "histogram": [
                {
                    "bucket": b.label,
                    "count": b.count,
                    "total_ms": ms(b.total_ns),
                    "by_cause": {c.cause: c.count for c in b.by_cause if c.cause in HOST_CAUSES},
                }
                for b in report.buckets
            ],
        },
        "worst_gaps": [
            {
                "rank": g["rank"],
                "device": g["device"],
                "step": g["step"],
                "start_ns": g["start_ns"],
                "end_ns": g["end_ns"],
                "dur_us": us(g["dur_ns"]),
                "cause": g["cause"],
                "host_op": g["host_op"],
                "host_annotation": g["host_annotation"],
                "next_task": g["next_task"],
            }
            for g in worst
        ],
        "worst_steps": [
            {
                "rank": w.rank,
                "device": w.device,
                "step": w.step,
                "start_ns": w.start_ns,
                "end_ns": w.end_ns,
                "wall_ms": ms(w.wall_ns),
                "idle_pct": pct(w.idle_ns, w.wall_ns),
                "host_caused_ms": ms(w.idle_host_dispatch_ns + w.idle_sync_ns),
            }
            for w in per_step[:TOP_OFFENDERS]
        ],
    }
    return Finding(
        id=ID,
        title=(
            f"Device idle {pct(idle, wall):.1f}% of the step, {pct(host, idle):.0f}% of it "
            "waiting for the host to issue work"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Issue work faster than the device runs it: remove per-op synchronisations "
            "(.item(), .cpu(), printing tensors) from the step; batch small launches into "
            "fewer, larger ops; "
            + (
                f"the step already replays CUDA graphs ({ctx.graph_launches} launches): capture "
                "what still runs between them (input copies, random numbers, the optimizer, "
                "logging) into the graph, or move it onto the device; "
                if ctx.graph_launches
                else "capture the step with CUDA Graphs or torch.compile (mode='reduce-overhead'); "
            )
            + "pin the dispatching thread to a free core away from data-loader workers. On "
            "Ascend: enable the task queue (TASK_QUEUE_ENABLE=2) and bind cores "
            "(CPU_AFFINITY_CONF)."
        ),
        verify=(
            "Re-profile and compare (perfledger diff): idle_host_dispatch_ns and idle_sync_ns "
            "per step must fall and the step time with them; the gap histogram should lose "
            "its 0.1-10 ms host-caused gaps."
        ),
        estimate=(
            "Device idle time attributed to host_dispatch and sync, less the host's time in "
            "the data loader within it, per step: the time the device would gain if the host "
            "always kept work queued."
        ),
        spans=tuple(
            {"rank": g["rank"], "start_ns": g["start_ns"], "end_ns": g["end_ns"]} for g in worst
        ),
        # the fix replayed: launch overhead (calls, latency, dispatch work between them) scaled
        whatif_ms=ctx.whatif_ms(ID, WhatIf(scales=(Scale(LAUNCH, p["whatif_launch_factor"]),))),
    )


RULE: Final = Rule(
    id=ID,
    title="the host cannot issue work as fast as the device runs it",
    checks="device idle share of the step and the share of it caused by host_dispatch/sync",
    thresholds=(
        Threshold(
            "idle_pct",
            10.0,
            "%",
            "device idle share of the step above which to look",
            "the msprof guides' checklist (device idle > 10% of step)",
        ),
        Threshold(
            "host_share_pct",
            50.0,
            "%",
            "share of idle time caused by host_dispatch or sync",
            "perfledger: most of the idle time",
        ),
        Threshold(
            "whatif_launch_factor",
            0.5,
            "x",
            "the fix replayed (whatif_ms): launch overhead multiplied by this",
            "perfledger: dispatch twice as fast (fewer Python ops, torch.compile)",
        ),
    ),
    check=check,
    replays=True,
)
