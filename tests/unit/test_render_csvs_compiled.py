"""The CSV writer's compiled path against its Arrow path: the same bytes for every kind of cell.

The Arrow path (cells made texts by Arrow's kernels, then joined) is what the exact-bytes tests
of test_render_csvs.py pin by hand; here random tables of every column type the writer takes
(nulls, NaN and infinities, huge and negative numbers, quotes, commas, line breaks, non-ASCII
text, dictionaries with unused and null entries, sliced arrays, several chunks) go through both.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.render import csvs

pytestmark = pytest.mark.skipif(csvs._records is None, reason="compiled formatter not built")

_TEXTS = st.one_of(
    st.none(),
    st.sampled_from(
        ["", "plain", "a,b", 'say "hi"', "line\nbreak", "cr\rx", "é ü 日本", "x" * 300]
    ),
    st.text(max_size=12),
)
_FLOATS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-7, -4e-7, 0.5, 1 / 3, 10.48576, 1e300, -1e308, 2.5e15]),
)


def _both(table: pa.Table, batch_rows: int = 16_384) -> tuple[bytes, bytes]:
    """The table's CSV bytes by the compiled path, then by the Arrow path."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(csvs, "_BATCH_ROWS", batch_rows)
        patched.setattr(csvs, "_PREPARED_ROWS", 3 * batch_rows)  # pieces made for 3 batches
        compiled = csvs.csv_bytes(table)
        patched.setattr(csvs, "_records", None)
        joined = csvs.csv_bytes(table)
    return compiled, joined


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            _TEXTS,
            st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            st.one_of(st.none(), st.integers(0, 2**64 - 1)),
            st.one_of(st.none(), st.integers(-128, 127)),
            st.one_of(st.none(), st.booleans()),
            _FLOATS,
            _TEXTS,
        ),
        max_size=40,
    ),
    cut=st.integers(0, 5),
    batch=st.integers(1, 7),
)
def test_random_tables_give_the_same_bytes(
    rows: list[tuple[object, ...]], cut: int, batch: int
) -> None:
    columns = list(zip(*rows, strict=True)) if rows else [()] * 7
    full = pa.table(
        {
            "name": pa.array(columns[0], pa.string()),
            "i64": pa.array(columns[1], pa.int64()),
            "u64": pa.array(columns[2], pa.uint64()),
            "i8": pa.array(columns[3], pa.int8()),
            "flag": pa.array(columns[4], pa.bool_()),
            "gbps": pa.array(columns[5], pa.float64()),
            "big": pa.array(columns[6], pa.large_string()),
            "coded": pa.array(columns[0], pa.string()).dictionary_encode(),
        }
    )
    table = full.slice(min(cut, full.num_rows))  # arrays that start past their buffers' front
    compiled, joined = _both(table, batch)
    assert compiled == joined


def test_shared_dictionaries_across_chunks_and_batches() -> None:
    # one dictionary (with entries no row uses and a null entry) behind two chunks, another
    # dictionary behind a third: each chunk's rows read their own dictionary's texts
    shared = pa.array(["k,1", None, 'q"', "unused", "plain"])
    other = pa.array(["z", "a\nb"])
    chunks = [
        pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 4, 2], pa.int32()), shared),
        pa.DictionaryArray.from_arrays(pa.array([4, 4, 0], pa.int32()), shared),
        pa.DictionaryArray.from_arrays(pa.array([1, 0, None], pa.int32()), other),
    ]
    table = pa.table({"name": pa.chunked_array(chunks), "n": pa.array(range(11), pa.float32())})
    compiled, joined = _both(table, 2)
    assert compiled == joined
    # and by hand: a null entry of the dictionary and a null index are both empty cells
    cells = ['"k,1"', "", "", "plain", '"q"""', "plain", "plain", '"k,1"', '"a\nb"', "z", ""]
    assert compiled.decode() == "name,n\n" + "".join(
        f"{cell},{i}\n" for i, cell in enumerate(cells)
    )


def test_unsigned_beyond_int64_and_floats_of_every_magnitude() -> None:
    table = pa.table(
        {
            "u": pa.array([2**64 - 1, 0, None, 2**63], pa.uint64()),
            "f": [math.nan, -0.0, 1e300, 123456789.1234567],
            "b": [True, None, False, True],
        }
    )
    compiled, joined = _both(table)
    assert (
        compiled
        == joined
        == (
            b"u,f,b\n18446744073709551615,,true\n0,0,\n,1e+300,false\n"
            b"9223372036854775808,123456789.123457,true\n"
        )
    )
