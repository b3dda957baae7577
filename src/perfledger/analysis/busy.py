"""Device busy % per time bucket: the share of each bucket in which some device task ran.

A device is busy while any of its tasks (kernels, collectives, copies, sets) runs, on any
stream: the union of their intervals, so two kernels side by side count once. Buckets are
aligned on the profile's time origin; a long profile gets wider buckets rather than more.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa

from perfledger.analysis import columns, intervals
from perfledger.analysis.intervals import IntervalSet
from perfledger.model import schema

DEVICE_BUSY_BUCKET_NS: Final = 1_000_000
# A device gets at most this many buckets (plus its last, idle one); longer profiles widen them.
DEVICE_BUSY_MAX_BUCKETS: Final = 200_000

# One row per bucket and device, in (rank, device, start_ns) order.
DEVICE_BUSY_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("device", pa.int64(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),  # the bucket is [start, start + width)
        pa.field("width_ns", pa.int64(), nullable=False),  # the same for every bucket of a device
        pa.field("busy_pct", pa.float64(), nullable=False),  # 0 .. 100, not rounded
    ]
)


def device_busy(
    events: pa.Table,
    *,
    origin_ns: int | None = None,
    bucket_ns: int = DEVICE_BUSY_BUCKET_NS,
    max_buckets: int = DEVICE_BUSY_MAX_BUCKETS,
) -> pa.Table:
    """Busy % of every device per bucket (:data:`DEVICE_BUSY_SCHEMA`).

    Each device of each rank gets the buckets [t, t + width) from ``origin_ns`` (the first
    event's start by default) up to the end of its last task, then one more bucket wholly
    after it, idle (0 %), so that a plotted series comes back to 0. ``width`` is
    ``bucket_ns``, or a whole multiple of it when a device would need more than
    ``max_buckets`` buckets. Host events are not device time.

    Args:
        events: canonical events (:data:`perfledger.model.schema.EVENTS_SCHEMA`).
        origin_ns: where the first bucket starts (absolute ns, the events' time base).
        bucket_ns: the bucket width of a profile short enough.
        max_buckets: the most buckets a device gets before its last, idle one.
    """
    if events.num_rows == 0:
        return DEVICE_BUSY_SCHEMA.empty_table()
    device = columns.int64(events, "device")
    task = columns.isin(events, "kind", schema.DEVICE_TASK_KINDS) & (device >= 0)
    if not task.any():
        return DEVICE_BUSY_SCHEMA.empty_table()
    start = columns.int64(events, "start_ns")
    origin = int(start.min()) if origin_ns is None else origin_ns
    rows = np.flatnonzero(task)
    rank = columns.int64_at(events, "rank", rows)
    device = device[rows]
    start = start[rows]
    end = start + columns.int64_at(events, "dur_ns", rows)
    # the tasks of one device side by side, devices in (rank, device) order
    order = np.lexsort((device, rank))
    rank, device, start, end = rank[order], device[order], start[order], end[order]
    heads = np.flatnonzero(
        np.concatenate([[True], (rank[1:] != rank[:-1]) | (device[1:] != device[:-1])])
    )
    tails = np.append(heads[1:], rows.size)
    parts = [
        _buckets(
            int(rank[head]),
            int(device[head]),
            intervals.union(start[head:tail], end[head:tail]),
            origin,
            bucket_ns,
            max_buckets,
        )
        for head, tail in zip(heads.tolist(), tails.tolist(), strict=True)  # one per device
    ]
    return pa.concat_tables(parts)


def _buckets(
    rank: int, device: int, busy: IntervalSet, origin: int, bucket_ns: int, max_buckets: int
) -> pa.Table:
    """The rows of one device, from the union of its tasks."""
    span_end = int(busy.ends[-1]) if len(busy) else origin
    width = bucket_ns
    count = max(-(-(span_end - origin) // width), 0)
    if count > max_buckets:
        width = bucket_ns * -(-count // max_buckets)
        count = -(-(span_end - origin) // width)
    edges = origin + np.arange(count + 1, dtype=np.int64) * width  # the last one is idle
    busy_pct = busy.covered(edges, edges + width) * (100.0 / width)
    return pa.table(
        {
            "rank": pa.array(np.full(edges.size, rank, dtype=np.int32)),
            "device": pa.array(np.full(edges.size, device, dtype=np.int64)),
            "start_ns": pa.array(edges),
            "width_ns": pa.array(np.full(edges.size, width, dtype=np.int64)),
            "busy_pct": pa.array(busy_pct),
        },
        schema=DEVICE_BUSY_SCHEMA,
    )
