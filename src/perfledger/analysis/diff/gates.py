"""The CI gate: thresholds on a diff's changes, e.g. ``step_time>+5%`` or ``idle>+2pp``.

A threshold is crossed when the change is beyond it and beyond run-to-run noise; a change within
noise never fails unless the caller ignores noise. The command line parses the text of a
threshold into a :class:`Threshold`; this module only evaluates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from perfledger.analysis.diff.noise import NO_CHANGE, Change, compare
from perfledger.analysis.diff.runs import RunDiff
from perfledger.analysis.diff.step_account import DEVICE_CATEGORIES, HOST_CATEGORIES

# metric -> the units a threshold on it may take: % change, pp of the step, ms
GATE_METRICS: Final = {
    "step_time": ("%", "ms"),
    "step_time_p90": ("%", "ms"),
    "throughput": ("%",),
    "sample_time": ("%", "ms"),  # step time per sample (diff --per-sample)
    "utilization": ("pp",),
    "gap": ("%", "ms"),
    **dict.fromkeys((*DEVICE_CATEGORIES, *HOST_CATEGORIES), ("%", "ms", "pp")),
}
CROSSED: Final = "crossed"
WITHIN_NOISE: Final = "within_noise"
PASSED: Final = "ok"
UNKNOWN: Final = "unknown"


@dataclass(frozen=True)
class Threshold:
    """One ``--fail-on`` expression: fail when ``metric``'s change ``op`` ``limit`` ``unit``."""

    expression: str
    metric: str
    op: str
    limit: float
    unit: str


@dataclass(frozen=True)
class GateCheck:
    """A threshold evaluated: the change it looked at and whether it was crossed."""

    threshold: Threshold
    value: float | None  # the change, in the threshold's unit
    base: float | None
    current: float | None
    noise: float | None  # noise band in the threshold's unit
    within_noise: bool | None
    status: str  # crossed, within_noise, ok, unknown

    @property
    def crossed(self) -> bool:
        return self.status == CROSSED


def _gate_change(diff: RunDiff, metric: str, unit: str) -> tuple[Change, float | None]:
    """The change a metric's threshold looks at, and its value in the threshold's unit."""
    if metric == "step_time":
        change = diff.step_time.median
    elif metric == "step_time_p90":
        median = diff.step_time.median
        p90 = diff.step_time.p90
        # p90 has no noise estimate of its own: it borrows the median's relative band
        noise = (
            None
            if median.noise is None or not median.base or p90.base is None
            else p90.base * median.noise / median.base
        )
        change = compare(p90.base, p90.current, band=noise)
    elif metric == "throughput":
        change = diff.step_time.throughput
    elif metric == "sample_time":
        change = NO_CHANGE if diff.per_sample is None else diff.per_sample.time_ms
    elif metric == "utilization":
        change = diff.utilization
    elif metric == "gap":
        gap = diff.gaps.duration_us
        change = Change(
            None if gap.base is None else gap.base / 1e3,
            None if gap.current is None else gap.current / 1e3,
            None if gap.delta is None else gap.delta / 1e3,
            gap.change_pct,
            None if gap.noise is None else gap.noise / 1e3,
            gap.within_noise,
        )
    else:
        category = diff.category(metric)
        if category is None:
            return NO_CHANGE, None
        change = category.share if unit == "pp" else category.ms
    if unit == "%":
        return change, change.change_pct
    return change, change.delta


def evaluate_gates(
    diff: RunDiff, thresholds: Sequence[Threshold], *, ignore_noise: bool = False
) -> tuple[GateCheck, ...]:
    """Evaluate every threshold; a change within noise never fails unless ``ignore_noise``."""
    checks = []
    for threshold in thresholds:
        change, value = _gate_change(diff, threshold.metric, threshold.unit)
        noise = change.noise
        if threshold.unit == "%" and noise is not None and change.base:
            noise = 100.0 * noise / abs(change.base)
        if value is None:
            status = UNKNOWN
        else:
            beyond = {
                ">": value > threshold.limit,
                ">=": value >= threshold.limit,
                "<": value < threshold.limit,
                "<=": value <= threshold.limit,
            }[threshold.op]
            if not beyond:
                status = PASSED
            elif change.within_noise and not ignore_noise:
                status = WITHIN_NOISE
            else:
                status = CROSSED
        checks.append(
            GateCheck(
                threshold=threshold,
                value=value,
                base=change.base,
                current=change.current,
                noise=noise,
                within_noise=change.within_noise,
                status=status,
            )
        )
    return tuple(checks)
