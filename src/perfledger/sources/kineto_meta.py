"""A Kineto trace's meta: its top-level keys under the profile's names, process and thread
names, the profiler's span, its rank and time base read with damage in mind."""

from __future__ import annotations

from typing import Any

from perfledger.sources.kineto_columns import Side
from perfledger.sources.kineto_stream import ReadResult

# Ranks are 32-bit in every table: a larger "rank" is damage, read as no rank at all (the
# rank then comes from the file name or the order of the files).
_RANK_LIMIT = 1 << 31


def distributed_rank(meta: dict[str, Any]) -> int | None:
    info = meta.get("distributed_info")
    value = info.get("rank") if isinstance(info, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _RANK_LIMIT:
        return value
    return None


# Beyond this a base time is damage, not a clock reading (2**62 ns is 146 years), and adding it
# to every timestamp would overflow 64 bits.
_BASE_TIME_LIMIT_NS = 1 << 62


def base_time_ns(meta: dict[str, Any]) -> int | None:
    """The trace's baseTimeNanoseconds (0 when absent); None when it is not a usable time."""
    value = meta.get("base_time_ns")
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value if abs(value) < _BASE_TIME_LIMIT_NS else None
    return None


_META_KEYS = {
    "schemaVersion": "schema_version",
    "deviceProperties": "device_properties",
    "distributedInfo": "distributed_info",
    "baseTimeNanoseconds": "base_time_ns",
    "traceName": "trace_name",
    "displayTimeUnit": "display_time_unit",
    "record_shapes": "record_shapes",
    "profile_memory": "profile_memory",
    "with_stack": "with_stack",
    "with_flops": "with_flops",
    "with_modules": "with_modules",
    "cupti_version": "cupti_version",
    "cuda_runtime_version": "cuda_runtime_version",
    "cuda_driver_version": "cuda_driver_version",
    "hip_runtime_version": "hip_runtime_version",
    "roctracer_version": "roctracer_version",
}


def trace_meta(result: ReadResult, side: Side) -> dict[str, Any]:
    """Everything outside the events: top-level keys, process and thread names, the span."""
    top = {**result.head, **result.tail}
    meta: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for key, value in top.items():
        if key in _META_KEYS:
            meta[_META_KEYS[key]] = value
        else:
            other[key] = value
    if other:
        meta["trace_keys"] = other
    info = meta.get("distributed_info")
    if isinstance(info, dict):
        for key in ("world_size", "backend"):
            if key in info:
                meta[key] = info[key]
    names: dict[str, dict[str, Any]] = {
        "process_names": {},
        "process_labels": {},
        "process_sort_index": {},
        "thread_names": {},
        "thread_sort_index": {},
    }
    for name, pid, tid, args in side.metadata:
        if name == "process_name" and "name" in args:
            names["process_names"][str(pid)] = args["name"]
        elif name == "process_labels" and "labels" in args:
            names["process_labels"][str(pid)] = args["labels"]
        elif name == "process_sort_index" and "sort_index" in args:
            names["process_sort_index"][str(pid)] = args["sort_index"]
        elif name == "thread_name" and "name" in args:
            names["thread_names"][f"{pid}:{tid}"] = args["name"]
        elif name == "thread_sort_index" and "sort_index" in args:
            names["thread_sort_index"][f"{pid}:{tid}"] = args["sort_index"]
    meta.update({key: value for key, value in names.items() if value})
    base = base_time_ns(meta) or 0
    if side.spans:
        name, start, dur = side.spans[0]
        meta["profiler_span"] = {"name": name, "start_ns": base + start, "dur_ns": dur}
    for name, ts in side.markers:
        if name == "Record Window End":
            meta["record_window_end_ns"] = base + ts
    meta["time_base"] = (
        "epoch ns: baseTimeNanoseconds + ts" if "base_time_ns" in meta else "epoch ns: ts"
    )
    return meta
