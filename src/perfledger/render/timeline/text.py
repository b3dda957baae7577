"""Column-wise JSON text: string columns joined row by row, numbers as Perfetto reads them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.render.timeline.grouping import Int64Array


def literal(text: str) -> pa.StringScalar:
    """A typed string scalar: an untyped Python str makes pyarrow infer its type, which tries
    to import pandas and dateutil on every call (measured: 10% of a timeline's time here)."""
    return pa.scalar(text, pa.string())


def join(*parts: Any) -> pa.Array:
    """Row by row concatenation of string columns and literals."""
    return pc.binary_join_element_wise(
        *(literal(part) if isinstance(part, str) else part for part in parts), literal("")
    )


def either(condition: Any, yes: Any, no: Any) -> pa.Array:
    """``pc.if_else`` with literals typed up front (see :func:`literal`)."""
    return pc.if_else(
        condition,
        literal(yes) if isinstance(yes, str) else yes,
        literal(no) if isinstance(no, str) else no,
    )


# The text of small non-negative integers (the timeline's pids, tids, fractions of a µs):
# taken from here, a column formats four times faster than cast from numbers.
_SMALL_INTS: Final = pa.array([str(i) for i in range(4096)], pa.string())


def ints(values: Int64Array) -> pa.Array:
    """Integers as decimal text."""
    values = np.asarray(values, dtype=np.int64)
    if values.size and values.min() >= 0 and values.max() < len(_SMALL_INTS):
        return _SMALL_INTS.take(pa.array(values))
    return pc.cast(pa.array(values), pa.string())


# ".000" to ".999", then the same with the fourth decimal "1" (see :func:`us`): one take of
# these formats a fraction instead of a cast, a pad, a choice and two joins.
_FRACTIONS: Final = pa.array(
    [f".{ns:03d}{tail}" for tail in ("", "1") for ns in range(1000)], pa.string()
)


def us(ns: Int64Array) -> pa.Array:
    """Non-negative ns as µs text with three decimals, Perfetto-exact (see the package doc)."""
    ns = np.asarray(ns, dtype=np.int64)
    whole = ns // 1000
    frac = ns - whole * 1000
    # what Perfetto computes: trunc(double(text) * 1000); double(text) == ns / 1000.0
    short = (ns / 1000.0) * 1000.0 < ns
    return join(ints(whole), _FRACTIONS.take(pa.array(frac + 1000 * short)))


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
