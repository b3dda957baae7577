"""From traces to the profile's analysis: each rank's steps and time account, then the
profile-wide tables (operators, copies, communication, gaps) and the cluster pass.

Pure functions: nothing here reads or writes a file.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import ops
from perfledger.analysis.accounting import device_accounting, split_communication
from perfledger.analysis.beside import beside
from perfledger.analysis.cluster.arrivals import Arrivals, align_arrivals, clock_of
from perfledger.analysis.cluster.balance import DEFAULT_EXCESS_PCT, cluster_report, step_kernels
from perfledger.analysis.cluster.collectives import (
    collective_tasks,
    communication_matrix,
    link_usage,
)
from perfledger.analysis.comm_split import (
    ALIGNED,
    ALIGNED_PARTIAL,
    ESTIMATED,
    MEASURED,
    comm_split,
)
from perfledger.analysis.communication import communication
from perfledger.analysis.critical_path import combined_report
from perfledger.analysis.gaps import gap_report
from perfledger.analysis.intervals import Int64Array
from perfledger.analysis.quality import rank_checks, relinked_tasks, trace_checks
from perfledger.analysis.repair import repair_trace
from perfledger.analysis.steps import (
    assign_steps,
    launch_keys,
    launch_starts,
    step_annotations,
    step_plan,
)
from perfledger.analysis.transfers import transfers, transfers_from_spellings
from perfledger.memory import drop_mapped_pages
from perfledger.model import schema
from perfledger.model.accounts import GAPS_SCHEMA, host_step_trace_table, step_trace_table
from perfledger.model.cluster import COLLECTIVES_SCHEMA, ClusterReport
from perfledger.model.devices import device_from_meta, peer_link_gbps
from perfledger.model.gaps import GapReport
from perfledger.model.profile import ProfileAnalysis, RankAnalysis
from perfledger.model.schema import HOST_WIDE_TRACKS
from perfledger.model.trace import Trace
from perfledger.model.whatif import ReplayReport


def analyze_rank(trace: Trace) -> RankAnalysis:
    """Clock repairs, step windows, step assignment, accounting and plausibility checks of
    one rank."""
    # the pages of the events' memory-mapped columns a pass read let go after it
    # (:func:`perfledger.memory.drop_mapped_pages`): the next one reads others
    trace, repairs = repair_trace(trace)
    where = trace.source_files[0].name if trace.source_files else None
    # the launch links (the largest pass) beside the step plan and assignment, the split, the
    # accounting and the checks, which do not read them (perfledger.analysis.beside: two
    # cores where the kernels let go of the GIL); linked before the steps are assigned (the
    # one column of theirs the assignment fills), the tasks' steps taken after
    with beside(ops.link_device_tasks, trace.events) as linking:
        keys = launch_keys(trace.events)
        launches = launch_starts(trace.events, keys)
        keys = keys.narrowed()  # kept for the rank's replays (RankAnalysis.launch_keys)
        plan = step_plan(trace.events, launches, where=where)
        events = assign_steps(trace.events, plan.windows, launches)
        drop_mapped_pages(events)
        split = comm_split(
            events,
            peer_link_gbps(device_from_meta(trace.meta)),
            _group_size(trace),
            launches=launches,
        )
        drop_mapped_pages(events)
        # the checks that read no accounting beside it (the links, begun first, are ending)
        with beside(trace_checks, events, plan.windows, where=where, launches=launches) as traced:
            accounting = device_accounting(
                events, plan.windows, launches, split.wait_by_row(events.num_rows)
            )
        drop_mapped_pages(events)
        annotated = len(step_annotations(events))
        links = ops.with_task_steps(linking.result(), events)
        checks = rank_checks(
            events,
            plan.windows,
            accounting,
            where=where,
            launches=launches,
            traced=traced.result(),
        )
    drop_mapped_pages(events)
    quality = (
        *trace.quality,
        *repairs,
        *plan.checks,
        *checks,
        *relinked_tasks(links, where=where),
    )
    return RankAnalysis(
        # its events with the steps assigned, as a profile's merged ranks have them: the
        # imported step column is not kept beside the assigned one
        trace=replace(trace, events=events),
        events=events,
        windows=plan.windows,
        accounting=accounting,
        annotated_steps=annotated,
        quality=quality,
        device_links=links,
        comm=split,
        launch_keys=keys,
    )


def steps_table(ranks: Sequence[RankAnalysis]) -> pa.Table:
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


def profile_gaps(ranks: Sequence[RankAnalysis]) -> pa.Table:
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


def analyze_traces(
    traces: Sequence[Trace],
    counters: pa.Table | None = None,
    *,
    slow_rank_excess_pct: float = DEFAULT_EXCESS_PCT,
) -> ProfileAnalysis:
    """Analyse every rank and gather the tables of the profile.

    Args:
        traces: one trace per rank.
        counters: host counters sampled outside the traces (COUNTERS_SCHEMA).
        slow_rank_excess_pct: the cluster pass's slow-rank threshold (several ranks).
    """
    started = time.perf_counter()
    ranks = tuple(analyze_rank(t) for t in traces)
    all_counters = [t.counters for t in traces]
    if counters is not None:
        all_counters.append(counters.cast(schema.COUNTERS_SCHEMA))
    return profile_of(ranks, all_counters, slow_rank_excess_pct, started)


def rank_profile(analysis: ProfileAnalysis, position: int) -> ProfileAnalysis:
    """The profile of one rank of ``analysis`` (``analysis.ranks[position]``) on its own."""
    rank = analysis.ranks[position]
    mine = rank_counters(analysis.counters, rank.rank)
    return profile_of((rank,), [mine], DEFAULT_EXCESS_PCT, time.perf_counter())


def rank_counters(counters: pa.Table, rank: int) -> pa.Table:
    """The counter rows of one rank, and the host-wide rows whatever rank they were filed under."""
    mine = pc.equal(counters["rank"], rank)
    host_wide = pc.is_in(counters["track"], value_set=pa.array(list(HOST_WIDE_TRACKS)))
    return counters.filter(pc.or_(mine, host_wide))


def profile_of_rank(
    rank: RankAnalysis, counters: pa.Table | None = None, *, spellings: pa.Table | None = None
) -> ProfileAnalysis:
    """The profile of one analysed rank: its trace's counters and ``counters`` (its rows of
    the host counters sampled outside the traces). ``spellings``: the rank's
    :func:`~perfledger.analysis.transfers.copy_spellings` if already made."""
    tables = [rank.trace.counters]
    if counters is not None:
        tables.append(counters.cast(schema.COUNTERS_SCHEMA))
    return profile_of((rank,), tables, DEFAULT_EXCESS_PCT, time.perf_counter(), spellings)


def _group_size(trace: Trace) -> int:
    """The ranks a collective spans when its task does not say: the largest group of the
    source's communication matrix, else HCCL's rank count, else the job's world size (0:
    unknown)."""
    matrix = trace.communication_matrix
    if matrix is not None and matrix.num_rows:
        members = pa.concat_arrays(
            [matrix.column("src_rank").combine_chunks(), matrix.column("dst_rank").combine_chunks()]
        )
        groups = pa.concat_arrays([matrix.column("group").combine_chunks()] * 2)
        sizes = (
            pa.table({"group": groups, "member": members})
            .group_by("group", use_threads=False)
            .aggregate([("member", "count_distinct")])
        )
        return int(pc.max(sizes.column("member_count_distinct")).as_py() or 0)
    for key in ("hccl_ranks", "world_size"):
        value = trace.meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def comm_waits(ranks: Sequence[RankAnalysis]) -> Int64Array:
    """Per row of the profile's events (the ranks' events one after the other), how long a
    communication task waited for its peers at its start (0 elsewhere, and for a rank
    without a split): what splits the critical path's communication in wait and transfer."""
    parts = [
        r.comm.wait_by_row(r.events.num_rows)
        if r.comm is not None
        else np.zeros(r.events.num_rows, dtype=np.int64)
        for r in ranks
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def profile_communication(ranks: Sequence[RankAnalysis]) -> pa.Table:
    """communication.csv's rows of every rank, each from its own events and split."""
    tables = [communication(r.events, r.comm) for r in ranks]
    return pa.concat_tables(tables) if tables else communication(schema.empty_events())


def rank_clocks(ranks: Sequence[RankAnalysis]) -> dict[int, str]:
    """The clock each rank's trace was stamped with, where it says
    (:func:`perfledger.analysis.cluster.arrivals.clock_of`)."""
    clocks = {r.rank: clock_of(r.trace.meta) for r in ranks}
    return {rank: clock for rank, clock in clocks.items() if clock}


def align_ranks(
    ranks: Sequence[RankAnalysis], collectives: pa.Table | None = None
) -> tuple[tuple[RankAnalysis, ...], Arrivals]:
    """The ranks with their communication waits measured across ranks, and the arrivals.

    Each rank's collectives (``collectives``: every rank's, rows of its own events; default
    taken from the ranks) are matched across the ranks and their clocks aligned
    (:func:`perfledger.analysis.cluster.arrivals.align_arrivals`); a task whose wait was
    estimated or unknown takes the wait measured so (``aligned``; ``aligned_partial`` when its
    group has members that were not profiled, unless its estimate waits longer) and its rank's
    exposed communication is split again. The collective library's own figures stay.
    """
    if len(ranks) < 2:
        return tuple(ranks), Arrivals()
    if collectives is None:
        collectives = pa.concat_tables([collective_tasks(r.events) for r in ranks])
    arrivals = align_arrivals(collectives, [r.rank for r in ranks], rank_clocks(ranks))
    aligned = []
    for rank in ranks:
        empty = np.zeros(0, np.int64)
        rows, waits = arrivals.waits.get(rank.rank, (empty, empty))
        split = rank.comm
        if split is None or rows.size == 0:
            aligned.append(rank)
            continue
        position = np.searchsorted(split.rows, rows)
        known = (position < split.rows.size) & (
            split.rows[np.minimum(position, split.rows.size - 1)] == rows
        )
        wait = split.wait_ns.copy()
        source = list(split.source)
        profiled = len(ranks)
        for p, w in zip(position[known].tolist(), waits[known].tolist(), strict=True):
            if source[p] == MEASURED:
                continue
            partial = split.group_size[p] > profiled
            if partial and source[p] == ESTIMATED and wait[p] > w:
                continue  # the profiled peers explain less than the estimate does
            wait[p], source[p] = w, ALIGNED_PARTIAL if partial else ALIGNED
        new_split = replace(split, wait_ns=wait, source=tuple(source))
        windows = split_communication(
            rank.events, rank.accounting.windows, new_split.wait_by_row(rank.events.num_rows)
        )
        aligned.append(
            replace(rank, comm=new_split, accounting=replace(rank.accounting, windows=windows))
        )
    return tuple(aligned), arrivals


def profile_of(
    ranks: tuple[RankAnalysis, ...],
    counters: Sequence[pa.Table],
    slow_rank_excess_pct: float,
    started: float,
    spellings: pa.Table | None = None,
) -> ProfileAnalysis:
    """The profile's tables from its analysed ranks (``spellings``: the copies of all their
    events summed per spelling, if already made)."""
    ranks, arrivals = align_ranks(ranks)
    events = pa.concat_tables([r.events for r in ranks]) if ranks else schema.empty_events()
    gaps = profile_gaps(ranks)
    accounted = time.perf_counter()
    # one rank's events are the profile's: its linkage holds for them
    one = ranks[0].device_links if len(ranks) == 1 else None
    linked = one if one is not None else ops.link_device_tasks(events)

    def details_and_gaps() -> tuple[pa.Table, GapReport]:
        return ops.kernel_details(events, linked), gap_report(gaps, events)

    # kernel_details and the gap report beside the other operator tables, which read
    # neither: about as long as those on this thread
    with beside(details_and_gaps) as beside_work:
        summary = ops.op_summary(events, linked)
        # of the columns mapped (a rank task's): the next pass reads others
        drop_mapped_pages(events)
        statistic = ops.op_statistic(events, summary)
        apis = ops.api_statistic(events)
        drop_mapped_pages(events)
        communication_table = profile_communication(ranks)
        details, worst = beside_work.result()
    drop_mapped_pages(events)
    return ProfileAnalysis(
        ranks=ranks,
        events=events,
        counters=pa.concat_tables(counters) if counters else schema.empty_counters(),
        steps=steps_table(ranks),
        gaps=gaps,
        op_summary=summary,
        op_statistic=statistic,
        kernel_details=details,
        api_statistic=apis,
        device_links=linked,
        transfers=transfers(events) if spellings is None else transfers_from_spellings([spellings]),
        communication=communication_table,
        gap_report=worst,
        timings={
            "accounting_s": accounted - started,
            "operators_s": time.perf_counter() - accounted,
        },
        cluster=cluster_pass(
            ranks,
            pa.concat_tables([collective_tasks(r.events) for r in ranks])
            if len(ranks) > 1
            else COLLECTIVES_SCHEMA.empty_table(),
            link_usage(events) if len(ranks) > 1 else None,
            slow_rank_excess_pct,
            arrivals.offsets_ns,
        ),
        replay=ranks_replay(ranks),
    )


def ranks_replay(ranks: Sequence[RankAnalysis]) -> ReplayReport | None:
    """The ranks' replays as the profile's (None unless every rank has one)."""
    reports = [r.replay for r in ranks]
    if not reports or any(r is None for r in reports):
        return None
    return combined_report([r for r in reports if r is not None])


def cluster_pass(
    ranks: Sequence[RankAnalysis],
    collectives: pa.Table,
    links: pa.Table | None,
    excess_pct: float,
    offsets_ns: dict[int, int] | None = None,
) -> ClusterReport | None:
    """The cluster pass over the ranks' accounts; None for a single rank or a host-only run.
    ``offsets_ns``: the ranks' clock offsets (:func:`align_ranks`), applied before arrivals
    are compared."""
    windows = [w for r in ranks for w in r.accounting.windows]
    if len(ranks) < 2 or not windows:
        return None
    matrices = [
        r.trace.communication_matrix for r in ranks if r.trace.communication_matrix is not None
    ]
    return cluster_report(
        windows,
        collectives,
        links,
        ranks=[r.rank for r in ranks],
        excess_pct=excess_pct,
        matrix=communication_matrix(matrices) if matrices else None,
        offsets_ns=offsets_ns,
        kernels=pa.concat_tables([step_kernels(r.rank, r.events) for r in ranks]),
    )


def step_trace(analysis: ProfileAnalysis) -> pa.Table:
    """step_trace.csv: device rows, or the main-thread rows of a host-only profile."""
    if analysis.host_only:
        return host_step_trace_table([a for r in analysis.ranks for a in r.accounting.host])
    return step_trace_table([a for r in analysis.ranks for a in r.accounting.windows])
