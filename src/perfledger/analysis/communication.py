"""Communication tasks per operation: how long they ran and how much of it compute hid.

``communication(events)`` returns :data:`COMMUNICATION_SCHEMA`, one row per (rank, device, name)
of the communication tasks (NCCL / RCCL / HCCL / gloo kernels), sorted by rank, device, then
total time descending:
    rank, device, name, count, total_ns, avg_ns, max_ns,
    overlapped_ns -- time of these tasks under a kernel of the same device (hidden),
    exposed_ns    -- total_ns - overlapped_ns (summed per task: tasks of one name that run
                     at once on two streams are both counted),
    bytes         -- bytes moved, when the source gives them (-1 when unknown).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.analysis.intervals import union
from perfledger.model import schema
from perfledger.model.tables import COMMUNICATION_SCHEMA


def communication(events: pa.Table) -> pa.Table:
    """Per communication operation: count, time, time hidden under compute, bytes."""
    is_comm = columns.isin(events, "kind", [schema.COMM])
    if not is_comm.any():
        return COMMUNICATION_SCHEMA.empty_table()
    is_kernel = columns.isin(events, "kind", [schema.KERNEL])
    rank = columns.int64(events, "rank")
    device = columns.int64(events, "device")
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    nbytes = columns.int64(events, "bytes")
    names = columns.strings(events, "name")

    overlapped = np.zeros(events.num_rows, dtype=np.int64)
    for r, d in {(int(a), int(b)) for a, b in zip(rank[is_comm], device[is_comm], strict=True)}:
        same = (rank == r) & (device == d)
        compute = union(start[same & is_kernel], end[same & is_kernel])
        rows = np.flatnonzero(same & is_comm)
        overlapped[rows] = compute.covered(start[rows], end[rows])

    rows = np.flatnonzero(is_comm)
    keys = sorted({(int(rank[i]), int(device[i]), str(names[i])) for i in rows})
    records: list[dict[str, int | str]] = []
    for r, d, name in keys:
        sel = rows[(rank[rows] == r) & (device[rows] == d) & (names[rows] == name)]
        dur = end[sel] - start[sel]
        known = nbytes[sel][nbytes[sel] >= 0]
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
            }
        )
    records.sort(
        key=lambda x: (int(x["rank"]), int(x["device"]), -int(x["total_ns"]), str(x["name"]))
    )
    return pa.Table.from_pylist(records, schema=COMMUNICATION_SCHEMA)
