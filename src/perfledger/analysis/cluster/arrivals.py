"""Arrivals at collectives across ranks, on one clock: who waited for whom, and how long.

The ranks of a job are profiled on different hosts whose clocks differ by up to milliseconds:
comparing raw start times blames the wrong rank. Every participant of a collective leaves it
at about the same moment (the transfer ends together), so the ends give each rank's clock
offset: for every collective matched across the ranks (the k-th task of one name on every
rank, as :func:`perfledger.analysis.cluster.collectives.align_collectives` matches them), a
rank's residual is its end minus the median end of the participants; its offset is the median
of its residuals, taken against the first rank. On the aligned clock, the last participant
arrives at A = max(a_r) and rank r waits [a_r, A) — then transfers until its end.

Pure functions over the collectives table (:data:`perfledger.model.cluster.COLLECTIVES_SCHEMA`,
a few rows per step and rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

IntArray = npt.NDArray[np.int64]


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


def _instances(
    tasks: pa.Table, ranks: Sequence[int]
) -> list[tuple[IntArray, IntArray, IntArray, IntArray]]:
    """Per name taken by every rank the same number of times: the (rank x k) grids of start,
    end, duration and event row, rows in ``ranks`` order."""
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)
    row = np.asarray(tasks["row"], dtype=np.int64)
    names = tasks["name"].to_numpy(zero_copy_only=False)
    wanted = np.asarray(sorted(set(ranks)), dtype=np.int64)
    grids = []
    for name in sorted(set(names.tolist())):
        rows = np.flatnonzero(names == name)
        members = np.unique(rank[rows])
        counts = np.array([np.count_nonzero(rank[rows] == r) for r in members])
        if not np.array_equal(members, wanted) or counts.min() != counts.max():
            continue
        order = np.lexsort((start[rows], rank[rows]))
        shape = (members.size, int(counts[0]))
        pick = rows[order]
        grids.append(
            (
                start[pick].reshape(shape),
                (start[pick] + dur[pick]).reshape(shape),
                dur[pick].reshape(shape),
                row[pick].reshape(shape),
            )
        )
    return grids


def align_arrivals(tasks: pa.Table, ranks: Sequence[int]) -> Arrivals:
    """The ranks' clock offsets and every matched task's wait (see the module doc)."""
    rank_list = sorted(set(ranks))
    if len(rank_list) < 2 or tasks.num_rows == 0:
        return Arrivals()
    grids = _instances(tasks, rank_list)
    if not grids:
        return Arrivals()
    ends = np.concatenate([g[1] for g in grids], axis=1)
    residual = ends - np.median(ends, axis=0, keepdims=True)
    offset = np.median(residual, axis=1)
    offset = np.round(offset - offset[0]).astype(np.int64)
    waits: dict[int, tuple[list[IntArray], list[IntArray]]] = {r: ([], []) for r in rank_list}
    for start, _, dur, rows in grids:
        arrival = start - offset[:, None]
        last = arrival.max(axis=0, keepdims=True)
        wait = np.clip(last - arrival, 0, dur)
        for i, r in enumerate(rank_list):
            waits[r][0].append(rows[i])
            waits[r][1].append(wait[i])
    return Arrivals(
        offsets_ns={r: int(offset[i]) for i, r in enumerate(rank_list)},
        waits={r: (np.concatenate(w[0]), np.concatenate(w[1])) for r, w in waits.items()},
        matched=int(ends.shape[1]),
    )
