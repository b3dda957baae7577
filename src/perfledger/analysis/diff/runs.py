"""Two runs compared: who they are, every comparison, and the one-line verdict on step time."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfledger.analysis.diff.findings import FindingsDiff, findings_diff
from perfledger.analysis.diff.idle_gaps import GapsDiff, gaps_diff
from perfledger.analysis.diff.noise import Change, DiffOptions
from perfledger.analysis.diff.operators import OpsDiff, ops_diff
from perfledger.analysis.diff.step_account import (
    CategoryDiff,
    StepTimeDiff,
    category_diffs,
    step_time_diff,
    utilization_change,
)
from perfledger.analysis.diff.tables import RunTables, host_only, windows
from perfledger.analysis.diff.traffic import (
    CommunicationDiff,
    TransferDiff,
    communication_diff,
    transfers_diff,
)


@dataclass(frozen=True)
class RunInfo:
    """Who is compared: the run's name and how many samples it gives."""

    label: str
    path: str
    source_kind: str
    ranks: tuple[int, ...]
    step_count: int
    windows: int  # step windows (rank x step) the per-step figures divide by
    host_only: bool
    confidence: str | None = None  # the run's data quality (high, medium, low)


@dataclass(frozen=True)
class RunDiff:
    """Everything ``perfledger diff`` reports."""

    base: RunInfo
    current: RunInfo
    step_time: StepTimeDiff
    categories: tuple[CategoryDiff, ...]
    utilization: Change  # device busy share of the step, % (delta in pp)
    gaps: GapsDiff
    ops: OpsDiff
    transfers: tuple[TransferDiff, ...]
    communication: CommunicationDiff
    findings: FindingsDiff
    verdict: str
    options: DiffOptions = field(default_factory=DiffOptions)

    def category(self, name: str) -> CategoryDiff | None:
        """The category called ``name`` (None when the runs do not share it)."""
        return next((c for c in self.categories if c.name == name), None)


def run_info(run: RunTables) -> RunInfo:
    """The run's name, ranks and the number of step windows its figures divide by."""
    ranks = (
        tuple(sorted({int(r) for r in run.step_trace.column("rank").to_pylist()}))
        if run.step_trace.num_rows
        else ()
    )
    return RunInfo(
        label=run.label,
        path=run.path,
        source_kind=run.source_kind,
        ranks=ranks,
        step_count=run.step_count,
        windows=windows(run),
        host_only=host_only(run),
        confidence=run.confidence,
    )


def quality_warning(base: RunInfo, current: RunInfo) -> str | None:
    """A warning when either run's figures rest on doubtful data (quality confidence low)."""
    low = [r.label for r in (base, current) if r.confidence == "low"]
    if not low:
        return None
    who = " and ".join(low)
    return (
        f"data quality low in {who}: a change may come from the trace's faults, not the code "
        "(see the quality report in summary.json)"
    )


def verdict(step: StepTimeDiff, base: RunInfo, current: RunInfo) -> str:
    """One line on step time: the change, its noise band, and whether it is beyond it."""
    change = step.median
    if change.base is None or change.current is None:
        missing = [r.label for r in (base, current) if r.step_count <= 0]
        who = " and ".join(missing) if missing else "one run"
        return f"step time not compared: {who} has no step annotation"
    assert change.change_pct is not None and change.noise is not None
    direction = "slower" if change.delta and change.delta > 0 else "faster"
    noise_pct = 100.0 * change.noise / change.base if change.base else 0.0
    headline = (
        f"step time {change.base:.3f} ms -> {change.current:.3f} ms "
        f"({change.change_pct:+.1f}%, noise ±{noise_pct:.1f}%)"
    )
    if change.within_noise:
        return f"{headline}: within noise"
    return f"{headline}: {direction}, beyond run-to-run noise"


def diff_runs(base: RunTables, current: RunTables, options: DiffOptions | None = None) -> RunDiff:
    """Compare ``current`` against ``base``."""
    options = options or DiffOptions()
    info_b, info_c = run_info(base), run_info(current)
    step_time = step_time_diff(base, current, options)
    return RunDiff(
        base=info_b,
        current=info_c,
        step_time=step_time,
        categories=category_diffs(base, current, options),
        utilization=utilization_change(base, current, options),
        gaps=gaps_diff(base, current, options),
        ops=ops_diff(base, current, options),
        transfers=transfers_diff(base, current),
        communication=communication_diff(base, current, options),
        findings=findings_diff(base.findings, current.findings),
        verdict=verdict(step_time, info_b, info_c),
        options=options,
    )
