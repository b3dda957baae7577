"""The aggregate of every analysis of a profile: each rank's analysis and the profile-wide
tables, as the renderers, the advisor and the profile writer read them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from perfledger.model.accounts import Accounting, StepWindow
from perfledger.model.cluster import ClusterReport
from perfledger.model.comm import CommSplit
from perfledger.model.findings import RankAdvice
from perfledger.model.gaps import GapReport
from perfledger.model.launches import LaunchKeys
from perfledger.model.quality import QualityCheck, merge_checks
from perfledger.model.schema import SPAN_STEP
from perfledger.model.trace import Trace
from perfledger.model.whatif import ReplayReport


@dataclass(frozen=True)
class RankAnalysis:
    """Everything computed for one rank."""

    trace: Trace
    events: pa.Table  # the trace's events with the step column assigned
    windows: tuple[StepWindow, ...]
    accounting: Accounting
    annotated_steps: int  # how many step annotations the trace has
    quality: tuple[QualityCheck, ...] = ()  # what was repaired or is doubtful in this rank
    # its device tasks linked to their launches and host ops (analysis.ops.link_device_tasks)
    device_links: pa.Table | None = None
    # its communication tasks split into waiting for peers and transfer
    comm: CommSplit | None = None
    # its steps replayed unchanged, with their critical paths (analysis.critical_path;
    # made by the rank task, None where not made)
    replay: ReplayReport | None = None
    # which host calls may have launched its device tasks (analysis.steps.launch_keys), for
    # the rank task's replays; None where not kept
    launch_keys: LaunchKeys | None = None

    @property
    def rank(self) -> int:
        return self.trace.rank

    @property
    def host_only(self) -> bool:
        return not any(w.step != SPAN_STEP for w in self.accounting.windows) and bool(
            self.accounting.host
        )


@dataclass(frozen=True)
class ProfileAnalysis:
    """The results of every analysis over all ranks of a profile."""

    ranks: tuple[RankAnalysis, ...]
    events: pa.Table
    counters: pa.Table
    steps: pa.Table
    gaps: pa.Table
    op_summary: pa.Table
    op_statistic: pa.Table
    kernel_details: pa.Table
    api_statistic: pa.Table
    transfers: pa.Table
    communication: pa.Table
    gap_report: GapReport
    # each device task linked to its launch and host op (analysis.ops.link_device_tasks), made
    # for op_summary and kept for the advisor; None where not made (merged from rank tasks)
    device_links: pa.Table | None = None
    timings: dict[str, float] = field(default_factory=dict)
    cluster: ClusterReport | None = None  # several ranks: the cluster pass
    # several ranks analysed as tasks: each rank's advisor findings, made in its task
    rank_advice: tuple[RankAdvice, ...] | None = None
    # ranks whose trace could not be read, left out (one quality check each)
    skipped_ranks: tuple[QualityCheck, ...] = ()
    # every rank's steps replayed unchanged, with their critical paths (docs/whatif.md):
    # the ranks' replays in rank order; None when a rank's was not made
    replay: ReplayReport | None = None

    @property
    def host_only(self) -> bool:
        return all(r.host_only for r in self.ranks)

    @property
    def step_count(self) -> int:
        return max((r.annotated_steps for r in self.ranks), default=0)

    @property
    def source_kind(self) -> str:
        kinds = sorted({r.trace.source_kind for r in self.ranks})
        return "+".join(kinds) if kinds else "unknown"

    @property
    def source_files(self) -> list[str]:
        return [str(p) for r in self.ranks for p in r.trace.source_files]

    @property
    def quality(self) -> tuple[QualityCheck, ...]:
        """The quality checks of every rank, one per check (counts added)."""
        return merge_checks([*(c for r in self.ranks for c in r.quality), *self.skipped_ranks])

    @property
    def loss(self) -> str | None:
        lost = [r.trace.loss for r in self.ranks if r.trace.loss]
        lost += [c.message for c in self.skipped_ranks]
        return "; ".join(lost) if lost else None
