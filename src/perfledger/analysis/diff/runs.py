"""Two runs compared: who they are, every comparison, and the one-line verdict on step time."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfledger.analysis.diff.findings import FindingsDiff, findings_diff
from perfledger.analysis.diff.idle_gaps import GapsDiff, gaps_diff
from perfledger.analysis.diff.noise import Change, DiffOptions
from perfledger.analysis.diff.operators import OpsDiff, ops_diff
from perfledger.analysis.diff.step_account import (
    CategoryDiff,
    PerSampleDiff,
    StepTimeDiff,
    category_diffs,
    per_sample_diff,
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
from perfledger.analysis.diff.workload import (
    BatchSize,
    Workload,
    kernel_overlap,
    operator_overlap,
    workload_differences,
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
    workload: WorkloadComparison | None = None
    per_sample: PerSampleDiff | None = None  # when asked for, with both batch sizes known

    def category(self, name: str) -> CategoryDiff | None:
        """The category called ``name`` (None when the runs do not share it)."""
        return next((c for c in self.categories if c.name == name), None)


@dataclass(frozen=True)
class WorkloadComparison:
    """Whether the two runs compute the same thing, and how many samples a step holds.

    Attributes:
        differences: why they are different workloads (programs, devices, operators); empty
            when nothing known of both tells them apart.
        operator_overlap: op types in common over those of both runs (None: unknown).
        kernel_overlap: kernel names in common over those of both runs (None: unknown).
        base, current: each run's workload.
        base_batch, current_batch: samples per step (None: unknown).
    """

    differences: tuple[str, ...]
    operator_overlap: float | None
    base: Workload
    current: Workload
    base_batch: BatchSize | None
    current_batch: BatchSize | None
    kernel_overlap: float | None = None

    @property
    def same(self) -> bool:
        return not self.differences

    @property
    def batches_differ(self) -> bool:
        """Both batch sizes are known and differ: step times compare unequal work."""
        return (
            self.base_batch is not None
            and self.current_batch is not None
            and self.base_batch.samples != self.current_batch.samples
        )


def compare_workloads(base: RunTables, current: RunTables) -> WorkloadComparison:
    """The two runs' workloads compared, with their batch sizes."""
    return WorkloadComparison(
        differences=workload_differences(base.workload, current.workload),
        operator_overlap=operator_overlap(base.workload, current.workload),
        base=base.workload,
        current=current.workload,
        base_batch=base.batch,
        current_batch=current.batch,
        kernel_overlap=kernel_overlap(base.workload, current.workload),
    )


def workload_warning(comparison: WorkloadComparison) -> str | None:
    """One line when the runs are different workloads: what differs, and what it means."""
    if comparison.same:
        return None
    return (
        f"different workloads ({'; '.join(comparison.differences)}): not a like-for-like comparison"
    )


def batch_note(comparison: WorkloadComparison, per_sample: bool) -> str | None:
    """One line when the batch sizes differ and step times are compared as they are."""
    if not comparison.batches_differ or per_sample:
        return None
    assert comparison.base_batch is not None and comparison.current_batch is not None
    return (
        f"batch sizes differ ({comparison.base_batch.samples} vs "
        f"{comparison.current_batch.samples} samples per step): step times compare unequal "
        "work; --per-sample compares time per sample"
    )


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


def per_sample_verdict(change: PerSampleDiff) -> str:
    """One line on time per sample, as :func:`verdict` says it of step time."""
    time = change.time_ms
    if time.base is None or time.current is None:
        return "time per sample not compared: a run has no step annotation"
    assert time.change_pct is not None and time.noise is not None
    direction = "slower" if time.delta and time.delta > 0 else "faster"
    noise_pct = 100.0 * time.noise / time.base if time.base else 0.0
    headline = (
        f"time per sample {time.base:.4f} ms -> {time.current:.4f} ms "
        f"({change.base_samples} vs {change.current_samples} samples per step; "
        f"{time.change_pct:+.1f}%, noise ±{noise_pct:.1f}%)"
    )
    if time.within_noise:
        return f"{headline}: within noise"
    return f"{headline}: {direction}, beyond run-to-run noise"


def diff_runs(
    base: RunTables,
    current: RunTables,
    options: DiffOptions | None = None,
    *,
    per_sample: bool = False,
) -> RunDiff:
    """Compare ``current`` against ``base``.

    With ``per_sample`` (both runs' ``batch`` known) step time is also compared per sample,
    and the verdict speaks of time per sample.

    Raises:
        ValueError: ``per_sample`` without both batch sizes.
    """
    options = options or DiffOptions()
    info_b, info_c = run_info(base), run_info(current)
    step_time = step_time_diff(base, current, options)
    samples = None
    if per_sample:
        if base.batch is None or current.batch is None:
            raise ValueError("per-sample comparison needs both runs' batch sizes")
        samples = per_sample_diff(base, current, base.batch.samples, current.batch.samples, options)
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
        verdict=verdict(step_time, info_b, info_c)
        if samples is None
        else per_sample_verdict(samples),
        options=options,
        workload=compare_workloads(base, current),
        per_sample=samples,
    )
