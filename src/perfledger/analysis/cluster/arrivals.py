"""Arrivals at collectives across ranks, on one clock: who waited for whom, and how long.

The ranks of a job are profiled on different hosts whose clocks differ by up to milliseconds:
comparing raw start times blames the wrong rank. Every participant of a collective leaves it
at about the same moment (the transfer ends together), so the ends give each rank's clock
offset: for every collective matched across the ranks (the k-th task of one name on every
rank, as :func:`perfledger.analysis.cluster.collectives.align_collectives` matches them), a
rank's residual is its end minus the median end of the participants; its offset is the median
of its residuals, taken against the first rank. On the aligned clock, the last participant
arrives at A = max(a_r) and rank r waits [a_r, A) — then transfers until its end.

Ranks known to share a clock are not set apart by it: ``perfledger record`` writes the clock
of the machine each rank ran on (its Linux boot id, :data:`CLOCK_KEY`) into the rank's trace,
and ranks of one clock take one offset, the median of their estimates (all 0 when every rank
ran on one machine). The ends of a collective are not simultaneous everywhere: a broadcast's
root leaves before its receivers, and over a slow transport the ends of an all-reduce differ
by a chunk's transfer (two NCCL ranks on one H200 over sockets: an estimated 175 to 280 µs
between two ranks of one clock).

Pure functions over the collectives table (:data:`perfledger.model.cluster.COLLECTIVES_SCHEMA`,
a few rows per step and rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.model.clock import CLOCK_KEY

IntArray = npt.NDArray[np.int64]


def clock_of(meta: Mapping[str, Any]) -> str | None:
    """The clock a rank's trace was stamped with (its meta's :data:`CLOCK_KEY`), None when
    the trace does not say."""
    keys = meta.get("trace_keys")
    value = keys.get(CLOCK_KEY) if isinstance(keys, Mapping) else None
    boot = value.get("boot_id") if isinstance(value, Mapping) else None
    return boot if isinstance(boot, str) and boot else None


@dataclass(frozen=True)
class Arrivals:
    """The clocks of the ranks aligned on their collectives, and what each task waited.

    Attributes:
        offsets_ns: per rank, how far its clock runs ahead of the first rank's (subtract it
            from the rank's times to put them on the first rank's clock).
        waits: per rank, (row of its events table, ns waited for the last participant) of
            every task matched across the ranks.
        matched: how many collectives (instances, not tasks) were matched.
    """

    offsets_ns: dict[int, int] = field(default_factory=dict)
    waits: dict[int, tuple[IntArray, IntArray]] = field(default_factory=dict)
    matched: int = 0


def _instances(tasks: pa.Table, ranks: Sequence[int]) -> list[_Grid]:
    """Per (name, process group) taken by two or more ranks, each the same number of times:
    the (member x k) grids of start, end, duration and event row, members in rank order."""
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)
    row = np.asarray(tasks["row"], dtype=np.int64)
    wanted = set(ranks)
    by_key: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(
        zip(tasks["name"].to_pylist(), tasks["group"].fill_null("").to_pylist(), strict=True)
    ):
        if int(rank[i]) in wanted:
            by_key.setdefault(key, []).append(i)
    grids = []
    for key in sorted(by_key):
        rows = np.asarray(by_key[key], dtype=np.int64)
        members, counts = np.unique(rank[rows], return_counts=True)
        if members.size < 2 or counts.min() != counts.max():
            continue
        order = np.lexsort((start[rows], rank[rows]))
        shape = (members.size, int(counts[0]))
        pick = rows[order]
        grids.append(
            _Grid(
                members=members,
                start=start[pick].reshape(shape),
                end=(start[pick] + dur[pick]).reshape(shape),
                dur=dur[pick].reshape(shape),
                rows=row[pick].reshape(shape),
            )
        )
    return grids


@dataclass(frozen=True)
class _Grid:
    """One collective's instances: row i is rank members[i], column k its k-th instance."""

    members: IntArray
    start: IntArray
    end: IntArray
    dur: IntArray
    rows: IntArray


def _offsets(grids: Sequence[_Grid], ranks: Sequence[int]) -> IntArray:
    """Each rank's clock offset against the first rank's: the median of its ends' residuals
    against the median end of the participants. Collectives of every rank are used when there
    are any, else those of the groups; a rank with no residual keeps 0."""
    everyone = [g for g in grids if g.members.size == len(ranks)]
    used = everyone or list(grids)
    position = {r: i for i, r in enumerate(ranks)}
    residuals: list[list[IntArray]] = [[] for _ in ranks]
    for grid in used:
        residual = grid.end - np.median(grid.end, axis=0, keepdims=True)
        for i, r in enumerate(grid.members.tolist()):
            residuals[position[r]].append(residual[i])
    offset = np.array(
        [float(np.median(np.concatenate(r))) if r else 0.0 for r in residuals], dtype=np.float64
    )
    aligned: IntArray = np.round(offset - offset[0]).astype(np.int64)
    return aligned


def _shared_clocks(
    offset: IntArray, ranks: Sequence[int], clocks: Mapping[int, str] | None
) -> IntArray:
    """The offsets with the ranks of one clock at one offset: the median of theirs."""
    groups: dict[str, list[int]] = {}
    for i, rank in enumerate(ranks):
        clock = (clocks or {}).get(rank)
        if clock:
            groups.setdefault(clock, []).append(i)
    if not any(len(members) > 1 for members in groups.values()):
        return offset
    shared = offset.astype(np.float64)
    for members in groups.values():
        shared[members] = np.median(offset[members])
    aligned: IntArray = np.round(shared - shared[0]).astype(np.int64)
    return aligned


def align_arrivals(
    tasks: pa.Table, ranks: Sequence[int], clocks: Mapping[int, str] | None = None
) -> Arrivals:
    """The ranks' clock offsets and every matched task's wait (see the module doc);
    ``clocks``: the clock of each rank known to share one with others (:func:`clock_of`)."""
    rank_list = sorted(set(ranks))
    if len(rank_list) < 2 or tasks.num_rows == 0:
        return Arrivals()
    grids = _instances(tasks, rank_list)
    if not grids:
        return Arrivals()
    offset = _shared_clocks(_offsets(grids, rank_list), rank_list, clocks)
    position = {r: i for i, r in enumerate(rank_list)}
    waits: dict[int, tuple[list[IntArray], list[IntArray]]] = {r: ([], []) for r in rank_list}
    for grid in grids:
        mine = offset[[position[r] for r in grid.members.tolist()]]
        arrival = grid.start - mine[:, None]
        last = arrival.max(axis=0, keepdims=True)
        wait = np.clip(last - arrival, 0, grid.dur)
        for i, r in enumerate(grid.members.tolist()):
            waits[r][0].append(grid.rows[i])
            waits[r][1].append(wait[i])
    empty = np.zeros(0, dtype=np.int64)
    return Arrivals(
        offsets_ns={r: int(offset[i]) for i, r in enumerate(rank_list)},
        waits={
            r: (np.concatenate(w[0]), np.concatenate(w[1])) if w[0] else (empty, empty)
            for r, w in waits.items()
        },
        matched=sum(int(g.start.shape[1]) for g in grids),
    )
