"""CSV writers: any result table to a deterministic CSV file, and the step_trace.csv layouts.

The bytes written depend only on the table: columns in table order, rows in table order (the
analyses sort them), "\\n" line endings, integers as written, floats rounded to
:data:`FLOAT_DECIMALS` decimals in their shortest form ("0.5", "10.48576", "3"), NaN, infinity
and null as an empty cell, booleans as true/false, and a string quoted only when it holds a
comma, a quote or a line break. Files are written under a temporary name and renamed, so an
interrupted run never leaves a half file that looks whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from perfledger.files import replacing

FLOAT_DECIMALS: Final = 6
# Rows formatted at once: a batch's text and its temporaries (a few times its size) are held
# while it is written; 16k rows of long kernel names keep that to about 25 MB (65k rows: 95
# MB) for the same CPU.
_BATCH_ROWS: Final = 16_384
# Floats from this magnitude on are written unrounded (see _format_column).
_ROUNDED: Final = 1e300


def write_csv(table: pa.Table, path: Path) -> None:
    """Write ``table`` as CSV to ``path`` atomically (temporary name, then rename)."""
    with replacing(path) as temporary, temporary.open("wb") as out:
        out.write(_csv_line([_quote_text(name) for name in table.column_names]))
        for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
            if batch.num_rows:
                out.write(memoryview(_format_batch(batch)))


def csv_bytes(table: pa.Table) -> bytes:
    """The exact bytes :func:`write_csv` writes for ``table``."""
    parts = [_csv_line([_quote_text(name) for name in table.column_names])]
    parts.extend(
        _format_batch(batch).to_pybytes()
        for batch in table.to_batches(max_chunksize=_BATCH_ROWS)
        if batch.num_rows
    )
    return b"".join(parts)


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


def _format_batch(batch: pa.RecordBatch) -> pa.Buffer:
    """The CSV text of a batch's rows: one buffer, lines back to back."""
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
