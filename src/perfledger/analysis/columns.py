"""Fast column access on canonical tables: numpy views and masks over dictionary columns, and
the distinct values and rows of integer columns numbered by hashing rather than sorting every
row (:func:`factorize`, :func:`unique_rows`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.intervals import Int64Array
from perfledger.memory import drop_mapped_pages
from perfledger.sources import kineto_scan

BoolArray = npt.NDArray[np.bool_]


def int64(table: pa.Table, column: str) -> Int64Array:
    """A column as an int64 numpy array."""
    return np.asarray(table.column(column).to_numpy(), dtype=np.int64)


def int64_at(table: pa.Table, column: str, rows: Int64Array) -> Int64Array:
    """An integer column's values at ``rows`` (any order) as int64: what
    ``int64(table, column)[rows]`` gives, gathered chunk by chunk from the column's
    own buffers, without the whole column joined and widened to 8 bytes a row first."""
    result = np.zeros(rows.size, dtype=np.int64)
    for chunk, target, local in _chunk_rows(table.column(column), rows):
        gather_into(result, target, chunk.to_numpy(zero_copy_only=False), local)
    return result


def gather_into(
    result: npt.NDArray[Any], target: slice | Int64Array, values: np.ndarray, rows: Int64Array
) -> None:
    """``result[target] = values[rows]`` (``rows`` within ``values``), into a slice of
    ``result`` of the same type without a temporary: numpy's take writes in place, at half
    the time of a gather copied over (8-byte values, a few million rows)."""
    if isinstance(target, slice) and values.dtype == result.dtype:
        # "wrap" only lets take write in place; every row is within values already
        np.take(values, rows, out=result[target], mode="wrap")
    else:
        result[target] = values.take(rows)


def codes_at(table: pa.Table, column: str, rows: Int64Array) -> tuple[Int64Array, list[str | None]]:
    """A dictionary column's values at ``rows`` as codes into its distinct values (in the
    order the chunks' dictionaries first give them) and those values: equal codes for equal
    values, read from each chunk's codes at the rows, without a code per row of the table.
    A null row takes the code of None."""
    values: dict[str | None, int] = {}
    codes = np.zeros(rows.size, dtype=np.int64)
    for chunk, target, local in _chunk_rows(table.column(column), rows):
        code_of = np.asarray(
            [values.setdefault(v, len(values)) for v in chunk.dictionary.to_pylist()] or [0],
            dtype=np.int64,
        )
        indices = chunk.indices
        gather_into(codes, target, code_of, np.asarray(indices.fill_null(0).to_numpy()).take(local))
        if indices.null_count:
            null = ~np.asarray(indices.is_valid(), dtype=bool)[local]
            codes[np.arange(rows.size)[target][null]] = values.setdefault(None, len(values))
    return codes, list(values)


def _chunk_rows(
    column: pa.ChunkedArray, rows: Int64Array
) -> Iterator[tuple[pa.Array, slice | Int64Array, Int64Array]]:
    """For each chunk holding some of ``rows`` (any order): the chunk, where its rows go in
    the result (a slice when ``rows`` ascend, as they mostly do: no sort), and their
    positions in the chunk."""
    rows = np.asarray(rows, dtype=np.int64)
    # one chunk (a rank's events): the rows within it are read where they are, in any order,
    # without sorting them first
    one = column.num_chunks == 1 and rows.size > 0
    if one and int(rows.min()) >= 0 and int(rows.max()) < len(column):
        yield column.chunk(0), slice(0, rows.size), rows
        return
    ascending = rows.size < 2 or bool((rows[1:] >= rows[:-1]).all())
    order = None if ascending else np.argsort(rows, kind="stable")
    ordered = rows if order is None else rows[order]
    offset = 0
    for chunk in column.chunks:  # a loop over chunks
        size = len(chunk)
        lo, hi = (int(x) for x in np.searchsorted(ordered, [offset, offset + size]))
        if hi > lo:
            target = slice(lo, hi) if order is None else order[lo:hi]
            # the first chunk's positions are the rows themselves: no copy
            yield chunk, target, ordered[lo:hi] - offset if offset else ordered[lo:hi]
        offset += size


def _dictionary_mask(
    column: pa.ChunkedArray, wanted: Callable[[npt.NDArray[np.object_]], BoolArray]
) -> BoolArray:
    """Evaluate a predicate once per distinct value of a dictionary (or string) column (a
    plain chunk is encoded first, in Arrow: no Python string per row); a null row is False."""
    masks: list[BoolArray] = []
    for chunk in column.chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)
        values = np.asarray(chunk.dictionary.to_pylist(), dtype=object)
        hit = wanted(values) if values.size else np.zeros(0, dtype=bool)
        indices = chunk.indices
        if indices.null_count:  # a null row: a code past the values', which none wants
            hit = np.append(hit, False)
            indices = indices.fill_null(values.size)
        masks.append(_code_mask(hit, indices.to_numpy(zero_copy_only=False)))
    if not masks:
        return np.zeros(0, dtype=bool)
    return np.concatenate(masks)


def texts(table: pa.Table, column: str) -> npt.NDArray[np.str_]:
    """A string column (dictionary or plain) as a numpy array of text, a null row as "":
    each distinct value decoded once, and compared with a string in C (an object array
    compares row by row in Python)."""
    codes, values = dictionary_codes(table, column, null=-1)
    distinct = np.array([*("" if v is None else v for v in values), ""], dtype=np.str_)
    return distinct[codes]  # -1: the "" at the end


# A mask of this many codes (or all codes but this many) is a few comparisons of the codes
# rather than a lookup per row: a twentieth of the time on a million rows.
_FEW_CODES: Final = 4


def _code_mask(hit: BoolArray, codes: npt.NDArray[np.integer]) -> BoolArray:
    """``hit[codes]``: whether each row's dictionary code is one of those ``hit`` marks."""
    wanted = np.flatnonzero(hit)
    if wanted.size <= _FEW_CODES:
        mask = np.zeros(codes.size, dtype=bool)
        for code in wanted.tolist():
            mask |= codes == code
        return mask
    unwanted = np.flatnonzero(~hit)
    if unwanted.size <= _FEW_CODES:
        mask = np.ones(codes.size, dtype=bool)
        for code in unwanted.tolist():
            mask &= codes != code
        return mask
    return np.asarray(np.take(hit, codes), dtype=bool)


def isin(table: pa.Table, column: str, values: Iterable[str]) -> BoolArray:
    """Rows whose (dictionary) string column is one of ``values``."""
    value_set = set(values)
    return _dictionary_mask(
        table.column(column),
        lambda distinct: np.fromiter((v in value_set for v in distinct), bool, distinct.size),
    )


def matches(table: pa.Table, column: str, predicate: Callable[[str], bool]) -> BoolArray:
    """Rows whose string column satisfies ``predicate`` (evaluated once per distinct value)."""
    return _dictionary_mask(
        table.column(column),
        lambda distinct: np.fromiter(
            (v is not None and predicate(v) for v in distinct), bool, distinct.size
        ),
    )


def strings(table: pa.Table, column: str) -> npt.NDArray[np.object_]:
    """A string column as an object array (decoded once per distinct value)."""
    parts: list[npt.NDArray[np.object_]] = []
    for chunk in table.column(column).chunks:
        if pa.types.is_dictionary(chunk.type):
            values = np.asarray(chunk.dictionary.to_pylist(), dtype=object)
            indices = chunk.indices.to_numpy(zero_copy_only=False)
            parts.append(values[indices] if indices.size else np.zeros(0, dtype=object))
        else:
            parts.append(np.asarray(chunk.to_pylist(), dtype=object))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=object)


def take(column: pa.ChunkedArray, rows: Int64Array) -> pa.ChunkedArray:
    """``column[rows]`` for ascending ``rows``, taken from each chunk in turn.

    Arrow's take on a chunked column first joins its chunks: a copy of the whole column (the
    args of a large trace: over a hundred MB) to pick a few thousand rows.
    """
    rows = np.asarray(rows, dtype=np.int64)
    bounds = np.cumsum([0, *(len(chunk) for chunk in column.chunks)])
    cuts = np.searchsorted(rows, bounds)
    parts = [
        chunk.take(pa.array(rows[cuts[i] : cuts[i + 1]] - bounds[i], pa.int64()))
        for i, chunk in enumerate(column.chunks)
        if cuts[i + 1] > cuts[i]
    ]
    return pa.chunked_array(parts, type=column.type)


def take_rows(table: pa.Table, rows: Int64Array, names: Iterable[str]) -> pa.Table:
    """The columns ``names`` of ``table`` at ascending ``rows`` (:func:`take`)."""
    return pa.table({name: take(table.column(name), rows) for name in names})


def dictionary_codes(
    table: pa.Table, column: str, null: int = 0
) -> tuple[Int64Array, list[str | None]]:
    """A string column as (codes, distinct values); works on dictionary and plain strings.
    A null row gets the code ``null`` (by default 0, the first value's)."""
    col = table.column(column)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = pa.chunked_array(col.chunks, type=col.type) if col.num_chunks else col
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64), []
    combined = col.unify_dictionaries() if hasattr(col, "unify_dictionaries") else col
    dictionary = combined.chunk(0).dictionary
    # a copy of each chunk's codes (writable), nulls as ``null``
    parts = [
        np.array(
            (c.indices.fill_null(null) if c.indices.null_count else c.indices).to_numpy(),
            dtype=np.int64,
        )
        for c in combined.chunks
    ]
    codes = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return codes, dictionary.to_pylist()


def distinct_strings(column: pa.ChunkedArray) -> list[str]:
    """The distinct non-empty values of a string column (dictionary or plain), sorted; a
    dictionary's values no row uses are not among them."""
    found: set[str] = set()
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary.take(pc.unique(chunk.indices).drop_null())
        found.update(value for value in pc.unique(chunk).to_pylist() if value)
    return sorted(found)


def codes_taken(column: pa.ChunkedArray, rows: Int64Array) -> pa.DictionaryArray:
    """A string or dictionary ``column``'s values at ``rows`` (null where a row is -1) as
    codes into the distinct values taken, in the order of the column's (unified) dictionary:
    the long kernel names of a million tasks are a few MB of codes, not hundreds of MB of text
    (copied again by each table and file that holds them)."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    if column.num_chunks != 1:  # the chunks' codes made codes into one dictionary
        column = column.unify_dictionaries()
    chunks = [
        c.indices if c.null_count == 0 else pc.fill_null(c.indices, -1) for c in column.chunks
    ]
    # one chunk's codes read in place (int32), not copied whole: a few rows of them are taken
    codes = (
        np.asarray(chunks[0])
        if len(chunks) == 1
        else np.concatenate(
            [np.asarray(c, dtype=np.int64) for c in chunks] or [np.zeros(0, dtype=np.int64)]
        )
    )
    dictionary = column.chunk(0).dictionary if chunks else pa.array([], pa.string())
    rows = np.asarray(rows, dtype=np.int64)
    picked = np.full(rows.size, -1, dtype=np.int64)
    asked = rows >= 0
    picked[asked] = codes[rows[asked]]
    del codes
    # only the values taken kept, in their dictionary's order
    valid = picked >= 0
    used = np.zeros(len(dictionary), dtype=bool)
    used[picked[valid]] = True
    renumbered = np.cumsum(used, dtype=np.int64) - 1
    picked[valid] = renumbered[picked[valid]]
    values = pc.cast(dictionary.filter(pa.array(used)), pa.string())
    indices = pa.array(picked.astype(np.int32), pa.int32(), mask=~valid)
    return pa.DictionaryArray.from_arrays(indices, values)


def lexsort(keys: Sequence[npt.NDArray[Any]]) -> Int64Array:
    """``np.lexsort(keys)`` (the last key first), each run of neighbouring integer keys whose
    ranges multiply to less than 2**63 packed into one key: one stable sort of 8-byte keys
    where ``np.lexsort`` sorts by each key in turn (a graph's nodes by time then kind: 53 ->
    21 ms for 1.25 M nodes). The same order: ties keep the rows in place."""
    packed: list[npt.NDArray[Any]] = []  # the first key first
    span = 0  # of the key being packed (0: none is)
    for key in reversed(keys):
        key = np.asarray(key)
        if key.size == 0 or not (np.issubdtype(key.dtype, np.integer) or key.dtype == bool):
            return np.asarray(np.lexsort(keys), dtype=np.int64)
        low, high = int(key.min()), int(key.max())
        width = high - low + 1
        if span and span * width < 2**63:
            packed[-1] = packed[-1] * width + _from_zero(key, low)
            span *= width
        elif width < 2**63:
            packed.append(_from_zero(key, low))
            span = width
        else:  # a range as wide as int64's: the key as it is
            packed.append(key)
            span = 0
    if len(packed) == 1:
        return np.asarray(np.argsort(packed[0], kind="stable"), dtype=np.int64)
    return np.asarray(np.lexsort(packed[::-1]), dtype=np.int64)


def _from_zero(key: npt.NDArray[Any], low: int) -> Int64Array:
    """``key - low`` as int64 (a range under 2**63), whatever the key's integer type."""
    if key.dtype.kind == "u":  # subtracted before the cast: values past int64's
        unsigned = key.astype(np.uint64)
        unsigned -= np.uint64(low)
        return unsigned.view(np.int64)
    shifted = key.astype(np.int64)
    shifted -= low
    return shifted


def pair_order(keys: Int64Array, names: npt.NDArray[np.integer[Any]]) -> Int64Array:
    """``np.lexsort((names, keys))``: rows by key, then name, then row, for keys (ids counted
    up as calls are made) that come almost in order and rarely repeat: one stable sort of
    the keys, then the names sorted only among the rows whose key another row has."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    tie = sorted_keys[1:] == sorted_keys[:-1]
    if tie.any():
        shared = np.zeros(keys.size, dtype=bool)
        shared[1:] |= tie
        shared[:-1] |= tie
        at = np.flatnonzero(shared)
        rows = order[at]
        # runs of one key stay where they are: each is sorted within itself
        order[at] = rows[np.lexsort((rows, names[rows], keys[rows]))]
    return np.asarray(order, dtype=np.int64)


# Values gathered and copied into the result at a time by strings_at.
_STRINGS_BATCH: Final = 1 << 14


def strings_at(values: pa.Array, picked: Int64Array) -> pa.Array:
    """``values.take(picked)`` of a string array (null where ``picked`` is -1), the result's
    text allocated once at its size.

    Arrow's take grows the text of its result by doubling it, a copy each time: on the way it
    holds up to three times the result (the long kernel names of a million tasks: hundreds
    of MB). Here the result's offsets are summed first, then its text copied in one compiled
    pass (``join`` of the Kineto scanner's module), or where that is not built filled a batch
    of takes at a time. Text beyond 32-bit offsets is left to Arrow's take.
    """
    picked = np.asarray(picked, dtype=np.int64)
    if not pa.types.is_string(values.type) or picked.size == 0 or len(values) == 0:
        return values.take(pa.array(picked, pa.int64(), mask=picked < 0))
    starts = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + len(values) + 1
    ].astype(np.int64)
    valid = picked >= 0
    if values.null_count:
        valid[valid] = np.asarray(values.is_valid(), dtype=bool)[picked[valid]]
    lengths = np.where(valid, np.diff(starts)[np.maximum(picked, 0)], 0)
    offsets = np.zeros(picked.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    del lengths
    total = int(offsets[-1])
    if total > np.iinfo(np.int32).max:
        return values.take(pa.array(picked, pa.int64(), mask=picked < 0))
    nulls = int(picked.size - np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if kineto_scan.AVAILABLE:
        # the compiled gather: the texts copied one after the other, no take per batch
        data, table = kineto_scan.string_table(values)
        codes = np.where(valid, picked, -1).astype(np.int32)
        joined = kineto_scan.join_texts(data, table, codes)
        return pa.Array.from_buffers(
            pa.string(),
            picked.size,
            [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(joined)],
            null_count=nulls,
        )
    text = np.empty(total, dtype=np.uint8)
    for at in range(0, picked.size, _STRINGS_BATCH):
        part = picked[at : at + _STRINGS_BATCH]
        taken = values.take(pa.array(part, pa.int64(), mask=~valid[at : at + _STRINGS_BATCH]))
        low, high = int(offsets[at]), int(offsets[at + part.size])
        if high > low:
            first = int(np.frombuffer(taken.buffers()[1], dtype=np.int32)[taken.offset])
            data = np.frombuffer(taken.buffers()[2], dtype=np.uint8)
            text[low:high] = data[first : first + high - low]
    return pa.Array.from_buffers(
        pa.string(),
        picked.size,
        [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(text)],
        null_count=nulls,
    )


# Rows taken between two hand-backs of a mapped column's pages by take_paged.
_PAGED_ROWS: Final = 1 << 13


def take_paged(column: pa.ChunkedArray, rows: Int64Array) -> pa.ChunkedArray:
    """:func:`take` of ascending ``rows``, a batch of rows at a time, the pages read of a
    memory-mapped column let go after each batch (:func:`perfledger.memory.drop_mapped_pages`;
    the rows taken are copies).

    Rows far apart (the args of the copies or of the collectives, one row in tens) keep a
    page of the file each: taken at once, most of the column's pages (hundreds of MB of args)
    would stay in memory until the pass ends.
    """
    rows = np.asarray(rows, dtype=np.int64)
    parts: list[pa.Array] = []
    for at in range(0, rows.size, _PAGED_ROWS):
        parts.extend(take(column, rows[at : at + _PAGED_ROWS]).chunks)
        drop_mapped_pages(column)
    return pa.chunked_array(parts, type=column.type)


# Values within a range this narrow (ranks, small ids, classes) are numbered by counting.
_COUNTED_SPAN: Final = 1 << 16


def factorize(values: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Distinct values in ascending order and each row's index among them.

    The same result as ``np.unique(values, return_inverse=True)``, by hashing instead of
    sorting every row: only the distinct values get sorted.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.size:
        low = int(values.min())
        span = int(values.max()) - low
        if span < _COUNTED_SPAN:  # numbered by counting each value, not by hashing rows
            shifted = values - low
            present = np.bincount(shifted, minlength=span + 1) > 0
            number = np.cumsum(present) - 1
            return np.flatnonzero(present).astype(np.int64) + low, number[shifted]
    encoded = pc.dictionary_encode(pa.array(values))
    distinct = np.asarray(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(distinct, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return distinct[order], position[codes]


def distinct(values: Int64Array) -> Int64Array:
    """``np.unique(values)`` by hashing."""
    return factorize(values)[0] if values.size else np.zeros(0, dtype=np.int64)


def unique_rows(columns: Sequence[Int64Array]) -> tuple[Int64Array, Int64Array]:
    """Distinct rows of equal-length integer columns, in lexicographic order, and the inverse.

    The same result as ``np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)``
    without sorting rows as bytes: each column is numbered by its distinct values, and the
    numbers are combined.
    """
    n = columns[0].size
    if n == 0:
        return np.zeros((0, len(columns)), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if _compiled is not None and len(columns) <= _COMPILED_COLUMNS:
        return _hashed_rows(columns)
    code = np.zeros(n, dtype=np.int64)
    combinations = 1
    for column in columns:
        values, index = factorize(column)
        if combinations * values.size >= 1 << 62:  # renumber before the product overflows
            code = factorize(code)[1]
            combinations = int(code.max()) + 1
        code = code * values.size + index
        combinations *= values.size
    keys_distinct, inverse = factorize(code)
    first = np.empty(keys_distinct.size, dtype=np.int64)
    first[inverse] = np.arange(n, dtype=np.int64)
    keys = np.stack([np.asarray(c, dtype=np.int64)[first] for c in columns], axis=1)
    return keys, inverse


def first_seen_ids(columns: Sequence[Int64Array]) -> Int64Array | None:
    """Each row's number among the distinct rows of equal-length integer columns, in the order
    they first appear (0, 1, ...): the compiled pass's one hash table. None where it was not
    built, or for more columns than it reads."""
    if _compiled is None or not 1 <= len(columns) <= _COMPILED_COLUMNS:
        return None
    values = tuple(np.ascontiguousarray(c, dtype=np.int64) for c in columns)
    codes = np.empty(values[0].size, dtype=np.int64)
    _compiled.first_seen(values, codes)
    return codes


def first_seen(values: npt.NDArray[np.integer]) -> Int64Array:
    """The distinct values of an integer array in the order they first appear (the compiled
    pass's one hash table where it is built)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    if _compiled is None:
        distinct, first = np.unique(values, return_index=True)
        ordered: Int64Array = distinct[np.argsort(first, kind="stable")]
        return ordered
    codes = np.empty(values.size, dtype=np.int64)
    seen: Int64Array = np.frombuffer(_compiled.first_seen((values,), codes), dtype=np.int64)
    return seen


def _hashed_rows(columns: Sequence[Int64Array]) -> tuple[Int64Array, Int64Array]:
    """:func:`unique_rows` by the compiled pass: the rows numbered as they first appear (one
    hash table of the distinct rows), then the distinct rows sorted."""
    assert _compiled is not None
    values = tuple(np.ascontiguousarray(c, dtype=np.int64) for c in columns)
    codes = np.empty(values[0].size, dtype=np.int64)
    seen = np.frombuffer(_compiled.first_seen(values, codes), dtype=np.int64)
    seen = seen.reshape(-1, len(values))
    order = np.lexsort(seen.T[::-1])  # the first column first
    place = np.empty(order.size, dtype=np.int64)
    place[order] = np.arange(order.size, dtype=np.int64)
    return seen[order], place.take(codes)  # take: faster than indexing for scattered codes


def widest_gap(start: Int64Array, dur: Int64Array) -> tuple[int, int, int, int] | None:
    """Of intervals [start, start + dur) whose starts come in order (2 or more), the first
    row after which the rows so far leave the widest gap before the next start, that gap
    (negative: an overlap), and the spans of the rows on either side (each side's reach less
    its first start), by the compiled pass (``_columns.c``); None where the starts are out
    of order or the pass was not built."""
    test = getattr(_compiled, "widest_gap", None)
    if test is None:
        return None
    found: tuple[int, int, int, int] | None = test(
        np.ascontiguousarray(start, np.int64), np.ascontiguousarray(dur, np.int64)
    )
    return found


def chain_positions(pred: Int64Array) -> tuple[Int64Array, Int64Array] | None:
    """Each node's chain (the index of its first node) and its place along the chain, of nodes
    whose predecessor on their chain is ``pred`` (negative: none), by the compiled walk
    (``_columns.c``); None where the pass was not built.

    Raises:
        ValueError: the predecessors make no chains (a cycle, one past the last node).
    """
    walk = getattr(_compiled, "chain_positions", None)
    if walk is None:
        return None
    pred = np.ascontiguousarray(pred, np.int64)
    root = np.empty(pred.size, dtype=np.int64)
    depth = np.empty(pred.size, dtype=np.int64)
    if not walk(pred, root, depth):
        raise ValueError("the predecessors make no chains (a cycle, or one past the last node)")
    return root, depth


def relax_keys(
    key: Int64Array, graph: Any, chain_order: Int64Array, same: Any, rounds: int
) -> bool:
    """The step graph's sort keys raised in place by the compiled rounds (``_columns.c``'s
    ``relax_keys``: the same keys as ``graph.relaxed_keys``); False, ``key`` untouched, where
    the pass was not built."""
    relax = getattr(_compiled, "relax_keys", None)
    if relax is None:
        return False
    relax(
        key,
        *(np.ascontiguousarray(getattr(graph, name), np.int64) for name in _KEY_POINTERS),
        np.ascontiguousarray(chain_order, np.int64),
        np.ascontiguousarray(same, np.bool_).view(np.uint8),
        np.empty(key.size, dtype=np.int64),
        rounds,
    )
    return True


# The step graph's pointers its keys are raised above, in relax_keys' order.
_KEY_POINTERS: Final = ("launch_src", "wake_src", "wait_src", "wait_dst", "event_src", "event_dst")


def remap_pointers(
    pointers: Int64Array, rank: Int64Array, order: Int64Array
) -> tuple[Int64Array, int] | None:
    """``graph.moved_pointers`` by the compiled pass (``_columns.c``); None where it was not
    built."""
    remap = getattr(_compiled, "remap_pointers", None)
    if remap is None:
        return None
    out = np.empty(order.size, dtype=np.int64)
    dropped = remap(
        np.ascontiguousarray(pointers, np.int64),
        np.ascontiguousarray(rank, np.int64),
        np.ascontiguousarray(order, np.int64),
        out,
    )
    return out, int(dropped)


def _compiled_columns() -> Any:
    """The compiled numbering of rows; None where it was not built (no compiler where the
    project was installed): :func:`unique_rows` then numbers each column by hashing it."""
    try:
        return importlib.import_module("perfledger.analysis._columns")
    except ImportError:
        return None


_compiled = _compiled_columns()
# The most columns the compiled pass numbers rows of.
_COMPILED_COLUMNS: Final = 8
