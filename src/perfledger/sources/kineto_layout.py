"""The text columns of the import's blocks laid out in sorted row order, a piece at a time.

A piece of the sorted table reads rows of a few blocks (the sorted order follows time, and so
mostly does the file): each block's stretch read is joined to the others' and the piece taken
from the join. A block's text is let go as soon as the pieces have read its last row.

The number columns are made where :class:`NumbersInto` says: in the place load_kineto's
``fill_columns`` gives (a map of the file they will be read from: :class:`ColumnFiller`), or
else in the heap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.memory import release_freed_memory
from perfledger.sources import kineto_scan
from perfledger.sources.kineto_columns import Block
from perfledger.sources.kineto_text import BoolArray, Int64Array

__all__ = [
    "ColumnFiller",
    "ColumnFilling",
    "NumbersInto",
    "TextPiece",
    "text_in_place",
    "LAYOUT_PIECE_ROWS",
    "LAYOUT_RELEASE_BYTES",
    "GatherPlan",
    "gather_plan",
    "piece",
    "piece_ranges",
    "read_last",
    "scatter_into",
    "sorted_column",
    "sorted_strings",
    "string_pieces",
]


@dataclass(frozen=True)
class GatherPlan:
    """Where each row of the sorted table comes from: block and row inside the block."""

    block: npt.NDArray[np.int32]  # per sorted row
    local: npt.NDArray[np.int32]  # per sorted row
    last: Int64Array  # per block: the last sorted position that reads it
    first: Int64Array  # per block: its first row in file order (the blocks one after another)


def gather_plan(sizes: list[int], order: Int64Array, position: Int64Array) -> GatherPlan:
    """The plan of the sorted rows ``order`` (file-order rows, as many as ``sizes`` add up
    to; ``position``: each file-order row's place among them, the inverse of ``order``)."""
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    block = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)[order]
    local = (order - starts[block]).astype(np.int32)
    # a block's last place: the greatest place of its rows, which lie one after another
    last = np.full(len(sizes), -1, np.int64)
    rows = np.asarray(sizes, np.int64) > 0
    if order.size:
        last[rows] = np.maximum.reduceat(position, starts[rows])
    return GatherPlan(block, local, last, starts)


def sorted_column(
    blocks: list[Block],
    sizes: list[int],
    column: str,
    position: Int64Array,
    dtype: Any,
    fill: Any = None,
    out: Any = None,
) -> Any:
    """One column of all blocks, written straight into sorted row order (into ``out`` if
    given: an array of ``dtype``, as long as the table).

    ``position`` is each file-order row's place in the sorted table. Blocks let go of their
    part as it is copied, so the column never exists twice; blocks without the column
    (None) get ``fill``: the whole column is filled first, in order, and the blocks that
    have it written over it (their rows' places are scattered over the column: a scattered
    fill costs several times the ordered one).
    """
    out = np.empty(position.size, dtype) if out is None else out
    if any(size and getattr(b, column) is None for b, size in zip(blocks, sizes, strict=True)):
        out[:] = fill
    begin = 0
    for block, size in zip(blocks, sizes, strict=True):
        part = getattr(block, column)
        setattr(block, column, None)
        end = begin + size
        if part is not None:
            scatter_into(part, position[begin:end], out)
        begin = end
    return out


def codes_among(codes: npt.NDArray[np.integer], wanted: Sequence[int] | Int64Array) -> BoolArray:
    """Which of ``codes`` are among the few ``wanted``: ``np.isin(codes, wanted)`` by one
    comparison per wanted code (several times cheaper than a lookup table indexed per row, or
    ``np.isin``'s sort, for the one-byte codes of a few kinds)."""
    found = np.zeros(codes.shape, dtype=np.bool_)
    for code in np.unique(np.asarray(wanted, dtype=np.int64)).tolist():
        found |= codes == code
    return found


def scatter_into(values: Any, position: Int64Array, out: Any) -> None:
    """``out[position] = values``: by the compiled loop where it was built and takes these
    types (numpy's takes several times longer, casting through buffers)."""
    scatter = getattr(kineto_scan._kscan, "scatter", None)
    if (
        scatter is not None
        and values.dtype.kind == out.dtype.kind
        and values.dtype.kind in "if"
        and values.dtype.itemsize <= out.dtype.itemsize
        and (values.dtype.kind == "i" or values.dtype.itemsize == out.dtype.itemsize == 8)
        and values.flags.c_contiguous
        and out.flags.c_contiguous
        and position.dtype == np.int64
    ):
        scatter(values, position, out)
    else:
        out[position] = values


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
    ranges = piece_ranges(plan.block.size)
    if all(p is None or p.null_count == len(p) for p in parts):
        del parts
        for begin, end in ranges:
            yield pa.nulls(end - begin, pa.string())
        return
    for j, part in enumerate(parts):
        if part is None:
            parts[j] = pa.nulls(sizes[j], pa.string())
    freed = 0  # bytes of text let go since the pool last handed memory back
    for begin, end in ranges:
        made = piece(parts, plan.block[begin:end], plan.local[begin:end])
        for j in read_last(plan, begin, end):
            part = parts[j]
            freed += part.get_total_buffer_size() if part is not None else 0
            parts[j] = None
        if release is not None and freed >= release:
            # hand the freed text back, or the pool keeps it beside the growing output (not
            # where the output reuses it: perfledger.memory.holding_freed_memory)
            release_freed_memory()
            freed = 0
        yield made
        del made


def piece_ranges(rows: int) -> list[tuple[int, int]]:
    """The sorted rows each piece of the text holds (begin, end): at least
    :data:`LAYOUT_PIECE_ROWS` rows a piece, at most 32 pieces."""
    step = max(LAYOUT_PIECE_ROWS, rows // 32 + 1)
    return [(begin, min(rows, begin + step)) for begin in range(0, rows, step)]


def read_last(plan: GatherPlan, begin: int, end: int) -> list[int]:
    """The blocks whose last row the sorted rows ``begin:end`` read."""
    found: list[int] = np.flatnonzero((plan.last >= begin) & (plan.last < end)).tolist()
    return found


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
    """Where a group of columns is made in place (load_kineto's ``fill_columns``)."""

    def target(self, name: str, batch: int = 0) -> npt.NDArray[Any]:
        """Column ``name``'s body in record batch ``batch``: a number column's values (an
        array of the table's length and the column's type), a text column's text (bytes,
        as many as the batch's offsets say)."""

    def written(self, name: str, batch: int = 0) -> None:
        """Column ``name``'s body in record batch ``batch`` is made (its target let go)."""

    def finish(self) -> pa.Table:
        """The columns as written (every target let go before)."""

    def abandon(self) -> None:
        """Give the place up (the columns are then made in the heap)."""


@dataclass(frozen=True)
class TextPiece:
    """One text column of one record batch, before its text: its int32 offsets (from 0; as
    many as its rows and one), its validity bitmap (None: no null) and null count; or, as
    ``whole``, the column as it is (all null)."""

    offsets: npt.NDArray[np.int32] | None = None
    validity: bytes | None = None
    null_count: int = 0
    whole: pa.Array | None = None


# load_kineto's ``fill_columns``: a group's name, its schema and its layout in (the numbers:
# the table's length; the text: a TextPiece per column of each record batch), a place to make
# its columns in (None: none here)
ColumnFilling = Callable[[str, pa.Schema, "int | list[list[TextPiece]]"], ColumnFiller | None]


class NumbersInto:
    """Where the layout makes the number columns: each in its place in ``filler``'s file
    (load_kineto's ``fill_columns``), else a new array in the heap.

    A column the layout is done with (:meth:`done`) is written into the file on a thread of
    its own while the layout goes on, rather than all of them at its end (:meth:`finish`)."""

    def __init__(self, filler: ColumnFiller | None, names: tuple[str, ...]) -> None:
        self.filler = filler
        self.names = names  # the columns the filler holds
        self._writer: ThreadPoolExecutor | None = None
        self._writes: list[Future[None]] = []

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

    def done(self, name: str) -> None:
        """Column ``name`` is made and will not change: written into the filler's file now,
        on a thread of its own (nothing without a filler)."""
        if self.filler is None:
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="kineto-numbers")
        self._writes.append(self._writer.submit(self.filler.written, name))

    def finish(self, columns: dict[str, Any]) -> dict[str, Any]:
        """The number columns read back from the filler's file; ``columns`` lets go of the
        targets first (they must be the last references to them)."""
        assert self.filler is not None
        self._settle(raising=True)
        for name in self.names:
            columns[name] = None
        filler, self.filler = self.filler, None
        table = filler.finish()
        return {name: table[name] for name in self.names}

    def abandon(self) -> None:
        self._settle(raising=False)  # no write left going into the file given up
        if self.filler is not None:
            self.filler.abandon()
            self.filler = None

    def _settle(self, *, raising: bool) -> None:
        """Wait for the writes :meth:`done` started (the first one's error raised, if
        ``raising``: the file is then given up by the caller's :meth:`abandon`)."""
        writes, self._writes = self._writes, []
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        for write in writes:
            error = write.exception()
            if error is not None and raising:
                raise error


class _TextParts:
    """One text column of every block, as the in-place layout reads it: each block's text
    buffer, and every row's span in its block's buffer (start, end, valid) in file order, in
    arrays of all the rows: a row's span is then read by one index, whatever its block (a
    block without the column, or a null: no text)."""

    def __init__(self, parts: list[pa.Array | None], first: Int64Array, rows: int) -> None:
        self.data: list[Any] = []
        self.first = first
        self.null = all(p is None or p.null_count == len(p) for p in parts)  # no text at all
        size = 0 if self.null else rows
        self.start = np.zeros(size, np.int32)
        self.end = np.zeros(size, np.int32)
        self.valid = np.zeros(size, np.bool_)
        for j, part in enumerate(parts):
            if part is None or part.null_count == len(part):
                self.data.append(b"")
                continue
            validity, offsets, data = part.buffers()
            at, count = int(first[j]), len(part)
            own = np.frombuffer(offsets, np.int32, count + 1, part.offset * 4)
            self.start[at : at + count] = own[:-1]
            self.end[at : at + count] = own[1:]
            self.valid[at : at + count] = (
                True
                if part.null_count == 0
                else np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[
                    part.offset : part.offset + count
                ].astype(np.bool_)
            )
            self.data.append(data if data is not None else b"")

    def let_go(self, block: int) -> None:
        self.data[block] = b""

    def spans(
        self, block: npt.NDArray[np.int32], local: npt.NDArray[np.int32]
    ) -> tuple[Int64Array, Int64Array, npt.NDArray[np.bool_]]:
        """The rows' texts (block, row in it): where each starts in its block's buffer, its
        length (0 for a null) and whether it is valid. Not for a column of no text
        (:attr:`null`: the layout gives it whole)."""
        rows = self.first[block] + local  # the rows in file order
        starts = self.start[rows].astype(np.int64)
        lengths = self.end[rows] - starts
        valid = self.valid[rows]
        lengths[~valid] = 0
        return starts, lengths, valid


def text_in_place(
    blocks: list[Block],
    columns: tuple[str, ...],
    plan: GatherPlan,
    fill: ColumnFilling,
    group: str,
) -> pa.Table | None:
    """The text columns ``columns`` of all blocks in sorted row order, made in the place
    ``fill`` gives them (``group``: its name for them), in the record batches
    :func:`string_pieces` makes (the same pieces, the same values); the blocks let go of
    the columns, and of each block's text once the pieces have read its last row. None,
    the blocks untouched, where the compiled scanner is not built, a column is not plain
    Arrow strings, a piece's text passes int32 offsets, or ``fill`` gives no place."""
    if not kineto_scan.AVAILABLE:
        return None
    taken = {column: [getattr(b, column) for b in blocks] for column in columns}
    if not all(
        p is None or (isinstance(p, pa.Array) and pa.types.is_string(p.type))
        for parts in taken.values()
        for p in parts
    ):
        return None
    ranges = piece_ranges(plan.block.size)
    texts = {c: _TextParts(parts, plan.first, plan.block.size) for c, parts in taken.items()}
    null = {c: texts[c].null for c in columns}  # all rows null
    laid: list[list[TextPiece]] = []
    for begin, end in ranges:
        block, local = plan.block[begin:end], plan.local[begin:end]
        pieces = []
        for column in columns:
            if null[column]:
                pieces.append(TextPiece(whole=pa.nulls(end - begin, pa.string())))
                continue
            _, lengths, valid = texts[column].spans(block, local)
            offsets = np.zeros(end - begin + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            if offsets[-1] > np.iinfo(np.int32).max:
                return None
            nulls = int(end - begin - np.count_nonzero(valid))
            bitmap = np.packbits(valid, bitorder="little").tobytes() if nulls else None
            pieces.append(TextPiece(offsets.astype(np.int32), bitmap, nulls))
        laid.append(pieces)
    schema = pa.schema([(column, pa.string()) for column in columns])
    filler = fill(group, schema, laid)
    if filler is None:
        return None
    del laid
    for owner in blocks:
        for column in columns:
            setattr(owner, column, None)
    del taken
    try:
        for index, (begin, end) in enumerate(ranges):
            block, local = plan.block[begin:end], plan.local[begin:end]
            for column in columns:
                parts = texts[column]
                if null[column]:
                    continue
                starts, lengths, _ = parts.spans(block, local)
                kineto_scan.copy_spans(
                    parts.data, block, starts, lengths, filler.target(column, index)
                )
                filler.written(column, index)  # the piece's text in its file: let go
            for j in read_last(plan, begin, end):
                for parts in texts.values():
                    parts.let_go(j)  # its last row read
        return filler.finish()
    except BaseException:
        filler.abandon()
        raise
