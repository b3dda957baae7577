"""Communication tasks per operation: how long they ran and how much of it compute hid.

``communication(events)`` returns :data:`COMMUNICATION_SCHEMA`, one row per (rank, device, name,
message size to within a factor of two: [2^k, 2^(k+1)) bytes) of the communication tasks (NCCL /
RCCL / HCCL / gloo kernels), sorted by rank, device, then total time descending:
    rank, device, name, count, total_ns, avg_ns, max_ns,
    overlapped_ns -- time of these tasks under a kernel of the same device (hidden),
    exposed_ns    -- total_ns - overlapped_ns (summed per task: tasks of one name that run
                     at once on two streams are both counted),
    bytes         -- bytes moved, when the source gives them (-1 when unknown),
    collective    -- what they do (all_reduce, all_gather, send_recv ...; null: unknown),
    group_size    -- the ranks taking part (0: unknown),
    wait_ns       -- time spent waiting for peers (:mod:`perfledger.analysis.comm_split`),
    transfer_ns   -- total_ns - wait_ns,
    wait_pct      -- wait_ns / total_ns, %,
    bus_gbps      -- achieved bus bandwidth (nccl-tests' busbw: the messages' bytes times the
                     collective's factor, over transfer_ns where the waits are measured or
                     aligned, over total_ns — as nccl-tests times it — where they are
                     estimated from the link or unknown; NaN when bytes are unknown),
    split         -- where the waits come from: measured, aligned, aligned_partial,
                     estimated, unknown (or several, joined by "+"),
    message_bytes -- the median message of these tasks (-1: unknown),
    algorithm     -- the algorithm and protocol NCCL/RCCL's kernel name says (RING_LL,
                     TREE_SIMPLE, ...); null when it does not.
"""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.comm_split import ALIGNED, ALIGNED_PARTIAL, MEASURED, UNKNOWN, bus_factor
from perfledger.analysis.intervals import union
from perfledger.model import schema
from perfledger.model.comm import CommSplit
from perfledger.model.tables import COMMUNICATION_SCHEMA

# Waits found from the collective itself: the bus bandwidth is timed over the transfer.
_MEASURED_WAITS: Final = frozenset({MEASURED, ALIGNED, ALIGNED_PARTIAL})
_ALGORITHM: Final = re.compile(
    r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)"
    r"_(LL128|LL|SIMPLE)(?=[_(]|$)"
)


def communication(events: pa.Table, split: CommSplit | None = None) -> pa.Table:
    """Per communication operation: count, time, time hidden under compute, bytes, and the
    wait/transfer split (``split``: the rank's :func:`~perfledger.analysis.comm_split.
    comm_split`, rows of ``events``; None: all transfer)."""
    is_comm = columns.isin(events, "kind", [schema.COMM])
    if not is_comm.any():
        return COMMUNICATION_SCHEMA.empty_table()
    # every per-task figure at the communication rows only (a few per step), not per event;
    # the compute under them from the kernels' rows alone (no column of every event copied)
    rows = np.flatnonzero(is_comm)
    rank, device, start, end = _times_at(events, rows)
    k_rank, k_device, k_start, k_end = _times_at(
        events, np.flatnonzero(columns.isin(events, "kind", [schema.KERNEL]))
    )
    overlapped = np.zeros(rows.size, dtype=np.int64)
    for r, d in set(zip(rank.tolist(), device.tolist(), strict=True)):
        same = (k_rank == r) & (k_device == d)
        compute = union(k_start[same], k_end[same])
        mine = np.flatnonzero((rank == r) & (device == d))
        overlapped[mine] = compute.covered(start[mine], end[mine])
    del k_rank, k_device, k_start, k_end
    names = columns.strings(columns.take_rows(events, rows, ["name"]), "name")
    split_of = _per_task(events, rows, split)
    wait = split_of["wait"]
    message = split_of["bytes"]
    size_class = np.where(message > 0, np.floor(np.log2(np.maximum(message, 1))), -1).astype(
        np.int64
    )
    # the tasks of each (rank, device, name, size class), in row order: one pass over them
    groups: dict[tuple[int, int, str, int], list[int]] = {}
    for i, key in enumerate(
        zip(
            rank.tolist(),
            device.tolist(),
            [str(n) for n in names.tolist()],
            size_class.tolist(),
            strict=True,
        )
    ):
        groups.setdefault(key, []).append(i)
    sources_of = split_of["source"].tolist()
    records: list[dict[str, Any]] = []
    for key in sorted(groups):
        r, d, name, size = key
        sel = np.array(groups[key], dtype=np.int64)
        dur = end[sel] - start[sel]
        waited = int(wait[sel].sum())
        total = int(dur.sum())
        collective = split_of["collective"][sel[0]]
        group = int(split_of["group_size"][sel].max())
        moved = message[sel]
        known = moved[moved >= 0]
        transfer = total - waited
        sources = {str(sources_of[i]) for i in groups[key]}
        timed = transfer if sources <= _MEASURED_WAITS else total
        bus = (
            float(moved.sum()) * bus_factor(collective, group) / timed
            if (moved > 0).all() and timed > 0 and group > 1
            else float("nan")
        )
        records.append(
            {
                "rank": r,
                "device": d,
                "name": name,
                "count": int(sel.size),
                "total_ns": int(dur.sum()),
                "avg_ns": int(dur.sum() // sel.size),
                "max_ns": int(dur.max()),
                "overlapped_ns": int(overlapped[sel].sum()),
                "exposed_ns": int(dur.sum() - overlapped[sel].sum()),
                "bytes": int(known.sum()) if known.size else -1,
                "collective": collective,
                "group_size": group,
                "wait_ns": waited,
                "transfer_ns": transfer,
                "wait_pct": round(100.0 * waited / total, 2) if total > 0 else 0.0,
                "bus_gbps": bus,
                "split": "+".join(sorted(sources)),
                "message_bytes": int(np.median(moved)) if size >= 0 else -1,
                "algorithm": nccl_algorithm(name),
            }
        )
    records.sort(
        key=lambda x: (
            int(x["rank"]),
            int(x["device"]),
            -int(x["total_ns"]),
            str(x["name"]),
            int(x["message_bytes"]),
        )
    )
    return pa.Table.from_pylist(records, schema=COMMUNICATION_SCHEMA)


def nccl_algorithm(name: str) -> str | None:
    """The algorithm and protocol in an NCCL/RCCL kernel's name (``ncclKernel_AllReduce_
    RING_LL_Sum_float`` and ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` say RING_LL)."""
    found = _ALGORITHM.search(name)
    return f"{found.group(1)}_{found.group(2)}" if found else None


def _times_at(events: pa.Table, rows: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
    """Rank, device, start and end of the events at ascending ``rows``."""
    taken = columns.take_rows(events, rows, ["rank", "device", "start_ns", "dur_ns"])
    start = columns.int64(taken, "start_ns")
    return (
        columns.int64(taken, "rank"),
        columns.int64(taken, "device"),
        start,
        start + columns.int64(taken, "dur_ns"),
    )


def _per_task(events: pa.Table, rows: np.ndarray, split: CommSplit | None) -> dict[str, np.ndarray]:
    """The split's figures of the tasks at ``rows`` (ascending rows of the events table): the
    events' own bytes where there is no split."""
    collective = np.full(rows.size, None, dtype=object)
    source = np.full(rows.size, UNKNOWN, dtype=object)
    group = np.zeros(rows.size, dtype=np.int64)
    wait = np.zeros(rows.size, dtype=np.int64)
    moved = columns.int64_at(events, "bytes", rows)
    if split is not None and split.rows.size and rows.size:
        at = np.minimum(np.searchsorted(rows, split.rows), rows.size - 1)
        found = rows[at] == split.rows
        at = at[found]
        collective[at] = np.asarray(split.collective, dtype=object)[found]
        source[at] = np.asarray(split.source, dtype=object)[found]
        group[at] = split.group_size[found]
        moved[at] = split.bytes[found]
        wait[at] = split.wait_ns[found]
    return {
        "collective": collective,
        "source": source,
        "group_size": group,
        "bytes": moved,
        "wait": wait,
    }
