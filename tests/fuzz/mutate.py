"""Damage a copy of an input file the way files get damaged, driven by hypothesis.

Every mutator takes the hypothesis ``data`` object and a file, changes the file in place and
returns a few words saying what it did (hypothesis prints them with a failing example):

- bytes: flip, insert, delete, truncate, a byte that is not UTF-8, another encoding;
- lines: delete, duplicate, swap, cut short, blank;
- CSV: a cell emptied or of another type (text for a number, -1e9, 1e300, NaN ...), an empty
  or repeated header cell, a column dropped, a row with a cell too many;
- JSON: a key dropped, a value of another type, an element repeated, nesting thousands deep;
- SQLite: a table or column dropped, NULLs, values of another type, rows deleted or repeated;
- gzip: damage to the compressed bytes, or to the text inside.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

# Values a cell, a JSON value or a database column may hold instead of its own.
ODD_TEXT = [
    "",
    "N/A",
    "-1e9",
    "-1",
    "0",
    "1e300",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "abc",
    '"',
    "\t",
    "1,2",
    "9223372036854775808",
    "-9223372036854775809",
    "１２３",
    "\x00",
    "1.5.5",
    "0x1F",
    " ",
    "x" * 3000,
    "a\r\nb",
    "é",
]
ODD_JSON: list[Any] = [
    None,
    "x",
    "",
    -1,
    0,
    1.5,
    -1e9,
    1e300,
    10**30,
    -(10**19),
    True,
    [],
    {},
    "NaN",
    "-1e9",
    "１２",
    "\ud800",
    "x" * 3000,
    {"a": [1, {"b": None}]},
]
ODD_SQL: list[Any] = [
    None,
    "x",
    "",
    "N/A",
    -1,
    0,
    -(10**18),
    2**63 - 1,
    -(2**63),
    1.5,
    1e300,
    float("nan"),
    b"\xff\x00",
    "１２",
    "1736412474704643",
]
DEEP = 3000
_DEEP_MARK = "@@deep@@"


def _position(data: st.DataObject, size: int) -> int:
    return data.draw(st.integers(0, max(size - 1, 0)), label="at")


# --- bytes ---------------------------------------------------------------------------------------


def mutate_bytes(data: st.DataObject, path: Path) -> str:
    raw = bytearray(path.read_bytes())
    how = data.draw(
        st.sampled_from(["flip", "insert", "delete", "truncate", "not_utf8", "encoding", "bom"]),
        label="bytes",
    )
    at = _position(data, len(raw))
    if how == "flip" and raw:
        raw[at] ^= data.draw(st.integers(1, 255))
    elif how == "insert":
        raw[at:at] = data.draw(
            st.one_of(
                st.binary(min_size=1, max_size=4),
                st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xef\xbb\xbf", b"\xed\xa0\x80"]),
            )
        )
    elif how == "delete":
        del raw[at : at + data.draw(st.integers(1, 64))]
    elif how == "truncate":
        del raw[at:]
    elif how == "not_utf8":
        raw[at:at] = b"\xff\xfe\x80"
    elif how == "encoding":
        text = raw.decode("utf-8", errors="replace") + "é"
        encoding = data.draw(st.sampled_from(["utf-16", "latin-1", "cp1252"]))
        raw = bytearray(text.encode(encoding, errors="replace"))
    elif how == "bom":
        raw[0:0] = data.draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"]))
    path.write_bytes(bytes(raw))
    return f"bytes {how} at {at}"


# --- lines ---------------------------------------------------------------------------------------


def mutate_lines(data: st.DataObject, path: Path) -> str:
    lines = path.read_bytes().split(b"\n")
    how = data.draw(
        st.sampled_from(["delete", "duplicate", "swap", "cut", "blank", "garbage"]), label="lines"
    )
    at = _position(data, len(lines))
    if how == "delete":
        del lines[at]
    elif how == "duplicate":
        lines[at:at] = [lines[at]] * data.draw(st.integers(1, 3))
    elif how == "swap":
        other = _position(data, len(lines))
        lines[at], lines[other] = lines[other], lines[at]
    elif how == "cut":
        lines[at] = lines[at][: _position(data, len(lines[at]) + 1)]
    elif how == "blank":
        lines[at] = b""
    else:
        lines.insert(at, data.draw(st.binary(max_size=40)).replace(b"\n", b""))
    path.write_bytes(b"\n".join(lines))
    return f"lines {how} at {at}"


# --- CSV -----------------------------------------------------------------------------------------


def mutate_csv(data: st.DataObject, path: Path) -> str:
    try:
        text = path.read_bytes().decode("utf-8")
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except (UnicodeDecodeError, csv.Error):
        return mutate_lines(data, path)
    if not rows:
        return mutate_bytes(data, path)
    how = data.draw(
        st.sampled_from(
            [
                "cell",
                "cell",
                "cell",
                "column_cells",
                "header_empty",
                "header_repeated",
                "drop_column",
                "drop_header_cell",
                "extra_cell",
                "delete_row",
                "duplicate_row",
                "only_header",
            ]
        ),
        label="csv",
    )
    width = len(rows[0])
    column = _position(data, width)
    row = 1 + _position(data, len(rows) - 1) if len(rows) > 1 else 0
    odd = st.sampled_from(ODD_TEXT)
    if how == "cell" and column < len(rows[row]):
        rows[row][column] = data.draw(odd, label="cell")
    elif how == "column_cells":
        value = data.draw(odd, label="cell")
        for cells in rows[1:]:
            if column < len(cells):
                cells[column] = value
    elif how == "header_empty" and rows[0]:
        rows[0][column] = ""
    elif how == "header_repeated" and width > 1:
        rows[0][column] = rows[0][_position(data, width)]
    elif how == "drop_column":
        for cells in rows:
            del cells[column : column + 1]
    elif how == "drop_header_cell":
        del rows[0][column : column + 1]
    elif how == "extra_cell":
        rows[row].append(data.draw(odd, label="cell"))
    elif how == "delete_row" and len(rows) > 1:
        del rows[row]
    elif how == "duplicate_row":
        rows.insert(row, list(rows[row]))
    elif how == "only_header":
        del rows[1:]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")
    return f"csv {how} row {row} column {column}"


# --- JSON ----------------------------------------------------------------------------------------


def _walk_to(data: st.DataObject, document: Any) -> tuple[Any, Any] | None:
    """A random (container, key) inside ``document``: descend a few levels at random."""
    node, place = document, None
    for _ in range(data.draw(st.integers(1, 7), label="depth")):
        if isinstance(node, dict) and node:
            key = data.draw(st.sampled_from(sorted(node, key=str)), label="key")
        elif isinstance(node, list) and node:
            key = _position(data, len(node))
        else:
            break
        place = (node, key)
        node = node[key]
    return place


def mutate_json(data: st.DataObject, path: Path) -> str:
    try:
        document = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return mutate_lines(data, path)
    place = _walk_to(data, document)
    if place is None:
        return mutate_bytes(data, path)
    container, key = place
    how = data.draw(
        st.sampled_from(["drop", "retype", "retype", "repeat", "deep_list", "deep_object"]),
        label="json",
    )
    if how == "drop":
        del container[key]
    elif how == "retype":
        container[key] = data.draw(st.sampled_from(ODD_JSON), label="value")
    elif how == "repeat" and isinstance(container, list):
        container.insert(key, json.loads(json.dumps(container[key])))
    elif how.startswith("deep"):
        container[key] = _DEEP_MARK
    text = json.dumps(document)
    depth = data.draw(st.sampled_from([DEEP, 200_000]), label="nesting") if "deep" in how else 0
    if how == "deep_list":
        text = text.replace(f'"{_DEEP_MARK}"', "[" * depth + "]" * depth)
    elif how == "deep_object":
        text = text.replace(f'"{_DEEP_MARK}"', '{"a": ' * depth + "1" + "}" * depth)
    path.write_text(text, encoding="utf-8")
    return f"json {how} at {key!r}"


# --- SQLite --------------------------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def mutate_sqlite(data: st.DataObject, path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        try:
            tables = sorted(
                r[0]
                for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                if not r[0].startswith("sqlite_")
            )
            if not tables:
                return "no table"
            table = data.draw(st.sampled_from(tables), label="table")
            columns = [r[1] for r in con.execute(f"PRAGMA table_info({_quote(table)})")]
            column = data.draw(st.sampled_from(columns), label="column") if columns else None
            rows = con.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()[0]
        except sqlite3.Error:  # already damaged past SQLite's reading: damage it more
            con.close()
            return mutate_bytes(data, path)
        how = data.draw(
            st.sampled_from(
                [
                    "drop_table",
                    "drop_column",
                    "null_column",
                    "null_cells",
                    "retype_cells",
                    "retype_column",
                    "delete_rows",
                    "duplicate_rows",
                    "empty_table",
                ]
            ),
            label="sqlite",
        )
        t = _quote(table)
        limit, offset = data.draw(st.integers(1, 3)), _position(data, rows)
        some = f"rowid IN (SELECT rowid FROM {t} LIMIT {limit} OFFSET {offset})"
        try:
            if how == "drop_table":
                con.execute(f"DROP TABLE {t}")
            elif how == "drop_column" and column is not None:
                kept = ", ".join(_quote(c) for c in columns if c != column) or "NULL AS nothing"
                con.execute(f"CREATE TABLE fuzz_kept AS SELECT {kept} FROM {t}")
                con.execute(f"DROP TABLE {t}")
                con.execute(f"ALTER TABLE fuzz_kept RENAME TO {t}")
            elif how == "null_column" and column is not None:
                con.execute(f"UPDATE {t} SET {_quote(column)} = NULL")
            elif how == "null_cells" and column is not None:
                con.execute(f"UPDATE {t} SET {_quote(column)} = NULL WHERE {some}")
            elif how == "retype_cells" and column is not None:
                value = data.draw(st.sampled_from(ODD_SQL), label="value")
                con.execute(f"UPDATE {t} SET {_quote(column)} = ? WHERE {some}", (value,))
            elif how == "retype_column" and column is not None:
                value = data.draw(st.sampled_from(ODD_SQL), label="value")
                con.execute(f"UPDATE {t} SET {_quote(column)} = ?", (value,))
            elif how == "delete_rows":
                con.execute(f"DELETE FROM {t} WHERE {some}")
            elif how == "duplicate_rows":
                con.execute(f"INSERT INTO {t} SELECT * FROM {t} WHERE {some}")
            elif how == "empty_table":
                con.execute(f"DELETE FROM {t}")
            con.commit()
        except sqlite3.Error:
            con.rollback()  # a constraint forbids it (a typed primary key): no change
            return f"sqlite {how} on {table}.{column}: not allowed"
        return f"sqlite {how} on {table}.{column}"
    finally:
        con.close()


# --- by kind of file -----------------------------------------------------------------------------


def mutate_gzip(data: st.DataObject, path: Path) -> str:
    if data.draw(st.booleans(), label="inside"):
        try:
            text = gzip.decompress(path.read_bytes())
        except (OSError, EOFError, zlib.error):  # damaged already: damage the bytes more
            return "gzip " + mutate_bytes(data, path)
        text_path = path.with_name(path.name + ".text")
        text_path.write_bytes(text)
        what = mutate_any(data, text_path, kind="json")
        path.write_bytes(gzip.compress(text_path.read_bytes(), mtime=0))
        text_path.unlink()
        return f"gzip inside: {what}"
    return "gzip " + mutate_bytes(data, path)


def kind_of(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        return "gzip"
    if name.endswith(".db"):
        return "sqlite"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".json"):
        return "json"
    return "bytes"


def mutate_any(data: st.DataObject, path: Path, kind: str | None = None) -> str:
    """One mutation fitting the kind of ``path``, or a generic one (bytes, lines)."""
    kind = kind or kind_of(path)
    own = {
        "gzip": [mutate_gzip],
        "sqlite": [mutate_sqlite, mutate_sqlite, mutate_sqlite],
        "csv": [mutate_csv, mutate_csv, mutate_lines],
        "json": [mutate_json, mutate_json, mutate_lines],
        "bytes": [mutate_lines],
    }[kind]
    mutator = data.draw(st.sampled_from([*own, mutate_bytes]), label="mutator")
    return mutator(data, path)


def damage(data: st.DataObject, files: list[Path], most: int = 3) -> list[str]:
    """Up to ``most`` mutations of files drawn from ``files``."""
    done = []
    for _ in range(data.draw(st.integers(1, most), label="mutations")):
        path = data.draw(st.sampled_from(files), label="file")
        if path.is_file():
            done.append(f"{path.name}: {mutate_any(data, path)}")
    return done
