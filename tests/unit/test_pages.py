"""Files written in pieces and maps written a page at a time (perfledger.pages): the bytes
are the same as one write's, no write is larger than a piece, and a writable map reads
nothing ahead."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from perfledger import pages
from perfledger.pages import WRITE_PIECE_BYTES, PieceSink, writable_map, write_pieces
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


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists() or not hasattr(mmap, "MADV_RANDOM"),
    reason="reads /proc/self/smaps (Linux)",
)
def test_a_writable_map_reads_nothing_ahead(tmp_path: Path) -> None:
    path = tmp_path / "m.bin"
    size = 8 << 20
    with open(path, "w+b") as file:
        file.truncate(size)
        writable = writable_map(file.fileno(), size)
    target = np.frombuffer(writable, np.uint8)
    target[:] = 7
    address = target.ctypes.data
    flags: list[str] = []
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            flags = head[1:]
    del target
    writable.close()
    assert "rr" in flags  # the kernel's mark of MADV_RANDOM: no read-ahead
    assert path.read_bytes() == bytes([7]) * size
