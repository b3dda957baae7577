"""exposed_communication: collectives that move data with no compute to hide them.

Communication that runs while kernels run costs nothing; communication with nothing else on
the device is time the step spends in collectives. The accounting's ``communication`` category
is exactly that exposed part, split into waiting for peers and transfer (docs/accounting.md).
Only the transfer is what overlap, bucket sizes, compression or a better topology recover:
the rule's severity is the exposed transfer, flagged above ``exposed_pct`` of the step; the
waiting is the communication_wait and slow_rank findings', and is said here in the evidence.
It lists the collectives and the tasks that were exposed the longest.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import numpy as np

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.comm_split import UNKNOWN
from perfledger.analysis.intervals import union
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us
from perfledger.model.whatif import WhatIf

ID: Final = "exposed_communication"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Communication not overlapped with compute > exposed_pct of the step."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    kind = ctx.task_kind
    is_comm = kind == "comm"
    if not is_comm.any():
        return Skipped(ID, "no communication task in the trace (one device, or not recorded)")
    windows = ctx.step_windows
    wall = sum(w.wall_ns for w in windows)
    exposed = sum(w.communication_ns for w in windows)
    transfer = sum(w.communication_transfer_ns for w in windows)
    waiting = exposed - transfer
    overlapped = sum(w.overlapped_communication_ns for w in windows)
    if pct(transfer, wall) <= p["exposed_pct"]:
        return None
    sources: Counter[str] = Counter()
    for rank_analysis in ctx.analysis.ranks:
        if rank_analysis.comm is not None:
            sources.update(rank_analysis.comm.source)

    exposed_each = _exposed_per_task(tasks, kind, is_comm)
    comm_rows = np.flatnonzero(is_comm)
    worst = comm_rows[np.argsort(-exposed_each[comm_rows], kind="stable")[:TOP_OFFENDERS]]
    # the names of the offenders only (every task's name decoded is a large object array)
    names = dict(zip(worst.tolist(), tasks["name"].take(worst).to_pylist(), strict=True))
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    step = np.asarray(tasks["step"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)
    offenders = [
        offender(
            rank[i],
            step[i],
            start[i],
            start[i] + dur[i],
            name=str(names[i]),
            dur_us=us(dur[i]),
            exposed_us=us(exposed_each[i]),
        )
        for i in worst
        if exposed_each[i] > 0
    ]
    count = len(windows)
    by_op: list[dict[str, Any]] = sorted(
        (
            {
                "rank": row["rank"],
                "name": row["name"],
                "count": row["count"],
                "total_ms": ms(row["total_ns"]),
                "exposed_ms": ms(row["exposed_ns"]),
                "overlapped_pct": pct(row["overlapped_ns"], row["total_ns"]),
                "bytes": row["bytes"] if row["bytes"] >= 0 else None,
                "wait_pct": row["wait_pct"],
                "bus_gbps": row["bus_gbps"] if row["bus_gbps"] == row["bus_gbps"] else None,
            }
            for row in ctx.analysis.communication.to_pylist()
        ),
        key=lambda e: (-e["exposed_ms"], e["rank"], e["name"]),
    )[:TOP_OFFENDERS]
    worst_steps = sorted(windows, key=lambda w: -w.communication_ns)[:TOP_OFFENDERS]
    severity_ms, severity_pct = ctx.severity(transfer)
    evidence = {
        "steps": ctx.basis.describe(),
        "exposed_ms_per_step": ms(exposed / count),
        "exposed_pct_of_step": pct(exposed, wall),
        "transfer_ms_per_step": ms(transfer / count),
        "wait_ms_per_step": ms(waiting / count),
        "wait_pct_of_exposed": pct(waiting, exposed),
        "split_sources": dict(sorted(sources.items())),
        "overlapped_ms_per_step": ms(overlapped / count),
        "overlap_pct_of_communication": pct(overlapped, exposed + overlapped),
        "by_operation": by_op,
        "worst_tasks": offenders,
        "worst_steps": [
            offender(
                w.rank,
                w.step,
                w.start_ns,
                w.end_ns,
                device=w.device,
                exposed_ms=ms(w.communication_ns),
                wall_ms=ms(w.wall_ns),
            )
            for w in worst_steps
        ],
    }
    return Finding(
        id=ID,
        title=(
            f"Exposed communication: {pct(transfer, wall):.1f}% of the step transfers data "
            f"in collectives with no compute to hide it{_waiting_note(waiting, count, sources)}"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Overlap the transfers with compute: let DDP/FSDP bucket and start gradient "
            "all-reduces during backward (tune bucket_cap_mb, avoid find_unused_parameters, "
            "no syncs between backward and the optimizer), prefetch FSDP all-gathers "
            "(forward_prefetch / backward_prefetch), use gradient accumulation with no_sync() "
            "to communicate less often; move fewer bytes (bf16 or PowerSGD gradient "
            "compression hooks); and check the topology: the collectives' bus bandwidth in "
            "communication.csv against the link's (NVLink/HCCS within a node, the network "
            "between nodes), ranks of a group placed on one node where they can be."
        ),
        verify=(
            "Re-profile: communication_transfer_ns (exposed) per step in step_trace.csv must "
            "fall while overlapped_communication_ns grows; the step time drops by about the "
            "difference."
        ),
        estimate=(
            "Communication transferring data with no kernel running on the device, per step "
            "(the exposed communication less its waiting for peers): the most that full "
            "overlap could hide."
        ),
        spans=spans_of(offenders),
        # the fix replayed: collectives overlapped with the compute of their stream
        whatif_ms=ctx.whatif_ms(ID, WhatIf(overlap_comm=True)),
    )


def _waiting_note(waiting: float, count: int, sources: Counter[str]) -> str:
    """What the title says of the waiting: how much, or that the split is unknown."""
    if waiting > 0:
        return f"; {ms(waiting / count)} ms per step more is waiting for peers"
    if sources and set(sources) == {UNKNOWN}:
        return " (the trace cannot tell waiting for peers from transfer: all counted as transfer)"
    return ""


def _exposed_per_task(tasks: Any, kind: np.ndarray, is_comm: np.ndarray) -> np.ndarray:
    """For each communication task, its time with no kernel of the same device running."""
    lane = np.asarray(tasks["rank"], dtype=np.int64) * (1 << 20) + np.asarray(
        tasks["device"], dtype=np.int64
    )
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    end = start + np.asarray(tasks["dur_ns"], dtype=np.int64)
    exposed = np.zeros(len(start), dtype=np.int64)
    is_kernel = kind == "kernel"
    for key in np.unique(lane[is_comm]):
        same = lane == key
        compute = union(start[same & is_kernel], end[same & is_kernel])
        rows = np.flatnonzero(same & is_comm)
        exposed[rows] = (end[rows] - start[rows]) - compute.covered(start[rows], end[rows])
    return exposed


RULE: Final = Rule(
    id=ID,
    title="communication is not hidden under compute",
    checks="exposed communication (no kernel running) per step",
    thresholds=(
        Threshold(
            "exposed_pct",
            10.0,
            "%",
            "exposed communication share of the step",
            "the msprof guides' checklist (communication > 10% of step)",
        ),
    ),
    check=check,
    replays=True,
)
