"""Read the Ascend CSV files: kernel_details / op_summary, memory_record, summary tables.

Facts the reader relies on (from the writers' source, seen in real files): timestamps end with a
TAB (``1736412474704643.212\\t``), shapes carry literal quotes (tripled in the file, so the cell
reads ``"81920,4096"``), missing values are ``N/A``, ``Call Stack`` cells hold newlines, and the
column set depends on the profiler level, options and version. Columns are therefore always
found by header name (see :data:`perfledger.model.vendors_ascend.KERNEL_COLUMNS`), every cell is
read as text and converted after trimming.
"""

from __future__ import annotations

import codecs
import csv
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfledger.duck import duck
from perfledger.errors import TraceFormatError, reason
from perfledger.model import vendors_ascend
from perfledger.sources import ascend_build as build

_NULLS: Final = ["N/A", "", "NA", "None", "null"]
_TRIM: Final = " \t\r\n"

# Staged kernel rows: one per line of kernel_details.csv / op_summary.csv.
KERNEL_SCHEMA: Final = pa.schema(
    [
        ("name", pa.string()),
        ("op_type", pa.string()),
        ("core_type", pa.string()),
        ("device", pa.int16()),
        ("stream", pa.int64()),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("shapes", pa.string()),
        ("dtypes", pa.string()),
        ("args", pa.string()),
    ]
)


def header(path: Path) -> list[str]:
    """The column names of a CSV file (its first record), trimmed."""
    try:
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as stream:
            first = next(csv.reader(stream), None)
    except (OSError, csv.Error) as exc:
        raise TraceFormatError(f"{path}: cannot read as CSV ({reason(exc)})") from exc
    if not first:
        raise TraceFormatError(f"{path}: empty file")
    return [name.strip(_TRIM) for name in first]


def column_names(names: Sequence[str]) -> list[str]:
    """Header names every query can use: an empty one named after its place (``column_3``),
    a repeated one numbered (``Name_2``), so that no two columns share a name."""
    used: set[str] = set()
    unique = []
    for place, name in enumerate(names, start=1):
        candidate = name or f"column_{place}"
        number = 1
        while candidate in used:
            number += 1
            candidate = f"{name or f'column_{place}'}_{number}"
        used.add(candidate)
        unique.append(candidate)
    return unique


@dataclass(frozen=True)
class CsvText:
    """A CSV file read as text, and what had to be skipped."""

    table: pa.Table
    losses: tuple[str, ...]  # what was skipped or replaced: one line each, naming the file


_UTF8_CHUNK: Final = 1 << 24


def _is_utf8(path: Path) -> bool:
    """Whether the file is UTF-8 throughout (read piece by piece: a kernel table can be large)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with path.open("rb") as stream:
            while chunk := stream.read(_UTF8_CHUNK):
                decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    return True


def _as_utf8(path: Path) -> tuple[pa.BufferReader, int]:
    """The file with every byte sequence that is not UTF-8 replaced by U+FFFD, and how many
    were replaced."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    text = raw.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd") - raw.count("\ufffd".encode())
    return pa.BufferReader(text.encode("utf-8")), replaced


def read_strings(path: Path) -> CsvText:
    """A CSV file with every column as trimmed text (null for N/A and empty cells).

    Rows with a wrong number of cells (a damaged file) are skipped, and bytes that are not
    UTF-8 read as U+FFFD; both are reported in ``loss``.
    """
    names = column_names(header(path))
    skipped: list[str] = []

    def skip(row: pacsv.InvalidRow) -> str:
        where = f"line {row.number}" if row.number is not None else "a row"
        skipped.append(f"{where} has {row.actual_columns} of {row.expected_columns} cells")
        return "skip"

    replaced = 0
    source: Path | pa.BufferReader = path
    if not _is_utf8(path):
        source, replaced = _as_utf8(path)
    try:
        table = pacsv.read_csv(
            source,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=skip),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in names},
                null_values=_NULLS,
                strings_can_be_null=True,
            ),
        )
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{path}: malformed CSV ({reason(exc)})") from exc
    trimmed = [pc.utf8_trim(column, characters=_TRIM) for column in table.columns]
    # a cell that was only a TAB or a quoted N/A is missing too
    cleaned = [
        pc.if_else(pc.is_in(column, value_set=pa.array(_NULLS)), None, column) for column in trimmed
    ]
    losses = []
    if skipped:
        losses.append(f"{path}: skipped {len(skipped)} malformed rows ({', '.join(skipped[:3])})")
    if replaced:
        losses.append(f"{path}: {replaced} bytes that are not UTF-8 read as U+FFFD")
    return CsvText(pa.table(cleaned, names=names), tuple(losses))


def find_columns(names: Sequence[str], wanted: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Canonical column → the header that carries it, for those present."""
    present = set(names)
    found: dict[str, str] = {}
    for canonical, aliases in wanted.items():
        for alias in aliases:
            if alias in present:
                found[canonical] = alias
                break
    return found


def require(path: Path, found: dict[str, str], required: Sequence[str]) -> None:
    """Raise when a required canonical column has no header in the file."""
    missing = [c for c in required if c not in found]
    if missing:
        raise TraceFormatError(
            f"{path}: missing required columns "
            + ", ".join("/".join(vendors_ascend.KERNEL_COLUMNS.get(c, (c,))) for c in missing)
        )


_UNIT_SUFFIX: Final = (
    ("(us)", "_us"),
    ("(%)", "_pct"),
    ("(GB/s)", "_gb_s"),
    ("(MB/s)", "_mb_s"),
    ("(MB)", "_mb"),
    ("(KB)", "_kb"),
)


def counter_key(header_name: str) -> str:
    """The args key of a counter column: ``cube_utilization(%)`` → ``cube_utilization_pct``."""
    key = header_name.strip()
    for suffix, replacement in _UNIT_SUFFIX:
        if key.endswith(suffix):
            key = key[: -len(suffix)] + replacement
            break
    return re.sub(r"[^0-9a-zA-Z]+", "_", key).strip("_").lower()


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _json_value(column: str) -> str:
    """A text cell as a JSON number when it is one, else as a JSON string."""
    ident = _quote_ident(column)
    return f"coalesce(to_json(TRY_CAST({ident} AS DOUBLE)), to_json({ident}))"


_TIME_NS = (
    "CAST(round(coalesce(TRY_CAST({c} AS DECIMAL(38, 6)), "
    "TRY_CAST(TRY_CAST({c} AS DOUBLE) AS DECIMAL(38, 6))) * 1000) AS BIGINT)"
)
_DUR_NS = "CAST(round(TRY_CAST({c} AS DOUBLE) * 1000) AS BIGINT)"
# columns of the kernel table that are not copied into args (they have their own field)
_OWN_FIELDS: Final = frozenset(
    {"name", "op_type", "core_type", "device", "stream", "start_us", "dur_us"}
)
# shapes and types come quoted ("32,3,224,224"): the quotes are not part of the value
_UNQUOTE = "nullif(trim({c}, '\"'), '')"


def read_kernels(paths: Sequence[Path], default_device: int) -> tuple[pa.Table, tuple[str, ...]]:
    """Kernel rows of ``kernel_details.csv`` or ``op_summary*.csv`` (all slices of one rank).

    Hardware-counter columns and the remaining fields go to ``args`` under
    :func:`counter_key` names (numbers stay numbers). Returns the rows and the losses.
    """
    parts = [_read_kernel_file(path, default_device) for path in paths]
    tables = [table for table, _ in parts]
    losses = tuple(loss for _, file_losses in parts for loss in file_losses)
    return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), losses


def _read_kernel_file(path: Path, default_device: int) -> tuple[pa.Table, tuple[str, ...]]:
    text = read_strings(path)
    table = text.table
    found = find_columns(table.column_names, vendors_ascend.KERNEL_COLUMNS)
    require(path, found, vendors_ascend.KERNEL_REQUIRED)
    used = set(found.values())
    extra_args = [
        (canonical, column) for canonical, column in found.items() if canonical not in _OWN_FIELDS
    ] + [(counter_key(c), c) for c in table.column_names if c not in used]

    def col(canonical: str) -> str:
        return _quote_ident(found[canonical]) if canonical in found else "NULL"

    unquote_args = {"input_shapes", "input_dtypes", "output_shapes", "output_dtypes"}
    json_pairs = ", ".join(
        f"'{key}', "
        + (
            f"to_json({_UNQUOTE.format(c=_quote_ident(column))})"
            if key in unquote_args
            else _json_value(column)
        )
        for key, column in extra_args
        if key not in ("input_shapes", "input_dtypes")
    )
    args_sql = f"json_object({json_pairs})" if json_pairs else "'{}'"
    sql = f"""
        SELECT {col("name")} AS name, {col("op_type")} AS op_type,
            {col("core_type")} AS core_type,
            coalesce(TRY_CAST({col("device")} AS SMALLINT), {int(default_device)}) AS device,
            TRY_CAST({col("stream")} AS BIGINT) AS stream,
            {_TIME_NS.format(c=col("start_us"))} AS start_ns,
            {_DUR_NS.format(c=col("dur_us"))} AS dur_ns,
            {_UNQUOTE.format(c=col("input_shapes"))} AS shapes,
            {_UNQUOTE.format(c=col("input_dtypes"))} AS dtypes,
            {args_sql}::VARCHAR AS args
        FROM kernel_csv
    """
    con = duck(parallel=True)
    try:
        con.register("kernel_csv", table)
        rows = con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        raise TraceFormatError(f"{path}: unexpected content ({reason(exc)})") from exc
    finally:
        con.close()
    # a row is a kernel only with a name and a start time: others are skipped and counted
    readable = pc.and_(pc.is_valid(rows.column("start_ns")), pc.is_valid(rows.column("name")))
    skipped = rows.num_rows - (pc.sum(readable).as_py() or 0)
    losses = text.losses
    if skipped:
        if skipped == rows.num_rows:
            raise TraceFormatError(f"{path}: no row with a name and a readable start time")
        rows = rows.filter(readable)
        losses += (f"{path}: skipped {skipped} rows without a name or a readable start time",)
    return rows.cast(KERNEL_SCHEMA), losses


def read_memory_counters(path: Path) -> tuple[pa.Table, tuple[str, ...]]:
    """Memory counters of ``memory_record.csv`` (torch_npu: MB; msprof npu_mem: KB) in bytes,
    and what was skipped."""
    text = read_strings(path)
    table = text.table
    names = table.column_names
    time_column = next((c for c in vendors_ascend.MEMORY_TIME_COLUMNS if c in names), None)
    if time_column is None:
        raise TraceFormatError(
            f"{path}: missing required column {'/'.join(vendors_ascend.MEMORY_TIME_COLUMNS)}"
        )
    component = "Component" if "Component" in names else None
    selects: list[str] = []
    for metric, aliases in vendors_ascend.MEMORY_RECORD_COLUMNS.items():
        column = next((a for a in aliases if a in names), None)
        if column is None:
            continue
        unit = next(
            (
                scale
                for suffix, scale in vendors_ascend.UNIT_BYTES.items()
                if column.endswith(suffix)
            ),
            1,
        )
        label = (
            f"lower(coalesce({_quote_ident(component)}, 'app')) || '/{metric}'"
            if component
            else f"'{metric}'"
        )
        selects.append(
            f"SELECT 'npu_memory' AS track, {label} AS name, "
            f"{_TIME_NS.format(c=_quote_ident(time_column))} AS ts_ns, "
            f"TRY_CAST({_quote_ident(column)} AS DOUBLE) * {unit} AS value FROM memory_csv"
        )
    if not selects:
        return build.STAGED_COUNTER_SCHEMA.empty_table(), text.losses
    con = duck(parallel=True)
    try:
        con.register("memory_csv", table)
        rows = con.sql(" UNION ALL ".join(selects)).to_arrow_table()
    except duckdb.Error as exc:
        raise TraceFormatError(f"{path}: unexpected content ({reason(exc)})") from exc
    finally:
        con.close()
    return rows.cast(build.STAGED_COUNTER_SCHEMA), text.losses


def read_records(path: Path) -> list[dict[str, Any]]:
    """A small CSV (step_trace_time, op_statistic, api_statistic) as records, numbers parsed."""
    table = read_strings(path).table
    records: list[dict[str, Any]] = []
    for row in table.to_pylist():
        record: dict[str, Any] = {}
        for key, value in row.items():
            if value is None:
                record[key] = None
                continue
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):  # text, or nan / inf: kept as written
                record[key] = value
            else:
                record[key] = int(number) if number.is_integer() and "." not in value else number
        records.append(record)
    return records
