"""The compiled record formatter (``_records.c``, :class:`RowBuilder`): the text of every kind of
piece is the one the pieces joined as tables give (:class:`PieceBuilder`, its oracle), records
of several parts come out in record order, and times read back as Perfetto reads them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.render.timeline import text
from perfledger.render.timeline.text import Builder, PieceBuilder, RowBuilder, joined_bytes

pytestmark = pytest.mark.skipif(
    text._records is None, reason="no C compiler where the project was installed"
)

_TEXTS = st.text(alphabet=st.sampled_from('ab"\\{}:,é€\n0'), max_size=6)
_INT64 = st.integers(-(2**63), 2**63 - 1)
# times as the timeline writes them (ns from the profile's origin), negatives too
_NS = st.one_of(st.integers(0, 2**53), st.integers(-(2**40), 2**40), st.integers(0, 10**6))


@st.composite
def _programs(draw: Any) -> tuple[int, list[tuple[Any, ...]]]:
    """A row count and the pieces of its records: (method, arguments, options)."""
    n = draw(st.integers(0, 40))

    def shown() -> np.ndarray | None:
        if not draw(st.booleans()):
            return None
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)

    ops: list[tuple[Any, ...]] = [("text", ("{", None), {})]  # as a record's head
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["text", "table", "values", "ints", "us"]))
        if kind == "text":
            ops.append(("text", (draw(_TEXTS), shown()), {}))
        elif kind == "table":
            texts = draw(st.lists(_TEXTS, min_size=1, max_size=12))
            codes = np.array(
                draw(st.lists(st.integers(0, len(texts) - 1), min_size=n, max_size=n)),
                dtype=draw(st.sampled_from([np.int8, np.int32, np.int64])),
            )
            fixed = draw(st.booleans())
            ops.append(("table", (pa.array(texts, pa.string()), codes, shown()), {"fixed": fixed}))
        elif kind == "values":
            texts = draw(st.lists(_TEXTS, min_size=n, max_size=n))
            ops.append(("values", (pa.array(texts, pa.string()), shown()), {}))
        elif kind == "ints":
            values = np.array(draw(st.lists(_INT64, min_size=n, max_size=n)), dtype=np.int64)
            around = {"before": draw(_TEXTS), "after": draw(_TEXTS)}
            ops.append(("ints", (values, shown()), around))
        else:
            values = np.array(draw(st.lists(_NS, min_size=n, max_size=n)), dtype=np.int64)
            ops.append(("us", (values, shown()), {"after": draw(_TEXTS)}))
    return n, ops


def _built(kind: type, n: int, ops: list[tuple[Any, ...]], rows: np.ndarray) -> Any:
    """The pieces of ``ops`` at ``rows`` (the records of one part) made by ``kind``."""
    line: Builder = kind(int(rows.size))
    for method, args, options in ops:
        picked = [a[rows] if isinstance(a, np.ndarray) else a for a in args]
        if method == "values":  # one text a row: the part's own
            picked[0] = args[0].take(pa.array(rows, pa.int64()))
        getattr(line, method)(*picked, **options)
    return line.build()


def _written(kind: type, n: int, ops: list[tuple[Any, ...]], part_of: np.ndarray) -> bytes:
    """The records of ``ops`` written as parts (record ``i`` in part ``part_of[i]``)."""
    parts = []
    for part in np.unique(part_of).tolist():
        at = np.flatnonzero(part_of == part)
        parts.append((_built(kind, n, ops, at), at))
    return bytes(joined_bytes(parts, n)) if parts else b""


@settings(max_examples=300, deadline=None)
@given(_programs(), st.data())
def test_records_written_a_row_at_a_time_are_those_of_the_pieces_joined(
    program: tuple[int, list[tuple[Any, ...]]], data: Any
) -> None:
    n, ops = program
    # the records split among up to three parts, interleaved, as a chunk's sources are
    part_of = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
    compiled = _written(RowBuilder, n, ops, part_of)
    assert compiled == _written(PieceBuilder, n, ops, part_of)
    assert compiled == _written(RowBuilder, n, ops, np.zeros(n, np.int64))


def _us_text(ns: int) -> str:
    line = RowBuilder(1)
    line.us(np.array([ns]))
    return bytes(joined_bytes([(line.build(), np.arange(1))], 1)).decode()


@pytest.mark.parametrize(
    "ns",
    [0, 1, 999, 1000, 1001, 123_456_789, 2**40 + 7, 2**44 - 1, *range(10**9, 10**9 + 40)],
)
def test_times_read_back_as_the_exact_ns_the_way_perfetto_reads_them(ns: int) -> None:
    written = _us_text(ns)
    assert written.startswith(f"{ns // 1000}.{ns % 1000:03d}")
    assert len(written.split(".")[1]) in (3, 4)
    assert math.trunc(float(written) * 1000) == ns  # Perfetto: trunc(x * 1000) in doubles


def test_a_code_beyond_its_table_and_a_record_placed_twice_are_refused() -> None:
    line = RowBuilder(2)
    line.table(pa.array(["a", "b"]), np.array([0, 2]))
    with pytest.raises(ValueError, match="beyond its table"):
        line.build()
    hidden = RowBuilder(2)  # a hidden row's code is never read
    hidden.table(pa.array(["a", "b"]), np.array([1, 9]), np.array([True, False]))
    rows = hidden.build()
    assert bytes(joined_bytes([(rows, np.arange(2))], 2)) == b"b"
    with pytest.raises(ValueError, match="out of place"):
        joined_bytes([(rows, np.array([1, 1]))], 2)
    with pytest.raises(ValueError, match="no row"):
        joined_bytes([(rows, np.array([0, 1]))], 3)


@pytest.mark.parametrize("texts", [2, 40])  # no more texts than rows (one pass), and more
def test_a_code_beyond_its_table_is_refused_whether_rows_are_measured_or_not(texts: int) -> None:
    data = b"".join(b"t%d" % i for i in range(texts))
    offsets = np.array([len(b"".join(b"t%d" % i for i in range(k))) for k in range(texts + 1)])
    codes = np.array([texts - 1, 1, texts], dtype=np.int64)  # the last one beyond
    table = (1, data, offsets.astype(np.int32), codes, None)
    with pytest.raises(ValueError, match="beyond its table"):
        text._records.format(3, (table,))
    shown = np.array([True, True, False])  # hidden: never read, the others written
    written, at = text._records.format(3, ((1, data, offsets.astype(np.int32), codes, shown),))
    assert written == b"t%dt1" % (texts - 1)
    assert np.frombuffer(at, np.int64).tolist() == [0, len(written) - 2, len(written), len(written)]


def test_a_text_whose_offsets_leave_the_data_is_refused_where_a_row_reads_it() -> None:
    data, offsets = b"ab", np.array([0, 1, 9], dtype=np.int32)  # text 1 ends past the data
    table = (1, data, offsets, np.array([0, 0], dtype=np.int64), None)
    written, at = text._records.format(2, (table,))
    assert written == b"aa" and np.frombuffer(at, np.int64).tolist() == [0, 1, 2]
    damaged = (1, data, offsets, np.array([0, 1], dtype=np.int64), None)
    with pytest.raises(ValueError, match="offsets do not lie within the data"):
        text._records.format(2, (damaged,))
