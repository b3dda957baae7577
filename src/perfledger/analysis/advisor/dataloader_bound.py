"""dataloader_bound: the step waits for its input batch.

Data loading on the step's critical path shows up twice: as host time inside the data loader
(``enumerate(DataLoader)#...__next__``) and, when the device runs out of work meanwhile, as
device idle time spent waiting for it: of the idle gaps the host caused (dispatch, sync, data
loader), the time the host was in the data loader before it launched the next task
(:meth:`AdvisorContext.idle_in_loader`; a ``.item()`` returning just as the device went idle
makes the accounting's cause ``sync``, not the 100 ms of loading after it). The host's share,
or the idle the accounting attributes to ``dataloader``, above its threshold flags the step;
the device's wait for data is its severity.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from perfledger.analysis import columns
from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.intervals import union
from perfledger.model import schema
from perfledger.model.accounts import IDLE_DATALOADER, IDLE_HOST_DISPATCH, IDLE_SYNC
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us
from perfledger.model.whatif import WhatIf

ID: Final = "dataloader_bound"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Host data loading > host_pct of the step, or device idle for data > idle_pct."""
    events = ctx.analysis.events
    is_loader = columns.isin(events, "kind", [schema.DATALOADER])
    is_loader &= columns.int64(events, "device") < 0
    if not is_loader.any():
        return Skipped(
            ID, "no data-loader activity recorded (no enumerate(DataLoader) annotations)"
        )
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    rank = columns.int64(events, "rank")
    loading = ctx.data_loading

    # One host window per (rank, step): the device windows of several devices share it.
    steps: dict[tuple[int, int], tuple[int, int]] = {}
    for w in ctx.step_windows or ctx.host_windows:
        steps.setdefault((w.rank, w.step), (w.start_ns, w.end_ns))
    if not steps:
        return Skipped(ID, "no step window")
    host_loading = 0
    host_wall = 0
    for r in sorted({r for r, _ in steps}):
        mine = [(s, e) for (rr, _), (s, e) in steps.items() if rr == r]
        loads = loading.get(r) or union(np.zeros(0, np.int64), np.zeros(0, np.int64))
        window_start = np.array([s for s, _ in mine], dtype=np.int64)
        window_end = np.array([e for _, e in mine], dtype=np.int64)
        host_loading += int(loads.covered(window_start, window_end).sum())
        host_wall += int((window_end - window_start).sum())
    host_share = pct(host_loading, host_wall)

    device_windows = ctx.step_windows
    if device_windows:
        device_wall = sum(w.wall_ns for w in device_windows)
        # fires on the accounting's data-loader idle; measures the device's wait for data
        # within every host-caused gap
        accounted_share = pct(sum(w.idle_dataloader_ns for w in device_windows), device_wall)
        idle = ctx.idle_in_loader((IDLE_HOST_DISPATCH, IDLE_SYNC, IDLE_DATALOADER))
        idle_share = pct(idle, device_wall)
        recoverable = idle
    else:
        idle, idle_share, accounted_share = 0, 0.0, 0.0
        recoverable = sum(w.dataloader_ns for w in ctx.host_windows)
    if host_share <= p["host_pct"] and accounted_share <= p["idle_pct"]:
        return None

    rows = np.flatnonzero(is_loader)
    step = columns.int64(events, "step")
    longest = rows[np.argsort(-(end[rows] - start[rows]), kind="stable")[:TOP_OFFENDERS]]
    offenders = [
        offender(rank[i], step[i], start[i], end[i], dur_us=us(end[i] - start[i])) for i in longest
    ]
    host_steps = len(steps)
    severity_ms, severity_pct = ctx.severity(recoverable)
    evidence = {
        "steps": ctx.basis.describe(),
        "host_loading_ms_per_step": ms(host_loading / host_steps),
        "host_loading_pct_of_step": host_share,
        "device_idle_for_data_ms_per_step": (
            ms(idle / len(device_windows)) if device_windows else None
        ),
        "device_idle_for_data_pct_of_step": idle_share if device_windows else None,
        "longest_loads": offenders,
    }
    return Finding(
        id=ID,
        title=(
            f"Data loading takes {host_share:.1f}% of the step on the host"
            + (
                f"; the device idles {idle_share:.1f}% of the step waiting for it"
                if device_windows
                else ""
            )
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Prepare batches ahead of the step: raise DataLoader num_workers (one per free "
            "core), set persistent_workers=True and prefetch_factor, pin_memory=True; move "
            "decoding and augmentation off the training process (pre-processed datasets, GPU "
            "decoding/augmentation such as DALI); check worker processes are not starved of CPU."
        ),
        verify=(
            "Re-profile: the data-loader time inside each step and the device's idle for data "
            "(device_idle_for_data_ms_per_step) must fall to near zero; the step time drops by "
            "about as much."
        ),
        estimate=(
            "Device idle time while the host was in the data loader before launching the next "
            "work, per step (host-only profiles: the main thread's time inside the data "
            "loader): what prefetching would hide."
        ),
        spans=spans_of(offenders),
        # the fix replayed: the next batch ready when the step asks for it
        whatif_ms=ctx.whatif_ms(ID, WhatIf(no_dataloader=True)),
    )


RULE: Final = Rule(
    id=ID,
    title="the step waits for its input data",
    checks="host time in the data loader and device idle attributed to data loading",
    thresholds=(
        Threshold(
            "host_pct",
            5.0,
            "%",
            "host data-loading share of the step",
            "the msprof guides' checklist; PyTorch's TensorBoard plugin (DataLoader > 5%)",
        ),
        Threshold(
            "idle_pct",
            2.0,
            "%",
            "device idle caused by data loading, share of the step",
            "perfledger",
        ),
    ),
    check=check,
    replays=True,
)
