"""excessive_sync: the host waits for the device to drain, over and over.

Each synchronisation (``cudaStreamSynchronize``, ``.item()`` / ``_local_scalar_dense``, a
blocking copy) empties the device's queue: the device then idles until the host has issued the
next kernel. A step that synchronises after most of its launches runs at the speed of the host.
The rule counts synchronisations per step, the share of kernel launches followed by a
synchronisation before the next launch on the same thread, the device idle time they caused,
and where in the code they are (the recorded stack or the Python frame) when the trace has it.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import (
    call_sites,
    distinct_rows,
    encode,
    host_steps,
    offender,
    spans_of,
    sync_mask,
)
from perfledger.analysis.advisor.context import AdvisorContext, thread_ids
from perfledger.analysis.nesting import operator_nesting
from perfledger.model import schema, vendors
from perfledger.model.accounts import IDLE_SYNC
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us
from perfledger.model.whatif import WhatIf

ID: Final = "excessive_sync"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Launches followed by a sync > followed_pct, or sync-caused idle > sync_idle_pct."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    events = ctx.analysis.events
    tasks = ctx.tasks
    is_kernel = np.asarray(ctx.task_kind == schema.KERNEL, dtype=bool)
    launch_rows = np.asarray(tasks["launch_row"], dtype=np.int64)[is_kernel]
    launch_rows = distinct_rows(launch_rows[launch_rows >= 0], events.num_rows)
    if launch_rows.size == 0:
        return Skipped(ID, "no kernel launch is linked to its device task (no correlation ids)")
    is_sync = sync_mask(events)
    sync_rows = np.flatnonzero(is_sync)
    # a launch that is itself blocking (a kind ``sync`` row issuing a kernel) is not a launch
    # followed by a sync: it is the sync
    launch_rows = launch_rows[~is_sync[launch_rows]]

    followed = _followed_by_sync(events, launch_rows, sync_rows)
    windows = ctx.step_windows
    wall = sum(w.wall_ns for w in windows)
    accounted_sync_idle = sum(w.idle_sync_ns for w in windows)
    # the part of it the host spent in the data loader is the loader's, not the sync's: the
    # device would wait for the batch without the sync too
    sync_idle = max(accounted_sync_idle - ctx.idle_in_loader((IDLE_SYNC,)), 0)
    followed_pct = pct(int(followed.sum()), launch_rows.size)
    # a share of launches means little over a handful of them
    enough = launch_rows.size >= p["min_launches_per_step"] * max(host_steps(ctx), 1)
    by_share = enough and followed_pct > p["followed_pct"]
    if not by_share and pct(sync_idle, wall) <= p["sync_idle_pct"]:
        return None

    steps = max(host_steps(ctx), 1)
    names = columns.strings(events, "name")
    step = columns.int64(events, "step")
    start = columns.int64(events, "start_ns")
    dur = columns.int64(events, "dur_ns")
    rank = columns.int64(events, "rank")
    # A synchronisation point is an outermost sync: .item() runs _local_scalar_dense, which
    # runs a copy and a stream sync; the idle those cause belongs to the .item() call.
    root = _outermost(events, sync_rows)
    idle_nested = _idle_caused(ctx, sync_rows)
    nested_rows = sync_rows
    sync_rows = np.unique(nested_rows[root])
    idle_by_row = np.zeros(sync_rows.size, dtype=np.int64)
    np.add.at(idle_by_row, np.searchsorted(sync_rows, nested_rows[root]), idle_nested)
    in_steps = sync_rows[step[sync_rows] >= 0] if ctx.basis.annotated else sync_rows

    call_index, call_names = encode(names[sync_rows])
    call_count = np.bincount(call_index, minlength=call_names.size)
    call_host = np.zeros(call_names.size, dtype=np.int64)
    call_idle = np.zeros(call_names.size, dtype=np.int64)
    np.add.at(call_host, call_index, dur[sync_rows])
    np.add.at(call_idle, call_index, idle_by_row)
    item_like = int(np.isin(names[in_steps], list(vendors.HOST_SYNC_OPS)).sum())

    worst = np.argsort(-idle_by_row, kind="stable")[:TOP_OFFENDERS]
    worst = worst[idle_by_row[worst] > 0] if (idle_by_row > 0).any() else worst
    worst_rows = sync_rows[worst]
    sites = call_sites(events, worst_rows)
    offenders = [
        offender(
            rank[row],
            step[row],
            start[row],
            start[row] + dur[row],
            call=str(names[row]),
            host_us=us(dur[row]),
            device_idle_us=us(idle_by_row[i]),
            call_site=site,
        )
        for i, row, site in zip(worst, worst_rows, sites, strict=True)
    ]
    severity_ms, severity_pct = ctx.severity(sync_idle)
    # the fix replayed: every synchronisation inside the steps gone (the host no longer waits)
    offending = nested_rows[step[nested_rows] >= 0] if ctx.basis.annotated else nested_rows
    whatif_ms = ctx.whatif_ms(ID, WhatIf(unsynced_rows=tuple(offending.tolist())))
    evidence: dict[str, Any] = {
        "steps": ctx.basis.describe(),
        "sync_calls_per_step": round(in_steps.size / steps, 1),
        "item_like_ops_per_step": round(item_like / steps, 1),
        "kernel_launches": int(launch_rows.size),
        "launches_followed_by_sync_pct": followed_pct,
        "idle_sync_ms_per_step": ms(accounted_sync_idle / len(windows)),
        "idle_sync_pct_of_step": pct(accounted_sync_idle, wall),
        "idle_sync_in_data_loader_ms_per_step": ms(
            (accounted_sync_idle - sync_idle) / len(windows)
        ),
        "by_call": [
            {
                "call": str(call_names[i]),
                "count": int(call_count[i]),
                "per_step": round(int(call_count[i]) / steps, 1),
                "host_ms": ms(call_host[i]),
                "device_idle_ms": ms(call_idle[i]),
            }
            for i in np.lexsort((call_names, -call_count, -call_idle))[:TOP_OFFENDERS]
        ],
        "worst_syncs": offenders,
    }
    if not any(o["call_site"] for o in offenders):
        evidence["call_site_note"] = (
            "no stack recorded: profile with with_stack=True to see where the syncs are"
        )
    return Finding(
        id=ID,
        title=(
            f"{in_steps.size / steps:.0f} synchronisations per step; "
            f"{followed_pct:.0f}% of kernel launches are followed by one"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Keep values on the device: replace .item() / .cpu() / .tolist() / printing "
            "tensors inside the step with on-device ops, accumulate metrics as tensors and "
            "read them once per N steps; avoid ops with data-dependent output sizes "
            "(nonzero, boolean masks) on the hot path; use non_blocking=True copies from pinned "
            "memory; drop explicit torch.cuda.synchronize() calls outside timing code."
        ),
        verify=(
            "Re-profile: sync_calls_per_step and idle_sync_ns per step must fall; "
            "launches_followed_by_sync_pct should drop well below the threshold."
        ),
        estimate=(
            "Device idle time attributed to sync (a synchronisation was running when the "
            "device went idle), less the host's time in the data loader within it, per step."
        ),
        spans=spans_of(offenders),
        whatif_ms=whatif_ms,
    )


def _followed_by_sync(
    events: pa.Table, launch_rows: np.ndarray, sync_rows: np.ndarray
) -> np.ndarray:
    """Whether the next launch-or-sync on each launch's thread is a sync."""
    rows = np.concatenate([launch_rows, sync_rows])
    is_sync = np.concatenate(
        [np.zeros(launch_rows.size, dtype=bool), np.ones(sync_rows.size, dtype=bool)]
    )
    thread = thread_ids(events, rows)
    start = columns.int64_at(events, "start_ns", rows)
    order = np.lexsort((rows, start, thread))
    thread_s, sync_s = thread[order], is_sync[order]
    next_is_sync = np.zeros(rows.size, dtype=bool)
    next_is_sync[:-1] = sync_s[1:] & (thread_s[1:] == thread_s[:-1])
    followed = np.zeros(rows.size, dtype=bool)
    followed[order] = next_is_sync
    result: np.ndarray = followed[: launch_rows.size]
    return result


def _outermost(events: pa.Table, rows: np.ndarray) -> np.ndarray:
    """For each row, the position (in ``rows``) of the outermost row enclosing it on its thread."""
    start = columns.int64_at(events, "start_ns", rows)
    end = start + columns.int64_at(events, "dur_ns", rows)
    parent = operator_nesting(thread_ids(events, rows), start, end)
    root = np.arange(rows.size, dtype=np.int64)
    for _ in range(rows.size):
        up = parent[root]
        climbing = up >= 0
        if not climbing.any():
            break
        root[climbing] = up[climbing]
    return root


def _idle_caused(ctx: AdvisorContext, sync_rows: np.ndarray) -> np.ndarray:
    """Device idle time of the ``sync`` gaps that began while each sync row ran."""
    events = ctx.analysis.events
    gaps = ctx.analysis.gaps
    caused = np.zeros(sync_rows.size, dtype=np.int64)
    if gaps.num_rows == 0 or sync_rows.size == 0:
        return caused
    is_sync_gap = columns.isin(gaps, "cause", [IDLE_SYNC])
    g_rank = np.asarray(gaps["rank"], dtype=np.int64)[is_sync_gap]
    g0 = np.asarray(gaps["start_ns"], dtype=np.int64)[is_sync_gap]
    g_dur = np.asarray(gaps["dur_ns"], dtype=np.int64)[is_sync_gap]
    rank = columns.int64_at(events, "rank", sync_rows)
    start = columns.int64_at(events, "start_ns", sync_rows)
    end = start + columns.int64_at(events, "dur_ns", sync_rows)
    for r in np.unique(rank):
        mine = np.flatnonzero(rank == r)
        order = mine[np.argsort(start[mine], kind="stable")]
        gap_index = np.flatnonzero(g_rank == r)
        # the latest sync begun by the gap start that still runs then (end inclusive, as the
        # accounting decides the cause)
        at = np.searchsorted(start[order], g0[gap_index], side="right") - 1
        valid = at >= 0
        chosen = order[np.maximum(at, 0)]
        valid &= end[chosen] >= g0[gap_index]
        np.add.at(caused, chosen[valid], g_dur[gap_index][valid])
    return caused


RULE: Final = Rule(
    id=ID,
    title="the host synchronises with the device inside the step",
    checks="sync calls per step, launches followed by a sync, idle caused by syncs",
    thresholds=(
        Threshold(
            "followed_pct",
            50.0,
            "%",
            "share of kernel launches followed by a sync",
            "perfledger (most launches); nsys analyze cuda_api_sync flags the same calls",
        ),
        Threshold(
            "sync_idle_pct",
            5.0,
            "%",
            "device idle caused by syncs, share of the step",
            "perfledger",
        ),
        Threshold(
            "min_launches_per_step",
            10.0,
            "count",
            "with fewer kernel launches per step the followed share means little",
            "perfledger",
        ),
    ),
    check=check,
    replays=True,
)
