"""One rank as one independent task: import it, analyse it, diagnose it, write its files.

:func:`run_rank_task` is the one path from a rank's trace to its results, whether it runs in
this process (one rank, or a few small ones) or on a local process pool or Dask workers — the
very same function of a picklable :class:`RankTask`. It writes the rank's events as Parquet
(for ``perfledger query``) and copies its source files for the profile's raw/, both on a
thread while the advisor runs. Run in another process (``spill``), it also writes its big
tables as Arrow IPC files the parent memory-maps (zero-copy: the parent's private memory does
not grow with the ranks) and returns a small :class:`RankResult`: step windows, accounts,
collectives, the worst gaps, per-rank communication figures, paths and timings; run here,
the result holds the tables themselves. Either way the events' plain columns (the args text,
half the table, times and ids; not the dictionary ones) are written to a file right after the
import and read from then on through a memory map, whose pages are let go between the passes
and the phases (:func:`perfledger.memory.drop_mapped_pages`): the columns a pass does not read
leave the process's memory for the analysis, the replay and the advisor. The columns the
passes make (the steps) are mapped from a file of their own after them.

A bad trace is not an exception crossing process boundaries: the task returns its one-line
message and exit code, and the parent raises it.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Protocol

import pyarrow as pa

from perfledger.analysis.advisor import AdvisorConfig, RankAdvice, diagnose_rank
from perfledger.analysis.cluster.collectives import collective_tasks, link_usage
from perfledger.analysis.critical_path import prepare_rank, rank_report
from perfledger.analysis.profile import analyze_rank, profile_of_rank, rank_counters
from perfledger.analysis.steps import mark_steps
from perfledger.analysis.transfers import copy_spellings
from perfledger.errors import PerfledgerError
from perfledger.files import replacing
from perfledger.memory import (
    ARROW_SUFFIX,
    drop_mapped_pages,
    dropping_mapped_pages,
    release_freed_memory,
    returning_pool,
)
from perfledger.model.accounts import HostWindowAccount, StepWindow, WindowAccount
from perfledger.model.cluster import COLLECTIVES_SCHEMA, LINKS_SCHEMA
from perfledger.model.comm import CommSplit
from perfledger.model.gaps import GapReport
from perfledger.model.profile import ProfileAnalysis, RankAnalysis
from perfledger.model.quality import QualityCheck
from perfledger.model.trace import Trace
from perfledger.model.whatif import ReplayReport
from perfledger.profiledir.writer import copy_source, write_events_parquet
from perfledger.render.csvs import write_csv
from perfledger.run.mapped_files import (
    PlacedColumns,
    mapped_copy,
    read_ipc,
    same_buffers,
    with_columns,
    write_ipc,
)
from perfledger.run.progress import PHASE_ADVISOR, PHASE_ANALYSIS
from perfledger.sources import discover
from perfledger.sources.kineto import NUMBERS, TEXT

KINETO: Final = "kineto"
ASCEND: Final = "ascend"
# The tables a task writes as Arrow IPC for the parent to memory-map.
IPC_TABLES: Final = ("events", "counters", "gaps", "op_summary", "kernel_details")
EVENTS_PARQUET: Final = "events.parquet"
EVENTS: Final = "events"
RAW_COPIES: Final = "raw"
# The CSVs a profile's only rank writes in its task (file name -> table): the two large
# ones, written beside the replay and the advisor rather than after them
RANK_CSVS: Final = {"op_summary.csv": "op_summary", "kernel_details.csv": "kernel_details"}
CSV_DIR: Final = "csv"
_RANK_IN_NAME: Final = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class RankTask:
    """What one task reads and where it writes.

    Attributes:
        index: the task's place in discovery order (names its folder).
        fmt: ``"kineto"`` or ``"ascend"``.
        path: the rank's trace file, or its Ascend output folder.
        work_dir: the folder the task writes its tables into (created by the task).
        rank: the rank to record instead of the one the trace names (None: the trace's own).
        advisor_config: the advisor's configuration: the task diagnoses its rank.
        counters: host counters sampled outside the traces (the recorder's): the task keeps
            the rows of its rank.
        import_workers: processes that decode one large Kineto trace (0: this process).
        spill: write the big tables as Arrow IPC files for a parent in another process
            (False: the result holds them).
        csvs: write the rank's :data:`RANK_CSVS` (the profile's own when this rank is its
            only one) beside the replay and the advisor, for the parent to move in place.
        step_mark: the name of the host events that mark the steps (``--step-mark``; None:
            the trace's own step marks).
        alone: the profile's only rank: its collectives and link usage, which only the
            cluster pass reads (two ranks or more), are not gathered (empty tables).
    """

    index: int
    fmt: str
    path: Path
    work_dir: Path
    rank: int | None = None
    advisor_config: AdvisorConfig | None = None
    counters: pa.Table | None = None
    import_workers: int = 0
    spill: bool = True
    step_mark: str | None = None
    csvs: bool = False
    alone: bool = False


class TaskProgress(Protocol):
    """Where a task run in this process reports its progress (see run.progress.TaskReport)."""

    def imported(self, done: int, total: int) -> None: ...

    def phase(self, name: str) -> None: ...


@dataclass(frozen=True)
class RankResult:
    """What a task sends back: small figures and the paths of its tables."""

    index: int
    rank: int  # the rank recorded in the tables
    claimed_rank: int | None  # the rank the trace names itself (None: it does not say)
    source_kind: str
    source_files: tuple[Path, ...]
    meta: dict[str, Any]
    loss: str | None
    windows: tuple[StepWindow, ...]
    accounts: tuple[WindowAccount, ...]
    host_accounts: tuple[HostWindowAccount, ...]
    annotated_steps: int
    events_rows: int
    tables: dict[str, pa.Table]  # IPC_TABLES name -> table (empty when spilled)
    table_files: dict[str, Path]  # IPC_TABLES name -> Arrow IPC file (when spilled)
    events_parquet: Path
    communication: pa.Table
    collectives: pa.Table
    links: pa.Table
    gap_report: GapReport
    api_statistic: pa.Table  # the rank's (merged with ops.merge_api_statistics)
    copy_spellings: pa.Table  # the rank's copies per spelling (transfers.copy_spellings)
    communication_matrix: pa.Table | None = None  # the source's rank-to-rank figures
    # spilled: the files of the events' plain columns mapped since the import (those that
    # table_files' events file leaves out), and the events' columns in order
    events_plain: tuple[Path, ...] = ()
    events_columns: tuple[str, ...] = ()
    # the rank's source files, copied by the task for the profile's raw/: source -> copy
    raw_copies: dict[Path, Path] = field(default_factory=dict)
    # the CSVs the task wrote (``RankTask.csvs``): file name -> file, for the parent to move
    csv_files: dict[str, Path] = field(default_factory=dict)
    advice: RankAdvice | None = None
    quality: tuple[QualityCheck, ...] = ()
    comm: CommSplit | None = None  # the rank's communication split
    replay: ReplayReport | None = None  # the rank's steps replayed, with their critical paths
    timings: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int = 0
    worker: str = ""
    # Ascend: the main file and its fingerprint, to tell a rank copied over another
    main_file: Path | None = None
    fingerprint: tuple[int, bytes] | None = None


@dataclass(frozen=True)
class RankFailure:
    """A task whose trace could not be read: the user's one-line message."""

    index: int
    path: Path
    message: str
    exit_code: int


def plan_tasks(inputs: Sequence[Path], work_dir: Path) -> list[RankTask]:
    """One task per rank source named by ``inputs``, in discovery order.

    A folder of Ascend output becomes one task per rank folder in it.
    """
    tasks: list[RankTask] = []
    for fmt, path in discover(inputs):
        paths = ascend_rank_paths(path) if fmt == ASCEND else [path]
        for rank_path in paths:
            index = len(tasks)
            tasks.append(RankTask(index, fmt, rank_path, work_dir / f"task-{index:05d}"))
    return tasks


def ascend_rank_paths(path: Path) -> list[Path]:
    """The rank sources of an Ascend path: itself, or each of its rank folders."""
    from perfledger.sources import ascend

    # The importer's own layout rules decide what a rank folder is (one place for them); a
    # rank folder with nothing readable is a task too, which fails alone (a skipped rank)
    found = ascend.rank_layout(path)
    return [item if isinstance(item, Path) else item.root for item in found] or [path]


def run_rank_task(task: RankTask, progress: TaskProgress | None = None) -> RankResult | RankFailure:
    """Import one rank, analyse and diagnose it, write its files under ``task.work_dir``.

    ``progress``: told the bytes read and each phase (a task run in this process only).
    """
    with returning_pool():  # a worker process's too, not only build_profile's
        outcome = _run(task, progress)
    # A worker reads rank after rank: hand the freed rank's memory back before the next one
    # (Arrow's pool and the C heap keep freed blocks otherwise, and the peak creeps up).
    release_freed_memory()
    return outcome


def loaded(result: RankResult) -> RankResult:
    """The result with its spilled tables memory-mapped back (as it is when not spilled)."""
    if not result.table_files or result.tables:
        return result
    tables = {n: read_ipc(p) for n, p in result.table_files.items()}
    if result.events_plain:  # the columns mapped since the import: their files
        rest = tables["events"]
        holders = [rest, *(read_ipc(path) for path in result.events_plain)]

        def holder(name: str) -> pa.Table:
            return next(t for t in holders if name in t.column_names)

        fields = [holder(name).schema.field(name) for name in result.events_columns]
        columns = [holder(name)[name] for name in result.events_columns]
        schema = pa.schema(fields, metadata=rest.schema.metadata)
        tables["events"] = pa.Table.from_arrays(columns, schema=schema)
    return replace(result, tables=tables)


def _run(task: RankTask, progress: TaskProgress | None) -> RankResult | RankFailure:
    started = time.perf_counter()
    placed = PlacedColumns({group: task.work_dir / name for group, name in _PLACED_FILES.items()})
    try:
        trace = _load(task, progress, placed)
        if task.step_mark is not None:
            events = mark_steps(trace.events, task.step_mark, str(task.path))
            trace = replace(trace, events=events)
    except PerfledgerError as error:
        return RankFailure(task.index, task.path, error.message, error.exit_code)
    task.work_dir.mkdir(parents=True, exist_ok=True)
    # the plain columns (the args text: half the events, times, ids) read from here on
    # through maps of files written now: the passes read few of them, and the pages read
    # are let go between the passes
    # what the import freed handed back first: the files' pages are then those just freed,
    # which the system gives again at a fraction of the cost of pages it has to find
    # (bench/README.md, "Growth")
    release_freed_memory()
    plain, plain_files = _mapped_plain(trace.events, task.work_dir, placed)
    del placed
    trace = replace(trace, events=plain)
    release_freed_memory()  # the imported columns in the heap
    imported = time.perf_counter()
    if progress is not None:
        progress.phase(PHASE_ANALYSIS)
    claimed = trace.meta.get("rank")
    rank_analysis = analyze_rank(trace)
    # the launch keys the analysis found, for the replay windows (not kept in the tables'
    # copy of the analysis the writer holds)
    launch_keys = rank_analysis.launch_keys
    rank_analysis = replace(rank_analysis, launch_keys=None)
    # the repaired trace (its meta, counters and files are the import's): a repair's source
    # events are not kept through the replay
    trace = rank_analysis.trace
    outside = rank_counters(task.counters, trace.rank) if task.counters is not None else None
    spellings = copy_spellings(rank_analysis.events)  # summed once: the profile's transfers too
    drop_mapped_pages(rank_analysis.events)
    profile = profile_of_rank(rank_analysis, outside, spellings=spellings)
    events = profile.events
    drop_mapped_pages(events)
    collectives = COLLECTIVES_SCHEMA.empty_table() if task.alone else collective_tasks(events)
    links = LINKS_SCHEMA.empty_table() if task.alone else link_usage(events)
    # the columns the passes made (the steps assigned, times repaired) mapped too, in a file
    # of their own; the mapped ones stay as they are
    release_freed_memory()  # the files below written into the pages the passes freed
    events, spilled, events_plain = _mapped_rest(task, events, plain, plain_files)
    del plain
    trace = rank_analysis.trace
    rank_analysis = replace(rank_analysis, events=events, trace=replace(trace, events=events))
    profile = replace(profile, events=events, ranks=(rank_analysis,))
    release_freed_memory()  # the analysis passes' temporaries, the args in the heap
    analysed = time.perf_counter()
    windows, split, sources = rank_analysis.windows, rank_analysis.comm, trace.source_files
    if progress is not None:
        progress.phase(PHASE_ADVISOR)
    stop = threading.Event()
    # the CSVs wait for the replay's end: building the graph is the task's largest memory
    replay_done = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="rank-writer") as writer:
        # the tables the replay and the advisor read little of mapped too (spilled: the files
        # the parent maps, written once), beside the replay, which reads none of them: their
        # heap copies go once mapped
        tabled = writer.submit(_mapped_tables, task, rank_analysis, profile, outside is None)
        del rank_analysis, profile, trace
        # then the files that do not depend on the replay nor the findings: written beside
        # them (Parquet encoding, compression and copying run mostly outside the GIL)
        written = writer.submit(
            _write_mapped, task, tabled, events, spilled, sources, stop, replay_done
        )
        try:
            # the steps replayed here, in parallel over ranks, before the advisor reads them
            waits = split.wait_by_row(events.num_rows) if split is not None else None
            # the windows analyze_rank found: the step plan reads no column assign_steps
            # fills, so planning again on these events finds the very same
            # the graph reads a dozen of the events' mapped columns whole: their pages let go
            # as it goes, not held through the graph's construction (the task's peak)
            with dropping_mapped_pages(events):
                prepared = (
                    prepare_rank(events, windows, comm_wait=waits, launches=launch_keys)
                    if events.num_rows
                    else None
                )
            del waits, launch_keys  # the graph keeps its nodes' own
            replay = rank_report(prepared) if prepared is not None else ReplayReport(())
            release_freed_memory()  # the graph's and the replay's temporaries
            replay_done.set()
            rank_analysis, profile, _ = tabled.result()
            trace = rank_analysis.trace
            tables = _rank_tables(events, rank_analysis, profile)
            rank_analysis = replace(rank_analysis, replay=replay)
            profile = replace(profile, ranks=(rank_analysis,), replay=replay)
            replayed = time.perf_counter()
            drop_mapped_pages(events)
            advice = diagnose_rank(
                profile, task.advisor_config, replays=(prepared,) if prepared else ()
            )
            del prepared
        except BaseException:
            stop.set()  # the writer ends with the file it is writing; the pool waits for it
            replay_done.set()
            raise
        advised = time.perf_counter()
        paths, parquet, copies, csvs, write_timings = written.result()
    release_freed_memory()  # the rules' derived tables
    drop_mapped_pages(events)
    main_file = _ascend_main_file(task.path) if task.fmt == ASCEND else None
    return RankResult(
        index=task.index,
        rank=trace.rank,
        claimed_rank=claimed if isinstance(claimed, int) and task.rank is None else None,
        source_kind=trace.source_kind,
        source_files=trace.source_files,
        meta=trace.meta,
        loss=trace.loss,
        windows=rank_analysis.windows,
        accounts=rank_analysis.accounting.windows,
        host_accounts=rank_analysis.accounting.host,
        annotated_steps=rank_analysis.annotated_steps,
        events_rows=events.num_rows,
        tables={} if task.spill else tables,
        table_files=paths,
        events_plain=events_plain,
        events_columns=tuple(events.column_names) if events_plain else (),
        events_parquet=parquet,
        communication=profile.communication,
        collectives=collectives,
        links=links,
        gap_report=profile.gap_report,
        api_statistic=profile.api_statistic,
        copy_spellings=spellings,
        communication_matrix=trace.communication_matrix,
        raw_copies=copies,
        csv_files=csvs,
        advice=advice,
        quality=rank_analysis.quality,
        comm=rank_analysis.comm,
        replay=rank_analysis.replay,
        timings={
            "import_s": imported - started,
            "analysis_s": analysed - imported,
            "replay_s": replayed - analysed,
            "advisor_s": advised - replayed,
            **write_timings,
        },
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        worker=f"{os.uname().nodename}:{os.getpid()}",
        main_file=main_file,
        fingerprint=_fingerprint(main_file) if main_file is not None else None,
    )


# The files of the events' plain columns, by the import's group of them (load_kineto's
# place_columns), each written as soon as the import has laid its group out.
_PLACED_FILES: Final = {
    TEXT: f"{EVENTS}-text{ARROW_SUFFIX}",
    NUMBERS: f"{EVENTS}-plain{ARROW_SUFFIX}",
}


def _mapped_plain(
    events: pa.Table, directory: Path, placed: PlacedColumns | None = None
) -> tuple[pa.Table, dict[Path, list[str]]]:
    """``events`` with its plain columns (all but the dictionary ones: the args text, times,
    ids) read through memory maps of Arrow IPC files written in ``directory``, and the
    columns each file holds (a file that could not be written or mapped: none, its columns
    stay in the heap). The columns ``placed`` already (by the import) are kept where they
    lie.

    The numbers and the text go to a file each: the import lays the text out in pieces and
    the numbers in one piece, and a file's record batches cut every column where any is cut.
    In one file a number column would be read back in as many chunks as the text, and every
    pass that reads it as one numpy array would copy it (34 MB a column at 1.5 GB of trace);
    in its own file it is read where it lies."""
    # the dictionary columns stay as they are: the file's share one dictionary per column,
    # and the events.parquet written from them would store other dictionary pages
    plain = [f.name for f in events.schema if not pa.types.is_dictionary(f.type)]
    text = [n for n in plain if _variable_width(events.schema.field(n).type)]
    groups = {
        directory / _PLACED_FILES[NUMBERS]: [n for n in plain if n not in text],
        directory / _PLACED_FILES[TEXT]: text,
    }
    files: dict[Path, list[str]] = {}
    for path, names in list(groups.items()):
        if placed is not None and placed.holds(events, path, names):
            files[path] = groups.pop(path)
    for path, names in groups.items():
        mapped = mapped_copy(events.select(names), path) if names else None
        if mapped is not None:
            events = with_columns(events, mapped)
            files[path] = names
    return events, files


def _variable_width(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
    )


def _mapped_tables(
    task: RankTask, rank: RankAnalysis, profile: ProfileAnalysis, own_counters: bool
) -> tuple[RankAnalysis, ProfileAnalysis, dict[str, Path]]:
    """The rank's counters, gaps and operator tables (and the device links op_summary is a
    part of) read through maps of Arrow IPC files written in ``task.work_dir``, in ``rank``
    and ``profile`` alike; the files written by table name. ``own_counters``: the profile's
    counters are the rank's trace's (no counters sampled outside the traces). A table whose
    file cannot be written or mapped stays in the heap."""
    files: dict[str, Path] = {}

    def mapped(table: pa.Table, name: str) -> pa.Table:
        path = task.work_dir / f"{name}{ARROW_SUFFIX}"
        done = mapped_copy(table, path)
        if done is None:
            return table
        files[name] = path
        return done

    counters = mapped(rank.trace.counters, "counters")
    links = rank.device_links
    mapped_links = mapped(links, "device-links") if links is not None else None
    summary = profile.op_summary
    if (
        links is not None
        and mapped_links is not None
        and mapped_links is not links
        and all(
            name in links.column_names and same_buffers(summary[name], links[name])
            for name in summary.column_names
        )
    ):
        summary = mapped_links.select(summary.column_names)  # a part of the links
    else:
        summary = mapped(summary, "op_summary")
    rank_gaps = mapped(rank.accounting.gaps, "rank-gaps")
    if rank_gaps is not rank.accounting.gaps and _same_gaps(profile.gaps, rank.accounting.gaps):
        gaps = rank_gaps  # the profile's gaps are its only rank's: one file holds both
        files["gaps"] = files["rank-gaps"]
    else:
        gaps = mapped(profile.gaps, "gaps")
    rank = replace(
        rank,
        trace=replace(rank.trace, counters=counters),
        accounting=replace(rank.accounting, gaps=rank_gaps),
        device_links=mapped_links,
    )
    profile = replace(
        profile,
        ranks=(rank,),
        counters=counters if own_counters else mapped(profile.counters, "profile-counters"),
        gaps=gaps,
        op_summary=summary,
        kernel_details=mapped(profile.kernel_details, "kernel_details"),
        device_links=mapped_links,
    )
    return rank, profile, files


def _same_gaps(profile_gaps: pa.Table, rank_gaps: pa.Table) -> bool:
    """Whether the profile's gaps hold the rank's (the same memory but ``next_task``, which
    :func:`~perfledger.analysis.profile.profile_gaps` makes again: the same values)."""
    return (
        profile_gaps.schema.equals(rank_gaps.schema)
        and all(
            same_buffers(profile_gaps[name], rank_gaps[name])
            for name in profile_gaps.column_names
            if name != "next_task"
        )
        and profile_gaps["next_task"].equals(rank_gaps["next_task"])
    )


def _mapped_rest(
    task: RankTask, events: pa.Table, plain: pa.Table, plain_files: dict[Path, list[str]]
) -> tuple[pa.Table, dict[str, Path], tuple[Path, ...]]:
    """``events`` (after the passes) with its plain columns that are not ``plain``'s (mapped
    from ``plain_files``, :func:`_mapped_plain`) read through a map of a file written here;
    the IPC tables written so (spilled: the events but the columns still ``plain``'s), and
    (spilled) those of ``plain_files`` that hold some of the events' columns."""
    # none where the plain columns could not be mapped
    holding = {
        path: [
            name
            for name in names
            if name in events.column_names and same_buffers(events[name], plain[name])
        ]
        for path, names in plain_files.items()
    }
    kept = [name for names in holding.values() for name in names]
    rest = [n for n in events.column_names if n not in kept]
    rest_plain = [n for n in rest if not pa.types.is_dictionary(events.schema.field(n).type)]
    if not task.spill:
        made = (
            mapped_copy(events.select(rest_plain), task.work_dir / f"{EVENTS}-made{ARROW_SUFFIX}")
            if rest_plain
            else None
        )
        return (events if made is None else with_columns(events, made)), {}, ()
    # the file the parent maps with the plain ones, written now
    path = write_ipc(events.select(rest), task.work_dir / f"{EVENTS}{ARROW_SUFFIX}")
    events = with_columns(events, read_ipc(path).select(rest_plain))
    return events, {"events": path}, tuple(p for p, names in holding.items() if names)


def _rank_tables(
    events: pa.Table, rank: RankAnalysis, profile: ProfileAnalysis
) -> dict[str, pa.Table]:
    """The tables a rank's result hands on (spilled: as files)."""
    return {
        "events": events,
        "counters": rank.trace.counters,
        "gaps": profile.gaps,
        "op_summary": profile.op_summary,
        "kernel_details": profile.kernel_details,
    }


def _write_mapped(
    task: RankTask,
    tabled: Future[tuple[RankAnalysis, ProfileAnalysis, dict[str, Path]]],
    events: pa.Table,
    spilled: dict[str, Path],
    sources: Sequence[Path],
    stop: threading.Event,
    replayed: threading.Event,
) -> tuple[dict[str, Path], Path, dict[Path, Path], dict[str, Path], dict[str, float]]:
    """:func:`_write_files` of the tables :func:`_mapped_tables` mapped (``tabled``, done
    before), the files it wrote among those spilled."""
    rank, profile, mapped = tabled.result()
    if task.spill:
        spilled = {**spilled, **{n: p for n, p in mapped.items() if n in IPC_TABLES}}
    tables = _rank_tables(events, rank, profile)
    del rank, profile
    return _write_files(task, tables, spilled, sources, stop, replayed)


def _write_files(
    task: RankTask,
    tables: dict[str, pa.Table],
    spilled: dict[str, Path],
    sources: Sequence[Path],
    stop: threading.Event,
    replayed: threading.Event,
) -> tuple[dict[str, Path], Path, dict[Path, Path], dict[str, Path], dict[str, float]]:
    """The rank's events as Parquet, its source copies, (spilled) its IPC tables but those
    in ``spilled`` (written already) and (``task.csvs``) its :data:`RANK_CSVS`, once
    ``replayed`` is set; the seconds each took. Ends early, between two files, once ``stop``
    is set."""

    def check() -> None:
        if stop.is_set():
            raise PerfledgerError("the profile was abandoned")

    started = time.perf_counter()
    parquet = task.work_dir / EVENTS_PARQUET
    events = tables["events"]
    # every args page is read for the file: let go as the writing goes (the replay runs now)
    with replacing(parquet) as temporary, dropping_mapped_pages(events):
        write_events_parquet(events, temporary)
    paths = dict(spilled)
    if task.spill:
        for name, table in tables.items():
            check()
            if name not in paths:
                paths[name] = write_ipc(table, task.work_dir / f"{name}{ARROW_SUFFIX}")
    written = time.perf_counter()
    check()
    copies = _copy_sources(sources, task.work_dir / RAW_COPIES)
    timings = {"write_s": written - started, "copy_s": time.perf_counter() - written}
    csvs: dict[str, Path] = {}
    if task.csvs:
        replayed.wait()
        csv_started = time.perf_counter()  # the wait is not the CSVs'
        (task.work_dir / CSV_DIR).mkdir(exist_ok=True)
        for name, table_name in RANK_CSVS.items():
            check()
            table = tables[table_name]
            write_csv(table, task.work_dir / CSV_DIR / name)
            drop_mapped_pages(table)
            csvs[name] = task.work_dir / CSV_DIR / name
        timings["rank_csv_s"] = time.perf_counter() - csv_started
    return paths, parquet, copies, csvs, timings


def _copy_sources(sources: Sequence[Path], directory: Path) -> dict[Path, Path]:
    """Copy a rank's source files for the profile's raw/ (the parent moves them in place).

    In the task, so that the copies of many ranks are made by the workers side by side, not
    one after the other by the parent; a task run again replaces its earlier copies.
    """
    if directory.exists():
        shutil.rmtree(directory)
    copies = {}
    for index, source in enumerate(sources):
        # a copy, a hard link or a record of a large source (copy_source says which)
        copies[source] = copy_source(source, directory / f"{index}_{source.name}")
    return copies


def _ascend_main_file(path: Path) -> Path | None:
    from perfledger.sources import ascend

    sources = ascend.rank_sources(path)
    return ascend.main_file(sources[0]) if sources else None


def _fingerprint(path: Path) -> tuple[int, bytes]:
    from perfledger.sources import ascend

    return ascend.fingerprint(path)


def flag_copies(results: Sequence[RankResult]) -> list[RankResult]:
    """Ranks whose Ascend output is byte for byte another rank's get a loss note saying so.

    The check of the Ascend importer when it reads a folder of ranks at once.
    """
    seen: dict[tuple[int, bytes], RankResult] = {}
    flagged = []
    for result in results:
        key = result.fingerprint
        if key is None or result.main_file is None:
            flagged.append(result)
            continue
        first = seen.setdefault(key, result)
        if first is not result:
            note = (
                f"{result.main_file}: same content as rank {first.rank}'s {first.main_file}, "
                "one rank's output probably copied over another's"
            )
            result = replace(result, loss="; ".join(x for x in (result.loss, note) if x))
        flagged.append(result)
    return flagged


def _load(
    task: RankTask, progress: TaskProgress | None, placed: PlacedColumns | None = None
) -> Trace:
    """One rank's trace, its names and args within the limits (:mod:`perfledger.sources.names`);
    ``placed``: where a Kineto import places its columns."""
    from perfledger.sources.names import bounded

    return bounded(_import(task, progress, placed))


def _import(task: RankTask, progress: TaskProgress | None, placed: PlacedColumns | None) -> Trace:
    report = progress.imported if progress is not None else None
    if task.fmt == KINETO:
        from perfledger.sources.kineto import load_kineto

        return load_kineto(
            task.path,
            rank=task.rank,
            progress=report,
            workers=task.import_workers,
            place_columns=placed,
            fill_columns=placed.in_place if placed is not None else None,
        )
    from perfledger.sources.ascend import load_ascend

    traces = load_ascend(task.path, progress=report)
    if len(traces) != 1:
        raise PerfledgerError(f"{task.path}: expected one rank, found {len(traces)}")
    trace = traces[0]
    return trace if task.rank is None else with_rank(trace, task.rank)


def with_rank(trace: Trace, rank: int) -> Trace:
    """The trace with every row's rank (and meta's) set to ``rank``."""
    events = trace.events
    counters = trace.counters
    return replace(
        trace,
        events=events.set_column(
            events.schema.get_field_index("rank"),
            events.schema.field("rank"),
            pa.array([rank] * events.num_rows, pa.int32()),
        ),
        counters=counters.set_column(
            counters.schema.get_field_index("rank"),
            counters.schema.field("rank"),
            pa.array([rank] * counters.num_rows, pa.int32()),
        ),
        meta={**trace.meta, "rank": rank},
        communication_matrix=_ranked(trace.communication_matrix, rank),
    )


def _ranked(table: pa.Table | None, rank: int) -> pa.Table | None:
    """``table`` with its ``rank`` column set to ``rank``."""
    if table is None:
        return None
    index = table.schema.get_field_index("rank")
    return table.set_column(
        index, table.schema.field("rank"), pa.array([rank] * table.num_rows, pa.int32())
    )


def resolve_ranks(results: Sequence[RankResult]) -> list[int]:
    """The rank of each result, as :func:`perfledger.sources.load_traces` decides it.

    Ranks come from the traces when each names a different one; else from a ``rank<N>`` in
    the file names; else from the order of the files (traces that name no rank, or Ascend
    output, whose importer numbers unnamed ranks by position).

    Raises:
        PerfledgerError: some traces name the same rank and the names do not settle it.
    """
    if len(results) < 2:
        return [r.rank for r in results]
    claimed = [r.claimed_rank for r in results]
    if len(set(claimed)) == len(claimed):
        return [r.rank for r in results]
    named = [_rank_in_name(r) for r in results]
    if None not in named and len(set(named)) == len(named):
        return [int(n) for n in named if n is not None]
    if all(c is None for c in claimed) or all(r.source_kind != KINETO for r in results):
        return list(range(len(results)))
    files = ", ".join(r.source_files[0].name if r.source_files else "?" for r in results)
    raise PerfledgerError(f"several traces claim the same rank: {files}")


def _rank_in_name(result: RankResult) -> int | None:
    name = result.source_files[0].name if result.source_files else ""
    match = _RANK_IN_NAME.search(name)
    return int(match.group(1)) if match else None
