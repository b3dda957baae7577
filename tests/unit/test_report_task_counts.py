"""The report's count of op_summary rows by (operator, kind, task), made on the columns'
dictionary codes, against the rows counted one by one (nulls, unused dictionary values, plain
and dictionary columns, several chunks)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from perfledger.render.report.tables import _task_counts

NAMES = ["aten::mm", "gemm_a", "copy_k", "aten::add", None]
KINDS = ["kernel", "memcpy", None]

row = st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES), st.sampled_from(KINDS))


def _column(chunks: list[list[str | None]], dictionary: bool) -> pa.ChunkedArray:
    if not dictionary:
        return pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    encoded = []
    for values in chunks:
        # every chunk's dictionary also holds a value none of its rows uses
        words = sorted({v for v in values if v is not None} | {"unused"})
        codes = pa.array([None if v is None else words.index(v) for v in values], pa.int32())
        encoded.append(pa.DictionaryArray.from_arrays(codes, pa.array(words, pa.string())))
    return pa.chunked_array(encoded, pa.dictionary(pa.int32(), pa.string()))


@given(st.lists(st.lists(row, max_size=20), min_size=1, max_size=3), st.booleans())
def test_rows_counted_by_operator_kind_and_task(chunks, dictionary) -> None:
    columns = {
        name: _column([[r[at] for r in c] for c in chunks], dictionary)
        for at, name in enumerate(("host_op", "name", "kind"))
    }
    counted = _task_counts(pa.table(columns)).to_pylist()
    rows = [r for c in chunks for r in c]
    # the operator: the host operator, else the task's own name; tasks without a name
    # are grouped but not counted
    expected = Counter(
        (host if host is not None else name, kind, name) for host, name, kind in rows
    )
    got = {(r["op"], r["kind"], r["task"]): r["task_count"] for r in counted}
    assert set(got) == set(expected)
    for key, n in expected.items():
        assert got[key] == (n if key[2] is not None else 0)
