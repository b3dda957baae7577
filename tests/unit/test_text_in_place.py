"""The events' text laid out in sorted row order straight into the file that holds it
(``kineto_layout.text_in_place``) gives the same pieces, value for value, as the layout
through the heap (``string_pieces``), whatever the blocks hold: nulls, blocks without the
column, sliced arrays, empty and non-ASCII texts, rows of blocks interleaved."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.run.filled_columns import filled_text
from perfledger.sources import kineto_layout, kineto_scan
from perfledger.sources.kineto_layout import gather_plan, sorted_strings, text_in_place

pytestmark = pytest.mark.skipif(not kineto_scan.AVAILABLE, reason="the compiled scanner")

COLUMNS = ("args", "shapes", "dtypes")


def _part(rng: np.random.Generator, size: int, kind: int) -> pa.Array | None:
    """A block's column: none (0), all null (1), texts with some nulls (2), a slice of a
    longer array (3)."""
    if kind == 0:
        return None
    if kind == 1:
        return pa.nulls(size, pa.string())
    pad = 3 if kind == 3 else 0
    texts = [
        None
        if rng.random() < 0.3
        else "ü" * int(rng.integers(0, 4)) + "{}" * int(rng.integers(0, 6))
        for _ in range(size + 2 * pad)
    ]
    array = pa.array(texts, pa.string())
    return array.slice(pad, size) if pad else array


def _blocks(seed: int) -> tuple[list[Any], list[int], np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, 60)) for _ in range(int(rng.integers(1, 8)))]
    kinds = {c: rng.integers(0, 4, len(sizes)) for c in COLUMNS}
    if seed % 5 == 0:
        kinds["dtypes"][:] = 0  # a column no block has
    blocks = [
        types.SimpleNamespace(**{c: _part(rng, size, int(kinds[c][j])) for c in COLUMNS})
        for j, size in enumerate(sizes)
    ]
    # mostly in file order, with runs of blocks interleaved (threads written side by side)
    keys = np.arange(sum(sizes)) + rng.integers(0, 40, sum(sizes))
    return blocks, sizes, np.argsort(keys, kind="stable")


def _inverse(order: np.ndarray) -> np.ndarray:
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    return position


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=12), seed=st.integers(0, 10_000))
def test_the_plan_says_where_each_sorted_row_comes_from(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    order = rng.permutation(sum(sizes)).astype(np.int64)
    plan = gather_plan(sizes, order, _inverse(order))
    # each sorted row's block and row inside it, counted from the blocks one after another
    file_block = np.repeat(np.arange(len(sizes)), sizes)
    np.testing.assert_array_equal(plan.block, file_block[order])
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    np.testing.assert_array_equal(plan.first, first)
    np.testing.assert_array_equal(plan.local, order - first[file_block[order]])
    # a block's last sorted place: the greatest of its rows' places; none for an empty block
    for b, size in enumerate(sizes):
        places = np.flatnonzero(file_block[order] == b)
        assert plan.last[b] == (places.max() if size else -1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_the_text_made_in_place_is_the_text_laid_out_in_the_heap(seed: int) -> None:
    import tempfile

    blocks, sizes, order = _blocks(seed)
    plan = gather_plan(sizes, order, _inverse(order))
    copies = [types.SimpleNamespace(**vars(b)) for b in blocks]
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(kineto_layout, "LAYOUT_PIECE_ROWS", 16)
        expected = {c: sorted_strings(copies, sizes, c, plan) for c in COLUMNS}
        groups: list[str] = []

        def fill(group: str, schema: pa.Schema, layout: Any) -> Any:
            groups.append(group)
            assert schema.names == list(COLUMNS)
            return filled_text(Path(folder) / "text.arrow", schema, layout)

        table = text_in_place(blocks, COLUMNS, plan, fill, "text")
        assert table is not None and groups == ["text"]
        for column in COLUMNS:
            made = table[column]
            assert [len(c) for c in made.chunks] == [len(c) for c in expected[column].chunks]
            assert made.to_pylist() == expected[column].to_pylist(), column
            # the blocks let go of the column
            assert all(getattr(b, column) is None for b in blocks)
        del table, made


def test_no_place_leaves_the_blocks_as_they_were() -> None:
    blocks, sizes, order = _blocks(7)
    before = [dict(vars(b)) for b in blocks]
    plan = gather_plan(sizes, order, _inverse(order))
    assert text_in_place(blocks, COLUMNS, plan, lambda *a: None, "t") is None
    assert [dict(vars(b)) for b in blocks] == before


def test_a_column_of_another_type_is_left_to_the_heap_layout() -> None:
    blocks, sizes, order = _blocks(8)
    blocks[0].args = pa.array(["{}"] * sizes[0], pa.large_string())
    calls: list[object] = []
    made = text_in_place(
        blocks, COLUMNS, gather_plan(sizes, order, _inverse(order)), lambda *a: calls.append(a), "t"
    )
    assert made is None and not calls
