"""From trace files to a profile directory: import, analyse once, write every artefact.

Compute once, write many times: :func:`analyze_traces` returns frozen results; the writers in
:mod:`perfledger.render` only lay those results out.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from perfledger.analysis import ops
from perfledger.analysis.advisor import AdvisorConfig, RankAdvice, diagnose
from perfledger.analysis.cluster.balance import DEFAULT_EXCESS_PCT
from perfledger.analysis.cluster.merge import merge_gap_reports
from perfledger.analysis.profile import analyze_traces, cluster_pass, profile_gaps, steps_table
from perfledger.analysis.transfers import transfers_from_spellings
from perfledger.errors import PerfledgerError
from perfledger.files import write_json
from perfledger.memory import release_freed_memory
from perfledger.model import schema
from perfledger.model.accounts import Accounting
from perfledger.model.profile import ProfileAnalysis, RankAnalysis
from perfledger.model.schema import STEP_TIMES_SCHEMA
from perfledger.model.trace import Trace, loss_line
from perfledger.profiledir import artefacts
from perfledger.profiledir.layout import META_JSON, RAW_DIR, TABLES_DIR
from perfledger.profiledir.writer import check_target, copy_source, staged_directory, write_table
from perfledger.render.csvs import write_csv
from perfledger.run.execution import Execution, open_runner
from perfledger.run.tasks import (
    RankResult,
    RankTask,
    flag_copies,
    plan_tasks,
    read_ipc,
    resolve_ranks,
)
from perfledger.sources import load_traces
from perfledger.sources.base import decoded_bytes
from perfledger.version import __version__


@dataclass(frozen=True)
class ProfileResult:
    """What :func:`build_profile` made."""

    path: Path
    analysis: ProfileAnalysis
    summary: dict[str, Any]


def analysis_from_results(
    results: Sequence[RankResult],
    counters: pa.Table | None = None,
    *,
    slow_rank_excess_pct: float = DEFAULT_EXCESS_PCT,
) -> ProfileAnalysis:
    """The profile's analysis from rank tasks' results, their tables memory-mapped.

    Equal, table for table, to :func:`analyze_traces` on the same traces: per-rank pieces
    are put back in the order the whole-profile analyses sort their rows, per-rank sums are
    added up, and each rank's advisor findings come along for :func:`diagnose` to merge.
    """
    started = time.perf_counter()
    ranks: list[RankAnalysis] = []
    summaries: list[pa.Table] = []
    details: list[pa.Table] = []
    for result in results:
        tables = {name: read_ipc(path) for name, path in result.tables.items()}
        trace = Trace(
            events=tables["events"],
            counters=tables["counters"],
            meta=result.meta,
            source_kind=result.source_kind,
            source_files=result.source_files,
            loss=result.loss,
            communication_matrix=result.communication_matrix,
        )
        accounting = Accounting(result.accounts, tables["gaps"], result.host_accounts)
        ranks.append(
            RankAnalysis(
                trace=trace,
                events=tables["events"],
                windows=result.windows,
                accounting=accounting,
                annotated_steps=result.annotated_steps,
            )
        )
        summaries.append(tables["op_summary"])
        details.append(tables["kernel_details"])
    events = pa.concat_tables([r.events for r in ranks]) if ranks else schema.empty_events()
    all_counters = [r.trace.counters for r in ranks]
    if counters is not None:
        all_counters.append(counters.cast(schema.COUNTERS_SCHEMA))
    # A rank without device tasks summarises its host operators; next to ranks with device
    # tasks it contributes no row, as in the whole-profile summary.
    device_summaries = [t for t in summaries if "self_ns" not in t.column_names]
    summary = pa.concat_tables(device_summaries or summaries)
    collectives = pa.concat_tables([r.collectives for r in results])
    links = pa.concat_tables([r.links for r in results])
    return ProfileAnalysis(
        ranks=tuple(ranks),
        events=events,
        counters=pa.concat_tables(all_counters) if all_counters else schema.empty_counters(),
        steps=steps_table(ranks),
        gaps=profile_gaps(ranks),
        op_summary=summary,
        op_statistic=ops.op_statistic(events, summary),
        kernel_details=pa.concat_tables(details),
        api_statistic=ops.merge_api_statistics([r.api_statistic for r in results]),
        transfers=transfers_from_spellings([r.copy_spellings for r in results]),
        communication=pa.concat_tables([r.communication for r in results]),
        gap_report=merge_gap_reports([r.gap_report for r in results]),
        timings={"merge_s": time.perf_counter() - started},
        cluster=cluster_pass(ranks, collectives, links, slow_rank_excess_pct),
        rank_advice=_advice_of(results),
    )


def _advice_of(results: Sequence[RankResult]) -> tuple[RankAdvice, ...] | None:
    """The advice every task made, in the results' order (None when a task made none)."""
    advice = tuple(r.advice for r in results if r.advice is not None)
    return advice if len(advice) == len(results) else None


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


def import_with_progress(
    inputs: Sequence[Path], console: Console, *, workers: int = 0
) -> list[Trace]:
    """Import the traces, drawing a progress bar on a terminal."""
    with _progress_bar(console) as bar:
        task = bar.add_task(", ".join(p.name for p in inputs)[:60], total=None)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        return load_traces(inputs, progress=report, workers=workers)


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
        "ranks": {str(t.rank): t.meta for t in traces},
        "loss": "; ".join(loss_line(t) for t in traces if t.loss) or None,
    }
    if extra:
        document.update(extra)
    return document


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
    execution: Execution | None = None,
) -> ProfileResult:
    """Import ``inputs``, analyse them and write the profile directory ``out_dir``.

    One rank is imported and analysed in this process. Several ranks (or any input with
    ``execution.dask``) are imported and analysed as independent tasks, one per rank, on a
    local process pool or a Dask cluster; the tasks write their big tables into the staging
    directory and the profile-wide analyses read them memory-mapped.

    Args:
        inputs: trace files or folders (one rank each, or folders of ranks).
        out_dir: the profile directory to create.
        force: replace ``out_dir`` if it exists.
        meta: extra run metadata merged into meta.json (the recorder's command, options ...).
        counters: host counters sampled outside the traces (COUNTERS_SCHEMA).
        step_times: the recorder's timing of every step, profiled or not (STEP_TIMES_SCHEMA).
        console: where to print; a plain stdout console by default.
        advisor_config: rule thresholds and device override for the advisor.
        execution: where rank tasks run (default: a local pool, one worker per core).
    """
    console = console or Console()
    check_target(out_dir, force=force)
    execution = execution or Execution()
    excess = _slow_rank_excess_pct(advisor_config)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    planned = plan_tasks(inputs, Path())
    if len(planned) < 2 and execution.dask is None:
        traces = import_with_progress(inputs, console, workers=execution.chunk_workers())
        timings["import_s"] = time.perf_counter() - started
        if not traces:
            raise PerfledgerError("no trace to analyse")
        with _phase_status(console) as show:
            show(PHASE_ANALYSIS)
            analysis = analyze_traces(traces, counters, slow_rank_excess_pct=excess)
            timings.update(analysis.timings)
            release_freed_memory()  # the passes' temporaries: 140 MB on the 486 MB bench trace
            with staged_directory(out_dir, force=force) as staging:
                summary = _write_profile(
                    staging,
                    analysis,
                    inputs,
                    out_dir.name,
                    meta=meta,
                    step_times=step_times,
                    advisor_config=advisor_config,
                    timings=timings,
                    show=show,
                    events=True,
                )
        artefacts.print_profile(console, analysis, summary, out_dir)
        return ProfileResult(path=out_dir, analysis=analysis, summary=summary)

    small = execution.dask is None and _input_bytes(planned) < SMALL_INPUT_BYTES
    if execution.workers is None and small:
        execution = Execution(workers=0)
    with staged_directory(out_dir, force=force) as staging:
        work = staging / _TASKS_DIR
        outside = counters.cast(schema.COUNTERS_SCHEMA) if counters is not None else None
        tasks = [
            replace(
                t, work_dir=work / t.work_dir.name, advisor_config=advisor_config, counters=outside
            )
            for t in planned
        ]
        results, executor = run_rank_tasks(tasks, execution, console)
        timings["ranks_s"] = time.perf_counter() - started
        for phase in ("import_s", "analysis_s", "advisor_s", "write_s", "copy_s"):
            timings[f"ranks_{phase}"] = sum(r.timings.get(phase, 0.0) for r in results)
        with _phase_status(console) as show:
            show(PHASE_MERGE)
            analysis = analysis_from_results(results, counters, slow_rank_excess_pct=excess)
            timings.update(analysis.timings)
            events_dir = staging / TABLES_DIR / "events"
            events_dir.mkdir(parents=True)
            for result in results:
                result.events_parquet.rename(events_dir / f"rank={result.rank}.parquet")
            extra = {**(meta or {}), "tasks": _tasks_document(results, executor)}
            summary = _write_profile(
                staging,
                analysis,
                inputs,
                out_dir.name,
                meta=extra,
                step_times=step_times,
                advisor_config=advisor_config,
                timings=timings,
                copies={s: c for r in results for s, c in r.raw_copies.items()},
                show=show,
            )
        # the mapped tables stay readable through open maps once their files are gone
        shutil.rmtree(work)
    artefacts.print_profile(console, analysis, summary, out_dir)
    return ProfileResult(path=out_dir, analysis=analysis, summary=summary)


_TASKS_DIR = ".ranks"
# Below this much trace data, starting worker processes (about 1 s each) costs more than the
# pool saves: the rank tasks then run one after the other in this process.
SMALL_INPUT_BYTES = 64 * 1024 * 1024


def _input_bytes(tasks: Sequence[RankTask]) -> int:
    """About how much trace data the tasks read (compressed files at their decoded size)."""
    total = 0
    for task in tasks:
        files = [task.path] if task.path.is_file() else task.path.rglob("*")
        total += sum(decoded_bytes(path) for path in files if path.is_file())
    return total


def _slow_rank_excess_pct(config: AdvisorConfig | None) -> float:
    from perfledger.analysis.advisor import rule_by_id

    rule = rule_by_id("slow_rank")
    if rule is None:
        return DEFAULT_EXCESS_PCT
    return float((config or AdvisorConfig()).params(rule)["excess_pct"])


def _write_profile(
    staging: Path,
    analysis: ProfileAnalysis,
    inputs: Sequence[Path],
    title: str,
    *,
    meta: Mapping[str, Any] | None,
    step_times: pa.Table | None,
    advisor_config: AdvisorConfig | None,
    timings: dict[str, float],
    copies: Mapping[Path, Path] | None = None,
    show: Callable[[str], None] | None = None,
    events: bool = False,
) -> dict[str, Any]:
    """Everything but the rank tasks' events tables: raw copies, tables, artefacts, meta.json.

    ``copies``: source files the rank tasks already copied (source -> copy), moved into raw/.
    ``show``: told the name of each phase as it starts. ``events``: write the events table
    too (``analysis.events``, as one file).

    What does not depend on the advisor's findings (the raw copies, the Parquet tables, the
    CSVs) is written on a thread of its own while the advisor runs: Parquet and CSV encoding,
    compression and copying run mostly outside the GIL.
    """
    show = show or (lambda phase: None)
    traces = [r.trace for r in analysis.ranks]
    overhead = profiler_overhead_pct(meta)
    show(PHASE_ADVISOR)
    stop = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="profile-writer") as writer:
        written = writer.submit(
            _write_independent, staging, analysis, inputs, step_times, copies, events, stop
        )
        try:
            advised = time.perf_counter()
            advice = diagnose(analysis, advisor_config, overhead_pct=overhead)
            timings["advisor_s"] = time.perf_counter() - advised
        except BaseException:
            stop.set()  # the writer ends with the file it is writing; the pool waits for it
            raise
        release_freed_memory()  # the rules' derived tables: 450 MB on the 486 MB bench trace
        show(PHASE_TABLES)
        waited = time.perf_counter()
        timings.update(written.result())
        # tables_s and csv_s ran beside the advisor; this is what was left of them after it
        timings["tables_wait_s"] = time.perf_counter() - waited
    document = _meta_document(traces, inputs, meta)
    summary = artefacts.write_artefacts(
        staging,
        analysis,
        overhead_pct=overhead,
        timings=timings,
        advice=advice,
        title=title,
        meta=document,
        on_phase=show,
        csvs=False,
    )
    document["timings"] = {k: round(v, 3) for k, v in timings.items()}
    write_json(staging / META_JSON, document)
    return summary


def _write_independent(
    staging: Path,
    analysis: ProfileAnalysis,
    inputs: Sequence[Path],
    step_times: pa.Table | None,
    copies: Mapping[Path, Path] | None,
    events: bool,
    stop: threading.Event,
) -> dict[str, float]:
    """The raw copies, the Parquet tables and the CSVs (none of them needs the findings);
    the seconds each took. Ends early, between two files, once ``stop`` is set."""

    def check() -> None:
        if stop.is_set():
            raise PerfledgerError("the profile was abandoned")

    started = time.perf_counter()
    if events:
        write_table(staging, "events", analysis.events)
    raw = staging / RAW_DIR
    raw.mkdir()
    traces = [r.trace for r in analysis.ranks]
    sources = sorted({p for t in traces for p in t.source_files} or set(inputs))
    for index, source in enumerate(sources):
        check()
        name = source.name
        while (raw / name).exists():  # two ranks' files often share a name
            name = f"{index}_{name}"
        copied = (copies or {}).get(source)
        if copied is not None and copied.exists():
            os.replace(copied, raw / name)  # copied by its rank task
        else:
            copy_source(source, raw / name)
    tables = {"counters": analysis.counters, "steps": analysis.steps, "gaps": analysis.gaps}
    if step_times is not None:
        tables["step_times"] = step_times.cast(STEP_TIMES_SCHEMA)
    for name, table in tables.items():
        check()
        write_table(staging, name, table)
    csv_started = time.perf_counter()
    for name, table in artefacts.csv_tables(analysis).items():
        check()
        write_csv(table, staging / name)
    return {"tables_s": csv_started - started, "csv_s": time.perf_counter() - csv_started}


def run_rank_tasks(
    tasks: Sequence[RankTask], execution: Execution, console: Console
) -> tuple[list[RankResult], str]:
    """Run the rank tasks; results sorted by rank, and how they ran.

    Ranks are settled as :func:`perfledger.sources.load_traces` settles them; a trace whose
    rank is decided by its file name or position is analysed again under that rank (only
    traces that do not name their own rank, or name another trace's).
    """
    with open_runner(execution, len(tasks)) as runner, _rank_progress(console) as bar:
        task_id = bar.add_task(runner.description, total=len(tasks))

        def report(done: int, total: int) -> None:
            bar.update(task_id, completed=done, total=total)

        results = runner.run(tasks, report)
        ranks = resolve_ranks(results)
        again = [
            replace(task, rank=rank)
            for task, result, rank in zip(tasks, results, ranks, strict=True)
            if result.rank != rank
        ]
        if again:
            bar.update(task_id, description=f"{runner.description}, renumbered ranks")
            redone = {r.index: r for r in runner.run(again)}
            results = [redone.get(r.index, r) for r in results]
        description = runner.description
    results = sorted(results, key=lambda r: r.rank)
    _settle_world_size(results)
    return flag_copies(results), description


def _settle_world_size(results: Sequence[RankResult]) -> None:
    """Ascend ranks read one by one: the world size the importer gives ranks read together."""
    ascend = [r for r in results if r.source_kind != "kineto" and "world_size" in r.meta]
    if not ascend:
        return
    world = max(len(ascend), *(int(r.meta.get("hccl_ranks", 0) or 0) for r in ascend))
    for result in ascend:
        result.meta["world_size"] = max(world, result.rank + 1)


def _tasks_document(results: Sequence[RankResult], executor: str) -> dict[str, Any]:
    return {
        "executor": executor,
        "ranks": [
            {
                "rank": r.rank,
                "worker": r.worker,
                **{k: round(v, 3) for k, v in r.timings.items()},
                "worker_peak_rss_mb": round(r.peak_rss_bytes / 1e6, 1),
            }
            for r in results
        ],
    }


# What the status line says while each phase after the import runs.
PHASE_ANALYSIS: Final = "analysing: steps, time account, operators"
PHASE_MERGE: Final = "merging the ranks"
PHASE_ADVISOR: Final = "diagnosing: advisor rules"
PHASE_TABLES: Final = "writing: raw copies, tables, CSVs"


@contextmanager
def _phase_status(console: Console) -> Iterator[Callable[[str], None]]:
    """A line naming the phase running now and its time so far (on a terminal only; it is
    gone when the block ends). Yields the function that starts the next phase."""
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
        redirect_stderr=False,  # what goes to stderr meanwhile stays there (``2>file``)
    ) as bar:
        current: list[TaskID] = []

        def show(phase: str) -> None:
            for task in current:
                bar.remove_task(task)
            current[:] = [bar.add_task(phase, total=None)]

        yield show


@contextmanager
def _rank_progress(console: Console) -> Iterator[Progress]:
    with Progress(
        TextColumn("[bold]analysing ranks[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        yield bar


def profiler_overhead_pct(meta: Mapping[str, Any] | None) -> float | None:
    """How much slower profiled steps ran than unprofiled ones, in %, as the recorder measured.

    The recorder knows which steps compare fairly (it leaves out the first step and the
    profiler's warm-up step); None when the profile was not recorded or lacks either kind.
    """
    record = (meta or {}).get("record")
    estimate = record.get("profiler_overhead") if isinstance(record, Mapping) else None
    value = estimate.get("overhead_pct") if isinstance(estimate, Mapping) else None
    return float(value) if isinstance(value, int | float) else None
