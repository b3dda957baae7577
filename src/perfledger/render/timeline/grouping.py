"""Column access for the timeline: kinds as codes, blocks of rows, columns as int64.

The timeline groups 1M+ rows into tracks, names and series with
:func:`perfledger.analysis.columns.unique_rows` (hashed: ``np.unique`` over rows sorts them as
bytes, measured 4.4 s against 0.08 s on 1.4M rows of 5 columns).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis.columns import dictionary_codes

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def int64(table: pa.Table, column: str) -> Int64Array:
    """A column as an int64 numpy array."""
    return np.asarray(table.column(column).to_numpy(), dtype=np.int64)


# Each row's kind as a small code, and the kinds the codes stand for (:func:`event_kinds`).
KindCodes = tuple[npt.NDArray[np.int16], list[str | None]]


def event_kinds(events: pa.Table) -> KindCodes:
    """Each row's kind code and the kinds: made once for several :func:`kind_mask` calls
    (each would otherwise number the whole kind column again)."""
    codes, values = dictionary_codes(events, "kind")
    return codes.astype(np.int16), values


def kind_mask(events: pa.Table, kinds: Iterable[str], known: KindCodes | None = None) -> BoolArray:
    """Rows of ``events`` whose kind is one of ``kinds``; ``known``: the events' kind codes
    (:func:`event_kinds`), when made already."""
    codes, values = known if known is not None else dictionary_codes(events, "kind")
    wanted = set(kinds)
    hit = np.fromiter((v in wanted for v in values), dtype=bool, count=len(values))
    return hit[codes] if codes.size else np.zeros(0, dtype=bool)


# Rows read at a time by the passes over every event that need only a few of their columns
# (the tracks' keys, the flows' ends, the step groups' rows): their temporaries are those of
# a block, not full-length copies of the columns (a gigabyte trace has millions of rows).
BLOCK_ROWS: Final = 1 << 19


def blocks(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """The table :data:`BLOCK_ROWS` rows at a time: (first row, the block) in row order."""
    size = BLOCK_ROWS
    for low in range(0, table.num_rows, size):
        yield low, table.slice(low, size)


def row_type(rows: int) -> type[np.signedinteger]:
    """The narrowest of int32 and int64 that numbers ``rows`` rows (and -1)."""
    return np.int32 if rows <= np.iinfo(np.int32).max else np.int64


# An integer column's chunks are read in place (numpy views of their buffers) unless they
# are on average smaller than this: then the column is copied whole, once.
_VIEWED_CHUNK: Final = 1 << 12


class ColumnValues:
    """An integer column's values at any rows, read from its chunks in place.

    ``int64(table, column)[rows]`` without the full-length copy that :func:`int64` makes of
    a column of several chunks: a memory-mapped table's pages are read, not copied into the
    heap, and only at the rows asked for.
    """

    def __init__(self, table: pa.Table, column: str) -> None:
        values = table.column(column)
        if values.num_chunks > 1 and values.num_chunks * _VIEWED_CHUNK > len(values):
            values = pa.chunked_array([values.combine_chunks()], values.type)
        self._parts = [
            np.asarray(chunk.to_numpy(zero_copy_only=False), dtype=np.int64)
            for chunk in values.chunks
        ]
        sizes = [part.size for part in self._parts]
        self._starts = np.cumsum([0, *sizes], dtype=np.int64)

    def at(self, rows: npt.NDArray[np.integer]) -> Int64Array:
        """The values at ``rows`` (any order)."""
        rows = np.asarray(rows)
        out = np.empty(rows.size, dtype=np.int64)
        if rows.size == 0:
            return out
        if len(self._parts) == 1:
            picked: Int64Array = self._parts[0][rows]
            return picked
        ascending = bool(np.all(rows[1:] >= rows[:-1]))
        order = None if ascending else np.argsort(rows, kind="stable")
        by_row = rows if order is None else rows[order]
        cuts = np.searchsorted(by_row, self._starts).tolist()
        values = out if order is None else np.empty(rows.size, dtype=np.int64)
        for part, start, (first, last) in zip(
            self._parts, self._starts[:-1].tolist(), itertools.pairwise(cuts), strict=True
        ):
            if last > first:
                values[first:last] = part[by_row[first:last] - start]
        if order is not None:
            out[order] = values
        return out
