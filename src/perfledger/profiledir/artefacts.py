"""Write every artefact of a profile directory from one :class:`ProfileAnalysis`.

Only layout happens here: each file shows fields of the analysis results, so the terminal, the
CSVs, summary.json, the timeline and the report agree to the nanosecond.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from rich.console import Console

from perfledger.analysis import figures
from perfledger.analysis.critical_path import replay_profile
from perfledger.analysis.profile import comm_waits, rank_clocks, step_trace
from perfledger.analysis.quality import (
    replay_error,
    replay_invariants,
    unmatched_collectives,
    whatif_bounds,
)
from perfledger.memory import dropping_mapped_pages, tables_within
from perfledger.model.whatif import WhatIf, fixes_table, path_spans_table
from perfledger.profiledir.layout import (
    CRITICAL_PATH_TABLE,
    REPORT_HTML,
    SUMMARY_JSON,
    TIMELINE,
    WHATIF_FIXES_TABLE,
)
from perfledger.profiledir.writer import write_table
from perfledger.render import timeline
from perfledger.render.cluster import write_cluster_outputs
from perfledger.render.report.data import report_data_from_profile
from perfledger.render.report.page import write_report
from perfledger.render.report.steps import report_finding, step_choices_of, timeline_steps
from perfledger.render.timeline.slices import RankPathSpan

if TYPE_CHECKING:
    from perfledger.model.accounts import StepWindow
    from perfledger.model.findings import AdvisorReport
    from perfledger.model.profile import ProfileAnalysis
    from perfledger.model.quality import QualityCheck

# The whole-profile timeline stops after this many events (about 150 MB of JSON, what
# Perfetto opens comfortably); the per-step slices under timeline/ always hold their step.
FULL_TIMELINE_MAX_EVENTS = 1_000_000
# A profile of more events than this (the cap above) gets no timeline.json.gz from analyze:
# it is written on demand (see whole_timeline_note).
WHOLE_TIMELINE_ON_DEMAND_ABOVE: Final = 1_000_000
# A profile of more events than this gets the step slices of at most STEP_SLICES_KEPT steps
# from analyze (the steps the report shows first, see kept_steps); any other step's slice is
# written on demand (see step_slices_note).
STEP_SLICES_ON_DEMAND_ABOVE: Final = 1_000_000
STEP_SLICES_KEPT: Final = 12
# meta.json's list of the artefacts a documented rule left out, each with how to get it.
OMITTED_KEY: Final = "omitted"
# A step slice stops after this many events, so that one step always opens fast.
STEP_MAX_EVENTS = timeline.STEP_MAX_EVENTS


def csv_tables(analysis: ProfileAnalysis) -> dict[str, pa.Table]:
    """The CSV artefacts' tables by file name."""
    return {
        "op_summary.csv": analysis.op_summary,
        "op_statistic.csv": analysis.op_statistic,
        "kernel_details.csv": analysis.kernel_details,
        "api_statistic.csv": analysis.api_statistic,
        "step_trace.csv": step_trace(analysis),
        "gaps.csv": analysis.gap_report.worst,
        "transfers.csv": analysis.transfers,
        "communication.csv": analysis.communication,
    }


def event_count(analysis: ProfileAnalysis) -> int:
    """The events of every rank of the profile."""
    return sum(r.events.num_rows for r in analysis.ranks) or analysis.events.num_rows


def whole_timeline_note(events: int) -> str | None:
    """Why analyze writes no timeline.json.gz for a profile of ``events`` events (None: it
    does).

    Above the whole timeline's cap the file would hold only the trace's beginning, which the
    step slices show as well, while formatting it costs as much as a fifth of the analysis
    of a gigabyte trace: the whole timeline is then written on demand.
    """
    if events <= WHOLE_TIMELINE_ON_DEMAND_ABOVE:
        return None
    return (
        f"timeline.json.gz not written: {events:,} events, more than the "
        f"{WHOLE_TIMELINE_ON_DEMAND_ABOVE:,} it holds; the step slices are in timeline/, and "
        "`perfledger timeline PROFILE` writes the whole timeline (`--window A:B`, a part)"
    )


def kept_steps(
    windows: Sequence[StepWindow], findings: Sequence[dict[str, Any]], limit: int
) -> list[int]:
    """The steps whose slices analyze writes when a profile is above
    :data:`STEP_SLICES_ON_DEMAND_ABOVE` events: at most ``limit``, chosen as the report
    chooses the step timelines it shows (the median, slowest and fastest steps, the steps the
    findings' spans lie in, then the first steps), in step order."""
    if not windows:
        return []
    steps = step_choices_of(figures.step_hulls(windows, pa.table({})))  # events: unread
    chosen = timeline_steps(steps, [report_finding(f, steps) for f in findings], limit)
    return sorted(int(steps[k]["step"]) for k in chosen)


def step_slices_note(events: int, written: int, steps: int) -> str | None:
    """Why analyze wrote the slices of only ``written`` of a profile's ``steps`` steps
    (None: it wrote every one)."""
    if written >= steps:
        return None
    return (
        f"timeline/: {written} of {steps} step slices written ({events:,} events, more than "
        f"{STEP_SLICES_ON_DEMAND_ABOVE:,}): the median, slowest and fastest steps, those the "
        "findings point at, then the first; `perfledger timeline PROFILE --step N` writes "
        "any other step's"
    )


def sliced_windows(
    analysis: ProfileAnalysis, findings: Sequence[dict[str, Any]]
) -> tuple[list[StepWindow], str | None]:
    """The step windows analyze writes a slice of (every step's, but above
    :data:`STEP_SLICES_ON_DEMAND_ABOVE` events those of :func:`kept_steps`), and why some
    steps have none (:func:`step_slices_note`; None: every step has its slice)."""
    windows = [w for r in analysis.ranks if r.annotated_steps for w in r.windows]
    steps = len({w.step for w in windows})
    events = event_count(analysis)
    if events <= STEP_SLICES_ON_DEMAND_ABOVE or steps <= STEP_SLICES_KEPT:
        return windows, None
    kept = set(kept_steps(windows, findings, STEP_SLICES_KEPT))
    return [w for w in windows if w.step in kept], step_slices_note(events, len(kept), steps)


def write_timelines(
    directory: Path,
    analysis: ProfileAnalysis,
    findings: list[dict[str, Any]] | None = None,
    windows: list[StepWindow] | None = None,
) -> list[Path]:
    """timeline.json.gz and one slice per step under timeline/, with the findings' spans.

    Written one rank at a time (each rank's events, gaps and counters, then the next), so
    memory is that of one rank whatever the number of ranks; each rank keeps its earliest
    ``ceil(cap / ranks)`` events of a file's cap. No timeline.json.gz above
    :data:`WHOLE_TIMELINE_ON_DEMAND_ABOVE` events (:func:`whole_timeline_note`), and the
    slices of at most :data:`STEP_SLICES_KEPT` steps above
    :data:`STEP_SLICES_ON_DEMAND_ABOVE` events (:func:`sliced_windows`; ``windows``: those
    it gave, when the caller has them).
    """
    ranks = sorted(analysis.ranks, key=lambda r: r.rank)
    paths = _path_spans(analysis)
    parts = [
        timeline.TimelinePart(r.rank, r.events, r.accounting.gaps, paths.get(r.rank, ()))
        for r in ranks
    ] or [timeline.TimelinePart(0, analysis.events, analysis.gaps)]
    whole = None if whole_timeline_note(event_count(analysis)) else directory / TIMELINE
    if windows is None:
        windows, _ = sliced_windows(analysis, findings or [])
    _, slices = timeline.write_profile_timelines(
        whole,
        directory / "timeline",
        parts,
        windows,
        counters=analysis.counters,
        findings=findings,
        max_events=FULL_TIMELINE_MAX_EVENTS,
        step_max_events=STEP_MAX_EVENTS,
    )
    return [whole, *slices] if whole is not None else slices


def _path_spans(analysis: ProfileAnalysis) -> dict[int, tuple[RankPathSpan, ...]]:
    """Per rank, the pieces of its steps' critical paths (the timeline's critical-path track)."""
    spans: dict[int, list[RankPathSpan]] = {}
    for step in analysis.replay.steps if analysis.replay is not None else ():
        spans.setdefault(step.rank, []).extend((step.rank, step.step, p) for p in step.path_spans)
    return {rank: tuple(pieces) for rank, pieces in spans.items()}


# The phases of :func:`write_artefacts`, as a status line names them.
PHASE_TIMELINES: Final = "writing: timelines"
PHASE_REPORT: Final = "writing: summary and report"


@dataclass(frozen=True)
class Written:
    """What :func:`write_artefacts` wrote: the summary document, and the seconds each phase
    took (``timeline_s``, ``report_s``)."""

    summary: dict[str, Any]
    timings: dict[str, float]
    # artefacts left out by a documented rule, each with why and how to get it
    omitted: tuple[str, ...] = ()


def advisor_fixes(
    analysis: ProfileAnalysis, advice: AdvisorReport | None
) -> list[tuple[int, str, WhatIf]]:
    """(rank, rule id, graph change) of every fix the advisor replayed: each rank's own from
    its rank task (rows of the rank's events), else the profile's on a profile of one rank."""
    if analysis.rank_advice is not None:
        return [(a.rank, rule, c) for a in analysis.rank_advice for rule, c in a.fixes.items()]
    if advice is None or len(analysis.ranks) != 1:
        return []
    return [(analysis.ranks[0].rank, rule, c) for rule, c in advice.fixes.items()]


@dataclass(frozen=True)
class TimelinesWritten:
    """What :func:`write_timeline_files` gives :func:`write_artefacts`: the analysis with its
    replay, the findings as documents, and the seconds the timelines took."""

    analysis: ProfileAnalysis
    findings: list[dict[str, Any]]
    timeline_s: float
    # the step slices a documented rule left out (step_slices_note), or None
    omitted: str | None = None
    # deferred: writes the timelines chosen, their seconds from the choice (None: written)
    write: Callable[[], float] | None = None


def write_timeline_files(
    directory: Path,
    analysis: ProfileAnalysis,
    advice: AdvisorReport | None,
    on_phase: Callable[[str], None] | None = None,
    *,
    deferred: bool = False,
) -> TimelinesWritten:
    """The critical-path and what-if tables, the timelines (the steps replayed first where
    the rank tasks did not): all that needs the findings but not the CSVs, so that the CSVs
    may still be written beside it. ``deferred``: the timelines chosen, not written: the
    result's ``write`` writes them (summary.json and the report need them chosen only)."""
    replay = analysis.replay
    if replay is None:  # made by the rank tasks; else replayed here
        waits = comm_waits(analysis.ranks)
        replay = replay_profile(
            analysis.events,
            comm_wait=waits if waits.size == analysis.events.num_rows else None,
            clocks=rank_clocks(analysis.ranks),
        )
        analysis = replace(analysis, replay=replay)
    write_table(directory, CRITICAL_PATH_TABLE, path_spans_table(replay.steps))
    write_table(directory, WHATIF_FIXES_TABLE, fixes_table(advisor_fixes(analysis, advice)))
    findings = [f.to_dict() for f in advice.findings] if advice else []
    (on_phase or (lambda phase: None))(PHASE_TIMELINES)
    started = time.perf_counter()
    windows, omitted = sliced_windows(analysis, findings)

    def write() -> float:
        write_timelines(directory, analysis, findings, windows)
        return time.perf_counter() - started

    if deferred:
        return TimelinesWritten(analysis, findings, 0.0, omitted, write)
    return TimelinesWritten(analysis, findings, write(), omitted)


def write_artefacts(
    directory: Path,
    analysis: ProfileAnalysis,
    *,
    overhead_pct: float | None,
    overhead_noise_pct: float | None = None,
    unprofiled_step_ms: float | None = None,
    overhead_checks: Sequence[QualityCheck] = (),
    source_files: Sequence[str] | None = None,
    advice: AdvisorReport | None = None,
    title: str = "profile",
    meta: dict[str, Any] | None = None,
    on_phase: Callable[[str], None] | None = None,
    timelines: TimelinesWritten,
) -> Written:
    """Write summary.json and the report into ``directory``, once ``timelines`` (what
    :func:`write_timeline_files` wrote with ``advice``) are (the CSVs are :func:`csv_tables`,
    written beside the advisor and the timelines).

    Profiles of several ranks also get cluster_summary.json and cluster_step_trace.csv.
    ``on_phase`` is told the name of the report's phase as it starts.
    ``source_files``: the names summary.json gives the sources (their copies in raw/).
    """
    from perfledger.render import summary as summary_render

    on_phase = on_phase or (lambda phase: None)
    analysis = timelines.analysis
    replay = analysis.replay
    assert replay is not None
    on_phase(PHASE_REPORT)
    account_table = step_trace(analysis)
    document = summary_render.summary_document(
        source_kind=analysis.source_kind,
        source_files=analysis.source_files if source_files is None else source_files,
        ranks=[r.rank for r in analysis.ranks],
        step_count=analysis.step_count,
        step_time_ms=figures.step_time_ms(account_table, analysis.step_count),
        device_utilization_pct=figures.utilization_pct(account_table),
        device_compute_pct=figures.compute_pct(account_table),
        windows=[a for r in analysis.ranks for a in r.accounting.windows],
        host_windows=[a for r in analysis.ranks for a in r.accounting.host],
        op_statistic=analysis.op_statistic,
        transfers=analysis.transfers,
        gaps=analysis.gap_report,
        findings=timelines.findings,
        skipped_rules=[(s.rule, s.reason) for s in advice.skipped] if advice else (),
        loss=analysis.loss,
        quality=(
            *analysis.quality,
            *replay_error(replay),
            *replay_invariants(replay),
            *unmatched_collectives(replay),
            *whatif_bounds(advice),
            *overhead_checks,
        ),
        profiler_overhead_pct=overhead_pct,
        profiler_overhead_noise_pct=overhead_noise_pct,
        unprofiled_step_ms=unprofiled_step_ms,
        replay=replay,
        whatif_combined=advice.combined.to_dict() if advice and advice.combined else None,
    )
    summary_render.write_summary(document, directory / SUMMARY_JSON)
    if analysis.cluster is not None:
        write_cluster_outputs(directory, analysis.cluster, document["findings"])
    reported = time.perf_counter()
    report = report_data_from_profile(analysis, document, title=title, meta=meta)
    # the report reads the events and many tables mapped from files: their pages let go as
    # read
    with dropping_mapped_pages(*tables_within(analysis), *tables_within(report)):
        write_report(directory / REPORT_HTML, report)
    del report
    timings = {"timeline_s": timelines.timeline_s, "report_s": time.perf_counter() - reported}
    notes = (whole_timeline_note(event_count(analysis)), timelines.omitted)
    return Written(
        summary=document, timings=timings, omitted=tuple(n for n in notes if n is not None)
    )


def print_profile(
    console: Console,
    analysis: ProfileAnalysis,
    document: dict[str, Any],
    directory: Path,
    omitted: tuple[str, ...] = (),
) -> None:
    """The terminal summary of a written profile; ``omitted``: the artefacts a rule left out
    (:attr:`Written.omitted`), one line each."""
    from perfledger.render import terminal

    terminal.print_summary(
        console,
        document,
        windows=[a for r in analysis.ranks for a in r.accounting.windows],
        host_windows=[a for r in analysis.ranks for a in r.accounting.host],
        op_statistic=analysis.op_statistic,
        transfers=analysis.transfers,
        gaps=analysis.gap_report,
        paths=[
            directory,
            directory / "report.html",
            directory / "summary.json",
            *([directory / "cluster_summary.json"] if analysis.cluster is not None else []),
        ],
    )
    for note in omitted:
        console.print(note, markup=False, highlight=False)
