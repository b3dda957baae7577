"""Files written around the page cache: the bytes are those written, whatever the sizes, on a
filesystem that takes O_DIRECT, one that refuses it and one that fails a direct write."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfledger import direct_files
from perfledger.direct_files import ALIGNMENT, BUFFER_BYTES, direct_file, write_parquet

SIZES = [0, 1, ALIGNMENT - 1, ALIGNMENT, ALIGNMENT + 1, BUFFER_BYTES, BUFFER_BYTES + 3]


def _pieces(total: int) -> list[bytes]:
    """``total`` bytes of a known pattern in uneven pieces."""
    data = np.random.default_rng(total).integers(0, 256, total, dtype=np.uint8).tobytes()
    cuts = [0, 1, 7, 5000, BUFFER_BYTES - 11, total]
    bounds = sorted({min(c, total) for c in cuts})
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.fixture
def direct_suits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file's disk taken for one that suits direct writes (the test's own may not)."""
    monkeypatch.setattr(direct_files, "direct_writes_suit", lambda fd: True)


@pytest.mark.parametrize("total", SIZES)
def test_a_direct_file_holds_exactly_the_bytes_written(
    tmp_path: Path, total: int, direct_suits: None
) -> None:
    pieces = _pieces(total)
    path = tmp_path / "out.csv"
    with direct_file(path) as sink:
        for piece in pieces:
            sink.write(piece)
        went_direct = sink.direct
    assert path.read_bytes() == b"".join(pieces)
    if total < BUFFER_BYTES:  # a small file: the usual way
        assert not went_direct


def test_a_disk_that_does_not_suit_keeps_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_files, "direct_writes_suit", lambda fd: False)
    pieces = _pieces(BUFFER_BYTES + 3)
    path = tmp_path / "out.bin"
    with direct_file(path) as sink:
        for piece in pieces:
            sink.write(piece)
        assert not sink.direct
    assert path.read_bytes() == b"".join(pieces)


def test_tmpfs_and_network_filesystems_do_not_suit() -> None:
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return  # no tmpfs here to ask about
    fd = os.open(shm / f"perfledger-direct-{os.getpid()}", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        assert os.major(os.fstat(fd).st_dev) == 0
        assert not direct_files.direct_writes_suit(fd)
    finally:
        os.close(fd)
        (shm / f"perfledger-direct-{os.getpid()}").unlink()


def test_a_direct_write_that_fails_goes_on_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_suits: None
) -> None:
    real = os.pwrite
    calls = {"n": 0}

    def failing_second(fd: int, data: memoryview, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # the second buffer's write: the first one is in the file
            raise OSError(22, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(direct_files.os, "pwrite", failing_second)
    pieces = _pieces(3 * BUFFER_BYTES + 5)
    path = tmp_path / "out.bin"
    with direct_file(path) as sink:
        for piece in pieces:
            sink.write(piece)
    assert path.read_bytes() == b"".join(pieces)
    assert calls["n"] > 2


def test_an_error_in_the_block_leaves_the_file_closed(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    with pytest.raises(RuntimeError), direct_file(path) as sink:
        sink.write(b"x" * 10)
        raise RuntimeError("stop")
    assert sink.closed


def test_a_parquet_file_written_around_the_cache_reads_back(tmp_path: Path) -> None:
    table = pa.table({"a": np.arange(300_000), "b": [f"k{i % 97}" for i in range(300_000)]})
    path = tmp_path / "t.parquet"
    write_parquet(table, path, compression="zstd")
    assert pq.read_table(path).equals(table)


def test_a_slow_disk_goes_back_to_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_files, "_slow_devices", set())
    monkeypatch.setattr(direct_files, "SLOWEST_DIRECT", 1 << 62)  # every disk too slow
    path = tmp_path / "out.bin"
    with direct_file(path) as probe:
        if not direct_files.direct_writes_suit(probe.fileno()):
            return  # a filesystem here that takes no direct writes: nothing to find slow
    pieces = _pieces(3 * BUFFER_BYTES + 5)
    with direct_file(path) as sink:
        for piece in pieces:
            sink.write(piece)
        assert not sink.direct
    assert path.read_bytes() == b"".join(pieces)
    assert os.stat(path).st_dev in direct_files._slow_devices  # the next files: the cache
    with direct_file(path) as again:
        assert not direct_files.direct_writes_suit(again.fileno())


def test_a_large_file_goes_direct_where_the_disk_takes_it(
    tmp_path: Path, direct_suits: None
) -> None:
    probe = tmp_path / "probe"
    try:  # whether this filesystem takes O_DIRECT at all
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o600))
        takes = bool(getattr(os, "O_DIRECT", 0))
    except OSError:
        takes = False
    pieces = _pieces(2 * BUFFER_BYTES + 5)
    path = tmp_path / "out.bin"
    with direct_file(path) as sink:
        for piece in pieces:
            sink.write(piece)
        assert sink.direct == takes
    assert path.read_bytes() == b"".join(pieces)
