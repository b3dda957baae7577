"""CSV writers: any result table to a deterministic CSV file, and the step_trace.csv layouts.

The bytes written depend only on the table: columns in table order, rows in table order (the
analyses sort them), "\\n" line endings, integers as written, floats rounded to
:data:`FLOAT_DECIMALS` decimals in their shortest form ("0.5", "10.48576", "3"), NaN, infinity
and null as an empty cell, booleans as true/false, and a string quoted only when it holds a
comma, a quote or a line break. Files are written under a temporary name and renamed, so an
interrupted run never leaves a half file that looks whole.

Where the timeline's compiled record formatter is built (``render/timeline/_records.c``), a
batch's lines are written by it in one pass outside the GIL: integers and booleans from their
values, strings from their distinct texts quoted once, floats from their text as Arrow writes
it (the rounding and the shortest form stay Arrow's). Elsewhere the cells are joined by Arrow's
kernels (:func:`_joined_batch`); both give the same bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.direct_files import direct_file
from perfledger.files import replacing
from perfledger.sources.kineto_scan import string_table

FLOAT_DECIMALS: Final = 6
# Rows formatted at once: a batch's text and its temporaries (a few times its size) are held
# while it is written; 16k rows of long kernel names keep that to about 25 MB (65k rows: 95
# MB) for the same CPU.
_BATCH_ROWS: Final = 16_384
# Rows whose columns the compiled path prepares at once (half a MB of values or codes a column).
_PREPARED_ROWS: Final = 65_536
# Floats from this magnitude on are written unrounded (see _format_column).
_ROUNDED: Final = 1e300


def _compiled() -> Any:
    """The compiled record formatter, or None where it was not built."""
    try:
        return importlib.import_module("perfledger.render.timeline._records")
    except ImportError:
        return None


_records = _compiled()
# its pieces (see _records.c): a literal, a text of a table, an int64 in decimal
_LITERAL, _TABLE, _INTEGER = 0, 1, 2
_COMMA: Final = (_LITERAL, b",", None)
_LINE_END: Final = (_LITERAL, b"\n", None)
_BOOLEANS: Final = (b"falsetrue", np.array([0, 5, 9], np.int32))
# The quoted texts of the dictionaries of a table's columns, by the dictionary's place in
# memory (the batches of one chunk share it): (the dictionary, its quoted texts as a table).
_Quoted = dict[tuple[int, int, int, int], tuple[pa.Array, tuple[Any, Any]]]


def write_csv(table: pa.Table, path: Path) -> None:
    """Write ``table`` as CSV to ``path`` atomically (temporary name, then rename)."""
    # the CSVs of a large trace are hundreds of MB nothing reads back: written around the
    # page cache where the filesystem allows it
    with replacing(path) as temporary, direct_file(temporary) as out:
        out.write(_csv_line([_quote_text(name) for name in table.column_names]))
        for text in _row_texts(table):
            out.write(text)


def csv_bytes(table: pa.Table) -> bytes:
    """The exact bytes :func:`write_csv` writes for ``table``."""
    parts: list[Any] = [_csv_line([_quote_text(name) for name in table.column_names])]
    parts.extend(_row_texts(table))
    return b"".join(parts)


def _row_texts(table: pa.Table) -> Iterator[memoryview]:
    """The CSV text of the table's rows, a batch of lines at a time."""
    if _records is None:
        for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
            if batch.num_rows:
                yield memoryview(_joined_batch(batch))
        return
    quoted: _Quoted = {}
    # each column made the formatter's piece once for many batches (Arrow's calls cost
    # about as much as a small batch's formatting), its lines written a batch at a time
    for prepared in table.to_batches(max_chunksize=_PREPARED_ROWS):
        ops: list[tuple[Any, ...]] = []
        for column in prepared.columns:
            if ops:
                ops.append(_COMMA)
            ops.append(_cell_op(column, quoted))
        ops.append(_LINE_END)
        for low in range(0, prepared.num_rows, _BATCH_ROWS):
            high = min(low + _BATCH_ROWS, prepared.num_rows)
            data, _ = _records.format(high - low, tuple(_op_rows(op, low, high) for op in ops))
            yield memoryview(data)


def _csv_line(cells: Sequence[str]) -> bytes:
    return (",".join(cells) + "\n").encode("utf-8")


def _quote_text(text: str) -> str:
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _text(value: str) -> pa.Scalar:
    # A typed scalar: pyarrow infers the type of a bare str by trying to import pandas.
    return pa.scalar(value, pa.string())


_EMPTY: Final = _text("")
_QUOTE: Final = _text('"')


def _format_column(column: pa.Array) -> pa.Array:
    """Every cell of a column as its CSV text (never null)."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = pc.cast(column, kind.value_type)
        kind = column.type
    if pa.types.is_floating(kind):
        finite = pc.is_finite(column)
        # rounding scales by 10**6: beyond _ROUNDED the product would overflow (and such a
        # value has no decimals to round anyway), so those are written as they are
        rounded = pc.less(pc.abs(column), _ROUNDED)
        within = pc.round(pc.if_else(rounded, column, 0.0), FLOAT_DECIMALS)
        text = pc.cast(pc.if_else(rounded, within, column), pa.string())
        text = pc.if_else(pc.equal(text, _text("-0")), _text("0"), text)
        text = pc.if_else(pc.fill_null(finite, False), text, _EMPTY)
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        # Names repeat (a kernel name per launch): quote each distinct value once.
        encoded = pc.dictionary_encode(pc.cast(column, pa.string()))
        text = _quoted(encoded.dictionary).take(encoded.indices)
    else:
        raise TypeError(f"cannot write a column of type {kind} to CSV")
    return pc.fill_null(text, _EMPTY)


def _quoted(text: pa.Array) -> pa.Array:
    """Strings as CSV cells: quoted (quotes doubled) when they hold a comma, quote or line break."""
    needs_quotes = pc.match_substring_regex(text, r'[,"\n\r]')
    quoted = pc.binary_join_element_wise(
        _QUOTE, pc.replace_substring(text, '"', '""'), _QUOTE, _EMPTY
    )
    return pc.if_else(needs_quotes, quoted, text)


def _op_rows(op: tuple[Any, ...], low: int, high: int) -> tuple[Any, ...]:
    """The piece ``op`` for its rows ``low`` to ``high`` only (views, no copies)."""
    kind = op[0]
    if kind == _LITERAL:
        return op
    if kind == _INTEGER:
        _, values, shown, before, after = op
        return (kind, values[low:high], _rows(shown, low, high), before, after)
    _, data, offsets, codes, shown = op
    if codes is None:  # a text a row
        return (kind, data, offsets[low : high + 1], None, _rows(shown, low, high))
    return (kind, data, offsets, codes[low:high], _rows(shown, low, high))


def _rows(shown: Any, low: int, high: int) -> Any:
    return None if shown is None else shown[low:high]


def _cell_op(column: pa.Array, quoted: _Quoted) -> tuple[Any, ...]:
    """The compiled formatter's piece writing a column's cells (a null: no bytes)."""
    kind = column.type
    shown = None if column.null_count == 0 else np.asarray(column.is_valid(), np.bool_)
    if pa.types.is_dictionary(kind) and pa.types.is_string(kind.value_type):
        dictionary = column.dictionary
        _, offsets, data = dictionary.buffers()
        key = (
            0 if data is None else data.address,
            offsets.address,
            dictionary.offset,
            len(dictionary),
        )
        if key not in quoted:
            quoted[key] = (dictionary, _quoted_table(dictionary))
        return (_TABLE, *quoted[key][1], _codes(column.indices), shown)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        encoded = pc.dictionary_encode(column)
        return (_TABLE, *_quoted_table(encoded.dictionary), _codes(encoded.indices), shown)
    if pa.types.is_boolean(kind):
        codes = np.asarray(column.fill_null(False), np.int64)
        return (_TABLE, *_BOOLEANS, codes, shown)
    if pa.types.is_integer(kind) and (
        kind != pa.uint64() or column.null_count == len(column) or pc.max(column).as_py() < 2**63
    ):
        if column.null_count:
            column = column.fill_null(0)
        if kind != pa.int64():
            column = column.cast(pa.int64())
        return (_INTEGER, np.asarray(column, np.int64), shown, b"", b"")
    # floats, and the rest Arrow writes: their text as _format_column makes it, a row each
    return (_TABLE, *string_table(_format_column(column).cast(pa.string())), None, None)


def _quoted_table(dictionary: pa.Array) -> tuple[Any, Any]:
    """The texts of ``dictionary`` as cells (quoted where needed, a null empty), as the
    compiled formatter reads a table."""
    return string_table(pc.fill_null(_quoted(pc.cast(dictionary, pa.string())), _EMPTY))


def _codes(indices: pa.Array) -> Any:
    """Dictionary indices as the formatter's int64 codes (a null's: 0, not shown)."""
    if indices.null_count:
        indices = indices.fill_null(0)
    return np.asarray(indices, np.int64)


def _joined_batch(batch: pa.RecordBatch) -> pa.Buffer:
    """A batch's lines (as :func:`_row_texts` gives them) by Arrow's kernels: each column's
    cells as texts, joined; one buffer, lines back to back."""
    cells = [_format_column(column) for column in batch.columns]
    # the line's end joined to its last cell (cell + "\n" + ""), not to the whole line
    cells[-1] = pc.binary_join_element_wise(cells[-1], _EMPTY, _text("\n"))
    lines = pc.binary_join_element_wise(*cells, _text(","))
    # The lines lie back to back in the array's data buffer: that buffer is the file's text.
    text = lines.cast(pa.large_string())
    offsets = pa.Array.from_buffers(
        pa.int64(), len(text) + 1, [None, text.buffers()[1]], offset=text.offset
    )
    first, last = offsets[0].as_py(), offsets[len(text)].as_py()
    data = text.buffers()[2]
    return pa.py_buffer(b"") if data is None else data.slice(first, last - first)
