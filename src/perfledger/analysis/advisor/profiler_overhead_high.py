"""profiler_overhead_high: the profiler itself slowed the profiled steps down.

``perfledger record`` times every step, profiled or not; the pipeline turns them into the
profiler overhead (median profiled step against median unprofiled step). Above
``overhead_pct`` every absolute figure of the profile is inflated — per-op costs most of all,
since the profiler adds a few µs to each operator — and should be read as relative.
"""

from __future__ import annotations

from typing import Final

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.model.findings import Finding, Skipped, Threshold, ms

ID: Final = "profiler_overhead_high"


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Profiled steps slower than unprofiled ones by more than overhead_pct."""
    overhead = ctx.overhead_pct
    if overhead is None:
        return Skipped(
            ID,
            "profiler overhead unknown: no unprofiled step times (record with perfledger "
            "record to measure it)",
        )
    if overhead <= p["overhead_pct"]:
        return None
    step_ns = ctx.basis.mean_step_ns
    inflated_share = overhead / (100.0 + overhead)
    severity_ms = ms(step_ns * inflated_share)
    return Finding(
        id=ID,
        title=f"Profiled steps ran {overhead:.1f}% slower than unprofiled ones",
        severity_ms=severity_ms,
        severity_pct=round(100.0 * inflated_share, 2),
        evidence={
            "steps": ctx.basis.describe(),
            "profiler_overhead_pct": overhead,
            "profiled_step_ms": ms(step_ns),
            "unprofiled_step_ms": ms(step_ns / (1.0 + overhead / 100.0)),
        },
        suggestion=(
            "Read the profile's figures as relative, not absolute: host-side costs per op are "
            "inflated most. Profile fewer things to cut the overhead (record_shapes, "
            "with_stack, profile_memory off unless needed; a shorter active window), and "
            "confirm every improvement with unprofiled step times."
        ),
        verify=(
            "Re-record with lighter options: profiler_overhead_pct in summary.json should drop "
            "under the threshold; compare step times without the profiler (DESIGN.md: "
            "re-measure without the profiler)."
        ),
        estimate=(
            "The part of the profiled step that is profiler inflation: step x overhead / "
            "(100 + overhead). Not recoverable in production, where the profiler is off."
        ),
    )


RULE: Final = Rule(
    id=ID,
    title="the profiler inflated the step times",
    checks="profiled against unprofiled step times (perfledger record)",
    thresholds=(
        Threshold(
            "overhead_pct",
            10.0,
            "%",
            "profiled steps slower than unprofiled ones by more",
            "the msprof guides' checklist (re-measure without the profiler)",
        ),
    ),
    check=check,
)
