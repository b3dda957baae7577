"""From trace files to a profile directory: import, analyse once, write every artefact.

Compute once, write many times: the rank tasks and the merge of their results make frozen
results; the writers in :mod:`perfledger.render` only lay those results out.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from rich.console import Console

from perfledger.analysis import figures
from perfledger.analysis.advisor import AdvisorConfig, diagnose
from perfledger.analysis.beside import beside
from perfledger.analysis.cluster.balance import DEFAULT_EXCESS_PCT
from perfledger.analysis.columns import distinct_strings
from perfledger.analysis.profile import step_trace
from perfledger.errors import PerfledgerError
from perfledger.files import write_json
from perfledger.ledger.record import BATCH_READ_ROWS
from perfledger.memory import (
    drop_mapped_pages,
    release_freed_memory,
    returning_pool,
)
from perfledger.model import schema
from perfledger.model.profile import ProfileAnalysis
from perfledger.model.quality import PROFILER_OVERHEAD, UNPROFILED_STEPS, QualityCheck
from perfledger.model.schema import STEP_TIMES_SCHEMA
from perfledger.model.trace import Trace
from perfledger.profiledir import StoredProfile, artefacts
from perfledger.profiledir.layout import (
    EVENTS_TABLE,
    META_JSON,
    RAW_DIR,
    TABLES_DIR,
    rank_part_name,
)
from perfledger.profiledir.writer import (
    SOURCE_RECORD_SUFFIX,
    check_target,
    copy_source,
    staged_directory,
    write_table,
)
from perfledger.render.csvs import write_csv
from perfledger.run.execution import Execution, open_runner
from perfledger.run.file_jobs import FileJobs
from perfledger.run.merge import analysis_from_results
from perfledger.run.progress import (
    PHASE_ADVISOR,
    PHASE_MERGE,
    PHASE_TABLES,
    ConsoleDisplay,
    Display,
    TaskReport,
)
from perfledger.run.tasks import (
    RankFailure,
    RankResult,
    RankTask,
    TaskProgress,
    flag_copies,
    plan_tasks,
    resolve_ranks,
)
from perfledger.sources.base import decoded_bytes
from perfledger.version import __version__


@dataclass(frozen=True)
class ProfileResult:
    """What :func:`build_profile` made: the analysis, and the profile as written (its
    documents in memory, for the ledger and other readers)."""

    path: Path
    analysis: ProfileAnalysis
    summary: dict[str, Any]
    stored: StoredProfile


def _meta_document(
    traces: Sequence[Trace],
    inputs: Sequence[Path],
    extra: Mapping[str, Any] | None,
    raw_files: Sequence[str] = (),
) -> dict[str, Any]:
    kinds = sorted({t.source_kind for t in traces})
    source: dict[str, Any] = {"kind": kinds[0] if len(kinds) == 1 else kinds, "files": raw_files}
    if not (extra and "recorder" in extra):
        # where the user's traces were read from (a recording's were its own staging files)
        source["inputs"] = [str(p) for t in traces for p in t.source_files] or [
            str(p) for p in inputs
        ]
    document: dict[str, Any] = {
        "format_version": schema.FORMAT_VERSION,
        "tool_version": __version__,
        "created_ns": time.time_ns(),
        "source": source,
        "command_line": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "working_dir": os.getcwd(),
        "ranks": {str(t.rank): t.meta for t in traces},
        "loss": "; ".join(t.loss for t in traces if t.loss) or None,
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
    display: Display | None = None,
    advisor_config: AdvisorConfig | None = None,
    execution: Execution | None = None,
    step_mark: str | None = None,
) -> ProfileResult:
    """Import ``inputs``, analyse them and write the profile directory ``out_dir``.

    One path for one rank or many: each rank is a task (:func:`~perfledger.run.tasks.
    run_rank_task`) that imports, analyses and diagnoses it; one rank, or a few small ones,
    run in this process, more on a local process pool or a Dask cluster (their big tables
    written into the staging directory and read back memory-mapped). The tasks' results make
    the profile's analysis (:func:`~perfledger.run.merge.analysis_from_results`), which the
    profile writer lays out.

    Args:
        inputs: trace files or folders (one rank each, or folders of ranks).
        out_dir: the profile directory to create.
        force: replace ``out_dir`` if it exists.
        meta: extra run metadata merged into meta.json (the recorder's command, options ...).
        counters: host counters sampled outside the traces (COUNTERS_SCHEMA).
        step_times: the recorder's timing of every step, profiled or not (STEP_TIMES_SCHEMA).
        console: where to print; a plain stdout console by default.
        display: where progress goes (default: bars and a status line on ``console``).
        advisor_config: rule thresholds and device override for the advisor.
        execution: where rank tasks run (default: a local pool, one worker per core).
        step_mark: the name of the host events that mark the steps, instead of the traces'
            own step marks (``--step-mark``).
    """
    console = console or Console()
    display = display or ConsoleDisplay(console)
    check_target(out_dir, force=force)
    execution = execution or Execution()
    chunk_workers = execution.chunk_workers()
    planned = plan_tasks(inputs, Path())
    if not planned:
        raise PerfledgerError("no trace to analyse")
    started = time.perf_counter()
    inline = execution.dask is None and (
        len(planned) == 1
        or execution.workers == 0
        or (execution.workers is None and _input_bytes(planned) < SMALL_INPUT_BYTES)
    )
    if inline:
        execution = Execution(workers=0)
    outside = counters.cast(schema.COUNTERS_SCHEMA) if counters is not None else None
    removals: list[threading.Thread] = []  # the replaced profile's removal, while printing
    try:
        with (
            # freed tables go back to the system between the passes, not kept by Arrow's pool
            returning_pool(),
            staged_directory(out_dir, force=force, removals=removals) as staging,
            TaskReport(display, ", ".join(p.name for p in inputs)) as report,
        ):
            work = staging / _TASKS_DIR
            tasks = [
                replace(
                    t,
                    work_dir=work / t.work_dir.name,
                    advisor_config=advisor_config,
                    counters=outside,
                    # one trace read here: its decoding may use the cores the pool would have
                    import_workers=chunk_workers if len(planned) == 1 else 0,
                    spill=not inline,
                    step_mark=step_mark,
                    # the profile's only rank, in another process: its large CSVs are the
                    # profile's own, written there beside its replay and advisor. In this
                    # process the profile's writer writes them, beside the timelines and
                    # the report (a core is idle there), not beside the replay and the advisor
                    # (both cores busy: bench/README.md, "Growth")
                    csvs=len(planned) == 1 and not inline,
                    alone=len(planned) == 1,
                )
                for t in planned
            ]
            one = report if len(tasks) == 1 and inline else None
            results, failures, executor = run_rank_tasks(tasks, execution, display, one)
            release_freed_memory()
            timings = _task_timings(results, time.perf_counter() - started)
            if len(results) > 1:
                report.phase(PHASE_MERGE)
            merged = time.perf_counter()
            excess = _slow_rank_excess_pct(advisor_config)
            analysis = analysis_from_results(
                results, counters, slow_rank_excess_pct=excess, failures=failures
            )
            timings["merge_s"] = time.perf_counter() - merged
            # of which the ranks replayed together (several ranks with matched collectives)
            timings.update({k: v for k, v in analysis.timings.items() if k == "replay_together_s"})
            _place_events(staging, results)
            extra = {**(meta or {}), "tasks": _tasks_document(results, executor)}
            summary, document = _write_profile(
                staging,
                analysis,
                inputs,
                out_dir.name,
                meta=extra,
                step_times=step_times,
                advisor_config=advisor_config,
                timings=timings,
                started=started,
                copies={s: c for r in results for s, c in r.raw_copies.items()},
                csvs=results[0].csv_files if len(results) == 1 else None,
                show=report.phase,
                diagnosed=len(results) == 1,
            )
            # the mapped tables stay readable through open maps once their files are gone; a
            # network filesystem may refuse to remove a file still mapped (NFS keeps it as a
            # hidden .nfs file until the map closes): the task files are left then, not the profile
            shutil.rmtree(work, ignore_errors=True)
        artefacts.print_profile(
            console, analysis, summary, out_dir, tuple(document.get(artefacts.OMITTED_KEY, ()))
        )
    finally:
        for removal in removals:
            removal.join()
    names = tuple(distinct_strings(analysis.kernel_details.column("name")))
    stored = StoredProfile(
        out_dir,
        document,
        summary,
        schema.FORMAT_VERSION,
        kernel_names=names,
        # op_summary.csv's first rows, for the ledger: not read back from the file
        op_summary_head=analysis.op_summary.slice(0, BATCH_READ_ROWS),
    )
    return ProfileResult(path=out_dir, analysis=analysis, summary=summary, stored=stored)


def _task_timings(results: Sequence[RankResult], ranks_s: float) -> dict[str, float]:
    """The phases of the rank tasks in meta.json's timings: one rank's own, else their sums."""
    phases = ("import_s", "analysis_s", "replay_s", "advisor_s", "write_s", "copy_s")
    if len(results) == 1:
        own = results[0].timings
        timings = {phase: own.get(phase, 0.0) for phase in phases}
        if "rank_csv_s" in own:  # the CSVs the profile's only rank wrote (RankTask.csvs)
            timings["rank_csv_s"] = own["rank_csv_s"]
        return timings
    timings = {"ranks_s": ranks_s}
    for phase in phases:
        timings[f"ranks_{phase}"] = sum(r.timings.get(phase, 0.0) for r in results)
    return timings


def _place_events(staging: Path, results: Sequence[RankResult]) -> None:
    """The tasks' events tables into tables/: one file for one rank, a file per rank else."""
    tables = staging / TABLES_DIR
    tables.mkdir(exist_ok=True)
    if len(results) == 1:
        results[0].events_parquet.rename(tables / f"{EVENTS_TABLE}.parquet")
        return
    folder = tables / EVENTS_TABLE
    folder.mkdir()
    for result in results:
        result.events_parquet.rename(folder / rank_part_name(result.rank))


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
    timings: Mapping[str, float],
    started: float | None = None,
    copies: Mapping[Path, Path] | None = None,
    csvs: Mapping[str, Path] | None = None,
    show: Callable[[str], None] | None = None,
    diagnosed: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Everything but the rank tasks' events tables: raw copies, tables, artefacts, meta.json;
    returns the summary and meta documents.

    ``started``: when the profile's build began (``time.perf_counter``): meta.json's
    ``total_s`` counts from there to the writing of meta.json, so that the time outside
    the recorded phases shows.
    ``copies``: source files the rank tasks already copied (source -> copy), moved into raw/.
    ``csvs``: CSVs the profile's only rank task wrote already (name -> file), moved in place.
    ``show``: told the name of each phase as it starts. ``diagnosed``: the rank rules ran in
    the rank's task already (the status line said so); what runs here is the profile's.

    What does not depend on the advisor's findings (the raw copies, the Parquet tables, the
    CSVs) is written on a thread of its own while the advisor runs and the timelines are
    written: Parquet and CSV encoding, compression and copying run mostly outside the GIL.
    """
    show = show or (lambda phase: None)
    traces = [r.trace for r in analysis.ranks]
    accounts = step_trace(analysis)
    overhead = recorded_overhead(
        meta,
        figures.step_time_ms(accounts, analysis.step_count),
        figures.device_busy_ms(accounts),
    )
    del accounts
    raw_files = [f"{RAW_DIR}/{name}" for name in raw_names(_sources(analysis, inputs)).values()]
    if not diagnosed:
        show(PHASE_ADVISOR)
    stop = threading.Event()
    raw_placed = threading.Event()  # set by the writer once raw/ is complete (or it failed)
    files = _file_jobs(staging, analysis, step_times, csvs, stop)
    with ThreadPoolExecutor(1, thread_name_prefix="profile-writer") as writer:
        written = writer.submit(
            _write_independent, staging, analysis, inputs, copies, stop, raw_placed, files
        )
        try:
            advised = time.perf_counter()
            advice = diagnose(
                analysis,
                advisor_config,
                overhead_pct=overhead.pct,
                overhead_noise_pct=overhead.noise_pct,
            )
            advisor_s = time.perf_counter() - advised
            release_freed_memory()  # the rules' derived tables
            # the timelines need the findings, not the CSVs: written while those are, and
            # while summary.json and the report are, which need them chosen only
            timelines = artefacts.write_timeline_files(
                staging, analysis, advice, show, deferred=True
            )
            assert timelines.write is not None
            with beside(timelines.write) as timelines_written:
                show(PHASE_TABLES)
                # the report names raw/'s files: written once they are in place, while the
                # writer goes on with the tables and the CSVs
                raw_placed.wait()
                if written.done():
                    written.result()  # the writer's error, if it failed
                # a large source that could not be linked is recorded in raw/ as
                # <name>.source.json
                raw_files = [
                    name + SOURCE_RECORD_SUFFIX
                    if (staging / (name + SOURCE_RECORD_SUFFIX)).exists()
                    else name
                    for name in raw_files
                ]
                document = _meta_document(traces, inputs, meta, raw_files)
                wrote = artefacts.write_artefacts(
                    staging,
                    analysis,
                    overhead_pct=overhead.pct,
                    overhead_noise_pct=overhead.noise_pct,
                    unprofiled_step_ms=overhead.unprofiled_step_ms,
                    overhead_checks=overhead.checks,
                    source_files=raw_files,
                    advice=advice,
                    title=title,
                    meta=document,
                    on_phase=show,
                    timelines=timelines,
                )
                # the files the writer has not begun yet written here too, now that the
                # report is: the largest first, on both threads
                helped = time.perf_counter()
                files.work()
                waited = time.perf_counter()
                started_tables = written.result()
                # tables_s and csv_s ran beside the advisor, the timelines and the report;
                # tables_help_s is this thread's share of them after the report, and
                # tables_wait_s what was left of the writer's after that
                wait_s = time.perf_counter() - waited
                tables_timings = {
                    "tables_s": files.span_s(_TABLES, since=started_tables),
                    "csv_s": files.span_s(_CSVS),
                    "tables_help_s": waited - helped,
                }
                timeline_s = timelines_written.result()
        except BaseException:
            stop.set()  # the writer ends with the file it is writing; the pool waits for it
            raise
    phases = {
        **timings,
        "profile_advisor_s": advisor_s,
        **tables_timings,
        "tables_wait_s": wait_s,
        **wrote.timings,
        "timeline_s": timeline_s,
    }
    if started is not None:
        phases["total_s"] = time.perf_counter() - started
    document["timings"] = {k: round(v, 3) for k, v in phases.items()}
    if wrote.omitted:
        document[artefacts.OMITTED_KEY] = list(wrote.omitted)
    write_json(staging / META_JSON, document)
    return wrote.summary, document


def _write_independent(
    staging: Path,
    analysis: ProfileAnalysis,
    inputs: Sequence[Path],
    copies: Mapping[Path, Path] | None,
    stop: threading.Event,
    raw_placed: threading.Event,
    files: FileJobs,
) -> float:
    """The raw copies, then ``files`` (the Parquet tables and the CSVs: none of them needs
    the findings), with whichever thread helps; when this began (``time.perf_counter``).
    Ends early, between two files, once ``stop`` is set. ``raw_placed``: set once raw/ is
    complete, or when this fails before."""
    started = time.perf_counter()
    try:
        _place_raw(staging, analysis, inputs, copies, stop)
    finally:
        raw_placed.set()
    files.work()
    return started


def _place_raw(
    staging: Path,
    analysis: ProfileAnalysis,
    inputs: Sequence[Path],
    copies: Mapping[Path, Path] | None,
    stop: threading.Event,
) -> None:
    """raw/: the sources, moved from the rank tasks' copies or copied here."""
    raw = staging / RAW_DIR
    raw.mkdir()
    for source, name in raw_names(_sources(analysis, inputs)).items():
        _check(stop)
        copied = (copies or {}).get(source)
        if copied is not None and copied.exists():
            # kept by its rank task (a copy, a link, or the record of a large source)
            recorded = copied.name.endswith(SOURCE_RECORD_SUFFIX)
            os.replace(copied, raw / (name + SOURCE_RECORD_SUFFIX if recorded else name))
        else:
            copy_source(source, raw / name)


_TABLES: Final = "tables"
_CSVS: Final = "csv"


def _file_jobs(
    staging: Path,
    analysis: ProfileAnalysis,
    step_times: pa.Table | None,
    csvs: Mapping[str, Path] | None,
    stop: threading.Event,
) -> FileJobs:
    """The Parquet tables and the CSVs to write (those in ``csvs``, written by the rank task,
    moved in place), each table's pages of a mapped file let go once it is written."""
    files = FileJobs(stop)
    tables = {"counters": analysis.counters, "steps": analysis.steps, "gaps": analysis.gaps}
    if step_times is not None:
        tables["step_times"] = step_times.cast(STEP_TIMES_SCHEMA)
    for name, table in tables.items():
        files.add(table.nbytes, _TABLES, functools.partial(_table_file, staging, name, table))
    for name, table in artefacts.csv_tables(analysis).items():
        moved = (csvs or {}).get(name)
        if moved is not None and moved.exists():
            files.add(table.nbytes, _CSVS, functools.partial(os.replace, moved, staging / name))
        else:
            files.add(table.nbytes, _CSVS, functools.partial(_csv_file, staging / name, table))
    return files


def _table_file(staging: Path, name: str, table: pa.Table) -> None:
    write_table(staging, name, table)
    drop_mapped_pages(table)  # of a mapped table: read whole for the file


def _csv_file(path: Path, table: pa.Table) -> None:
    write_csv(table, path)
    drop_mapped_pages(table)


def _check(stop: threading.Event) -> None:
    """Raise once the profile is abandoned (``stop`` set): the writer ends between files."""
    if stop.is_set():
        raise PerfledgerError("the profile was abandoned")


def run_rank_tasks(
    tasks: Sequence[RankTask],
    execution: Execution,
    display: Display,
    report: TaskProgress | None = None,
) -> tuple[list[RankResult], list[RankFailure], str]:
    """Run the rank tasks: the results sorted by rank, the ranks that could not be read, and
    how they ran.

    Ranks are settled as :func:`perfledger.sources.load_traces` settles them; a trace whose
    rank is decided by its file name or position is analysed again under that rank (only
    traces that do not name their own rank, or name another trace's). ``report``: the
    progress of a single task run in this process (its import bar and phases).

    Raises:
        PerfledgerError: no rank could be read (the first rank's error, in input order).
    """
    with open_runner(execution, len(tasks), report) as runner:
        with contextlib.ExitStack() as bars:
            done = (
                None
                if report is not None
                else bars.enter_context(display.ranks(runner.description, len(tasks)))
            )
            results, failures = runner.run(tasks, done)
            if not results:
                raise PerfledgerError(failures[0].message, failures[0].exit_code)
            by_index = {task.index: task for task in tasks}
            ranks = resolve_ranks(results)
            again = [
                replace(by_index[result.index], rank=rank)
                for result, rank in zip(results, ranks, strict=True)
                if result.rank != rank
            ]
            if again:
                redone, _ = runner.run(again)
                done_again = {r.index: r for r in redone}
                results = [done_again.get(r.index, r) for r in results]
        description = runner.description
    results = sorted(results, key=lambda r: r.rank)
    _settle_world_size(results)
    return flag_copies(results), failures, description


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


def _sources(analysis: ProfileAnalysis, inputs: Sequence[Path]) -> list[Path]:
    """The files the traces were read from (else the inputs given), in a fixed order."""
    return sorted({p for r in analysis.ranks for p in r.trace.source_files} or set(inputs))


def raw_names(sources: Sequence[Path]) -> dict[Path, str]:
    """The name of each source's copy in the profile's raw/ folder: its own name, with a
    prefix when an earlier source took it (two ranks' files often share a name)."""
    names: dict[Path, str] = {}
    taken: set[str] = set()
    for index, source in enumerate(sources):
        name = source.name
        while name in taken:
            name = f"{index}_{name}"
        taken.add(name)
        names[source] = name
    return names


@dataclass(frozen=True)
class RecordedOverhead:
    """The profiler's cost as summary.json gives it: the profile's step time against the
    median of the unprofiled steps around the profiled ones (``pct``), the noise of that
    difference, and that unprofiled median; each None when unknown."""

    pct: float | None = None
    noise_pct: float | None = None
    unprofiled_step_ms: float | None = None
    checks: tuple[QualityCheck, ...] = ()


# Unprofiled steps timed on the host shorter than this share of a profiled step's device work
# did not wait for the device: they are no measure of the step.
PLAUSIBLE_UNPROFILED_SHARE: Final = 0.9


def recorded_overhead(
    meta: Mapping[str, Any] | None,
    step_time_ms: float | None,
    device_busy_ms: float | None = None,
) -> RecordedOverhead:
    """The recorder's overhead estimate (meta.json record.profiler_overhead) put on the
    profile's own step time, so that step_time_ms, unprofiled_step_ms and
    profiler_overhead_pct of summary.json agree; the recorder's own figure when the profile
    has no step time.

    Unprofiled steps timed on the host (no device times: a CPU run, or a device without
    timing events) that took less than :data:`PLAUSIBLE_UNPROFILED_SHARE` of the device's
    work in a profiled step (``device_busy_ms``) ran ahead of the device: no overhead is
    given, and the ``unprofiled_steps`` quality check says why."""
    record = (meta or {}).get("record")
    estimate = record.get("profiler_overhead") if isinstance(record, Mapping) else None
    if not isinstance(estimate, Mapping):
        return RecordedOverhead()

    def number(key: str) -> float | None:
        value = estimate.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    unprofiled = number("unprofiled_step_ms")
    pct = number("overhead_pct")
    if (
        estimate.get("timed") != "device"
        and unprofiled is not None
        and device_busy_ms is not None
        and unprofiled < PLAUSIBLE_UNPROFILED_SHARE * device_busy_ms
    ):
        check = QualityCheck(
            UNPROFILED_STEPS,
            int(number("unprofiled_steps") or 0),
            f"the unprofiled steps, timed on the host, took {unprofiled:.3f} ms (median), less "
            f"than the device's work in a profiled step ({device_busy_ms:.3f} ms): the host "
            "queued them ahead of the device, and their time is not the step's; the "
            "profiler's overhead is not given",
            (PROFILER_OVERHEAD,),
            repaired=False,
        )
        return RecordedOverhead(checks=(check,))
    if step_time_ms is not None and unprofiled is not None and unprofiled > 0:
        pct = 100.0 * (step_time_ms / unprofiled - 1.0)
    return RecordedOverhead(pct, number("noise_pct"), unprofiled)


def profiler_overhead_pct(meta: Mapping[str, Any] | None) -> float | None:
    """How much slower profiled steps ran than unprofiled ones, in %, as the recorder measured.

    The recorder knows which steps compare fairly (it leaves out the first step and the
    profiler's warm-up step); None when the profile was not recorded or lacks either kind.
    """
    record = (meta or {}).get("record")
    estimate = record.get("profiler_overhead") if isinstance(record, Mapping) else None
    value = estimate.get("overhead_pct") if isinstance(estimate, Mapping) else None
    return float(value) if isinstance(value, int | float) else None
