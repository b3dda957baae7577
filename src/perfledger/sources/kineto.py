"""Importer of PyTorch profiler (Kineto) Chrome traces: ``.json`` and ``.json.gz``.

Covers the formats written from PyTorch 1.8 to 2.x: capitalised categories of 1.8
(``Kernel``, ``Runtime``, ``Operator``), integer µs timestamps and float µs with ns digits,
timestamps relative to ``baseTimeNanoseconds``, old and new arg names (``external id`` /
``External id``), launch flows (``async_gpu``, ``async_cpu_to_gpu``, ``ac2g``), CUDA, ROCm
(HIP), MTIA and CPU-only traces. Which category or name means which kind lives in
:mod:`perfledger.model.vendors`.

Time base: every ``start_ns`` is absolute epoch-style ns as the profiler wrote it:
``baseTimeNanoseconds + ts`` when the file has a base time (newer Kineto writes ``ts``
relative to it), else ``ts`` itself (older Kineto wrote absolute µs). Numbers are converted
from their text, so ``1712195495505543.2`` µs is exactly ``1712195495505543200`` ns.

The ``args`` column holds the source's args object as written (key order and values kept,
including those also copied into columns), with the line breaks and indentation of Kineto's
pretty printing removed; ``shapes`` and ``dtypes`` hold the text of ``Input Dims`` and
``Input type``. ``[memory]`` events also feed the counters table
(track ``cuda:0``, ``cpu`` ...; names ``allocated_bytes`` and ``reserved_bytes``).

Reading: :mod:`perfledger.sources.kineto_stream` decodes the file in chunks; a large file can
be decoded by worker processes (:mod:`perfledger.sources.kineto_parallel`, ``workers``), with
the same result.
"""

from __future__ import annotations

import gc
import gzip
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.errors import TraceFormatError
from perfledger.import_pool import PARALLEL_MIN_BYTES
from perfledger.memory import let_go_beside, release_freed_memory
from perfledger.model import schema, vendors
from perfledger.model.quality import (
    NEGATIVE_DURATIONS,
    OPERATORS,
    TIME_ACCOUNT,
    UNREADABLE_EVENTS,
    UTILIZATION,
    QualityCheck,
)
from perfledger.model.trace import Trace
from perfledger.sources import gunzip, kineto_scan
from perfledger.sources.base import decoded_bytes
from perfledger.sources.kineto_columns import (
    PHASE_INSTANT,
    Block,
    Side,
)
from perfledger.sources.kineto_counters import counters_table
from perfledger.sources.kineto_layout import (
    ColumnFiller,
    ColumnFilling,
    NumbersInto,
    codes_among,
    gather_plan,
    sorted_column,
    sorted_strings,
    string_pieces,
    text_in_place,
)
from perfledger.sources.kineto_meta import base_time_ns, distributed_rank, trace_meta
from perfledger.sources.kineto_stream import ReadResult, read_events
from perfledger.sources.kineto_text import Int64Array
from perfledger.sources.names import NAME_LIMIT

SOURCE_KIND = "kineto"
_SUFFIXES = (".json", ".json.gz")
_SNIFF_BYTES = 1 << 20
_KIND_CODE = {kind: code for code, kind in enumerate(schema.KINDS)}
_UNKNOWN = -1
KindArray = npt.NDArray[np.int8]  # codes into schema.KINDS
_DEVICE_SIDE_KINDS = (*schema.DEVICE_TASK_KINDS, schema.DEVICE_ANNOTATION)

__all__ = [
    "NUMBERS",
    "NUMBER_COLUMNS",
    "SOURCE_KIND",
    "TEXT",
    "TEXT_COLUMNS",
    "ColumnFiller",
    "ColumnFilling",
    "ColumnPlacer",
    "is_kineto",
    "load_kineto",
]

# The events' columns load_kineto's ``place_columns`` is given, by group: the text (laid out
# on a thread of its own) and the numbers (all the others but the dictionary ones).
TEXT: Final = "text"
NUMBERS: Final = "numbers"
TEXT_COLUMNS: Final = ("args", "shapes", "dtypes")
NUMBER_COLUMNS: Final = tuple(
    f.name
    for f in schema.EVENTS_SCHEMA
    if not pa.types.is_dictionary(f.type) and f.name not in TEXT_COLUMNS
)
# What load_kineto's ``place_columns`` is: a group's name and its columns in, as record batches
# to read one after the other (the text: each made as the last is read), the columns to hold
# out (the same values: the batches are read once).
ColumnPlacer = Callable[[str, pa.RecordBatchReader], pa.Table]
_NUMBERS_SCHEMA: Final = pa.schema([schema.EVENTS_SCHEMA.field(name) for name in NUMBER_COLUMNS])


def is_kineto(path: Path) -> bool:
    """Whether ``path`` looks like a Kineto / Chrome trace (a cheap look at its start)."""
    if not path.name.lower().endswith(_SUFFIXES) or not path.is_file():
        return False
    try:
        with path.open("rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            if magic == gunzip.GZIP_MAGIC:
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
    workers: int = 0,
    place_columns: ColumnPlacer | None = None,
    fill_columns: ColumnFilling | None = None,
) -> Trace:
    """Read one rank's Kineto trace into canonical tables.

    Args:
        path: a ``.json`` or ``.json.gz`` Chrome trace written by the PyTorch profiler.
        rank: the rank to record; default the trace's ``distributedInfo.rank``, else 0
            (``meta["rank"]`` is then None: the trace does not say).
        progress: called now and then with (bytes read, file size).
        workers: worker processes that decode a large trace (at least
            :data:`PARALLEL_MIN_BYTES` of JSON) chunk by chunk; 0 or 1: this process alone.
            The tables are the same either way.
        place_columns: given a group of the events' columns as soon as the layout has made
            them (``"text"``: :data:`TEXT_COLUMNS`, on the thread that lays them out, while
            this one goes on with the others; ``"numbers"``: :data:`NUMBER_COLUMNS`, in their
            canonical types, while that thread goes on) as record batches read once, one
            after the other (the text's made as they are read), returns them as the events
            will hold them (for instance read back through a memory map of a file the batches
            were written to as they came, never whole in the heap; ``reader.read_all()`` to
            keep them as they are).
        fill_columns: given a group with its schema and layout (the numbers,
            :data:`NUMBER_COLUMNS`: the table's length; the text: each record batch's
            offsets and validity, ``kineto_layout.TextPiece``), a place to make its columns
            in as the layout computes them (for instance the memory map of the file they
            will be read from), instead of making them in the heap and giving them to
            ``place_columns``; where it gives None, they are.

    Raises:
        TraceFormatError: the file is missing, not JSON, not a trace, or holds no events.
    """
    path = Path(path)
    with _no_cyclic_gc():
        result, blocks, side = _read_blocks(path, progress, workers)
        release_freed_memory()
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
    meta = {"source_kind": SOURCE_KIND, **trace_meta(result, side)}
    found_rank = distributed_rank(meta)
    trace_rank = rank if rank is not None else (found_rank if found_rank is not None else 0)
    base_ns = base_time_ns(meta)
    if base_ns is None:
        losses.append("baseTimeNanoseconds is not a time in ns: ignored")
        meta["time_base"] = "epoch ns: ts"
        base_ns = 0
    # the counters (their sort and their texts' copies: a third of a second at 1.5 GB of
    # trace) made beside the events' layout, which leaves part of a core free
    with ThreadPoolExecutor(1, thread_name_prefix="kineto-counters") as pool:
        counted = pool.submit(counters_table, side, trace_rank, base_ns)
        events = _events_table(blocks, side, trace_rank, base_ns, meta, place_columns, fill_columns)
        counters = counted.result()
    # None tells a caller holding several traces that this one does not know its rank.
    meta["rank"] = rank if rank is not None else found_rank
    meta["rank_source"] = (
        "argument" if rank is not None else "distributedInfo" if found_rank is not None else None
    )
    meta["events"] = events.num_rows
    if side.other_phases:
        meta["skipped_phases"] = dict(sorted(side.other_phases.items()))
    negative = side.negative_durations
    # the side data holds the last maps of the blocks' removed files: their pages freed on
    # a thread of its own, beside the analysis that follows
    held: list[Any] = [side]
    del side
    let_go_beside(held)
    release_freed_memory()
    return Trace(
        events=events,
        counters=counters,
        meta=meta,
        source_kind=SOURCE_KIND,
        source_files=(path,),
        loss="; ".join(f"{path.name}: {loss}" for loss in losses) if losses else None,
        quality=_import_checks(path, malformed, negative),
    )


def _import_checks(path: Path, malformed: int, negative: int) -> tuple[QualityCheck, ...]:
    """What the import skipped or repaired, as quality checks naming the file."""
    checks = []
    if negative:
        checks.append(
            QualityCheck(
                NEGATIVE_DURATIONS,
                negative,
                f"{path.name}: {negative:,} events with a negative duration read as zero-length",
                (UTILIZATION, TIME_ACCOUNT, OPERATORS),
                repaired=True,
            )
        )
    if malformed:
        checks.append(
            QualityCheck(
                UNREADABLE_EVENTS,
                malformed,
                f"{path.name}: {malformed:,} malformed events skipped",
                (TIME_ACCOUNT, OPERATORS),
                repaired=True,
            )
        )
    return tuple(checks)


def _read_blocks(
    path: Path, progress: Callable[[int, int], None] | None, workers: int
) -> tuple[ReadResult, list[Block], Side]:
    if workers > 1 and decoded_bytes(path) >= PARALLEL_MIN_BYTES:
        from perfledger.sources import kineto_parallel

        try:
            # a gzip file inflated whole first, then read as a plain one, where it can be
            inflated = kineto_parallel.read_inflated_blocks(path, workers, progress)
            if inflated is not None:
                return inflated
            return kineto_parallel.read_blocks(path, workers, progress)
        except kineto_parallel.WorkersUnavailable:
            pass  # no pool here, or a worker died (out of memory, killed): read in this process
    result, chunks = read_events(path, progress, kineto_scan.scanned_or_decoded)
    side = Side()
    blocks = [b for chunk in chunks if (b := kineto_scan.chunk_block(chunk, side)) is not None]
    kineto_scan.release_scan_arrays()  # this process goes on to analyse the trace
    return result, blocks, side


# --- events ---------------------------------------------------------------------------------


def _concat(arrays: list[Any]) -> Any:
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def _take_column(blocks: list[Block], column: str) -> Any:
    """One column of all blocks in file order; the blocks let go of it."""
    parts = [getattr(b, column) for b in blocks]
    for block in blocks:
        setattr(block, column, None)
    return _concat(parts)


def _dictionary(blocks: list[Block], column: str) -> pa.DictionaryArray:
    chunked = pa.chunked_array([getattr(b, column) for b in blocks])
    for block in blocks:
        setattr(block, column, None)
    return chunked.unify_dictionaries().combine_chunks()


def _codes(array: pa.DictionaryArray) -> npt.NDArray[np.int32]:
    return np.asarray(array.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int32)


def _category_rules(categories: list[str]) -> dict[str, npt.NDArray[Any]]:
    """Per distinct category: its base kind and the properties the name rules need."""
    rules = {
        "kind": np.full(len(categories), _UNKNOWN, np.int8),
        "device": np.zeros(len(categories), np.bool_),
        "mtia": np.zeros(len(categories), np.bool_),
    }
    for i, category in enumerate(categories):
        lowered = category.lower()
        kind = vendors.KINETO_CATEGORY_KINDS.get(lowered)
        rules["kind"][i] = _KIND_CODE[kind] if kind is not None else _UNKNOWN
        rules["device"][i] = lowered in vendors.KINETO_DEVICE_CATEGORIES
        rules["mtia"][i] = lowered == "mtia_ccp_events"
    return rules


def _name_rules(names: list[str]) -> dict[str, npt.NDArray[np.bool_]]:
    """Per distinct name: the vendor rules that match it."""
    rules = {
        key: np.zeros(len(names), np.bool_)
        for key in ("sync", "comm", "step", "loader", "loader_py", "mtia_copy", "mtia_mark")
    }
    for i, full in enumerate(names):
        name = full[:NAME_LIMIT]  # the name as stored (sources.names): rules read no further
        rules["sync"][i] = vendors.SYNC_RUNTIME.match(name) is not None
        rules["comm"][i] = vendors.COMM_KERNEL.search(name) is not None
        rules["step"][i] = vendors.STEP_ANNOTATION.match(name) is not None
        rules["loader"][i] = name.startswith(vendors.DATALOADER_PREFIXES)
        rules["loader_py"][i] = vendors.DATALOADER_PYTHON.search(name) is not None
        rules["mtia_copy"][i] = name in vendors.MTIA_MEMCPY_NAMES
        rules["mtia_mark"][i] = name in vendors.MTIA_MARKER_NAMES
    return rules


def _kind_table(categories: list[str], names: list[str]) -> npt.NDArray[np.int8]:
    """The kind of every (category, name) pair: what the vendor rules say, as a table."""
    cat = {key: value[:, None] for key, value in _category_rules(categories).items()}
    name = {key: value[None, :] for key, value in _name_rules(names).items()}
    k = _KIND_CODE
    base = cat["kind"]
    table: KindArray = np.broadcast_to(base, (len(categories), len(names))).astype(np.int8)
    runtime = base == k[schema.RUNTIME]
    table[runtime & name["sync"]] = k[schema.SYNC]
    table[(base == k[schema.KERNEL]) & name["comm"]] = k[schema.COMM]
    table[cat["mtia"] & name["mtia_copy"]] = k[schema.MEMCPY]
    table[cat["mtia"] & name["mtia_mark"]] = k[schema.DEVICE_ANNOTATION]
    host_span = (
        (base == k[schema.CPU_OP]) | (base == k[schema.ANNOTATION]) | (base == k[schema.PYTHON])
    )
    table[host_span & name["step"]] = k[schema.STEP]
    loader = (host_span & name["loader"]) | ((base == k[schema.PYTHON]) & name["loader_py"])
    table[loader & ~name["step"]] = k[schema.DATALOADER]
    return table


def _classify(
    cat: pa.DictionaryArray, name: pa.DictionaryArray, phase: Any, pid: Int64Array
) -> tuple[KindArray, list[str]]:
    """Kind code per row, and the categories the vendor table does not know."""
    categories = cat.dictionary.to_pylist()
    cat_rules = _category_rules(categories)
    cat_codes = _codes(cat)
    kind: KindArray = _kind_table(categories, name.dictionary.to_pylist())[cat_codes, _codes(name)]
    k = _KIND_CODE
    # Processes that hold device tasks are devices: runtime rows there are device-side marks,
    # and so are rows of unknown categories.
    on_device_pid = np.zeros(pid.size, np.bool_)
    for device_pid in np.unique(pid[cat_rules["device"][cat_codes]]).tolist():
        on_device_pid |= pid == device_pid
    base = cat_rules["kind"][cat_codes]
    unknown = base == _UNKNOWN
    kind[unknown] = k[schema.ANNOTATION]
    kind[(unknown | (base == k[schema.RUNTIME])) & on_device_pid] = k[schema.DEVICE_ANNOTATION]
    kind[phase == PHASE_INSTANT] = k[schema.INSTANT]
    unmapped = sorted(categories[i] for i in np.unique(cat_codes[unknown]).tolist())
    return kind, unmapped


def _of_kinds(kind: KindArray, kinds: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """Which rows have one of ``kinds``: a comparison of the one-byte codes per kind (a
    table looked up per row, or ``np.isin``, costs several times the few comparisons). A row
    of no kind yet (``_UNKNOWN``) has none of them."""
    return codes_among(kind, [_KIND_CODE[name] for name in kinds])


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
    kind: KindArray,
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
    launch = _of_kinds(kind, (schema.RUNTIME, schema.SYNC))
    task = _of_kinds(kind, schema.DEVICE_TASK_KINDS)
    missing = np.flatnonzero((launch | task) & (correlation < 0))
    if missing.size == 0:
        return correlation
    flows = pa.table(
        {
            "pid": _concat(side.flow_pid).astype(np.int64),
            "tid": _concat(side.flow_tid).astype(np.int64),
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


def _copy_sizes(kind: KindArray, correlation: Int64Array, nbytes: Int64Array) -> Int64Array:
    """Fill in (in place) the bytes of copies and fills from the host call that issued them.

    ROCm's device copy records carry no size; the HIP call (``hipMemcpyWithStream``, args
    ``size``) does.
    """
    tasks = _of_kinds(kind, (schema.MEMCPY, schema.MEMSET))
    wanting = np.flatnonzero(tasks & (nbytes < 0) & (correlation >= 0))
    if wanting.size == 0:
        return nbytes
    calls = np.flatnonzero(
        _of_kinds(kind, (schema.RUNTIME, schema.SYNC)) & (nbytes >= 0) & (correlation >= 0)
    )
    if calls.size == 0:
        return nbytes
    order = np.argsort(correlation[calls], kind="stable")
    keys = correlation[calls][order]
    found = np.clip(np.searchsorted(keys, correlation[wanting]), 0, keys.size - 1)
    hit = keys[found] == correlation[wanting]
    nbytes[wanting[hit]] = nbytes[calls][order][found[hit]]
    return nbytes


def _start_order(start: Int64Array, dur: Int64Array, out: Int64Array | None = None) -> Int64Array:
    """The rows in order of start, the longest first among those that start together, in
    file order where both tie (the same file, the same table); ``out``: where the starts go
    in that order. As ``np.lexsort((-dur, start))`` in a third of its time: a stable sort by
    start, then the rows that share a start (about 1% in Kineto traces) among themselves."""
    order: Int64Array = np.argsort(start, kind="stable")
    sorted_start = np.take(start, order, out=out)
    tie = sorted_start[1:] == sorted_start[:-1]
    if (ties := np.flatnonzero(tie)).size:
        shared = np.zeros(sorted_start.size, np.bool_)  # marked, not sorted: ties come in order
        shared[ties] = shared[ties + 1] = True
        rows = np.flatnonzero(shared)  # the places that share a start, in runs
        begins = np.ones(rows.size, np.bool_)  # a run's label: the runs begun up to it
        begins[1:] = ~tie[rows[1:] - 1]  # (the first place begins a run: the one before differs)
        run = np.cumsum(begins)
        order[rows] = order[rows[np.lexsort((-dur[order[rows]], run))]]
    return order


def _events_table(
    blocks: list[Block],
    side: Side,
    rank: int,
    base_ns: int,
    meta: dict[str, Any],
    place_columns: ColumnPlacer | None = None,
    fill_columns: ColumnFilling | None = None,
) -> pa.Table:
    """Classify the rows and lay them out sorted by (start_ns, -dur_ns).

    Every column goes from the blocks straight into sorted order and the blocks let go of it
    on the way, so the import never holds two copies of the table. The text columns are
    laid out on a thread while the others are here (their takes and sorts run outside the
    GIL, as do most of the others' copies).
    """
    sizes = [b.phase.size for b in blocks]
    start = _take_column(blocks, "ts") + base_ns
    dur = _take_column(blocks, "dur")
    into = NumbersInto(
        fill_columns(NUMBERS, _NUMBERS_SCHEMA, start.size) if fill_columns else None,
        NUMBER_COLUMNS,
    )
    try:
        # the starts in order made in their place as they are sorted: gathered once
        sorted_start = into.array("start_ns", start.size, np.int64)
        order = _start_order(start, dur, out=sorted_start)
        start, sorted_start = sorted_start, None
        into.done("start_ns")
        dur = into.take("dur_ns", dur, order)
        into.done("dur_ns")
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        with ThreadPoolExecutor(1, thread_name_prefix="kineto-text") as pool:
            # the text's plan made there too: the other columns need none
            laid_out = pool.submit(
                _strings_in_order, blocks, sizes, order, position, place_columns, fill_columns
            )
            other = _other_columns(
                blocks, sizes, order, position, start - base_ns, side, meta, into
            )
            del order, position
            kind = other.pop("kind")
            columns: dict[str, Any] = {
                "rank": into.full("rank", kind.size, rank, np.int32),
                "kind": pa.DictionaryArray.from_arrays(
                    pa.array(kind.astype(np.int32)), pa.array(list(schema.KINDS), pa.string())
                ),
                "name": other["name"],
                "device": other["device"],
                "stream": other["stream"],
                "pid": other["pid"],
                "start_ns": start,
                "dur_ns": dur,
                "correlation": other["correlation"],
                "external_id": other["external_id"],
                "step": into.full("step", kind.size, schema.NO_STEP, np.int32),
                "bytes": other["bytes"],
                "flops": other["flops"],
            }
            del kind, other, start, dur
            into.done("rank")
            into.done("step")
            if into.filler is not None:  # made in place: read back as the file holds them
                columns.update(into.finish(columns))
            elif place_columns is not None:  # while the text is laid out (and placed) there
                release_freed_memory()  # the file's pages those the columns' making freed
                columns.update(_placed_numbers(columns, place_columns))
            columns.update(laid_out.result())
    except BaseException:
        into.abandon()
        raise
    blocks.clear()
    release_freed_memory()
    return schema.conform_events(pa.table(columns))


def _placed_numbers(columns: dict[str, Any], place_columns: ColumnPlacer) -> dict[str, Any]:
    """The number columns as ``place_columns`` places them, in their canonical types."""
    numbers = pa.table(
        {name: columns[name] for name in NUMBER_COLUMNS},
        schema=pa.schema([schema.EVENTS_SCHEMA.field(name) for name in NUMBER_COLUMNS]),
    )
    placed = place_columns(
        NUMBERS, pa.RecordBatchReader.from_batches(numbers.schema, numbers.to_batches())
    )
    return {name: placed[name] for name in NUMBER_COLUMNS}


def _strings_in_order(
    blocks: list[Block],
    sizes: list[int],
    order: Int64Array,
    position: Int64Array,
    place_columns: ColumnPlacer | None,
    fill_columns: ColumnFilling | None = None,
) -> dict[str, Any]:
    """The text columns in sorted row order ``order`` (``position``: its inverse;
    ``kineto_layout.string_pieces``); given ``place_columns``, as it places them, a batch
    of pieces at a time (the pieces let go once it has read them: the layout never holds
    the whole text); given ``fill_columns``, made in the place it gives them where it gives
    one (``kineto_layout.text_in_place``)."""
    plan = gather_plan(sizes, order, position)
    del order, position
    filled = (
        text_in_place(blocks, TEXT_COLUMNS, plan, fill_columns, TEXT)
        if fill_columns is not None
        else None
    )
    if filled is not None:
        strings = {column: filled[column] for column in TEXT_COLUMNS}
    elif place_columns is None:
        strings = {column: sorted_strings(blocks, sizes, column, plan) for column in TEXT_COLUMNS}
    else:
        fields = pa.schema([(column, pa.string()) for column in TEXT_COLUMNS])
        pieces = [string_pieces(blocks, sizes, column, plan, None) for column in TEXT_COLUMNS]
        batches = (
            pa.record_batch(list(columns), schema=fields) for columns in zip(*pieces, strict=True)
        )
        placed = place_columns(TEXT, pa.RecordBatchReader.from_batches(fields, batches))
        del pieces, batches
        strings = {column: placed[column] for column in TEXT_COLUMNS}
    release_freed_memory()
    return strings


def _other_columns(
    blocks: list[Block],
    sizes: list[int],
    order: Int64Array,
    position: Int64Array,
    start_in_file: Int64Array,
    side: Side,
    meta: dict[str, Any],
    into: NumbersInto,
) -> dict[str, Any]:
    """The columns but the text, the times and the constant ones, in sorted row order: the
    kinds (codes), names, pids, devices, streams, correlations, external ids, bytes, flops
    (the number columns made where ``into`` makes them). ``start_in_file``: the sorted starts
    in the file's own time."""
    n = position.size
    take = pa.array(order)
    del order
    cat = _dictionary(blocks, "cat").take(take)
    name = _dictionary(blocks, "name").take(take)
    del take
    pid = sorted_column(
        blocks, sizes, "pid", position, np.int64, out=into.array("pid", n, np.int64)
    )
    into.done("pid")
    kind, unmapped = _classify(
        cat, name, sorted_column(blocks, sizes, "phase", position, np.int8), pid
    )
    if unmapped:
        meta["unmapped_categories"] = unmapped
    meta["vendor"] = _vendor(cat, name, kind, meta)
    del cat
    release_freed_memory()
    tid = sorted_column(blocks, sizes, "tid", position, np.int64)
    correlation = _flow_correlation(
        side,
        kind,
        pid,
        tid,
        start_in_file,
        sorted_column(
            blocks,
            sizes,
            "correlation",
            position,
            np.int64,
            out=into.array("correlation", n, np.int64),
        ),
    )
    correlation = into.put("correlation", correlation, np.int64)
    into.done("correlation")
    del start_in_file
    on_host = ~_of_kinds(kind, _DEVICE_SIDE_KINDS)
    device = sorted_column(blocks, sizes, "device", position, np.int64)
    device[on_host] = 0
    device = _device_index(device)
    device[on_host] = schema.HOST_DEVICE
    stream = sorted_column(
        blocks, sizes, "stream", position, np.int64, out=into.array("stream", n, np.int64)
    )
    np.copyto(stream, tid, where=on_host)
    into.done("stream")
    del tid, on_host
    nbytes = _copy_sizes(
        kind,
        correlation,
        sorted_column(
            blocks,
            sizes,
            "nbytes",
            position,
            np.int64,
            schema.NO_ID,
            out=into.array("bytes", n, np.int64),
        ),
    )
    moves_bytes = _of_kinds(
        kind, (schema.MEMCPY, schema.MEMSET, schema.COMM, schema.RUNTIME, schema.SYNC)
    )
    nbytes[~moves_bytes] = schema.NO_ID
    del moves_bytes
    columns = {
        "kind": kind,
        "name": name,
        "device": into.put("device", device, np.int16),
        "stream": stream,
        "pid": pid,
        "correlation": correlation,
        "external_id": sorted_column(
            blocks,
            sizes,
            "external_id",
            position,
            np.int64,
            out=into.array("external_id", n, np.int64),
        ),
        "bytes": into.put("bytes", nbytes, np.int64),
        "flops": sorted_column(
            blocks,
            sizes,
            "flops",
            position,
            np.float64,
            np.nan,
            out=into.array("flops", n, np.float64),
        ),
    }
    for done in ("device", "external_id", "bytes", "flops"):
        into.done(done)
    return columns


def _vendor(
    cat: pa.DictionaryArray, name: pa.DictionaryArray, kind: KindArray, meta: dict[str, Any]
) -> str:
    """cuda / rocm / mtia / cpu, from categories, runtime names and device names."""
    categories = {c.lower() for c in cat.dictionary.to_pylist()}
    if categories & vendors.MTIA_CATEGORIES:
        return vendors.VENDOR_MTIA
    runtime_rows = _of_kinds(kind, (schema.RUNTIME, schema.SYNC))
    count = len(name.dictionary)  # the code of a row without a name
    codes = name.indices.fill_null(count) if name.null_count else name.indices
    used = np.zeros(count + 1, np.bool_)  # the runtime rows' names marked: no sort
    used[codes.to_numpy(zero_copy_only=False)[runtime_rows]] = True
    runtime_names = name.dictionary.take(pa.array(np.flatnonzero(used[:count]))).to_pylist()
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
    if _of_kinds(kind, _DEVICE_SIDE_KINDS).any() or runtime_rows.any():
        return vendors.VENDOR_CUDA
    return vendors.VENDOR_CPU
