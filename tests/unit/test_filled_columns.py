"""Columns made a body at a time and written into their places in their Arrow IPC file: the
file read back holds what was written (a body written as soon as it is made, or at the end), a
file that cannot be made gives None (the caller uses the heap), and nothing is left behind of
a file given up."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfledger import pages
from perfledger.memory import in_mapped_files
from perfledger.run import filled_columns
from perfledger.run.filled_columns import filled_columns as filled
from perfledger.run.filled_columns import filled_text
from perfledger.sources.kineto_layout import NumbersInto, TextPiece

SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("device", pa.int16(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("flops", pa.float64(), nullable=False),
    ]
)


def _values(length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    flops = rng.normal(size=length)
    flops[:: max(1, length // 5)] = np.nan
    return {
        "rank": rng.integers(-(2**31), 2**31, length, dtype=np.int32),
        "device": rng.integers(-(2**15), 2**15, length, dtype=np.int16),
        "start_ns": rng.integers(-(2**63), 2**63 - 1, length, dtype=np.int64),
        "flops": flops,
    }


@pytest.mark.parametrize("length", [1, 7, 1000, 100_003])
def test_the_file_holds_what_was_written_through_its_targets(tmp_path: Path, length: int) -> None:
    # odd lengths: the int16 and int32 bodies end between the IPC writer's 8-byte paddings
    path = tmp_path / "numbers.arrow"
    given: list[tuple[Path, pa.Table]] = []
    place = filled(path, SCHEMA, length, lambda p, t: given.append((p, t)))
    assert place is not None
    values = _values(length, length)
    for name, column in values.items():
        target = place.target(name)
        assert target.shape == (length,) and target.dtype == column.dtype
        target[:] = column
    del target
    table = place.finish()
    assert table.schema == SCHEMA and table.num_rows == length
    for name, column in values.items():
        np.testing.assert_array_equal(table[name].to_numpy(), column)
    # read through a map of the file, which any IPC reader reads the same
    assert in_mapped_files(table)
    with pa.OSFile(str(path), "rb") as source:
        read = pa.ipc.open_file(source).read_all()
    assert read.schema == SCHEMA
    for name, column in values.items():
        np.testing.assert_array_equal(read[name].to_numpy(), column)
    assert given == [(path, table)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numbers.arrow"]


def test_only_fixed_width_columns_of_some_rows_are_made_in_place(tmp_path: Path) -> None:
    text = pa.schema([pa.field("args", pa.string())])
    assert filled(tmp_path / "a.arrow", text, 10) is None
    assert filled(tmp_path / "b.arrow", SCHEMA, 0) is None
    assert not list(tmp_path.iterdir())


def test_no_room_on_disk_gives_none_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(filled_columns.os, "posix_fallocate", full)
    assert filled(tmp_path / "numbers.arrow", SCHEMA, 1000) is None
    assert not list(tmp_path.iterdir())


def test_a_file_given_up_is_removed(tmp_path: Path) -> None:
    place = filled(tmp_path / "numbers.arrow", SCHEMA, 1000)
    assert place is not None
    place.target("rank")[:] = 1
    place.abandon()
    assert not list(tmp_path.iterdir())


def test_a_file_that_cannot_be_mapped_back_gives_its_columns_in_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "numbers.arrow"
    given: list[object] = []
    place = filled(path, SCHEMA, 5000, lambda p, t: given.append(p))
    assert place is not None
    values = _values(5000, 3)
    for name, column in values.items():
        place.target(name)[:] = column

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENODEV, "no maps here")

    monkeypatch.setattr(pa, "memory_map", refused)
    table = place.finish()
    for name, column in values.items():
        np.testing.assert_array_equal(table[name].to_numpy(), column)
    assert not in_mapped_files(table)
    assert not given and not list(tmp_path.iterdir())


def _text_batches(rng: np.random.Generator, rows: list[int]) -> list[list[pa.Array]]:
    """Record batches of two string columns: texts of 0-40 bytes (some not ASCII), some null;
    the second column all null in some batches."""
    batches = []
    for n in rows:
        texts = [
            None
            if rng.random() < 0.2
            else "é" * int(rng.integers(0, 20)) + "x" * int(rng.integers(0, 5))
            for _ in range(n)
        ]
        other = [None] * n if rng.random() < 0.5 else [str(i) for i in range(n)]
        batches.append([pa.array(texts, pa.string()), pa.array(other, pa.string())])
    return batches


def test_text_is_filled_into_the_holes_its_offsets_leave(tmp_path: Path) -> None:
    schema = pa.schema([("args", pa.string()), ("shapes", pa.string())])
    batches = _text_batches(np.random.default_rng(5), [1, 9, 300, 0, 2000])
    pieces = []
    for columns in batches:
        laid = []
        for column in columns:
            if column.null_count == len(column) and len(column):
                laid.append(TextPiece(whole=pa.nulls(len(column), pa.string())))
                continue
            validity, offsets, _ = column.buffers()
            laid.append(
                TextPiece(
                    np.frombuffer(offsets, np.int32, len(column) + 1).copy(),
                    None if column.null_count == 0 else validity.to_pybytes(),
                    column.null_count,
                )
            )
        pieces.append(laid)
    path = tmp_path / "text.arrow"
    place = filled_text(path, schema, pieces)
    assert place is not None
    for index, columns in enumerate(batches):
        for name, column, piece in zip(schema.names, columns, pieces[index], strict=True):
            if piece.whole is not None:
                continue
            data = column.buffers()[2]
            target = place.target(name, index)
            expected = b"" if data is None else data.to_pybytes()[: int(piece.offsets[-1])]
            assert target.nbytes == len(expected)
            target[:] = np.frombuffer(expected, np.uint8)
            if index % 2:  # half the pieces written as soon as made, the rest by finish
                place.written(name, index)
                target[:] = 0  # the file has the piece's text: the target is no longer read
    del target
    table = place.finish()
    assert in_mapped_files(table)
    for name in schema.names:
        assert table[name].num_chunks == len(batches)
        assert table[name].to_pylist() == [
            v for b in batches for v in b[schema.names.index(name)].to_pylist()
        ]


def test_where_space_cannot_be_reserved_ahead_nothing_is_made_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a system without posix_fallocate (macOS): no room is reserved ahead, so the caller
    # makes its columns in the heap
    monkeypatch.delattr(filled_columns.os, "posix_fallocate")
    assert filled(tmp_path / "numbers.arrow", SCHEMA, 1000) is None
    assert not list(tmp_path.iterdir())


def test_a_target_still_held_elsewhere_does_not_stop_the_columns_being_read(
    tmp_path: Path,
) -> None:
    """A frame that outlived its call (a profiler's sample) may still hold a target when the
    columns are finished: the file is read as written, the target stays its holder's."""
    path = tmp_path / "numbers.arrow"
    place = filled(path, SCHEMA, 100, None)
    assert place is not None
    values = _values(100, 3)
    for name, column in values.items():
        place.target(name)[:] = column
    held = place.target("start_ns")
    table = place.finish()
    for name, column in values.items():
        np.testing.assert_array_equal(table[name].to_numpy(), column)
    assert held.size == 100  # still readable by its holder
    del held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numbers.arrow"]


def test_a_write_refused_at_the_end_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = filled(tmp_path / "numbers.arrow", SCHEMA, 1000)
    assert place is not None
    for name, column in _values(1000, 4).items():
        place.target(name)[:] = column

    def refused(*args: object) -> int:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(pages.os, "pwrite", refused)  # the bodies' writes
    with pytest.raises(OSError):
        place.finish()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("done", [(), ("start_ns",), ("rank", "device", "start_ns", "flops")])
def test_columns_done_early_are_written_beside_and_read_back_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, done: tuple[str, ...]
) -> None:
    # the layout's way: a column written into the file on a thread of its own as soon as it
    # is made, the others at the end
    writers: list[str] = []
    write = filled_columns.write_pieces

    def noted(*args: Any) -> None:
        writers.append(threading.current_thread().name)
        write(*args)

    monkeypatch.setattr(filled_columns, "write_pieces", noted)
    place = filled(tmp_path / "numbers.arrow", SCHEMA, 100_003)
    into = NumbersInto(place, tuple(SCHEMA.names))
    values = _values(100_003, 5)
    columns: dict[str, object] = {}
    for name, column in values.items():
        columns[name] = target = into.array(name, 100_003, column.dtype)
        target[:] = column
        if name in done:
            into.done(name)
    del target
    table = into.finish(columns)
    assert all(columns[name] is None for name in SCHEMA.names)  # the targets let go
    for name, column in values.items():
        np.testing.assert_array_equal(table[name].to_numpy(), column)
        assert in_mapped_files(pa.table({name: table[name]}))
    beside = [w for w in writers if w != threading.current_thread().name]
    assert len(beside) == len(done) and len(writers) == len(SCHEMA.names)


def test_a_write_refused_beside_is_raised_at_the_end_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = filled(tmp_path / "numbers.arrow", SCHEMA, 1000)
    into = NumbersInto(place, tuple(SCHEMA.names))
    columns: dict[str, object] = {}

    def refused(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pages.os, "pwrite", refused)
    for name, column in _values(1000, 6).items():
        columns[name] = into.array(name, 1000, column.dtype)
        into.done(name)
    with pytest.raises(OSError, match="No space"):
        into.finish(columns)
    into.abandon()  # as the layout answers the error
    assert not list(tmp_path.iterdir())
