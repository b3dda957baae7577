"""profiler_overhead_high: the profiler itself slowed the profiled steps down.

``perfledger record`` times every step, profiled or not; the profiler's overhead compares the
profiled steps with the unprofiled steps around them (docs/record.md) and carries its noise:
the half-width of the difference within which the steps' own variation (machine load, a
shared core) could have put it. The rule fires only when the overhead exceeds ``overhead_pct``
by more than that noise: then every absolute figure of the profile is inflated — per-op costs
most of all, since the profiler adds a few µs to each operator — and should be read as
relative. A figure within its noise, or negative, is no finding.
"""

from __future__ import annotations

import statistics
from typing import Final

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.model.findings import Finding, Skipped, Threshold, ms

ID: Final = "profiler_overhead_high"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Profiled steps slower than unprofiled ones by more than overhead_pct beyond the noise."""
    overhead = ctx.overhead_pct
    if overhead is None:
        return Skipped(
            ID,
            "profiler overhead unknown: no unprofiled step times (record with perfledger "
            "record to measure it)",
        )
    noise = ctx.overhead_noise_pct or 0.0
    # The least overhead the steps' own variation allows: what is certainly the profiler's.
    certain = overhead - noise
    if certain <= p["overhead_pct"]:
        return None
    walls = [w.wall_ns for w in ctx.step_windows or ctx.host_windows]
    if not walls:
        return Skipped(ID, "no step window")
    # the profile's step time (summary.json step_time_ms): the median step
    step_ns = float(statistics.median(walls))
    unprofiled_ns = step_ns / (1.0 + overhead / 100.0)
    inflated_share = certain / (100.0 + overhead)
    mean_ns = ctx.basis.mean_step_ns
    return Finding(
        id=ID,
        title=(
            f"Profiled steps ran {overhead:.1f}% slower than the unprofiled steps around them"
            + (f" (± {noise:.1f}%)" if noise else "")
        ),
        severity_ms=ms(mean_ns * inflated_share),
        severity_pct=round(100.0 * inflated_share, 2),
        evidence={
            "steps": ctx.basis.describe(),
            "profiler_overhead_pct": overhead,
            "profiler_overhead_noise_pct": ctx.overhead_noise_pct,
            "step_time_ms": ms(step_ns),
            "unprofiled_step_ms": ms(unprofiled_ns),
        },
        suggestion=(
            "Record a lighter profile: perfledger record --level light (no operator shapes or "
            "FLOPs, no CPU operators: step, data-loader and device time only), or keep the "
            "default level and profile fewer, longer-running operators (a larger batch); read "
            "this profile's per-op host costs as relative, and confirm every improvement with "
            "the unprofiled step time (summary.json unprofiled_step_ms)."
        ),
        verify=(
            "Re-record with --level light: profiler_overhead_pct in summary.json should fall "
            "within its noise (profiler_overhead_noise_pct) or under the threshold."
        ),
        estimate=(
            "The part of the profiled step that is certainly profiler inflation: step x "
            "(overhead - noise) / (100 + overhead). Not recoverable in production, where the "
            "profiler is off."
        ),
    )


RULE: Final = Rule(
    id=ID,
    title="the profiler inflated the step times",
    checks="profiled against neighbouring unprofiled step times, beyond their noise "
    "(perfledger record)",
    thresholds=(
        Threshold(
            "overhead_pct",
            10.0,
            "%",
            "profiled steps slower than unprofiled ones by more, beyond the noise",
            "the msprof guides' checklist (re-measure without the profiler)",
        ),
    ),
    check=check,
)
