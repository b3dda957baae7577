"""mapped_batches: record batches written to an IPC file one at a time and read back through a
map of it; where the file fails (at its opening, after some batches, at its mapping), the same
table in the heap, with nothing left on disk; an error of the batches themselves raised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from perfledger.memory import in_mapped_files
from perfledger.run import mapped_files
from perfledger.run.mapped_files import mapped_batches

SCHEMA = pa.schema([("text", pa.string()), ("number", pa.int64())])
ROWS = 40  # a batch

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps"
)


def _batches(count: int, made: list[int] | None = None) -> Iterator[pa.RecordBatch]:
    for k in range(count):
        if made is not None:
            made.append(k)
        rows = range(k * ROWS, (k + 1) * ROWS)
        yield pa.record_batch(
            [
                pa.array([None if i % 7 == 0 else f"row {i} " + "x" * (i % 13) for i in rows]),
                pa.array(list(rows), pa.int64()),
            ],
            schema=SCHEMA,
        )


def _reader(count: int, made: list[int] | None = None) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(SCHEMA, _batches(count, made))


def _expected(count: int) -> pa.Table:
    return pa.Table.from_batches(list(_batches(count)), SCHEMA)


class _Full:
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, path: Path, room: int) -> None:
        self.file = path.open("wb")
        self.room = room
        self.closed = False

    def write(self, data: Any) -> int:
        data = bytes(data)
        if len(data) > self.room:
            raise OSError(28, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()
        self.closed = True


def _left(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_the_batches_are_read_back_through_a_map_of_the_file_written_one_at_a_time(
    tmp_path: Path,
) -> None:
    made: list[int] = []
    sizes: list[int] = []  # the file's size as each batch is made
    path = tmp_path / "t.arrow"

    def watched() -> Iterator[pa.RecordBatch]:
        for batch in _batches(5, made):
            written = list(tmp_path.iterdir())
            sizes.append(sum(p.stat().st_size for p in written))
            yield batch

    table, mapped = mapped_batches(pa.RecordBatchReader.from_batches(SCHEMA, watched()), path)
    assert mapped and in_mapped_files(table)
    assert table.equals(_expected(5))
    assert made == list(range(5))
    assert sizes == sorted(sizes) and len(set(sizes)) == 5  # each batch written before the next
    assert _left(tmp_path) == ["t.arrow"]
    assert pa.ipc.open_file(pa.memory_map(str(path))).read_all().equals(_expected(5))


@pytest.mark.parametrize("room", [0, 400, 1500, 3000])
def test_a_file_that_fills_up_leaves_the_same_table_in_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    # room for none, the schema, a batch or two, then the disk is full
    monkeypatch.setattr(
        mapped_files, "_sink", lambda path: pa.PythonFile(_Full(path, room), mode="w")
    )
    table, mapped = mapped_batches(_reader(6), tmp_path / "t.arrow")
    assert not mapped and not in_mapped_files(table)
    assert table.equals(_expected(6))
    assert _left(tmp_path) == []


def test_a_file_that_cannot_be_opened_leaves_the_table_in_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(path: Path) -> Any:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(mapped_files, "_sink", refused)
    table, mapped = mapped_batches(_reader(3), tmp_path / "t.arrow")
    assert not mapped and table.equals(_expected(3))
    assert _left(tmp_path) == []


def test_a_file_that_cannot_be_mapped_leaves_the_table_in_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unmappable(path: Path) -> pa.Table:
        raise OSError(19, "No such device", str(path))

    monkeypatch.setattr(mapped_files, "read_ipc", unmappable)
    table, mapped = mapped_batches(_reader(4), tmp_path / "t.arrow")
    assert not mapped and not in_mapped_files(table)
    assert table.equals(_expected(4))
    assert _left(tmp_path) == []


def test_an_error_of_the_batches_is_raised_and_leaves_no_file(tmp_path: Path) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield from _batches(2)
        raise OSError(5, "Input/output error", "the source")

    with pytest.raises(OSError, match="the source"):
        mapped_batches(pa.RecordBatchReader.from_batches(SCHEMA, failing()), tmp_path / "t.arrow")
    assert _left(tmp_path) == []


def test_no_batches_give_an_empty_mapped_table(tmp_path: Path) -> None:
    table, mapped = mapped_batches(_reader(0), tmp_path / "t.arrow")
    assert mapped and table.num_rows == 0 and table.schema.equals(SCHEMA)
