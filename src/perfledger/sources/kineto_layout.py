"""The text columns of the import's blocks laid out in sorted row order, a piece at a time.

A piece of the sorted table reads rows of a few blocks (the sorted order follows time, and so
mostly does the file): each block's stretch read is joined to the others' and the piece taken
from the join. A block's text is let go as soon as the pieces have read its last row.

The number columns are made where :class:`NumbersInto` says: in the place load_kineto's
``fill_columns`` gives (a map of the file they will be read from: :class:`ColumnFiller`), or
else in the heap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.sources.kineto_columns import Block
from perfledger.sources.kineto_text import Int64Array

__all__ = [
    "ColumnFiller",
    "ColumnFilling",
    "NumbersInto",
    "LAYOUT_PIECE_ROWS",
    "LAYOUT_RELEASE_BYTES",
    "GatherPlan",
    "gather_plan",
    "piece",
    "sorted_strings",
    "string_pieces",
]


@dataclass(frozen=True)
class GatherPlan:
    """Where each row of the sorted table comes from: block and row inside the block."""

    block: npt.NDArray[np.int32]  # per sorted row
    local: npt.NDArray[np.int32]  # per sorted row
    last: Int64Array  # per block: the last sorted position that reads it


def gather_plan(sizes: list[int], order: Int64Array) -> GatherPlan:
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    block = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)[order]
    local = (order - starts[block]).astype(np.int32)
    last = np.full(len(sizes), -1, np.int64)
    np.maximum.at(last, block, np.arange(order.size))
    return GatherPlan(block, local, last)


# The string columns are laid out in pieces of at least this many rows (and at most 32 pieces):
# a block's text is let go once the pieces have read its last row.
LAYOUT_PIECE_ROWS = 1 << 16
# Freed text is handed back to the system once this much has been let go, not after every
# block: each hand-back costs the next pieces fresh pages (page faults). On the 486 MB bench
# trace this takes a fifth off the text's layout at the same peak (bench/import_trees.py).
# A layout whose pieces are let go as they are made (placed a batch at a time) hands nothing
# back: the pieces reuse the freed text's pages instead of faulting in fresh ones.
LAYOUT_RELEASE_BYTES = 16 << 20


def sorted_strings(blocks: list[Block], sizes: list[int], column: str, plan: GatherPlan) -> Any:
    """A string column of all blocks in sorted row order, built piece by piece
    (:func:`string_pieces`)."""
    pieces = string_pieces(blocks, sizes, column, plan, LAYOUT_RELEASE_BYTES)
    return pa.chunked_array(list(pieces), pa.string())


def string_pieces(
    blocks: list[Block], sizes: list[int], column: str, plan: GatherPlan, release: int | None
) -> Iterator[pa.Array]:
    """A string column of all blocks in sorted row order, a piece at a time (at least
    :data:`LAYOUT_PIECE_ROWS` rows, at most 32 pieces; all-null pieces where no block has the
    column). The blocks let go of the column at once, the generator holds it. ``release``:
    the bytes of text let go after which freed memory is handed back (None: never).

    A block's strings are released as soon as the sorted output has read its last row.
    Kineto writes long time-ordered runs (host threads, then device streams), so the output
    mostly grows as the sources shrink: peak memory stays near one copy instead of two.
    """
    parts: list[pa.Array | None] = [getattr(b, column) for b in blocks]
    for block in blocks:
        setattr(block, column, None)
    n = plan.block.size
    step = max(LAYOUT_PIECE_ROWS, n // 32 + 1)
    if all(p is None or p.null_count == len(p) for p in parts):
        del parts
        for begin in range(0, n, step):
            yield pa.nulls(min(n, begin + step) - begin, pa.string())
        return
    for j, part in enumerate(parts):
        if part is None:
            parts[j] = pa.nulls(sizes[j], pa.string())
    freed = 0  # bytes of text let go since the pool last handed memory back
    for begin in range(0, n, step):
        end = min(n, begin + step)
        made = piece(parts, plan.block[begin:end], plan.local[begin:end])
        done = np.flatnonzero((plan.last >= begin) & (plan.last < end)).tolist()
        for j in done:
            part = parts[j]
            freed += part.get_total_buffer_size() if part is not None else 0
            parts[j] = None
        if release is not None and freed >= release:
            # hand the freed text back, or the pool keeps it beside the growing output
            pa.default_memory_pool().release_unused()
            freed = 0
        yield made
        del made


def piece(
    parts: list[pa.Array | None], block: npt.NDArray[np.int32], local: npt.NDArray[np.int32]
) -> pa.Array:
    """The strings of rows (``block``, ``local``) in this order, in one take.

    The rows a piece reads from one block mostly lie close together (the sorted order
    follows time, and so does a block): the stretch of such a block from its first to its
    last row read is joined to the others' (a bulk copy), and the piece taken from that. A
    block read sparsely (rows of threads far apart in time written side by side) gives only
    the rows read, so the join never holds more than about twice the piece.
    """
    keys = (block.astype(np.int64) << 32) | local
    ordered = np.sort(keys)  # runs of one block each, its rows in file order
    heads = np.flatnonzero(np.diff(ordered >> 32, prepend=-1))
    tails = np.append(heads[1:] - 1, ordered.size - 1)
    read = ordered[heads] >> 32  # the blocks read, ascending
    first = ordered[heads] & 0xFFFFFFFF
    last = ordered[tails] & 0xFFFFFFFF
    dense = last - first <= 2 * (tails - heads + 1) + 16
    sizes = np.where(dense, last - first + 1, tails - heads + 1)
    stretches = []
    for i, j in enumerate(read.tolist()):
        part = parts[j]
        assert part is not None
        if dense[i]:
            stretches.append(part.slice(first[i], sizes[i]))
        else:
            stretches.append(part.take(pa.array(ordered[heads[i] : tails[i] + 1] & 0xFFFFFFFF)))
    start = np.concatenate(([0], np.cumsum(sizes)[:-1]))  # of each stretch in the join
    run = np.searchsorted(read, block)
    index = start[run] + local - first[run]
    sparse = ~dense[run]
    if sparse.any():  # a row's place among the rows read of its block
        index[sparse] = (
            start[run[sparse]] + np.searchsorted(ordered, keys[sparse]) - heads[run[sparse]]
        )
    return pa.concat_arrays(stretches).take(pa.array(index))


class ColumnFiller(Protocol):
    """Where a group of number columns is made in place (load_kineto's ``fill_columns``)."""

    def target(self, name: str) -> npt.NDArray[Any]:
        """Column ``name``'s place: an array of the table's length and the column's type."""

    def finish(self) -> pa.Table:
        """The columns as written (every target let go before)."""

    def abandon(self) -> None:
        """Give the place up (the columns are then made in the heap)."""


# load_kineto's ``fill_columns``: a group's name, its schema and its length in, a place to make
# its columns in (None: none here)
ColumnFilling = Callable[[str, pa.Schema, int], ColumnFiller | None]


class NumbersInto:
    """Where the layout makes the number columns: each in its place in ``filler``'s file
    (load_kineto's ``fill_columns``), else a new array in the heap."""

    def __init__(self, filler: ColumnFiller | None, names: tuple[str, ...]) -> None:
        self.filler = filler
        self.names = names  # the columns the filler holds

    def array(self, name: str, length: int, dtype: Any) -> Any:
        """An array to make column ``name`` in."""
        return np.empty(length, dtype) if self.filler is None else self.filler.target(name)

    def take(self, name: str, values: Any, order: Int64Array) -> Any:
        """``values[order]`` as column ``name``."""
        if self.filler is None:
            return values[order]
        return np.take(values, order, out=self.filler.target(name))

    def full(self, name: str, length: int, value: Any, dtype: Any) -> Any:
        """Column ``name`` of ``length`` rows, all ``value``."""
        out = self.array(name, length, dtype)
        out.fill(value)
        return out

    def put(self, name: str, values: Any, dtype: Any) -> Any:
        """``values`` cast to ``dtype`` (as ``astype`` casts) as column ``name``."""
        if self.filler is None:
            return values.astype(dtype, copy=False)
        target = self.filler.target(name)
        if values is not target:
            np.copyto(target, values, casting="unsafe")
        return target

    def finish(self, columns: dict[str, Any]) -> dict[str, Any]:
        """The number columns read back from the filler's file; ``columns`` lets go of the
        targets first (they must be the last references to them)."""
        assert self.filler is not None
        for name in self.names:
            columns[name] = None
        filler, self.filler = self.filler, None
        table = filler.finish()
        return {name: table[name] for name in self.names}

    def abandon(self) -> None:
        if self.filler is not None:
            self.filler.abandon()
            self.filler = None
