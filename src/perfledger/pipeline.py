"""From trace files to a profile directory: import, analyse once, write every artefact.

Compute once, write many times: :func:`analyze_traces` returns frozen results; the writers in
:mod:`perfledger.render` only lay those results out.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from perfledger import __version__, artefacts, schema
from perfledger.analysis import ops
from perfledger.analysis.accounting import SPAN_STEP, device_accounting
from perfledger.analysis.advisor import AdvisorConfig, diagnose
from perfledger.analysis.communication import communication
from perfledger.analysis.gaps import GapReport, gap_report
from perfledger.analysis.steps import assign_steps, launch_starts, step_annotations, step_windows
from perfledger.analysis.transfers import transfers
from perfledger.analysis.types import GAPS_SCHEMA, Accounting, StepWindow
from perfledger.errors import PerfledgerError
from perfledger.profiledir import (
    RAW_DIR,
    check_target,
    copy_source,
    staged_directory,
    write_json,
    write_table,
)
from perfledger.sources import load_traces
from perfledger.sources.base import Trace

STEP_TIMES_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("step", pa.int32()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("profiled", pa.bool_()),
    ]
)


def _loss_line(trace: Trace) -> str:
    """What was lost from a trace, naming its file."""
    where = trace.source_files[0].name if trace.source_files else "trace"
    return f"{where}: {trace.loss}"


@dataclass(frozen=True)
class RankAnalysis:
    """Everything computed for one rank."""

    trace: Trace
    events: pa.Table  # the trace's events with the step column assigned
    windows: tuple[StepWindow, ...]
    accounting: Accounting
    annotated_steps: int  # how many step annotations the trace has

    @property
    def rank(self) -> int:
        return self.windows[0].rank if self.windows else 0

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
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def host_only(self) -> bool:
        return all(r.host_only for r in self.ranks)

    @property
    def step_count(self) -> int:
        return max((r.annotated_steps for r in self.ranks), default=0)

    @property
    def step_time_ms(self) -> float | None:
        """Median wall time of the annotated step windows, over all ranks."""
        walls = [w.wall_ns / 1e6 for r in self.ranks if r.annotated_steps for w in r.windows]
        return statistics.median(walls) if walls else None

    @property
    def source_kind(self) -> str:
        kinds = sorted({r.trace.source_kind for r in self.ranks})
        return "+".join(kinds) if kinds else "unknown"

    @property
    def source_files(self) -> list[str]:
        return [str(p) for r in self.ranks for p in r.trace.source_files]

    @property
    def loss(self) -> str | None:
        lost = [_loss_line(r.trace) for r in self.ranks if r.trace.loss]
        return "; ".join(lost) if lost else None


@dataclass(frozen=True)
class ProfileResult:
    """What :func:`build_profile` made."""

    path: Path
    analysis: ProfileAnalysis
    summary: dict[str, Any]


def analyze_rank(trace: Trace) -> RankAnalysis:
    """Step windows, step assignment and accounting of one rank."""
    launches = launch_starts(trace.events)
    windows = step_windows(trace.events, launches)
    events = assign_steps(trace.events, windows, launches)
    accounting = device_accounting(events, windows, launches)
    return RankAnalysis(
        trace=trace,
        events=events,
        windows=windows,
        accounting=accounting,
        annotated_steps=len(step_annotations(trace.events)),
    )


def _steps_table(ranks: Sequence[RankAnalysis]) -> pa.Table:
    rows = [
        {
            "rank": w.rank,
            "step": w.step,
            "host_start_ns": w.host_start_ns,
            "host_end_ns": w.host_end_ns,
            "start_ns": w.start_ns,
            "end_ns": w.end_ns,
            "wall_ns": w.wall_ns,
        }
        for r in ranks
        for w in r.windows
    ]
    times = ("host_start_ns", "host_end_ns", "start_ns", "end_ns", "wall_ns")
    schema_ = pa.schema(
        [("rank", pa.int32()), ("step", pa.int32())] + [(n, pa.int64()) for n in times]
    )
    return pa.Table.from_pylist(rows, schema=schema_)


def _profile_gaps(ranks: Sequence[RankAnalysis]) -> pa.Table:
    """The gaps of all ranks, ``next_task`` re-pointed at rows of the concatenated events."""
    if not ranks:
        return GAPS_SCHEMA.empty_table()
    parts = []
    offset = 0
    for rank in ranks:
        gaps = rank.accounting.gaps
        index = gaps.schema.get_field_index("next_task")
        task = gaps.column("next_task").to_numpy()
        shifted = pa.array(np.where(task >= 0, task + offset, -1), pa.int64())
        parts.append(gaps.set_column(index, gaps.schema.field("next_task"), shifted))
        offset += rank.events.num_rows
    return pa.concat_tables(parts)


def analyze_traces(traces: Sequence[Trace], counters: pa.Table | None = None) -> ProfileAnalysis:
    """Analyse every rank and gather the tables of the profile."""
    started = time.perf_counter()
    ranks = tuple(analyze_rank(t) for t in traces)
    events = pa.concat_tables([r.events for r in ranks]) if ranks else schema.empty_events()
    all_counters = [t.counters for t in traces]
    if counters is not None:
        all_counters.append(counters.cast(schema.COUNTERS_SCHEMA))
    gaps = _profile_gaps(ranks)
    accounted = time.perf_counter()
    summary = ops.op_summary(events)
    analysis = ProfileAnalysis(
        ranks=ranks,
        events=events,
        counters=pa.concat_tables(all_counters) if all_counters else schema.empty_counters(),
        steps=_steps_table(ranks),
        gaps=gaps,
        op_summary=summary,
        op_statistic=ops.op_statistic(events, summary),
        kernel_details=ops.kernel_details(events),
        api_statistic=ops.api_statistic(events),
        transfers=transfers(events),
        communication=communication(events),
        gap_report=gap_report(gaps, events),
        timings={
            "accounting_s": accounted - started,
            "operators_s": time.perf_counter() - accounted,
        },
    )
    return analysis


def _progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]importing[/] {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def import_with_progress(inputs: Sequence[Path], console: Console) -> list[Trace]:
    """Import the traces, drawing a progress bar on a terminal."""
    with _progress_bar(console) as bar:
        task = bar.add_task(", ".join(p.name for p in inputs)[:60], total=None)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        return load_traces(inputs, progress=report)


def _meta_document(
    traces: Sequence[Trace], inputs: Sequence[Path], extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    kinds = sorted({t.source_kind for t in traces})
    document: dict[str, Any] = {
        "format_version": schema.FORMAT_VERSION,
        "tool_version": __version__,
        "created_ns": time.time_ns(),
        "source": {
            "kind": kinds[0] if len(kinds) == 1 else kinds,
            "files": [str(p) for t in traces for p in t.source_files] or [str(p) for p in inputs],
        },
        "command_line": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "working_dir": os.getcwd(),
        "ranks": {str(_rank_of(t)): t.meta for t in traces},
        "loss": "; ".join(_loss_line(t) for t in traces if t.loss) or None,
    }
    if extra:
        document.update(extra)
    return document


def _rank_of(trace: Trace) -> int:
    if trace.events.num_rows:
        return int(trace.events.column("rank")[0].as_py())
    rank = trace.meta.get("rank", 0)
    return int(rank) if isinstance(rank, int) else 0


def build_profile(
    inputs: Sequence[Path],
    out_dir: Path,
    *,
    force: bool = False,
    meta: Mapping[str, Any] | None = None,
    counters: pa.Table | None = None,
    step_times: pa.Table | None = None,
    console: Console | None = None,
    advisor_config: AdvisorConfig | None = None,
) -> ProfileResult:
    """Import ``inputs``, analyse them and write the profile directory ``out_dir``.

    Args:
        inputs: trace files or folders (one rank each, or folders of ranks).
        out_dir: the profile directory to create.
        force: replace ``out_dir`` if it exists.
        meta: extra run metadata merged into meta.json (the recorder's command, options ...).
        counters: host counters sampled outside the traces (COUNTERS_SCHEMA).
        step_times: the recorder's timing of every step, profiled or not (STEP_TIMES_SCHEMA).
        console: where to print; a plain stdout console by default.
        advisor_config: rule thresholds and device override for the advisor.
    """
    console = console or Console()
    check_target(out_dir, force=force)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    traces = import_with_progress(inputs, console)
    timings["import_s"] = time.perf_counter() - started
    if not traces:
        raise PerfledgerError("no trace to analyse")
    analysis = analyze_traces(traces, counters)
    timings.update(analysis.timings)
    overhead = profiler_overhead_pct(meta)
    advised = time.perf_counter()
    advice = diagnose(analysis, advisor_config, overhead_pct=overhead)
    timings["advisor_s"] = time.perf_counter() - advised
    with staged_directory(out_dir, force=force) as staging:
        raw = staging / RAW_DIR
        raw.mkdir()
        sources = sorted({p for t in traces for p in t.source_files} or set(inputs))
        for index, source in enumerate(sources):
            name = source.name
            while (raw / name).exists():  # two ranks' files often share a name
                name = f"{index}_{name}"
            copy_source(source, raw / name)
        write_table(staging, "events", analysis.events)
        write_table(staging, "counters", analysis.counters)
        write_table(staging, "steps", analysis.steps)
        write_table(staging, "gaps", analysis.gaps)
        if step_times is not None:
            write_table(staging, "step_times", step_times.cast(STEP_TIMES_SCHEMA))
        document = _meta_document(traces, inputs, meta)
        summary = artefacts.write_artefacts(
            staging,
            analysis,
            overhead_pct=overhead,
            timings=timings,
            advice=advice,
            title=out_dir.name,
            meta=document,
        )
        document["timings"] = {k: round(v, 3) for k, v in timings.items()}
        write_json(staging / "meta.json", document)
    artefacts.print_profile(console, analysis, summary, out_dir)
    return ProfileResult(path=out_dir, analysis=analysis, summary=summary)


def profiler_overhead_pct(meta: Mapping[str, Any] | None) -> float | None:
    """How much slower profiled steps ran than unprofiled ones, in %, as the recorder measured.

    The recorder knows which steps compare fairly (it leaves out the first step and the
    profiler's warm-up step); None when the profile was not recorded or lacks either kind.
    """
    record = (meta or {}).get("record")
    estimate = record.get("profiler_overhead") if isinstance(record, Mapping) else None
    value = estimate.get("overhead_pct") if isinstance(estimate, Mapping) else None
    return float(value) if isinstance(value, int | float) else None
