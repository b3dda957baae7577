"""Importer of PyTorch profiler (Kineto) Chrome traces: ``.json`` and ``.json.gz``.

Covers the formats written from PyTorch 1.8 to 2.x: capitalised categories of 1.8
(``Kernel``, ``Runtime``, ``Operator``), integer µs timestamps and float µs with ns digits,
timestamps relative to ``baseTimeNanoseconds``, old and new arg names (``external id`` /
``External id``), launch flows (``async_gpu``, ``async_cpu_to_gpu``, ``ac2g``), CUDA, ROCm
(HIP), MTIA and CPU-only traces. Which category or name means which kind lives in
:mod:`perfledger.vendors`.

Time base: every ``start_ns`` is absolute epoch-style ns as the profiler wrote it:
``baseTimeNanoseconds + ts`` when the file has a base time (newer Kineto writes ``ts``
relative to it), else ``ts`` itself (older Kineto wrote absolute µs). Numbers are converted
from their text, so ``1712195495505543.2`` µs is exactly ``1712195495505543200`` ns.

The ``args`` column holds the source's args object verbatim (its text as written, key order
kept), including the values also copied into columns; ``shapes`` and ``dtypes`` hold the text
of ``Input Dims`` and ``Input type``. ``[memory]`` events also feed the counters table
(track ``cuda:0``, ``cpu`` ...; names ``allocated_bytes`` and ``reserved_bytes``).
"""

from __future__ import annotations

import gc
import gzip
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger import schema, vendors
from perfledger.errors import TraceFormatError
from perfledger.sources.base import Trace
from perfledger.sources.kineto_columns import (
    PHASE_INSTANT,
    Block,
    Int64Array,
    Side,
    chunk_columns,
)
from perfledger.sources.kineto_stream import ReadResult, read_events

SOURCE_KIND = "kineto"
_SUFFIXES = (".json", ".json.gz")
_SNIFF_BYTES = 1 << 20
_KIND_CODE = {kind: code for code, kind in enumerate(schema.KINDS)}
_UNKNOWN = -1

__all__ = ["SOURCE_KIND", "is_kineto", "load_kineto"]


def is_kineto(path: Path) -> bool:
    """Whether ``path`` looks like a Kineto / Chrome trace (a cheap look at its start)."""
    if not path.name.lower().endswith(_SUFFIXES) or not path.is_file():
        return False
    try:
        with path.open("rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    start = unzipped.read(_SNIFF_BYTES)
            else:
                start = raw.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    start = start.removeprefix(b"\xef\xbb\xbf").lstrip()
    if start.startswith(b"{"):
        return b'"traceEvents"' in start or (
            b'"schemaVersion"' in start and b'"deviceProperties"' in start
        )
    if start.startswith(b"["):
        return start[1:].lstrip().startswith(b"{") and b'"ph"' in start[:4096]
    return False


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    # The decoder creates millions of small objects that hold no cycles; the cyclic collector
    # would rescan them again and again (measured: 3x slower import).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_kineto(
    path: Path,
    *,
    rank: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Trace:
    """Read one rank's Kineto trace into canonical tables.

    Args:
        path: a ``.json`` or ``.json.gz`` Chrome trace written by the PyTorch profiler.
        rank: the rank to record; default the trace's ``distributedInfo.rank``, else 0.
        progress: called now and then with (bytes read, file size).

    Raises:
        TraceFormatError: the file is missing, not JSON, not a trace, or holds no events.
    """
    path = Path(path)
    with _no_cyclic_gc():
        result, chunks = read_events(path, progress)
        side = Side()
        blocks = [block for chunk in chunks if (block := chunk_columns(chunk, side)) is not None]
        del chunks
    if progress is not None:
        size = path.stat().st_size
        progress(size, size)
    losses = list(result.loss)
    malformed = result.malformed + side.malformed
    if malformed:
        losses.append(f"{malformed:,} malformed events were skipped")
    if not blocks:
        if losses:
            raise TraceFormatError(f"{path}: {'; '.join(losses)}; no event could be read")
        if result.events_seen == 0:
            raise TraceFormatError(f"{path}: traceEvents is empty: the trace holds no events")
        raise TraceFormatError(f"{path}: the trace holds no events, only metadata")
    meta = _meta(result, side)
    trace_rank = rank if rank is not None else _distributed_rank(meta)
    base_ns = _base_time_ns(meta)
    events = _events_table(blocks, side, trace_rank, base_ns, meta)
    meta["rank"] = trace_rank
    meta["events"] = events.num_rows
    if side.other_phases:
        meta["skipped_phases"] = dict(sorted(side.other_phases.items()))
    return Trace(
        events=events,
        counters=_counters_table(side, trace_rank, base_ns),
        meta=meta,
        source_kind=SOURCE_KIND,
        source_files=(path,),
        loss="; ".join(losses) if losses else None,
    )


# --- meta -----------------------------------------------------------------------------------


def _distributed_rank(meta: dict[str, Any]) -> int:
    info = meta.get("distributed_info")
    value = info.get("rank") if isinstance(info, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _base_time_ns(meta: dict[str, Any]) -> int:
    value = meta.get("base_time_ns")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


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


def _meta(result: ReadResult, side: Side) -> dict[str, Any]:
    """Everything outside the events: top-level keys, process and thread names, the span."""
    top = {**result.head, **result.tail}
    meta: dict[str, Any] = {"source_kind": SOURCE_KIND}
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
    base = _base_time_ns(meta)
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


# --- events ---------------------------------------------------------------------------------


def _concat(arrays: list[Any]) -> Any:
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def _take_column(blocks: list[Block], column: str) -> Any:
    """One column of all blocks, concatenated; the blocks let go of it (memory stays flat)."""
    parts = [getattr(b, column) for b in blocks]
    for block in blocks:
        setattr(block, column, None)
    return _concat(parts)


def _optional_column(
    blocks: list[Block], sizes: list[int], column: str, fill: Any, dtype: Any
) -> Any:
    """As :func:`_take_column` for a column that some blocks lack (None: all ``fill``)."""
    parts = [
        getattr(b, column) if getattr(b, column) is not None else np.full(size, fill, dtype)
        for b, size in zip(blocks, sizes, strict=True)
    ]
    for block in blocks:
        setattr(block, column, None)
    return _concat(parts)


def _string_column(blocks: list[Block], sizes: list[int], column: str, take: pa.Array) -> pa.Array:
    """A string column of all blocks in sorted row order (absent parts are nulls)."""
    parts = [
        getattr(b, column) if getattr(b, column) is not None else pa.nulls(size, pa.string())
        for b, size in zip(blocks, sizes, strict=True)
    ]
    for block in blocks:
        setattr(block, column, None)
    if all(p.null_count == len(p) for p in parts):
        return pa.nulls(len(take), pa.string())
    chunked = pa.chunked_array(parts, pa.string())
    del parts
    return chunked.take(take)


def _dictionary(blocks: list[Block], column: str) -> pa.DictionaryArray:
    chunked = pa.chunked_array([getattr(b, column) for b in blocks])
    for block in blocks:
        setattr(block, column, None)
    return chunked.unify_dictionaries().combine_chunks()


def _indices(array: pa.DictionaryArray) -> Int64Array:
    return np.asarray(array.indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _category_kinds(categories: list[str]) -> tuple[Int64Array, npt.NDArray[np.bool_]]:
    """Per distinct category: the base kind code and whether it lives on a device."""
    kinds = np.full(len(categories), _UNKNOWN, np.int64)
    device = np.zeros(len(categories), np.bool_)
    for i, category in enumerate(categories):
        lowered = category.lower()
        kind = vendors.KINETO_CATEGORY_KINDS.get(lowered)
        if kind is not None:
            kinds[i] = _KIND_CODE[kind]
        device[i] = lowered in vendors.KINETO_DEVICE_CATEGORIES
    return kinds, device


def _name_flags(names: list[str]) -> dict[str, npt.NDArray[np.bool_]]:
    """Per distinct name: the vendor rules that match it."""
    flags = {
        key: np.zeros(len(names), np.bool_)
        for key in ("sync", "comm", "step", "loader", "loader_py", "mtia_copy", "mtia_mark")
    }
    for i, name in enumerate(names):
        flags["sync"][i] = vendors.SYNC_RUNTIME.match(name) is not None
        flags["comm"][i] = vendors.COMM_KERNEL.search(name) is not None
        flags["step"][i] = vendors.STEP_ANNOTATION.match(name) is not None
        flags["loader"][i] = name.startswith(vendors.DATALOADER_PREFIXES)
        flags["loader_py"][i] = vendors.DATALOADER_PYTHON.search(name) is not None
        flags["mtia_copy"][i] = name in vendors.MTIA_MEMCPY_NAMES
        flags["mtia_mark"][i] = name in vendors.MTIA_MARKER_NAMES
    return flags


def _classify(
    cat: pa.DictionaryArray, name: pa.DictionaryArray, phase: Any, pid: Int64Array
) -> tuple[Int64Array, list[str]]:
    """Kind code per row, and the categories the vendor table does not know."""
    categories = cat.dictionary.to_pylist()
    base_of_cat, device_of_cat = _category_kinds(categories)
    cat_codes = _indices(cat)
    base = base_of_cat[cat_codes]
    name_codes = _indices(name)
    flags = {
        key: table[name_codes] for key, table in _name_flags(name.dictionary.to_pylist()).items()
    }
    # Processes that hold device tasks are devices: runtime rows there are device-side marks.
    on_device_pid = np.isin(pid, np.unique(pid[device_of_cat[cat_codes]]))
    is_mtia = np.array([c.lower() == "mtia_ccp_events" for c in categories], np.bool_)[cat_codes]

    k = _KIND_CODE
    kind = base.copy()
    runtime = base == k[schema.RUNTIME]
    kind[runtime & flags["sync"]] = k[schema.SYNC]
    kind[runtime & on_device_pid] = k[schema.DEVICE_ANNOTATION]
    kind[(base == k[schema.KERNEL]) & flags["comm"]] = k[schema.COMM]
    kind[is_mtia & flags["mtia_copy"]] = k[schema.MEMCPY]
    kind[is_mtia & flags["mtia_mark"]] = k[schema.DEVICE_ANNOTATION]
    host_span = np.isin(base, [k[schema.CPU_OP], k[schema.ANNOTATION], k[schema.PYTHON]])
    kind[host_span & flags["step"]] = k[schema.STEP]
    loader = (host_span & flags["loader"]) | ((base == k[schema.PYTHON]) & flags["loader_py"])
    kind[loader & ~flags["step"]] = k[schema.DATALOADER]
    unknown = base == _UNKNOWN
    kind[unknown] = np.where(
        on_device_pid[unknown], k[schema.DEVICE_ANNOTATION], k[schema.ANNOTATION]
    )
    kind[phase == PHASE_INSTANT] = k[schema.INSTANT]
    unmapped = sorted(categories[i] for i in np.unique(cat_codes[unknown]).tolist())
    return kind, unmapped


def _device_index(values: Int64Array) -> Int64Array:
    """Device numbers for int16: out-of-range ids (a pid used as device) are renumbered."""
    high = int(np.iinfo(np.int16).max)
    outside = (values < 0) | (values > high)
    if not outside.any():
        return values
    inside_max = int(values[~outside].max()) if (~outside).any() else -1
    _, position = np.unique(values[outside], return_inverse=True)
    renumbered: Int64Array = values.copy()
    renumbered[outside] = np.minimum(inside_max + 1 + position, high)
    return renumbered


def _flow_correlation(
    side: Side,
    kind: Int64Array,
    pid: Int64Array,
    tid: Int64Array,
    ts: Int64Array,
    correlation: Int64Array,
) -> Int64Array:
    """Correlation ids from launch flows, for launches and device tasks that lack one.

    A flow starts (``s``) on the host call and finishes (``f``, bound to the enclosing
    slice) on the device task, at the same pid, tid and ts as the event it binds to.
    """
    if not side.flow_id:
        return correlation
    k = _KIND_CODE
    launch = np.isin(kind, [k[schema.RUNTIME], k[schema.SYNC]])
    task = np.isin(kind, [k[x] for x in schema.DEVICE_TASK_KINDS])
    missing = np.flatnonzero((launch | task) & (correlation < 0))
    if missing.size == 0:
        return correlation
    flows = pa.table(
        {
            "pid": _concat(side.flow_pid),
            "tid": _concat(side.flow_tid),
            "ts": _concat(side.flow_ts),
            "start": _concat(side.flow_start),
            "flow": _concat(side.flow_id),
        }
    )
    keys = ["pid", "tid", "ts", "start"]
    flows = flows.group_by(keys).aggregate([("flow", "min"), ("flow", "max")])
    # two flows at the same place are ambiguous: link neither
    flows = flows.filter(pc.equal(flows["flow_min"], flows["flow_max"]))
    rows = pa.table(
        {
            "pid": pid[missing],
            "tid": tid[missing],
            "ts": ts[missing],
            "start": launch[missing],
            "row": missing,
        }
    )
    joined = rows.join(flows, keys=keys, join_type="inner")
    result: Int64Array = correlation.copy()
    result[joined["row"].to_numpy()] = joined["flow_min"].to_numpy()
    return result


def _copy_sizes(kind: Int64Array, correlation: Int64Array, nbytes: Int64Array) -> Int64Array:
    """Bytes of copies and fills that lack them, from the host call that issued them.

    ROCm's device copy records carry no size; the HIP call (``hipMemcpyWithStream``, args
    ``size``) does.
    """
    k = _KIND_CODE
    tasks = np.isin(kind, [k[schema.MEMCPY], k[schema.MEMSET]])
    wanting = np.flatnonzero(tasks & (nbytes < 0) & (correlation >= 0))
    if wanting.size == 0:
        return nbytes
    calls = np.flatnonzero(
        np.isin(kind, [k[schema.RUNTIME], k[schema.SYNC]]) & (nbytes >= 0) & (correlation >= 0)
    )
    if calls.size == 0:
        return nbytes
    order = np.argsort(correlation[calls], kind="stable")
    keys = correlation[calls][order]
    found = np.clip(np.searchsorted(keys, correlation[wanting]), 0, keys.size - 1)
    hit = keys[found] == correlation[wanting]
    result: Int64Array = nbytes.copy()
    result[wanting[hit]] = nbytes[calls][order][found[hit]]
    return result


def _events_table(
    blocks: list[Block], side: Side, rank: int, base_ns: int, meta: dict[str, Any]
) -> pa.Table:
    """Concatenate the blocks column by column, classify, sort by (start_ns, -dur_ns)."""
    k = _KIND_CODE
    sizes = [b.phase.size for b in blocks]
    cat = _dictionary(blocks, "cat")
    name = _dictionary(blocks, "name")
    phase = _take_column(blocks, "phase")
    pid = _take_column(blocks, "pid")
    kind, unmapped = _classify(cat, name, phase, pid)
    del phase
    if unmapped:
        meta["unmapped_categories"] = unmapped
    meta["vendor"] = _vendor(cat, name, kind, meta)
    del cat
    start = _take_column(blocks, "ts")
    tid = _take_column(blocks, "tid")
    correlation = _flow_correlation(
        side, kind, pid, tid, start, _take_column(blocks, "correlation")
    )
    start += base_ns
    dur = _take_column(blocks, "dur")
    # Ties keep file order (a stable sort): the same file always gives the same table.
    order = np.lexsort((-dur, start))
    take = pa.array(order)
    device_kinds = [k[x] for x in (*schema.DEVICE_TASK_KINDS, schema.DEVICE_ANNOTATION)]
    on_device = np.isin(kind, device_kinds)
    moves_bytes = np.isin(
        kind,
        [k[x] for x in (schema.MEMCPY, schema.MEMSET, schema.COMM, schema.RUNTIME, schema.SYNC)],
    )
    device = _take_column(blocks, "device").astype(np.int64)
    device = np.where(on_device, _device_index(np.where(on_device, device, 0)), schema.HOST_DEVICE)
    stream = np.where(on_device, _take_column(blocks, "stream"), tid)
    del tid
    nbytes = _copy_sizes(
        kind, correlation, _optional_column(blocks, sizes, "nbytes", schema.NO_ID, np.int64)
    )
    columns: dict[str, Any] = {
        "rank": np.full(order.size, rank, np.int32),
        "kind": pa.DictionaryArray.from_arrays(
            pa.array(kind[order].astype(np.int32)), pa.array(list(schema.KINDS), pa.string())
        ),
        "name": name.take(take),
        "device": device[order].astype(np.int16),
        "stream": stream[order],
        "pid": pid[order],
        "start_ns": start[order],
        "dur_ns": dur[order],
        "correlation": correlation[order],
        "external_id": _take_column(blocks, "external_id")[order],
        "step": np.full(order.size, schema.NO_STEP, np.int32),
        "bytes": np.where(moves_bytes, nbytes, schema.NO_ID)[order],
        "flops": _optional_column(blocks, sizes, "flops", np.nan, np.float64)[order],
    }
    del name, device, stream, pid, start, dur, correlation, nbytes, kind
    for column, source in (("shapes", "shapes"), ("dtypes", "dtypes"), ("args", "args")):
        columns[column] = _string_column(blocks, sizes, source, take)
    blocks.clear()
    return schema.conform_events(pa.table(columns))


def _vendor(
    cat: pa.DictionaryArray, name: pa.DictionaryArray, kind: Int64Array, meta: dict[str, Any]
) -> str:
    """cuda / rocm / mtia / cpu, from categories, runtime names and device names."""
    categories = {c.lower() for c in cat.dictionary.to_pylist()}
    if categories & vendors.MTIA_CATEGORIES:
        return vendors.VENDOR_MTIA
    k = _KIND_CODE
    device_kinds = [k[x] for x in (*schema.DEVICE_TASK_KINDS, schema.DEVICE_ANNOTATION)]
    runtime_rows = np.isin(kind, [k[schema.RUNTIME], k[schema.SYNC]])
    name_codes = np.asarray(name.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    used = np.unique(name_codes[runtime_rows])
    runtime_names = name.dictionary.take(pa.array(used, pa.int64())).to_pylist()
    if any(vendors.ROCM_RUNTIME.match(str(n)) for n in runtime_names):
        return vendors.VENDOR_ROCM
    devices = meta.get("device_properties")
    device_names = (
        [d.get("name", "") for d in devices if isinstance(d, dict)]
        if isinstance(devices, list)
        else []
    )
    if any(vendors.ROCM_DEVICE_NAMES.search(str(n)) for n in device_names):
        return vendors.VENDOR_ROCM
    if np.isin(kind, device_kinds).any() or runtime_rows.any():
        return vendors.VENDOR_CUDA
    return vendors.VENDOR_CPU


def _counters_table(side: Side, rank: int, base_ns: int) -> pa.Table:
    if not side.counter_ts:
        return schema.empty_counters()
    ts = _concat(side.counter_ts) + base_ns
    track = pa.chunked_array(side.counter_track, pa.string()).combine_chunks()
    name = pa.chunked_array(side.counter_name, pa.string()).combine_chunks()
    value = _concat(side.counter_value)
    order = np.argsort(ts, kind="stable")
    take = pa.array(order)
    table = pa.table(
        {
            "rank": np.full(ts.size, rank, np.int32),
            "track": track.take(take),
            "name": name.take(take),
            "ts_ns": ts[order],
            "value": value[order],
        }
    )
    return table.cast(schema.COUNTERS_SCHEMA)
