"""Compare two runs: step time, time account, idle gaps, operators, copies, communication, findings.

``diff_runs(base, current, options) -> RunDiff`` compares the tables of two runs
(:class:`RunTables`, read from a profile directory or from traces analysed in memory) and
returns frozen results; ``evaluate_gates`` checks ``--fail-on`` thresholds against them. The
render layer lays them out (diff.json, the terminal, diff.html).

Every figure is per step, so that runs with different step counts compare:

- :mod:`~perfledger.analysis.diff.tables` — the compared tables and their per-step samples;
- :mod:`~perfledger.analysis.diff.noise` — sample statistics and the noise band of a change;
- :mod:`~perfledger.analysis.diff.step_account` — step time, categories, utilisation;
- :mod:`~perfledger.analysis.diff.idle_gaps` — idle gaps by length, bucket and cause;
- :mod:`~perfledger.analysis.diff.operators` — op types and op classes;
- :mod:`~perfledger.analysis.diff.traffic` — memory copies and communication;
- :mod:`~perfledger.analysis.diff.findings` — findings matched by id;
- :mod:`~perfledger.analysis.diff.workload` — what a run computes, and its batch size;
- :mod:`~perfledger.analysis.diff.runs` — every comparison of two runs, and the verdict;
- :mod:`~perfledger.analysis.diff.gates` — ``--fail-on`` thresholds evaluated.
"""

from __future__ import annotations

from perfledger.analysis.diff.findings import (
    FindingChange,
    FindingsDiff,
    finding_severity,
    findings_diff,
)
from perfledger.analysis.diff.gates import (
    CROSSED,
    GATE_METRICS,
    PASSED,
    UNKNOWN,
    WITHIN_NOISE,
    GateCheck,
    Threshold,
    evaluate_gates,
)
from perfledger.analysis.diff.idle_gaps import GapBucketDiff, GapsDiff
from perfledger.analysis.diff.noise import (
    MAD_TO_SIGMA,
    MEDIAN_EFFICIENCY,
    Change,
    DiffOptions,
    Distribution,
    compare,
    distribution,
    noise_band,
)
from perfledger.analysis.diff.operators import ClassRow, OpRow, OpsDiff
from perfledger.analysis.diff.runs import (
    RunDiff,
    RunInfo,
    WorkloadComparison,
    batch_note,
    compare_workloads,
    diff_runs,
    quality_warning,
    workload_warning,
)
from perfledger.analysis.diff.step_account import (
    DEVICE_CATEGORIES,
    HOST_CATEGORIES,
    CategoryDiff,
    PerSampleDiff,
    StepTimeDiff,
)
from perfledger.analysis.diff.tables import RunTables, step_walls_ms
from perfledger.analysis.diff.traffic import CommunicationDiff, TransferDiff
from perfledger.analysis.diff.workload import BatchSize, Workload, same_workload

__all__ = [
    "CROSSED",
    "DEVICE_CATEGORIES",
    "GATE_METRICS",
    "HOST_CATEGORIES",
    "MAD_TO_SIGMA",
    "MEDIAN_EFFICIENCY",
    "PASSED",
    "UNKNOWN",
    "WITHIN_NOISE",
    "BatchSize",
    "CategoryDiff",
    "Change",
    "ClassRow",
    "CommunicationDiff",
    "DiffOptions",
    "Distribution",
    "FindingChange",
    "FindingsDiff",
    "GapBucketDiff",
    "GapsDiff",
    "GateCheck",
    "OpRow",
    "OpsDiff",
    "PerSampleDiff",
    "RunDiff",
    "RunInfo",
    "RunTables",
    "StepTimeDiff",
    "Threshold",
    "TransferDiff",
    "Workload",
    "WorkloadComparison",
    "batch_note",
    "compare",
    "compare_workloads",
    "diff_runs",
    "distribution",
    "evaluate_gates",
    "finding_severity",
    "findings_diff",
    "noise_band",
    "quality_warning",
    "same_workload",
    "step_walls_ms",
    "workload_warning",
]
