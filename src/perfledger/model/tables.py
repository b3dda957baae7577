"""The profile's derived tables, one row schema each: the operator tables (op_summary,
op_statistic, kernel_details, api_statistic), copies by spelling and by direction, and
communication per operation. The CSV artefacts are these tables written out."""

from __future__ import annotations

from typing import Final

import pyarrow as pa

# The names of op_summary and kernel_details (kind, name, host_op): codes into the distinct
# names (a few hundred kernel names for a million tasks); their CSVs are the same text.
NAMES: Final = pa.dictionary(pa.int32(), pa.string())

OP_SUMMARY_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("stream", pa.int64()),
        pa.field("step", pa.int32()),
        pa.field("kind", NAMES),
        pa.field("name", NAMES),
        pa.field("start_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("wait_ns", pa.int64()),
        pa.field("host_op", NAMES),
        pa.field("launch_ns", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("shapes", pa.string()),
        pa.field("dtypes", pa.string()),
    ]
)


HOST_OP_SUMMARY_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("stream", pa.int64()),
        pa.field("step", pa.int32()),
        pa.field("kind", pa.string()),
        pa.field("name", pa.string()),
        pa.field("start_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("self_ns", pa.int64()),
        pa.field("shapes", pa.string()),
        pa.field("dtypes", pa.string()),
    ]
)


OP_STATISTIC_SCHEMA: Final = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("total_ns", pa.int64()),
        pa.field("min_ns", pa.int64()),
        pa.field("avg_ns", pa.float64()),
        pa.field("max_ns", pa.int64()),
        pa.field("ratio", pa.float64()),
    ]
)


KERNEL_DETAILS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("stream", pa.int64()),
        pa.field("step", pa.int32()),
        pa.field("kind", NAMES),
        pa.field("name", NAMES),
        pa.field("start_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("wait_ns", pa.int64()),
        pa.field("host_op", NAMES),
        pa.field("grid", pa.string()),
        pa.field("block", pa.string()),
        pa.field("registers_per_thread", pa.int64()),
        pa.field("shared_memory_bytes", pa.int64()),
        pa.field("blocks_per_sm", pa.float64()),
        pa.field("warps_per_sm", pa.float64()),
        pa.field("occupancy_pct", pa.float64()),
    ]
)


API_STATISTIC_SCHEMA: Final = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("total_ns", pa.int64()),
        pa.field("avg_ns", pa.float64()),
        pa.field("min_ns", pa.int64()),
        pa.field("max_ns", pa.int64()),
    ]
)


# The copies of one spelling (name, args.kind), summed: what :func:`copy_spellings` returns.
SPELLINGS_SCHEMA: Final = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("kind_arg", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("time_ns", pa.int64()),
        pa.field("sized_time_ns", pa.int64()),
        pa.field("small_count", pa.int64()),
        pa.field("unknown_bytes_count", pa.int64()),
    ]
)


TRANSFERS_SCHEMA: Final = pa.schema(
    [
        pa.field("direction", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("time_ns", pa.int64()),
        pa.field("gbps", pa.float64()),
        pa.field("pageable_count", pa.int64()),
        pa.field("small_count", pa.int64()),
        pa.field("unknown_bytes_count", pa.int64()),
    ]
)


COMMUNICATION_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("name", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("total_ns", pa.int64()),
        pa.field("avg_ns", pa.int64()),
        pa.field("max_ns", pa.int64()),
        pa.field("overlapped_ns", pa.int64()),
        pa.field("exposed_ns", pa.int64()),
        pa.field("bytes", pa.int64()),
        # added in 0.2: what the tasks do, how long they waited for peers, the bandwidth
        pa.field("collective", pa.string()),
        pa.field("group_size", pa.int64()),
        pa.field("wait_ns", pa.int64()),
        pa.field("transfer_ns", pa.int64()),
        pa.field("wait_pct", pa.float64()),
        pa.field("bus_gbps", pa.float64()),
        pa.field("split", pa.string()),
        pa.field("message_bytes", pa.int64()),  # each task's message (-1: unknown)
        pa.field("algorithm", pa.string()),  # NCCL's algorithm and protocol, e.g. RING_LL
    ]
)
