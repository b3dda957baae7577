"""Column-wise JSON text: records as pieces of small text tables, numbers as Perfetto reads them.

A record's line is the concatenation of its pieces, and a chunk of records of every kind is
written by one copy of the pieces' texts in record order (:func:`joined_bytes`): the texts
that repeat (literals, names, small numbers, fractions of a µs) come straight from tables of
distinct texts, larger numbers are written a text per row (by the compiled module, else as
groups of their digits from tables), and no column is joined row by row (a row-by-row join
costs about twice the take of its pieces, per piece, and each nested join writes every byte
once more).

Where the compiled formatter is built (``_records.c``), a :class:`RowBuilder` takes the same
pieces and writes each record's text at once, a row at a time, without the GIL: the text is
that of the pieces (:class:`PieceBuilder` stays the path without it, and the oracle of its
tests).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.render.timeline.grouping import BoolArray, Int64Array
from perfledger.sources import kineto_scan


def _compiled() -> Any:
    """The compiled formatter; None where it was not built: the pieces are then joined as
    tables (:class:`PieceBuilder`)."""
    try:
        return importlib.import_module("perfledger.render.timeline._records")
    except ImportError:
        return None


_records = _compiled()


@functools.lru_cache(maxsize=256)
def literal(text: str) -> pa.StringScalar:
    """A typed string scalar: an untyped Python str makes pyarrow infer its type, which tries
    to import pandas and dateutil on every call (measured: 10% of a timeline's time here)."""
    return pa.scalar(text, pa.string())


def join(*parts: Any) -> pa.Array:
    """Row by row concatenation of string columns and literals."""
    return pc.binary_join_element_wise(
        *(literal(part) if isinstance(part, str) else part for part in parts), literal("")
    )


# The text of small non-negative integers (the timeline's pids, tids, fractions of a µs):
# taken from here, a column formats four times faster than cast from numbers.
_SMALL_INTS: Final = pa.array([str(i) for i in range(4096)], pa.string())


# ".000" to ".999", then the same with the fourth decimal "1" (see :func:`us_split`): one take of
# these formats a fraction instead of a cast, a pad, a choice and two joins.
_FRACTIONS: Final = pa.array(
    [f".{ns:03d}{tail}" for tail in ("", "1") for ns in range(1000)], pa.string()
)


def us_split(ns: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Non-negative ns as whole µs and the index of their fraction's text in
    :func:`fractions` (three decimals, Perfetto-exact: see the package doc)."""
    ns = np.asarray(ns, dtype=np.int64)
    whole = ns // 1000
    frac = ns - whole * 1000
    # what Perfetto computes: trunc(double(text) * 1000); double(text) == ns / 1000.0
    short = (ns / 1000.0) * 1000.0 < ns
    return whole, frac + 1000 * short


@functools.lru_cache(maxsize=64)
def fractions(after: str = "") -> pa.Array:
    """The texts of :func:`us_split`'s fraction indices, each followed by ``after``."""
    if not after:
        return _FRACTIONS
    return join(_FRACTIONS, after)


@functools.lru_cache(maxsize=64)
def small_ints(before: str = "", after: str = "") -> pa.Array:
    """The text of 0 to 4095, each between ``before`` and ``after``."""
    if not before and not after:
        return _SMALL_INTS
    return join(before, _SMALL_INTS, after)


# Larger values than the small texts' in at most one row in this many: those only are cast.
_FEW_LARGE: Final = 8
# At most this many rows' texts are written at once by the compiled module (each at most 20
# digits besides its literals: far from int32 offsets); a chunk holds fewer records.
_COMPILED_ROWS: Final = 1 << 20
_GROUP: Final = 10_000  # a group of four digits


@functools.lru_cache(maxsize=64)
def group_texts(prefix: str = "", *, padded: bool = False) -> pa.Array:
    """The texts of 0 to 9999 after ``prefix``: zero-padded to four digits (then with one
    more entry, empty) or not."""
    if padded:
        return pa.array([f"{prefix}{i:04d}" for i in range(_GROUP)] + [prefix], pa.string())
    return pa.array([f"{prefix}{i}" for i in range(_GROUP)], pa.string())


@functools.lru_cache(maxsize=256)
def _one_text(text: str) -> pa.Array:
    return pa.array([text], pa.string())


# The code of a piece a record lacks: negative even when moved by the texts before its
# tables in a chunk (far fewer than 2**30).
ABSENT: Final = np.int32(-(1 << 30))


@dataclass(frozen=True)
class Pieces:
    """The text of some records as pieces: record ``i`` is ``texts[codes[0, i]] +
    texts[codes[1, i]] + ...``, ``texts`` being ``tables`` concatenated; a negative code
    (:data:`ABSENT`) adds nothing."""

    tables: list[pa.Array]
    codes: npt.NDArray[np.int32]  # (pieces, records): one piece's codes lie together


@dataclass
class PieceBuilder:
    """Builds the :class:`Pieces` of ``rows`` records, piece after piece, left to right.

    ``shown``: the rows that have the piece (others skip it), None for all.
    """

    rows: int
    _tables: list[pa.Array] = field(default_factory=list)
    _columns: list[npt.NDArray[np.int32]] = field(default_factory=list)
    _size: int = 0
    _pending: str = ""  # literal text of every row, not yet placed

    def table(
        self, texts: pa.Array, codes: Any, shown: BoolArray | None = None, *, fixed: bool = False
    ) -> None:
        """Row ``i`` gets ``texts[codes[i]]``. ``fixed``: a small table of this module's (the
        digits, fractions, literals), concatenated whole into a chunk however few rows use it
        (else the texts of a large table that its rows use are picked out first)."""
        self._place()
        self._add(texts, codes, shown, fixed)

    def text(self, text: str, shown: BoolArray | None = None) -> None:
        """The same text in every (shown) row."""
        if shown is None:
            self._pending += text
            return
        self.table(_one_text(text), np.zeros(self.rows, dtype=np.int32), shown, fixed=True)

    def values(self, texts: pa.Array, shown: BoolArray | None = None) -> None:
        """One text per row (``texts`` has ``rows`` entries)."""
        self.table(texts, np.arange(self.rows, dtype=np.int32), shown)

    def ints(
        self,
        values: Int64Array,
        shown: BoolArray | None = None,
        *,
        before: str = "",
        after: str = "",
    ) -> None:
        """Integers as decimal text, between ``before`` and ``after``.

        Values below 4096 come from a table of their texts; when only a few are larger, just
        those are cast, into the same piece; when most are larger, non-negative values are
        written as groups of four digits, each from a table (a cast costs about three takes
        of a piece per value).
        """
        values = np.asarray(values, dtype=np.int64)
        small = (values >= 0) & (values < len(_SMALL_INTS))
        large = ~small if shown is None else ~small & shown
        n_large = int(np.count_nonzero(large))
        if n_large == 0:
            # the literal before, if every row has it, goes into the table's texts
            prefix = self._take_pending() + before if shown is None else before
            self.table(small_ints(prefix, after), values, shown, fixed=True)
            return
        if kineto_scan.AVAILABLE and values.size <= _COMPILED_ROWS:
            # a text per row, written by the compiled module (a fraction of the takes below)
            prefix = self._take_pending() + before if shown is None else before
            self._place()
            texts = kineto_scan.decimal_texts(values, prefix, after)
            self._add(texts, np.arange(values.size, dtype=np.int32), shown, fixed=True)
            return
        used = values.size if shown is None else int(np.count_nonzero(shown))
        if n_large * _FEW_LARGE <= used:
            prefix = self._take_pending() + before if shown is None else before
            cast = pc.cast(pa.array(values[large]), pa.string())
            texts = join(prefix, cast, after) if prefix or after else cast
            codes = np.where(small, values, 0)
            codes[large] = np.arange(len(_SMALL_INTS), len(_SMALL_INTS) + n_large)
            texts = pa.concat_arrays([small_ints(prefix, after), texts])
            self.table(texts, codes, shown, fixed=True)
            return
        low = int(values.min()) if shown is None else int(values[shown].min())
        if low >= 0:
            prefix = self._take_pending() + before if shown is None else before
            self._digit_groups(values, shown, prefix)
        else:
            if before:
                self.text(before, shown)
            self.values(pc.cast(pa.array(values), pa.string()), shown)
        if after:
            self.text(after, shown)

    def _digit_groups(self, values: Int64Array, shown: BoolArray | None, prefix: str) -> None:
        """Non-negative integers as groups of four digits, the first after ``prefix``: a
        value's leading group unpadded, the others zero-padded, absent groups empty."""
        if shown is not None:
            values = np.where(shown, values, 0)
        groups = 1
        top = int(values.max())
        while top >= _GROUP**groups:
            groups += 1
        # group j: digits 4j to 4j + 3 from the right (a division by a constant is cheap, a
        # divmod or a gather per row is not); a value has ``count`` groups
        group = [values // _GROUP**j for j in range(groups)]
        for j in range(groups - 1):
            group[j] = group[j] - group[j + 1] * _GROUP
        count = np.ones(values.size, dtype=np.int8)
        for j in range(1, groups):
            count += values >= _GROUP**j
        # slot i shows group count - 1 - i: the leading one unpadded, an absent one empty
        for i in range(groups):
            codes = group[0] if i == 0 else np.full(values.size, _GROUP, dtype=np.int64)
            for c in range(i + 2 if i == 0 else i + 1, groups + 1):
                codes = np.where(count == c, group[c - 1 - i], codes)
            if i == 0:
                self.table(group_texts(prefix), codes, shown, fixed=True)
            else:
                self.table(group_texts(padded=True), codes, shown, fixed=True)

    def us(self, ns: Int64Array, shown: BoolArray | None = None, *, after: str = "") -> None:
        """Non-negative ns as µs text (see :func:`us_split`), followed by ``after``."""
        whole, fraction = us_split(ns)
        self.ints(whole, shown)
        self.table(fractions(after), fraction, shown, fixed=True)

    def build(self) -> Pieces:
        """The pieces added."""
        self._place()
        codes = (
            np.stack(self._columns) if self._columns else np.zeros((0, self.rows), dtype=np.int32)
        )
        return Pieces(self._tables, codes)

    def _take_pending(self) -> str:
        pending, self._pending = self._pending, ""
        return pending

    def _place(self) -> None:
        """The pending literal as a piece of its own."""
        if self._pending:
            text = self._take_pending()
            self._add(_one_text(text), np.zeros(self.rows, dtype=np.int32), None, fixed=True)

    def _add(
        self, texts: pa.Array, codes: Any, shown: BoolArray | None, fixed: bool = False
    ) -> None:
        column = np.asarray(codes).astype(np.int32, copy=True)
        if not fixed and (
            len(texts) > max(self.rows, _FIXED_TABLE) or texts.nbytes > _KEPT_TABLE_BYTES
        ):
            texts, column = _used_texts(texts, column, shown)
        column += self._size
        if shown is not None:
            column[~shown] = ABSENT
        self._tables.append(texts)
        self._columns.append(column)
        self._size += len(texts)


# A table of distinct texts (names, shapes...) is concatenated into every chunk that uses
# it: beyond this many texts (more than the fixed tables of literals, small numbers and
# fractions hold), and more than the piece's records, only the texts its records use go in,
# so a chunk costs what its records' text does, not the trace's distinct texts; and beyond
# this many bytes too, so the chunk's tables stay far from pa.string's 2 GiB of offsets.
_FIXED_TABLE: Final = 8192
_KEPT_TABLE_BYTES: Final = 4 << 20


def _used_texts(
    texts: pa.Array, codes: npt.NDArray[np.int32], shown: BoolArray | None
) -> tuple[pa.Array, npt.NDArray[np.int32]]:
    """The texts that ``codes`` (of the ``shown`` rows) use, and the codes into them."""
    if shown is None:
        used, inverse = np.unique(codes, return_inverse=True)
        return texts.take(pa.array(used)), inverse.astype(np.int32).reshape(codes.shape)
    used, inverse = np.unique(codes[shown], return_inverse=True)
    codes[shown] = inverse.reshape(-1)  # the hidden rows' codes become ABSENT anyway
    return texts.take(pa.array(used)), codes


@dataclass(frozen=True)
class RowTexts:
    """The text of some records written by :class:`RowBuilder`: record ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``."""

    data: bytes
    offsets: Int64Array


class RowBuilder:
    """:class:`PieceBuilder`'s pieces, written a record at a time by the compiled formatter
    (the same text); only where it is built (:func:`builder`)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._ops: list[tuple[Any, ...]] = []

    def table(
        self, texts: pa.Array, codes: Any, shown: BoolArray | None = None, *, fixed: bool = False
    ) -> None:
        """Row ``i`` gets ``texts[codes[i]]`` (``fixed``: no meaning here, every table is
        read in place)."""
        data, offsets = _table(texts)
        self._ops.append((1, data, offsets, np.ascontiguousarray(codes, np.int64), _rows(shown)))

    def text(self, text: str, shown: BoolArray | None = None) -> None:
        """The same text in every (shown) row."""
        self._ops.append((0, text.encode(), _rows(shown)))

    def values(self, texts: pa.Array, shown: BoolArray | None = None) -> None:
        """One text per row (``texts`` has ``rows`` entries)."""
        data, offsets = _table(texts)
        self._ops.append((1, data, offsets, None, _rows(shown)))

    def ints(
        self,
        values: Int64Array,
        shown: BoolArray | None = None,
        *,
        before: str = "",
        after: str = "",
    ) -> None:
        """Integers as decimal text, between ``before`` and ``after``."""
        values = np.ascontiguousarray(values, np.int64)
        self._ops.append((2, values, _rows(shown), before.encode(), after.encode()))

    def us(self, ns: Int64Array, shown: BoolArray | None = None, *, after: str = "") -> None:
        """ns as µs text (as :func:`us_split` and :func:`fractions` give it), then ``after``."""
        self._ops.append((3, np.ascontiguousarray(ns, np.int64), _rows(shown), after.encode()))

    def build(self) -> RowTexts:
        """The records' text."""
        assert _records is not None
        data, offsets = _records.format(self.rows, tuple(self._ops))
        return RowTexts(data, np.frombuffer(offsets, np.int64))


def _table(texts: pa.Array | pa.ChunkedArray) -> tuple[Any, npt.NDArray[np.int32]]:
    """A table of texts as the compiled formatter reads it (bytes, int32 offsets)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not pa.types.is_string(texts.type):
        texts = texts.cast(pa.string())
    return kineto_scan.string_table(texts)


def _rows(shown: BoolArray | None) -> npt.NDArray[np.bool_] | None:
    return None if shown is None else np.ascontiguousarray(shown, np.bool_)


Builder = PieceBuilder | RowBuilder


def builder(rows: int) -> Builder:
    """The builder of ``rows`` records' text: the compiled one where it is built."""
    return RowBuilder(rows) if _records is not None else PieceBuilder(rows)


def joined_bytes(parts: Sequence[tuple[Pieces | RowTexts, Int64Array]], size: int) -> memoryview:
    """The text of ``size`` records made of several :class:`Pieces` or :class:`RowTexts`
    (each with the positions of its records), in position order, as bytes: the rows put in
    place by the compiled formatter, the pieces copied by the compiled join where it was
    built, else taken by Arrow (whose take also makes the offsets of every record)."""
    rows = [(p, at) for p, at in parts if isinstance(p, RowTexts)]
    if rows:
        assert _records is not None and len(rows) == len(parts), "one builder for a chunk"
        placed = tuple((p.data, p.offsets, np.ascontiguousarray(at, np.int64)) for p, at in rows)
        return memoryview(_records.interleave(size, placed))
    pieces = [(p, at) for p, at in parts if isinstance(p, Pieces)]
    table, flat = _record_codes(pieces, size)
    if not kineto_scan.AVAILABLE or not pa.types.is_string(table.type):
        return _string_bytes(table.take(pa.array(flat[flat >= 0])))
    return memoryview(kineto_scan.join_texts(*kineto_scan.string_table(table), flat))


def _record_codes(
    parts: Sequence[tuple[Pieces, Int64Array]], size: int
) -> tuple[pa.Array, npt.NDArray[np.int32]]:
    """The pieces' tables as one, and the codes into it of the records' pieces, record after
    record (below 0: no piece)."""
    width = max(p.codes.shape[0] for p, _ in parts)
    codes = np.full((size, width), ABSENT, dtype=np.int32)  # record after record
    tables: list[pa.Array] = []
    base = 0
    for pieces, at in parts:
        shifted = pieces.codes + np.int32(base)  # an absent piece's stays negative
        codes[at, : shifted.shape[0]] = shifted.T
        tables.extend(pieces.tables)
        base += sum(len(t) for t in pieces.tables)
    assert base < -ABSENT, "a chunk's pieces need fewer texts than ABSENT is far"
    return pa.concat_arrays(tables), codes.ravel()


def json_strings(values: Sequence[str | None]) -> pa.Array:
    """JSON string literals of distinct values (null becomes an empty string)."""
    return pa.array([json.dumps("" if v is None else v, ensure_ascii=False) for v in values])


def optional_field(key: str, column: pa.ChunkedArray) -> tuple[npt.NDArray[np.int32], pa.Array]:
    """Per row, an index into texts ``,"key":"value"``; "" where the value is null or empty."""
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    if column.num_chunks == 0 or len(column) == 0:
        return np.zeros(0, dtype=np.int32), pa.array([""], pa.string())
    encoded = pc.dictionary_encode(column).unify_dictionaries()
    values = encoded.chunk(0).dictionary.to_pylist()
    null = len(values)  # nulls point past the values, at ""
    codes = np.concatenate(
        [
            np.asarray(chunk.indices.fill_null(null).to_numpy(), dtype=np.int32)
            for chunk in encoded.chunks
        ]
    )
    texts = [
        f',"{key}":' + json.dumps(value, ensure_ascii=False) if value else ""
        for value in [*values, None]
    ]
    return codes, pa.array(texts, pa.string())


def _string_bytes(lines: pa.Array) -> memoryview:
    """The UTF-8 bytes of a string array's values, concatenated, without copying."""
    if len(lines) == 0:
        return memoryview(b"")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    first = int(offsets[lines.offset])
    last = int(offsets[lines.offset + len(lines)])
    return memoryview(lines.buffers()[2]).cast("B")[first:last]
