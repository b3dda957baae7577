"""Step time, the time account per step and device utilisation of two runs, compared.

Step time is the **median** of the step walls; p90 and the spread (robust coefficient of
variation, 1.4826 x MAD / median) describe the distribution. A run without step annotations
has no step time. Categories (compute, communication, memcpy, memset, idle, each idle cause;
the host phases of a CPU run) are the **mean** per step row (rank, device, step), so that they
add up to the mean step, and their share is sum(category) / sum(wall) over the step rows, so
that shares add up to 100 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from perfledger.analysis import figures
from perfledger.analysis.diff.noise import (
    NO_CHANGE,
    Change,
    DiffOptions,
    Distribution,
    compare,
    compare_samples,
    distribution,
)
from perfledger.analysis.diff.tables import RunTables, category_samples, host_only, step_walls_ms
from perfledger.model.accounts import IDLE_CAUSES

DEVICE_CATEGORIES: Final = (
    "compute",
    "communication",
    "communication_wait",
    "communication_transfer",
    "overlapped_communication",
    "memcpy",
    "memset",
    "idle",
    *(f"idle_{cause}" for cause in IDLE_CAUSES),
)
HOST_CATEGORIES: Final = (
    "dataloader",
    "forward",
    "backward",
    "optimizer",
    "operator",
    "overhead",
)


@dataclass(frozen=True)
class StepTimeDiff:
    """Step time in ms: both distributions and the change of their median and p90."""

    base: Distribution
    current: Distribution
    median: Change
    p90: Change
    throughput: Change  # steps per second, 1000 / median step ms
    base_samples: tuple[float, ...] = ()  # step walls in ms, in step order
    current_samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class CategoryDiff:
    """One accounting category: mean ms per step, and share of the step in % (delta in pp)."""

    name: str
    ms: Change
    share: Change


def step_time_diff(base: RunTables, current: RunTables, options: DiffOptions) -> StepTimeDiff:
    """The median, p90 and throughput of the step walls, with the median's noise band."""
    b, c = step_walls_ms(base), step_walls_ms(current)
    median = compare_samples(b, c, robust=True, options=options)
    db, dc = distribution(b), distribution(c)
    p90 = compare(db.p90, dc.p90)
    # throughput is the inverse of the median step: the same samples, the same verdict
    throughput = _inverse(median)
    return StepTimeDiff(
        base=db,
        current=dc,
        median=median,
        p90=p90,
        throughput=throughput,
        base_samples=tuple(float(x) for x in b),
        current_samples=tuple(float(x) for x in c),
    )


@dataclass(frozen=True)
class PerSampleDiff:
    """Step time divided by the samples each step processed: runs of different batch sizes
    compared for the same amount of work.

    Attributes:
        base_samples, current_samples: samples per step (batch size) of each run.
        time_ms: median of the step walls over the batch size, in ms per sample, with the
            noise band of those per-sample times.
        throughput: samples per second, 1000 / time per sample (the same samples, the same
            verdict).
    """

    base_samples: int
    current_samples: int
    time_ms: Change
    throughput: Change


def per_sample_diff(
    base: RunTables,
    current: RunTables,
    base_samples: int,
    current_samples: int,
    options: DiffOptions,
) -> PerSampleDiff:
    """Step time per sample of both runs (their step walls over their batch sizes)."""
    b = step_walls_ms(base) / base_samples
    c = step_walls_ms(current) / current_samples
    time_ms = compare_samples(b, c, robust=True, options=options)
    return PerSampleDiff(
        base_samples=base_samples,
        current_samples=current_samples,
        time_ms=time_ms,
        throughput=_inverse(time_ms),
    )


def _inverse(median: Change) -> Change:
    """Per second of a time in ms: 1000 / time, its noise carried over relatively."""
    if not (median.base and median.current):
        return NO_CHANGE
    tb, tc = 1000.0 / median.base, 1000.0 / median.current
    return Change(
        tb,
        tc,
        tc - tb,
        100.0 * (tc - tb) / tb,
        None if median.noise is None else tb * median.noise / median.base,
        median.within_noise,
    )


def category_diffs(
    base: RunTables, current: RunTables, options: DiffOptions
) -> tuple[CategoryDiff, ...]:
    """Each category's mean ms per step and share of the step (none for a CPU run against a
    device run: their accounts have no category in common)."""
    names = HOST_CATEGORIES if host_only(base) and host_only(current) else DEVICE_CATEGORIES
    if host_only(base) != host_only(current):
        return ()
    result = []
    for name in names:
        b_ms, b_share = category_samples(base, name)
        c_ms, c_share = category_samples(current, name)
        ms = compare_samples(b_ms, c_ms, robust=False, options=options)
        share = compare_samples(
            b_share,
            c_share,
            robust=False,
            options=options,
            floor_pp=True,
            value_base=figures.category_share_pct(base.step_trace, name),
            value_current=figures.category_share_pct(current.step_trace, name),
        )
        result.append(CategoryDiff(name=name, ms=ms, share=share))
    return tuple(result)


def utilization_change(base: RunTables, current: RunTables, options: DiffOptions) -> Change:
    """The device's busy share of the step in % (unknown when either run is a CPU run)."""
    if host_only(base) or host_only(current):
        return NO_CHANGE
    _, b_share = category_samples(base, "idle")
    _, c_share = category_samples(current, "idle")
    return compare_samples(
        100.0 - b_share,
        100.0 - c_share,
        robust=False,
        options=options,
        floor_pp=True,
        value_base=figures.utilization_pct(base.step_trace),
        value_current=figures.utilization_pct(current.step_trace),
    )
