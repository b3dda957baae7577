"""kernel_details reads every launch-configuration key from one parse of the args JSON, with the
values that one json_extract call per key gives."""

from __future__ import annotations

import json
import math
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import example, given, settings
from hypothesis import strategies as st

from perfledger.analysis.ops import KERNEL_ARG_KEYS, KINETO_TASK_IDS, launch_config
from perfledger.model.tables import KERNEL_DETAILS_SCHEMA

_KEYS = [key for keys in KERNEL_ARG_KEYS.values() for key in keys]


def _arg_expression(column: str, keys: list[str] | tuple[str, ...], type_: pa.DataType) -> str:
    """One column read the plain way: one json_extract call per key, first usable value wins."""
    values = []
    for key in keys:
        path = f"'$.\"{key}\"'"
        if pa.types.is_string(type_):
            raw = f"CAST(json_extract(valid_args, {path}) AS VARCHAR)"
            bare = f"regexp_replace({raw}, '[\\[\\] \"]', '', 'g')"
            whole = f"regexp_replace({bare}, '\\.0+(,|$)', '\\1', 'g')"
            values.append(f"nullif({whole}, 'null')")
        else:
            sql_type = "BIGINT" if pa.types.is_integer(type_) else "DOUBLE"
            values.append(f"TRY_CAST(json_extract_string(valid_args, {path}) AS {sql_type})")
    return f"coalesce({', '.join(values)}) AS {column}"


def _duckdb_config(args: list[str | None]) -> dict[str, list[Any]]:
    """The reference: every row through DuckDB's json_valid / json_extract."""
    select = ",\n".join(
        _arg_expression(column, keys, KERNEL_DETAILS_SCHEMA.field(column).type)
        for column, keys in KERNEL_ARG_KEYS.items()
    )
    table = pa.table(
        {"i": pa.array(range(len(args)), pa.int64()), "args": pa.array(args, pa.string())}
    )
    query = f"""
        WITH parsed AS (SELECT i, CASE WHEN json_valid(args) THEN args END AS valid_args FROM t)
        SELECT {select} FROM parsed ORDER BY i
    """
    with duckdb.connect() as con:
        con.register("t", table)
        result = con.sql(query).to_arrow_table()
    schema = pa.schema([KERNEL_DETAILS_SCHEMA.field(c) for c in KERNEL_ARG_KEYS])
    result = result.cast(schema)
    return {c: result[c].to_pylist() for c in KERNEL_ARG_KEYS}


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None)
        or (
            isinstance(x, float)
            and isinstance(y, float)
            and (x == y or math.isnan(x) == math.isnan(y) is True)
        )
        or x == y
        for x, y in zip(a, b, strict=True)
    )


def _check(args: list[str | None]) -> None:
    got = {c: v.to_pylist() for c, v in launch_config(pa.array(args, pa.string())).items()}
    want = _duckdb_config(args)
    for column in KERNEL_ARG_KEYS:
        assert _same(got[column], want[column]), (column, args, got[column], want[column])


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.integers(-5, 300),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.5, 1.0, 2.50, 1e3, -0.0, 12.0125]),
    st.text(max_size=6),
    st.sampled_from(["1,2", "a b", "null", "x\\y", 'q"', "é", "7.0"]),
)
_values = st.one_of(
    _scalars,
    st.lists(st.one_of(st.integers(-3, 2**40), st.floats(-10, 10), st.none()), max_size=4),
    st.dictionaries(st.sampled_from(["grid", "x"]), st.integers(0, 9), max_size=2),
)
_objects = st.dictionaries(
    st.one_of(st.sampled_from(_KEYS), st.text(max_size=4)), _values, max_size=6
)


# Kineto's ids before the launch configuration, written as Kineto writes them and damaged:
# numbers that are not JSON integers, ids as strings, and an id closing the object with a comma.
_ID_KEYS = ["External id", "queued", "device", "context", "stream", "correlation"]
_id_values = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["0", "-0", "007", "1.5", "2e3", '"9"', "-", "", "null", "1 2"]),
)


@st.composite
def _kineto_ids(draw: st.DrawFn) -> str:
    pairs = draw(st.lists(st.tuples(st.sampled_from(_ID_KEYS), _id_values), max_size=6))
    separator = draw(st.sampled_from([",", ", ", ",  ", " ,"]))
    colon = draw(st.sampled_from([": ", ":", " : "]))
    return "".join(f'"{key}"{colon}{value}{separator}' for key, value in pairs)


@st.composite
def _args_text(draw: st.DrawFn) -> str | None:
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return None
    obj = draw(_objects)
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (",", ": "), (" , ", " :  ")]))
    text = json.dumps(obj, separators=separators, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # Kineto's ids first, as on every kernel of a Kineto trace
        text = "{" + draw(_kineto_ids()) + text[1:]
    if choice == 1 and len(text) > 2:  # damaged JSON
        cut = draw(st.integers(1, len(text) - 1))
        text = text[:cut]
    if choice == 2:  # a key written twice
        text = text[:-1] + (', "grid": [9, 9, 9]}' if len(obj) else '"grid": [3, 1, 1]}')
    return text


@settings(max_examples=150, deadline=None)
@given(st.lists(_args_text(), min_size=1, max_size=12))
@example(
    [
        '{"grid": [24, 1, 1], "block": [128, 1, 1], "registers per thread": 16, '
        '"shared memory": 0, "blocks per SM": 0.3, "warps per SM": 1.2, '
        '"est. achieved occupancy %": 2}',
        '{"block_dim": 2.5, "grid": [1.0, 10.0, 1]}',
        '{"block_dim": 8, "grid": null}',
        '{"grid": "1, 2", "block": {"x": 1}}',
        '{"grid": [1e2, 1]}',
        "not json",
        "{}",
        '{"External id": 7,"queued": 0, "device": 1, "context": 1,"stream": 7, '
        '"correlation": 7,"grid": [2, 1, 1],"block": [64, 1, 1]}',
        '{"External id": 8,"queued": 0, "device": 1, "context": 1,"stream": 7, '
        '"correlation": 8,"grid": [2, 1, 1],"block": [64, 1, 1]}',
        '{"correlation": 007,"grid": [2, 1, 1]}',
        '{"correlation": 99999999999999999999999,"grid": [2, 1, 1]}',
        '{"correlation": 5,}',
        '{"stream": 7, "correlation": 5, ',
    ]
)
def test_launch_config_matches_duckdb(args: list[str | None]) -> None:
    _check(args)


def test_kineto_ids_are_not_configuration_keys() -> None:
    # launch_config drops the ids before parsing: a configuration key among them would be lost
    assert not set(_ID_KEYS) & set(_KEYS)
    for key in _ID_KEYS:
        text = pa.array([f'{{"{key}": 12, "grid": [1, 2, 3]}}'])
        assert pc.match_substring_regex(text, KINETO_TASK_IDS).to_pylist() == [True]
    assert pc.match_substring_regex(
        pa.array(['{"grid": 1, "x": 2}']), KINETO_TASK_IDS
    ).to_pylist() == [False]


def test_kineto_kernel_args_read_every_field() -> None:
    args = (
        '{"External id": 73689,"queued": 0, "device": 1, "context": 1,"stream": 7, '
        '"correlation": 73689,"registers per thread": 16,"shared memory": 0,"blocks per SM": 0.3,'
        '"warps per SM": 1.2,"grid": [24, 1, 1],"block": [128, 1, 1],'
        '"est. achieved occupancy %": 2}'
    )
    got = {c: v.to_pylist() for c, v in launch_config(pa.array([args])).items()}
    assert got == {
        "grid": ["24,1,1"],
        "block": ["128,1,1"],
        "registers_per_thread": [16],
        "shared_memory_bytes": [0],
        "blocks_per_sm": [0.3],
        "warps_per_sm": [1.2],
        "occupancy_pct": [2.0],
    }


def test_chunked_args_read_as_one_array() -> None:
    first = '{"External id": 1,"queued": 0, "correlation": 1,"grid": [4, 1, 1]}'
    second = '{"External id": 2,"queued": 0, "correlation": 2,"grid": [4, 1, 1]}'
    chunked = pa.chunked_array([[first], [second, "not json"]], pa.string())
    got = launch_config(chunked)
    assert got["grid"].to_pylist() == ["4,1,1", "4,1,1", None]
