"""Canonical tables: the one data model every importer produces and every analysis reads.

See DESIGN.md ("Canonical event table"). Times are integer nanoseconds on one time base per
rank; never floats of microseconds.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

# The version of meta.json and summary.json (history: docs/formats.md, "format_version").
FORMAT_VERSION: Final = 2

# Event kinds.
CPU_OP: Final = "cpu_op"
PYTHON: Final = "python"
ANNOTATION: Final = "annotation"
STEP: Final = "step"
RUNTIME: Final = "runtime"
SYNC: Final = "sync"
KERNEL: Final = "kernel"
COMM: Final = "comm"
MEMCPY: Final = "memcpy"
MEMSET: Final = "memset"
DATALOADER: Final = "dataloader"
DEVICE_ANNOTATION: Final = "device_annotation"
INSTANT: Final = "instant"

KINDS: Final = (
    CPU_OP,
    PYTHON,
    ANNOTATION,
    STEP,
    RUNTIME,
    SYNC,
    KERNEL,
    COMM,
    MEMCPY,
    MEMSET,
    DATALOADER,
    DEVICE_ANNOTATION,
    INSTANT,
)
# Kinds that occupy a device: the only ones counted in device busy time.
DEVICE_TASK_KINDS: Final = (KERNEL, COMM, MEMCPY, MEMSET)
# Host-side kinds that issue device work (carry a correlation id to a device task).
LAUNCH_KINDS: Final = (RUNTIME, SYNC)

HOST_DEVICE: Final = -1
NO_ID: Final = -1
NO_STEP: Final = -1
# The step number of a device's whole-span account row (step_trace.csv's step = -1).
SPAN_STEP: Final = -1

_DICT_STR = pa.dictionary(pa.int32(), pa.string())

EVENTS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("kind", _DICT_STR, nullable=False),
        pa.field("name", _DICT_STR, nullable=False),
        pa.field("device", pa.int16(), nullable=False),
        pa.field("stream", pa.int64(), nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("correlation", pa.int64(), nullable=False),
        pa.field("external_id", pa.int64(), nullable=False),
        pa.field("step", pa.int32(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("flops", pa.float64(), nullable=False),
        pa.field("shapes", pa.string()),
        pa.field("dtypes", pa.string()),
        pa.field("args", pa.string()),
    ]
)

COUNTERS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("track", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)


def empty_events() -> pa.Table:
    """An events table with no rows and the canonical schema."""
    return EVENTS_SCHEMA.empty_table()


# Bytes and time one rank sent to another over a link, per step and collective type, as the
# source's own communication matrix gives them (Ascend communication_matrix.json): the
# ``rank`` whose output it is, and the pair as the source numbers it (ranks of the group).
COMM_MATRIX_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.string()),  # the source's step label ("step50"), null if none
        pa.field("op", pa.string(), nullable=False),  # collective type ("allreduce")
        pa.field("group", pa.string()),  # the communication group's id, null if none
        pa.field("src_rank", pa.int32(), nullable=False),
        pa.field("dst_rank", pa.int32(), nullable=False),
        pa.field("transport", pa.string(), nullable=False),  # HCCS, PCIE, RDMA, SIO, LOCAL ...
        pa.field("transit_bytes", pa.int64(), nullable=False),
        pa.field("transit_ns", pa.int64(), nullable=False),
    ]
)


def empty_counters() -> pa.Table:
    """A counters table with no rows and the canonical schema."""
    return COUNTERS_SCHEMA.empty_table()


def conform_events(table: pa.Table) -> pa.Table:
    """Cast a table to the canonical events schema (column order and types).

    Raises:
        ValueError: a column is missing.
    """
    missing = [f.name for f in EVENTS_SCHEMA if f.name not in table.column_names]
    if missing:
        raise ValueError(f"events table lacks columns: {', '.join(missing)}")
    return table.select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA)


# The recorder's timing of every step, profiled or not (tables/step_times.parquet).
STEP_TIMES_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("step", pa.int32()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("profiled", pa.bool_()),
        # the step's time on the device, between CUDA events at its boundaries (null: unknown)
        pa.field("device_ns", pa.int64()),
    ]
)


# Counter tracks of the recorder's host samples.
TRACK_TREE: Final = "process_tree"  # the program's process tree (CPU %, RSS)
TRACK_CORES: Final = "cpu_cores"  # busy % of each core of the host
TRACK_RANK: Final = "rank_process"  # each rank's own process
# Host-wide samples the recorder files once, under rank 0 (busy % of each core of the host):
# each rank's own view of the run needs them too.
HOST_WIDE_TRACKS: Final = (TRACK_CORES,)
