"""Files written in pieces (perfledger.pages): the bytes are the same as one write's, and no
write is larger than a piece."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from perfledger import pages
from perfledger.pages import WRITE_PIECE_BYTES, PieceSink, write_pieces
from perfledger.run.mapped_files import read_ipc, write_ipc


@pytest.fixture
def write_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every pwrite perfledger.pages gives the system."""
    sizes: list[int] = []
    real = os.pwrite

    def recorded(descriptor: int, data: bytes, offset: int) -> int:
        sizes.append(len(memoryview(data).cast("B")))
        return real(descriptor, data, offset)

    monkeypatch.setattr(pages.os, "pwrite", recorded)
    return sizes


def _data(size: int) -> bytes:
    return np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()


def test_write_pieces_writes_everything_at_its_offset(
    tmp_path: Path, write_sizes: list[int]
) -> None:
    data = _data(3 * WRITE_PIECE_BYTES + 12345)
    path = tmp_path / "f.bin"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(descriptor, b"head", 0)
        write_pieces(descriptor, data, 4)
    finally:
        os.close(descriptor)
    assert path.read_bytes() == b"head" + data
    assert max(write_sizes) <= WRITE_PIECE_BYTES
    assert sum(write_sizes) == len(data) + 4  # the head's own write counted too


def test_an_arrow_file_written_through_the_sink_is_the_same(
    tmp_path: Path, write_sizes: list[int]
) -> None:
    table = pa.table(
        {
            "n": np.arange(1_000_000, dtype=np.int64),  # 8 MB: eight pieces at least
            "s": pa.array([f"row {i}" for i in range(1_000_000)]),
        }
    )
    ours = tmp_path / "ours.arrow"
    write_ipc(table, ours)
    assert read_ipc(ours).equals(table)
    assert max(write_sizes) <= WRITE_PIECE_BYTES
    assert len(write_sizes) >= 8
    reference = tmp_path / "reference.arrow"
    with pa.OSFile(str(reference), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    assert ours.read_bytes() == reference.read_bytes()


def test_the_sink_counts_what_it_wrote(tmp_path: Path) -> None:
    sink = PieceSink(tmp_path / "s.bin")
    assert sink.write(b"abc") == 3
    assert sink.write(memoryview(np.arange(4, dtype=np.int64))) == 32
    assert sink.tell() == 35
    sink.close()
    sink.close()  # a second close does nothing
    assert sink.closed
    assert (tmp_path / "s.bin").read_bytes() == b"abc" + np.arange(4, dtype=np.int64).tobytes()
