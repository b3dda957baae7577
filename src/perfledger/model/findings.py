"""The advisor's vocabulary: thresholds, findings, skipped rules, configuration and the step
basis severities are expressed per; plus the rounding every finding uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, SupportsFloat

from perfledger.errors import PerfledgerError
from perfledger.model.whatif import StepGains, WhatIf


class RuleDefaults(Protocol):
    """A rule as the configuration sees it: an id and its thresholds' defaults."""

    @property
    def id(self) -> str: ...

    def defaults(self) -> dict[str, float]: ...


MS_DECIMALS: Final = 3


PCT_DECIMALS: Final = 2


TOP_OFFENDERS: Final = 10  # offenders listed in a finding's evidence


MAX_SPANS: Final = 20  # timeline slices per finding


@dataclass(frozen=True)
class Threshold:
    """One configurable figure of a rule.

    Attributes:
        name: the key after the rule id (``host_dispatch_bound.idle_pct``).
        default: the value used when nothing overrides it.
        unit: "%", "µs", "x", "count", ...
        meaning: what the figure decides, in one line.
        source: where the default comes from.
    """

    name: str
    default: float
    unit: str
    meaning: str
    source: str


@dataclass(frozen=True)
class Finding:
    """One diagnosis: what holds the step back, what it costs, the evidence, what to do.

    Attributes:
        id: the rule id (stable; DESIGN.md's list of finding ids).
        title: one line naming the problem with its headline figure.
        severity_ms: estimated recoverable time per step, ms.
        severity_pct: the same as a share of the step, %.
        evidence: JSON-able figures and top offenders (each with rank, step, start_ns,
            end_ns so the timeline can jump there).
        suggestion: what to change.
        verify: how to check that the change worked.
        estimate: how severity was estimated.
        spans: ``{rank, start_ns, end_ns}`` of the offenders, for the timeline's finding track.
        whatif_ms: the replayed gain per step of the fix alone, ms (docs/whatif.md, "The
            advisor on replay"); None when the fix is not a change of the step graph.
    """

    id: str
    title: str
    severity_ms: float
    severity_pct: float
    evidence: Mapping[str, Any]
    suggestion: str
    verify: str
    estimate: str
    spans: tuple[Mapping[str, int], ...] = ()
    whatif_ms: float | None = None

    @property
    def gain_ms(self) -> float:
        """The finding's best estimate of its gain per step: the replayed one where there is
        one, else its severity (what findings are ranked by)."""
        return self.severity_ms if self.whatif_ms is None else self.whatif_ms

    def to_dict(self) -> dict[str, Any]:
        """summary.json's finding object: DESIGN.md's keys first, then estimate, spans and
        whatif_ms."""
        return {
            "id": self.id,
            "title": self.title,
            "severity_ms": self.severity_ms,
            "severity_pct": self.severity_pct,
            "evidence": _jsonable(self.evidence),
            "suggestion": self.suggestion,
            "verify": self.verify,
            "estimate": self.estimate,
            "spans": [dict(s) for s in self.spans],
            "whatif_ms": self.whatif_ms,
        }


@dataclass(frozen=True)
class Skipped:
    """A rule that could not run: the data it needs is not in the profile."""

    rule: str
    reason: str


@dataclass(frozen=True)
class DeviceOverride:
    """Device figures given by the user instead of (or on top of) the recognised device.

    ``model`` names a row of :data:`perfledger.model.devices.KNOWN_DEVICES`; the peaks replace the
    model's (or the recognised device's) figures when given.
    """

    model: str | None = None
    peak_tflops: float | None = None
    bandwidth_gbps: float | None = None
    host_link_gbps: float | None = None

    @property
    def given(self) -> bool:
        return any(
            v is not None
            for v in (self.model, self.peak_tflops, self.bandwidth_gbps, self.host_link_gbps)
        )


@dataclass(frozen=True)
class AdvisorConfig:
    """Thresholds, device override and the rules to run.

    Attributes:
        thresholds: ``"rule.name"`` → value, overriding the rules' defaults.
        device: device peaks given by the user.
        enabled: the rules to run (None: every rule).
        disabled: rules not to run.
    """

    thresholds: Mapping[str, float] = field(default_factory=dict)
    device: DeviceOverride = field(default_factory=DeviceOverride)
    enabled: frozenset[str] | None = None
    disabled: frozenset[str] = frozenset()

    def params(self, rule: RuleDefaults) -> dict[str, float]:
        """The thresholds of one rule: defaults, then overrides."""
        values = rule.defaults()
        prefix = rule.id + "."
        for key, value in self.thresholds.items():
            if key.startswith(prefix):
                values[key[len(prefix) :]] = value
        return values

    def runs(self, rule_id: str) -> bool:
        """Whether a rule is enabled."""
        if rule_id in self.disabled:
            return False
        return self.enabled is None or rule_id in self.enabled


def ms(ns: SupportsFloat) -> float:
    """ns to ms, rounded to µs."""
    return round(float(ns) / 1e6, MS_DECIMALS)


def us(ns: SupportsFloat) -> float:
    """ns to µs, rounded to ns."""
    return round(float(ns) / 1e3, 3)


def pct(part: SupportsFloat, whole: SupportsFloat) -> float:
    """Share in %, 2 decimals (0 when the whole is empty)."""
    total = float(whole)
    return round(100.0 * float(part) / total, PCT_DECIMALS) if total > 0 else 0.0


def check_value(key: str, value: float) -> float:
    """A threshold value must be a finite number >= 0."""
    if not math.isfinite(value) or value < 0:
        raise PerfledgerError(f"threshold {key}: {value} is not a finite number >= 0")
    return value


def _jsonable(value: Any) -> Any:
    """Evidence with numpy scalars, tuples and non-finite floats made JSON-safe."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if hasattr(value, "item"):  # numpy scalar
        return _jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


@dataclass(frozen=True)
class StepBasis:
    """What "per step" means for severities: the step windows of every rank and device.

    ``annotated`` is False when the trace has no step annotation: the one window is then the
    whole profile and "per step" reads "per profiled window".
    """

    windows: int
    wall_ns: int
    annotated: bool
    lanes: int = 1  # (rank, device) pairs, each with its own windows
    # the median window: the profile's step time (summary.json step_time_ms) on one
    # rank; None where only the sums are known (bases merged over ranks)
    median_step_ns: float | None = None

    @property
    def mean_step_ns(self) -> float:
        return self.wall_ns / self.windows if self.windows else 0.0

    def severity(self, recoverable_ns: float) -> tuple[float, float]:
        """(ms per step, % of step) of a recoverable time summed over every window."""
        if self.windows == 0:
            return 0.0, 0.0
        per_step_ms = round(recoverable_ns / self.windows / 1e6, 3)
        return per_step_ms, pct(recoverable_ns, self.wall_ns)

    def describe(self) -> str:
        per_lane = self.windows // max(self.lanes, 1)
        if self.annotated:
            unit = "step" if per_lane == 1 else "steps"
        else:
            unit = "profiled window" if per_lane == 1 else "profiled windows"
            unit += " (no step annotation)"
        lanes = f" on each of {self.lanes} devices" if self.lanes > 1 else ""
        if self.median_step_ns is not None:
            return f"{per_lane} {unit}{lanes}, median {self.median_step_ns / 1e6:.3f} ms"
        return f"{per_lane} {unit}{lanes}, mean {self.mean_step_ns / 1e6:.3f} ms"


# The fixes a combined what-if applies together, at most (the top ones by replayed gain).
COMBINED_FIXES: Final = 3


@dataclass(frozen=True)
class CombinedFix:
    """The top fixes by replayed gain applied together (summary.json's ``whatif_combined``).

    Attributes:
        findings: the ids of the fixes, largest gain first (at most :data:`COMBINED_FIXES`).
        gains: the replayed steps with every one of them applied (not the sum of their gains).
    """

    findings: tuple[str, ...]
    gains: StepGains

    def to_dict(self) -> dict[str, Any]:
        return {
            "findings": list(self.findings),
            "gain_ms": self.gains.gain_ms,
            "baseline_ms": self.gains.baseline_ms,
            "predicted_ms": self.gains.predicted_ms,
        }


@dataclass(frozen=True)
class RankAdvice:
    """One rank's findings and skipped rules, with the step basis its severities use.

    Attributes:
        rank: the rank diagnosed.
        basis: its step windows (count and wall time): what its severities are per.
        findings: the findings of the rank rules on it, largest gain first (whatif_ms, else
            severity_ms).
        skipped: the rank rules whose data the rank lacks.
        config: the configuration it was diagnosed with (to tell whether it can be reused).
        fixes: the graph change of each finding that has one, by rule id (to combine them).
        gains: what each of those changes gains on the rank's replayed steps, by rule id.
        combined: the rank's own top fixes applied together.
        baseline: the rank's replayed steps unchanged (what its gains are per).
    """

    rank: int
    basis: StepBasis
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    config: AdvisorConfig
    fixes: Mapping[str, WhatIf] = field(default_factory=dict)
    gains: Mapping[str, StepGains] = field(default_factory=dict)
    combined: CombinedFix | None = None
    baseline: StepGains = field(default_factory=StepGains)


@dataclass(frozen=True)
class AdvisorReport:
    """Findings sorted by their gain (:attr:`Finding.gain_ms`), the rules that could not run
    with the reason, and the top fixes' combined replayed gain (None when no fix gains)."""

    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    combined: CombinedFix | None = None
    # the graph change of each finding's fix and what it gains, by rule id (rank rules run here)
    fixes: Mapping[str, WhatIf] = field(default_factory=dict)
    gains: Mapping[str, StepGains] = field(default_factory=dict)
    baseline: StepGains = field(default_factory=StepGains)  # the replayed steps unchanged
    slower_replays: int = 0  # rank replays a fix predicted longer than their baseline
