"""small_op_explosion: thousands of tiny device tasks per step.

A task shorter than the cost of launching it (a few µs of host time per launch, a few µs of
device-side scheduling) keeps neither side busy: the step is paced by launches, not by work.
The msprof guides' example is "thousands of small adds" from an unfused optimizer or per-parameter
loops. The rule measures the share of tasks under ``short_task_us``, tasks per step, the share
of the step the host spends in launch calls, and which operators produce the short tasks.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from perfledger.analysis import columns
from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import (
    coalesce_text,
    distinct_rows,
    encode,
    offender,
    spans_of,
)
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.model import schema
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us
from perfledger.model.whatif import LAUNCH, Scale, WhatIf

ID: Final = "small_op_explosion"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Short tasks > short_share_pct of all tasks, and at least min_tasks_per_step tasks."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    step = np.asarray(tasks["step"], dtype=np.int64)
    in_steps = step >= 0 if ctx.basis.annotated else np.ones(tasks.num_rows, dtype=bool)
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)
    windows = ctx.basis.windows
    short = in_steps & (dur < p["short_task_us"] * 1e3)
    counted = int(in_steps.sum())
    tasks_per_step = counted / windows if windows else 0.0
    short_share = pct(int(short.sum()), counted)
    if short_share <= p["short_share_pct"] or tasks_per_step < p["min_tasks_per_step"]:
        return None

    # Idle gaps ended by a short task: what merging them into fewer tasks would remove.
    gaps = ctx.analysis.gaps
    gap_rows = ctx.gap_task_rows
    events = ctx.analysis.events
    # a mask over the events' rows: looking the gaps' rows up in it needs no sort
    is_short_row = np.zeros(events.num_rows, dtype=bool)
    is_short_row[ctx.task_rows[short]] = True
    ended_by_short = (gap_rows >= 0) & is_short_row[np.maximum(gap_rows, 0)]
    gap_dur = np.asarray(gaps["dur_ns"], dtype=np.int64)
    recoverable = int(gap_dur[ended_by_short].sum())

    # Launch overhead: each non-blocking launch call once (a blocking call's time is waiting).
    launch_row = np.asarray(tasks["launch_row"], dtype=np.int64)[in_steps]
    launch_row = distinct_rows(launch_row[launch_row >= 0], events.num_rows)
    if launch_row.size:
        launch_row = launch_row[columns.isin(events, "kind", [schema.RUNTIME])[launch_row]]
    launch_ns = int(columns.int64(events, "dur_ns")[launch_row].sum())
    wall = ctx.basis.wall_ns
    label_code, names = encode(coalesce_text(tasks["op_name"], tasks["name"]))
    short_code = label_code[short]
    counts = np.bincount(short_code, minlength=names.size)
    totals = np.zeros(names.size, dtype=np.int64)
    np.add.at(totals, short_code, dur[short])
    present = np.flatnonzero(counts)
    top = present[np.lexsort((names[present], -counts[present]))][:TOP_OFFENDERS]
    short_rows = np.flatnonzero(short)
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    by_op: list[dict[str, Any]] = []
    for i in top:
        first = int(short_rows[np.flatnonzero(short_code == i)[0]])
        by_op.append(
            offender(
                rank[first],
                step[first],
                start[first],
                start[first] + dur[first],
                op=str(names[i]),
                count=int(counts[i]),
                per_step=round(int(counts[i]) / windows, 1),
                mean_us=us(totals[i] / counts[i]),
                total_ms_per_step=ms(totals[i] / windows),
            )
        )
    severity_ms, severity_pct = ctx.severity(recoverable)
    evidence = {
        "steps": ctx.basis.describe(),
        "tasks_per_step": round(tasks_per_step, 1),
        "short_tasks_per_step": round(int(short.sum()) / windows, 1),
        "short_task_share_pct": short_share,
        "short_task_time_pct_of_step": pct(int(dur[short].sum()), wall),
        "launch_calls_ms_per_step": ms(launch_ns / windows),
        "launch_calls_pct_of_step": pct(launch_ns, wall),
        "idle_before_short_tasks_ms_per_step": ms(recoverable / windows),
        "top_ops_by_count": by_op,
    }
    return Finding(
        id=ID,
        title=(
            f"{tasks_per_step:.0f} device tasks per step, {short_share:.0f}% of them shorter "
            f"than {p['short_task_us']:g} µs"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Make fewer, larger tasks: use fused or multi-tensor implementations (fused=True / "
            "foreach=True optimizers, fused LayerNorm/GELU), replace per-parameter or per-sample "
            "Python loops with batched tensor ops, compile the hot region (torch.compile) or "
            + (
                f"capture in the CUDA graphs the step already replays ({ctx.graph_launches} "
                "launches) what still runs outside them, so launches cost nothing per task."
                if ctx.graph_launches
                else "capture it with CUDA Graphs so launches cost nothing per task."
            )
        ),
        verify=(
            "Re-profile: tasks_per_step and short_task_share_pct must fall, and with them the "
            "idle time before short tasks and the step time."
        ),
        estimate=(
            "Device idle gaps that end with a short task, per step: the launch and scheduling "
            "time that merging the tasks would remove (overlaps host_dispatch_bound)."
        ),
        spans=spans_of(by_op),
        # the fix replayed: CUDA Graphs or fused ops, launch overhead scaled down
        whatif_ms=ctx.whatif_ms(ID, WhatIf(scales=(Scale(LAUNCH, p["whatif_launch_factor"]),))),
    )


RULE: Final = Rule(
    id=ID,
    title="the step is made of thousands of tiny device tasks",
    checks="share of device tasks under short_task_us, tasks per step, launch time share",
    thresholds=(
        Threshold(
            "short_task_us",
            10.0,
            "µs",
            "a task shorter than this is short",
            "the msprof guides' checklist (tasks under 10 µs)",
        ),
        Threshold(
            "short_share_pct",
            50.0,
            "%",
            "share of short tasks that flags the step",
            "perfledger: most tasks",
        ),
        Threshold(
            "min_tasks_per_step",
            1000.0,
            "count",
            "fewer tasks per step are not an explosion",
            'the msprof guides ("thousands of small adds")',
        ),
        Threshold(
            "whatif_launch_factor",
            0.1,
            "x",
            "the fix replayed (whatif_ms): launch overhead multiplied by this",
            "perfledger: a captured graph replays its launches for a small part of their cost",
        ),
    ),
    check=check,
    replays=True,
)
