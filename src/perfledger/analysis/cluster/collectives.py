"""Collectives across ranks: which rank arrived last, how far apart the ranks arrived, link use.

``collective_tasks(events)`` keeps the communication tasks of one or several ranks in
:data:`COLLECTIVES_SCHEMA` (small: a few per step), so that a per-rank task can send them to
the cluster pass instead of its events:
    rank, device, step, name, start_ns, dur_ns,
    wait_ns -- the collective library's own figure of time spent waiting for peers (HCCL's
               "Wait Time" from Ascend's communication.json), -1 when the source has none,
    row     -- the task's row in the events table it was taken from,
    group   -- its process group as the trace names it (Kineto's ``Process Group Name``, else
               ``Process Group Ranks``), "" when it does not.

``link_usage(events)`` sums the transport links a collective used (HCCS, PCIE, RDMA, SDMA, SIO
from Ascend's communication.json) per rank, one row per (rank, link) in :data:`LINKS_SCHEMA`.

``communication_matrix(parts)`` sums the ranks' rank-to-rank figures (Ascend
communication_matrix.json) per (source, destination, transport) in :data:`MATRIX_SCHEMA`;
``slow_links`` lists the pairs far below their transport's median bandwidth.

``align_collectives(tasks)`` matches the k-th task named N on every rank with the k-th task
named N on every other rank (a collective is issued in the same order by every member).
A name whose count differs between the ranks that issue it, or that only some ranks issue
(sub-groups, point-to-point), is not aligned and is reported as such. Arrival spread compares
start times taken on different hosts: it is meaningful when the hosts' clocks agree (one
machine, or clocks synchronised by NTP/PTP); the last-arrival vote is less sensitive to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.duck import duck
from perfledger.memory import drop_mapped_pages
from perfledger.model import schema
from perfledger.model.cluster import (
    COLLECTIVES_SCHEMA,
    LINKS_SCHEMA,
    MATRIX_SCHEMA,
    CollectiveAlignment,
    CollectiveSkew,
    RankArrivals,
)

# How many of the most skewed collectives a report lists.
WORST_COLLECTIVES: Final = 10
# The keys of a task's args collective_tasks reads.
_TASK_FIELDS: Final = '"(hccl|Process Group Name|Process Group Ranks)"'


def collective_tasks(events: pa.Table) -> pa.Table:
    """The communication tasks of ``events`` sorted by rank, start (see the module doc)."""
    is_comm = columns.isin(events, "kind", [schema.COMM])
    if not is_comm.any():
        return COLLECTIVES_SCHEMA.empty_table()
    rows = np.flatnonzero(is_comm)
    names = ["rank", "device", "step", "name", "start_ns", "dur_ns"]
    comm = _comm_rows(events, rows, names, _TASK_FIELDS)
    comm = comm.append_column("row", pa.array(rows, pa.int64()))
    query = """
        SELECT rank, device, step, name, start_ns, dur_ns,
               coalesce(TRY_CAST(CASE WHEN json_valid(args)
                                 THEN json_extract(args, '$.hccl.wait_ns') END AS BIGINT),
                        -1) AS wait_ns,
               row,
               coalesce(CASE WHEN json_valid(args) THEN
                            coalesce(json_extract_string(args, '$."Process Group Name"'),
                                     json_extract_string(args, '$."Process Group Ranks"'))
                        END, '') AS "group"
        FROM comm ORDER BY rank, start_ns, device, name
    """
    with duck() as con:
        con.register("comm", comm)
        return con.sql(query).to_arrow_table().cast(COLLECTIVES_SCHEMA)


def _comm_rows(events: pa.Table, rows: np.ndarray, names: list[str], fields: str) -> pa.Table:
    """The columns ``names`` and ``args`` of the communication ``rows``, the strings plain
    and each column in one piece (the queries read them in this order). ``args`` is null
    where its text names none of the keys the query reads (``fields``: a regular expression
    of them in quotes): its JSON functions give nothing there, and cost most of the query."""
    taken = {}
    for name in [*names, "args"]:
        # the args a page apart: their pages let go as they are read
        column = (columns.take_paged if name == "args" else columns.take)(events.column(name), rows)
        # the pages read of a memory-mapped column let go: the next column's do not stack
        drop_mapped_pages(events.column(name))
        if pa.types.is_dictionary(column.type):
            column = pc.cast(column, column.type.value_type)
        taken[name] = column.combine_chunks()
    args = taken["args"]
    # a key written with escapes holds a backslash: those args are kept too
    said = pc.fill_null(pc.match_substring_regex(args, f"{fields}|\\\\"), False)
    taken["args"] = pc.if_else(said, args, pa.scalar(None, args.type))
    return pa.table(taken)


def link_usage(events: pa.Table) -> pa.Table:
    """Bytes and time per transport link and rank, from the collectives' HCCL link figures.

    A source repeats one collective's figures on every task of that name: each name counts
    once per rank.
    """
    is_comm = columns.isin(events, "kind", [schema.COMM])
    if not is_comm.any():
        return LINKS_SCHEMA.empty_table()
    comm = _comm_rows(events, np.flatnonzero(is_comm), ["rank", "name"], '"hccl"')
    query = """
        WITH per_name AS (
            SELECT rank, name, any_value(links) AS links FROM (
                SELECT rank, name, json_extract(args, '$.hccl.links') AS links FROM comm
                WHERE json_valid(args) AND json_extract(args, '$.hccl.links') IS NOT NULL
            ) GROUP BY rank, name
        ),
        per_link AS (
            SELECT rank, name, unnest(json_keys(links)) AS link, links FROM per_name
        ),
        figures AS (
            SELECT rank, link,
                   TRY_CAST(json_extract(links, '$."' || link || '".transit_bytes') AS BIGINT)
                       AS transit_bytes,
                   TRY_CAST(json_extract(links, '$."' || link || '".transit_ns') AS BIGINT)
                       AS transit_ns
            FROM per_link
        )
        SELECT rank, link, count(*) AS collectives,
               coalesce(sum(transit_bytes), 0)::BIGINT AS transit_bytes,
               coalesce(sum(transit_ns), 0)::BIGINT AS transit_ns,
               CASE WHEN sum(transit_ns) > 0 THEN sum(transit_bytes) / sum(transit_ns)
                    ELSE 'NaN'::DOUBLE END AS gbps
        FROM figures GROUP BY rank, link ORDER BY rank, link
    """
    with duck() as con:
        con.register("comm", comm)
        return con.sql(query).to_arrow_table().cast(LINKS_SCHEMA)


def align_collectives(
    tasks: pa.Table, ranks: Sequence[int], offsets_ns: Mapping[int, int] | None = None
) -> CollectiveAlignment:
    """Match collectives across ``ranks`` by name and occurrence (see the module doc); the
    ranks' clock offsets (``offsets_ns``) are taken off their start times first."""
    rank_list = sorted(set(ranks))
    position = {r: i for i, r in enumerate(rank_list)}
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    if offsets_ns:
        start = start - np.array([offsets_ns.get(int(r), 0) for r in rank], dtype=np.int64)
    step = np.asarray(tasks["step"], dtype=np.int64)
    wait = np.asarray(tasks["wait_ns"], dtype=np.int64)
    names = tasks["name"].to_numpy(zero_copy_only=False)
    skews: list[CollectiveSkew] = []
    last_votes = np.zeros(len(rank_list), dtype=np.int64)
    taking_part = np.zeros(len(rank_list), dtype=np.int64)
    waited = np.zeros(len(rank_list), dtype=np.int64)
    unaligned: list[str] = []
    spreads: list[np.ndarray] = []
    for name in sorted(set(names.tolist())):
        rows = np.flatnonzero(names == name)
        members = np.unique(rank[rows])
        counts = np.array([np.count_nonzero(rank[rows] == r) for r in members])
        if len(rank_list) < 2 or members.size != len(rank_list) or counts.min() != counts.max():
            unaligned.append(str(name))
            continue
        # tasks are sorted by rank then start: row k of each rank block is its k-th arrival
        order = np.lexsort((start[rows], rank[rows]))
        grid = start[rows][order].reshape(members.size, counts[0])
        steps = step[rows][order].reshape(members.size, counts[0])
        earliest = grid.min(axis=0)
        latest = grid.max(axis=0)
        last = np.argmax(grid, axis=0)  # the lowest rank wins a tie
        first = np.argmin(grid, axis=0)
        index = np.array([position[int(r)] for r in members])
        np.add.at(last_votes, index[last], 1)
        taking_part[index] += counts[0]
        waited[index] += (latest[None, :] - grid).sum(axis=1)
        spread = latest - earliest
        spreads.append(spread)
        skews.extend(
            CollectiveSkew(
                name=str(name),
                occurrence=k,
                step=int(steps[last[k], k]),
                ranks=int(members.size),
                first_start_ns=int(earliest[k]),
                arrival_spread_ns=int(spread[k]),
                first_rank=int(members[first[k]]),
                last_rank=int(members[last[k]]),
            )
            for k in range(counts[0])
        )
    skews.sort(key=lambda s: (-s.arrival_spread_ns, s.first_start_ns, s.name))
    all_spreads = np.concatenate(spreads) if spreads else np.zeros(0, dtype=np.int64)
    arrivals = []
    for r in rank_list:
        own = wait[(rank == r) & (wait >= 0)]
        arrivals.append(
            RankArrivals(
                rank=r,
                collectives=int(taking_part[position[r]]),
                last_arrivals=int(last_votes[position[r]]),
                waited_ns=int(waited[position[r]]),
                library_wait_ns=int(own.sum()) if own.size else -1,
            )
        )
    return CollectiveAlignment(
        aligned=len(skews),
        worst=tuple(skews[:WORST_COLLECTIVES]),
        arrivals=tuple(arrivals),
        median_spread_ns=int(np.median(all_spreads)) if all_spreads.size else 0,
        max_spread_ns=int(all_spreads.max()) if all_spreads.size else 0,
        unaligned_names=tuple(unaligned),
    )


# A link this far below the median bandwidth of its transport is listed as slow.
SLOW_LINK_PCT: Final = 80.0


def communication_matrix(parts: Sequence[pa.Table]) -> pa.Table:
    """The run's communication matrix from the ranks' matrix rows (COMM_MATRIX_SCHEMA).

    Sums over steps and collective types per (group, source, destination, transport): pairs
    of different groups are never added together, since each group numbers its members from 0.
    A rank's own output names its place in a group (every pair it gives starts there): that
    is how a member's number maps to a profiled rank. Each pair's bandwidth is compared with
    the median bandwidth of the pairs of its transport.
    """
    rows = pa.concat_tables([p.cast(schema.COMM_MATRIX_SCHEMA) for p in parts]) if parts else None
    if rows is None or rows.num_rows == 0:
        return MATRIX_SCHEMA.empty_table()
    query = """
        WITH members AS (
            SELECT "group", src_rank AS member, min(rank) AS global_rank
            FROM rows GROUP BY "group", src_rank
        ),
        pairs AS (
            SELECT "group", src_rank, dst_rank, transport, count(DISTINCT step) AS steps,
                   sum(transit_bytes)::BIGINT AS transit_bytes,
                   sum(transit_ns)::BIGINT AS transit_ns,
                   CASE WHEN sum(transit_ns) > 0 THEN sum(transit_bytes) / sum(transit_ns)
                        ELSE 'NaN'::DOUBLE END AS gbps
            FROM rows GROUP BY "group", src_rank, dst_rank, transport
        ),
        medians AS (
            SELECT transport, median(gbps) AS median_gbps FROM pairs WHERE NOT isnan(gbps)
            GROUP BY transport
        )
        SELECT p."group", p.src_rank, p.dst_rank, s.global_rank AS src_global_rank,
               d.global_rank AS dst_global_rank, p.transport, p.steps, p.transit_bytes,
               p.transit_ns, p.gbps,
               CASE WHEN m.median_gbps > 0 THEN 100.0 * p.gbps / m.median_gbps
                    ELSE 'NaN'::DOUBLE END AS vs_transport_median_pct
        FROM pairs p
        LEFT JOIN members s ON s."group" IS NOT DISTINCT FROM p."group" AND s.member = p.src_rank
        LEFT JOIN members d ON d."group" IS NOT DISTINCT FROM p."group" AND d.member = p.dst_rank
        LEFT JOIN medians m USING (transport)
        ORDER BY p."group" NULLS FIRST, p.src_rank, p.dst_rank, p.transport
    """
    with duck() as con:
        con.register("rows", rows)
        return con.sql(query).to_arrow_table().cast(MATRIX_SCHEMA)


def slow_links(matrix: pa.Table, below_pct: float = SLOW_LINK_PCT) -> list[dict[str, Any]]:
    """Pairs whose bandwidth is under ``below_pct`` % of their transport's median, slowest
    first (local copies left out: they are not links)."""
    found = [
        row
        for row in matrix.to_pylist()
        if row["transport"] != "LOCAL"
        and row["vs_transport_median_pct"] == row["vs_transport_median_pct"]
        and row["vs_transport_median_pct"] < below_pct
    ]
    return sorted(
        found,
        key=lambda r: (
            r["vs_transport_median_pct"],
            r["group"] or "",
            r["src_rank"],
            r["dst_rank"],
        ),
    )
