"""memcpy_heavy: the device spends its time copying memory rather than computing.

Copies that hold the device alone (no kernel, no collective running) are the accounting's
``memcpy`` category. Besides their share of the device's busy time the rule looks at how the
copies are made: pageable host memory (staged through a bounce buffer, never asynchronous),
many small copies (each pays a fixed cost of several µs), and host-device copies that reach a
small part of the link's bandwidth.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.transfers import copy_direction, is_pageable
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us
from perfledger.model.whatif import TaskChange, WhatIf

ID: Final = "memcpy_heavy"
HOST_DIRECTIONS: Final = ("HtoD", "DtoH")
# Copies at least this large have a measurable bandwidth (small ones are fixed-cost bound).
BANDWIDTH_MIN_BYTES: Final = 1 << 20


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Exposed copies > busy_share_pct of device busy time, or badly made copies."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    is_copy = ctx.task_kind == "memcpy"
    if ctx.basis.annotated:
        is_copy &= np.asarray(tasks["step"], dtype=np.int64) >= 0
    if not is_copy.any():
        return None
    windows = ctx.step_windows
    busy = sum(w.busy_ns for w in windows)
    exposed = sum(w.memcpy_ns for w in windows)
    share = pct(exposed, busy)

    rows = np.flatnonzero(is_copy)
    names = pc.cast(tasks["name"].take(pa.array(rows, pa.int64())), pa.string()).to_numpy(
        zero_copy_only=False
    )
    names = names.astype(str)
    distinct, index = np.unique(names, return_inverse=True)
    direction = np.array([copy_direction(n) for n in distinct], dtype=object)[index]
    pageable = np.array([is_pageable(n) for n in distinct], dtype=bool)[index]
    nbytes = np.asarray(tasks["bytes"], dtype=np.int64)[rows]
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)[rows]
    host_copy = np.isin(direction, HOST_DIRECTIONS)
    sized = nbytes >= 0
    small = sized & (nbytes < p["small_copy_kib"] * 1024)
    pageable_share = pct(int((pageable & host_copy).sum()), int(host_copy.sum()))
    small_share = pct(int(small.sum()), int(sized.sum()))

    link_checks = _link_efficiency(ctx, tasks, rows, direction, nbytes, dur)
    slow_links = [c for c in link_checks if c["link_pct"] < p["link_pct"]]
    symptoms = []
    if share > p["busy_share_pct"]:
        symptoms.append(f"copies hold the device alone {share:.0f}% of its busy time")
    if share >= p["min_share_pct"]:
        if pageable_share >= p["pageable_pct"]:
            symptoms.append(f"{pageable_share:.0f}% of host copies use pageable memory")
        small_per_step = int(small.sum()) / len(windows)
        if small_share >= p["small_share_pct"] and small_per_step >= p["small_min_per_step"]:
            symptoms.append(f"{small_share:.0f}% of copies are under {p['small_copy_kib']:g} KiB")
        if slow_links:
            symptoms.append("host-device copies reach a small part of the link bandwidth")
    if not symptoms:
        return None

    start = np.asarray(tasks["start_ns"], dtype=np.int64)[rows]
    rank = np.asarray(tasks["rank"], dtype=np.int64)[rows]
    step = np.asarray(tasks["step"], dtype=np.int64)[rows]
    longest = np.argsort(-dur, kind="stable")[:TOP_OFFENDERS]
    offenders = [
        offender(
            rank[i],
            step[i],
            start[i],
            start[i] + dur[i],
            name=str(names[i]),
            direction=str(direction[i]),
            bytes=int(nbytes[i]) if nbytes[i] >= 0 else None,
            dur_us=us(dur[i]),
        )
        for i in longest
    ]
    count = len(windows)
    by_direction: list[dict[str, Any]] = []
    for d in sorted(set(direction.tolist())):
        mine = direction == d
        known = mine & sized
        time_known = int(dur[known].sum())
        by_direction.append(
            {
                "direction": d,
                "count_per_step": round(int(mine.sum()) / count, 1),
                "ms_per_step": ms(dur[mine].sum() / count),
                "mb_per_step": round(float(nbytes[known].sum()) / count / 1e6, 3),
                "gbps": round(float(nbytes[known].sum()) / time_known, 2) if time_known else None,
                "pageable": int((mine & pageable).sum()),
                "small": int((mine & small).sum()),
            }
        )
    severity_ms, severity_pct = ctx.severity(exposed)
    evidence = {
        "steps": ctx.basis.describe(),
        "symptoms": symptoms,
        "exposed_copy_ms_per_step": ms(exposed / count),
        "exposed_copy_pct_of_busy": share,
        "pageable_pct_of_host_copies": pageable_share,
        "small_pct_of_copies": small_share,
        "by_direction": by_direction,
        "link_efficiency": link_checks,
        "longest_copies": offenders,
    }
    return Finding(
        id=ID,
        title=f"Memory copies: {'; '.join(symptoms)}",
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Copy less and overlap the rest: keep tensors on the device across steps instead of "
            "moving them back and forth; load batches into pinned memory (DataLoader "
            "pin_memory=True) and copy with .to(device, non_blocking=True) on a side stream; "
            "batch many small copies into one buffer; avoid .cpu()/.numpy() inside the step."
        ),
        verify=(
            "Re-profile: memcpy_ns per step (step_trace.csv) and the copy count must fall; "
            "pageable copies should be gone and HtoD bandwidth close to the link's."
        ),
        estimate=(
            "Copy time with no kernel or collective running on the device (the accounting's "
            "memcpy category), per step: what overlapping or removing the copies would gain."
        ),
        spans=spans_of(offenders),
        whatif_ms=_pinned_whatif(ctx, tasks, rows[pageable & host_copy], p),
    )


def _pinned_whatif(
    ctx: AdvisorContext, tasks: Any, pageable: np.ndarray, p: Params
) -> float | None:
    """The fix replayed: the pageable host copies made from pinned memory, faster by
    ``whatif_pageable_factor`` and asynchronous (the host no longer waits for them); None
    when no copy is pageable (the fix does not apply)."""
    if pageable.size == 0:
        return None
    copy_rows = np.asarray(tasks["row"], dtype=np.int64)[pageable]
    calls = np.asarray(tasks["launch_row"], dtype=np.int64)[pageable]
    factor = p["whatif_pageable_factor"]
    change = WhatIf(
        unsynced_rows=tuple(calls[calls >= 0].tolist()),
        tasks=(TaskChange(tuple(copy_rows.tolist()), (factor,) * int(copy_rows.size)),),
    )
    return ctx.whatif_ms(ID, change)


def _link_efficiency(
    ctx: AdvisorContext,
    tasks: Any,
    rows: np.ndarray,
    direction: np.ndarray,
    nbytes: np.ndarray,
    dur: np.ndarray,
) -> list[dict[str, Any]]:
    """Achieved bandwidth of large host-device copies against the device's link, per rank."""
    rank = np.asarray(tasks["rank"], dtype=np.int64)[rows]
    checks: list[dict[str, Any]] = []
    for r in np.unique(rank):
        spec = ctx.device(int(r))
        if spec is None or not np.isfinite(spec.host_link_gbps):
            continue
        for d in HOST_DIRECTIONS:
            large = (rank == r) & (direction == d) & (nbytes >= BANDWIDTH_MIN_BYTES)
            time = int(dur[large].sum())
            if not time:
                continue
            gbps = float(nbytes[large].sum()) / time
            checks.append(
                {
                    "rank": int(r),
                    "direction": d,
                    "copies": int(large.sum()),
                    "gbps": round(gbps, 2),
                    "link_gbps": spec.host_link_gbps,
                    "link_pct": pct(gbps, spec.host_link_gbps),
                }
            )
    return checks


RULE: Final = Rule(
    id=ID,
    title="memory copies take the device's time",
    checks="exposed copy share of busy time; pageable, small and slow host copies",
    thresholds=(
        Threshold(
            "busy_share_pct",
            30.0,
            "%",
            "exposed copies' share of device busy time",
            "the msprof guides' checklist (copies > 30% of device busy time)",
        ),
        Threshold(
            "min_share_pct",
            5.0,
            "%",
            "below this share, copy details are not worth a finding",
            "perfledger",
        ),
        Threshold(
            "pageable_pct",
            10.0,
            "%",
            "share of host copies from pageable memory",
            "nsys analyze cuda_memcpy_async (pageable memory in async copies)",
        ),
        Threshold(
            "small_copy_kib",
            64.0,
            "KiB",
            "a copy under this size is small",
            "perfledger transfers analysis (small copies under 64 KiB)",
        ),
        Threshold(
            "small_share_pct",
            50.0,
            "%",
            "share of small copies that flags",
            "perfledger",
        ),
        Threshold(
            "small_min_per_step",
            10.0,
            "count",
            'fewer small copies per step than this are not "many"',
            "perfledger",
        ),
        Threshold(
            "link_pct",
            25.0,
            "%",
            "achieved share of the host link for copies >= 1 MiB",
            "perfledger: far under the link",
        ),
        Threshold(
            "whatif_pageable_factor",
            0.5,
            "x",
            "the fix replayed (whatif_ms): a pageable copy's time multiplied by this once pinned",
            "perfledger: pageable copies are staged through a bounce buffer at about half the "
            "pinned bandwidth",
        ),
    ),
    check=check,
    replays=True,
)
