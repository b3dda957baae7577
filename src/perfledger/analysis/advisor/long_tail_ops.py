"""long_tail_ops: single runs of an operator far slower than its usual time.

The same kernel on the same shapes should take about the same time. Instances slower than
``ratio`` times the median of their group (kernel name, launching operator, input shapes and
types) point at interference: a clock or power throttle, contention with a concurrent stream
or process, a first-call autotune or allocation, a page fault on unified memory.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import encode, group_ids, offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us

ID: Final = "long_tail_ops"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Instances > ratio x their group's median, together > min_total_pct of the step."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    kind = ctx.task_kind
    keep = kind != "comm"  # a slow collective waits for other ranks: load_imbalance's business
    if ctx.basis.annotated:
        keep &= np.asarray(tasks["step"], dtype=np.int64) >= 0
    grid, block = ctx.launch_dimensions
    sized = (
        tasks["shapes"].is_valid().to_numpy(zero_copy_only=False)
        | tasks["op_shapes"].is_valid().to_numpy(zero_copy_only=False)
        | grid.is_valid().to_numpy(zero_copy_only=False)
        | block.is_valid().to_numpy(zero_copy_only=False)
        | (np.asarray(tasks["bytes"], dtype=np.int64) >= 0)
    )
    if not (keep & sized).any():
        return Skipped(
            ID, "no input shapes, launch dimensions or copy sizes recorded to group runs by"
        )
    rows = np.flatnonzero(keep & sized)
    group = _groups(tasks, rows, grid, block)
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)[rows]
    order = columns.lexsort((dur, group))
    group_sorted, dur_sorted = group[order], dur[order]
    first = np.flatnonzero(np.r_[True, group_sorted[1:] != group_sorted[:-1]])
    size = np.diff(np.r_[first, group_sorted.size])
    median_sorted = (dur_sorted[first + (size - 1) // 2] + dur_sorted[first + size // 2]) / 2.0
    position = np.cumsum(np.r_[True, group_sorted[1:] != group_sorted[:-1]]) - 1
    median = np.empty(rows.size)
    median[order] = median_sorted[position]
    count = np.empty(rows.size, dtype=np.int64)
    count[order] = size[position]
    excess = dur - median
    slow = (
        (count >= p["min_instances"])
        & (dur > p["ratio"] * median)
        & (excess >= p["min_excess_us"] * 1e3)
    )
    total_excess = float(excess[slow].sum())
    if not slow.any() or pct(total_excess, ctx.basis.wall_ns) < p["min_total_pct"]:
        return None

    flagged = np.flatnonzero(slow)
    worst = flagged[np.argsort(-excess[flagged], kind="stable")[:TOP_OFFENDERS]]
    take = rows[worst]
    # the offenders' strings only (every task's decoded is a large object array)
    at = pa.array(take, pa.int64())
    name = dict(zip(take.tolist(), tasks["name"].take(at).to_pylist(), strict=True))
    op = dict(zip(take.tolist(), tasks["op_name"].take(at).to_pylist(), strict=True))
    own_shapes = pc.coalesce(tasks["shapes"].take(at), tasks["op_shapes"].take(at))
    shapes = dict(zip(take.tolist(), own_shapes.to_pylist(), strict=True))
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    step = np.asarray(tasks["step"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    offenders = [
        offender(
            rank[t],
            step[t],
            start[t],
            start[t] + dur[w],
            name=str(name[t]),
            op=op[t],
            shapes=shapes[t],
            dur_us=us(dur[w]),
            median_us=us(median[w]),
            ratio=round(float(dur[w] / median[w]), 1) if median[w] > 0 else None,
            instances=int(count[w]),
        )
        for w, t in zip(worst, take, strict=True)
    ]
    flagged_steps = step[rows[flagged]]
    first_step = min(w.step for w in ctx.step_windows) if ctx.basis.annotated else None
    in_first = (
        pct(int((flagged_steps == first_step).sum()), flagged.size)
        if first_step is not None
        else None
    )
    severity_ms, severity_pct = ctx.severity(total_excess)
    evidence = {
        "steps": ctx.basis.describe(),
        "slow_instances": int(flagged.size),
        "groups_with_slow_instances": int(np.unique(group[flagged]).size),
        "excess_ms_per_step": ms(total_excess / ctx.basis.windows),
        "slow_instances_in_first_profiled_step_pct": in_first,
        "worst_instances": offenders,
    }
    return Finding(
        id=ID,
        title=(
            f"{flagged.size} operator runs took over {p['ratio']:g}x the median of the same "
            "operator and shapes"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Look at what else ran at those times (open the timeline at the listed spans): a "
            "concurrent stream or process, clock throttling (check power and temperature), "
            "first-call work such as cuDNN autotuning or allocator growth (warm up before "
            "measuring, set torch.backends.cudnn.benchmark once), or unified-memory page faults."
        ),
        verify=(
            "Re-profile: the same operators' max/avg ratio in op_statistic.csv should approach "
            "1; if the slow runs sit in the first step only, profile after a warm-up instead."
        ),
        estimate=(
            "For each slow run, its time above the median of its group (kernel, operator, "
            "shapes, types); summed per step."
        ),
        spans=spans_of(offenders),
    )


def _groups(tasks: pa.Table, rows: np.ndarray, grid: pa.Array, block: pa.Array) -> np.ndarray:
    """A dense group id per task at ``rows``: kind, kernel name, operator, shapes, types,
    launch dimensions (kernel_details' grid and block), bytes."""
    # each column encoded whole and read at the rows: no copy of the tasks' strings
    parts = (
        encode(tasks["kind"])[0][rows],
        encode(tasks["name"])[0][rows],
        encode(tasks["op_name"])[0][rows],
        encode(pc.coalesce(tasks["shapes"], tasks["op_shapes"]))[0][rows],
        encode(pc.coalesce(tasks["dtypes"], tasks["op_dtypes"]))[0][rows],
        encode(grid)[0][rows],
        encode(block)[0][rows],
        columns.factorize(np.asarray(tasks["bytes"], dtype=np.int64)[rows])[1],
    )
    return group_ids(parts, rows.size)


RULE: Final = Rule(
    id=ID,
    title="some operator runs are far slower than usual",
    checks="instances slower than ratio x the median of the same operator, shapes and types",
    thresholds=(
        Threshold("ratio", 3.0, "x", "slower than this multiple of the median", "perfledger"),
        Threshold(
            "min_instances",
            5.0,
            "count",
            "a group needs this many runs for a median",
            "perfledger",
        ),
        Threshold(
            "min_excess_us",
            20.0,
            "µs",
            "ignore runs less than this above the median",
            "perfledger: below timer and launch noise",
        ),
        Threshold(
            "min_total_pct",
            1.0,
            "%",
            "the slow runs' excess must reach this share of the step",
            "perfledger",
        ),
    ),
    check=check,
)
