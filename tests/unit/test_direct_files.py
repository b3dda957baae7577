"""Files written around the page cache: the bytes are those written, whatever the sizes, on a
filesystem that takes O_DIRECT, one that refuses it and one that fails a direct write."""

from __future__ import annotations

import os
import threading
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
    pieces = _pieces(direct_files.JUDGED_AFTER + 3 * BUFFER_BYTES + 5)
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


class _Clock:
    """``time.perf_counter`` for direct_files: each direct write (a pair of calls) takes the
    next of ``seconds`` (the last one again once they run out)."""

    def __init__(self, seconds: list[float]) -> None:
        self.seconds = seconds
        self.now = 0.0
        self.calls = 0

    def perf_counter(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:  # a write's end
            index = min(self.calls // 2 - 1, len(self.seconds) - 1)
            self.now += self.seconds[index]
        return self.now


def _write_with_clock(
    path: Path, monkeypatch: pytest.MonkeyPatch, seconds: list[float], writers: int = 1
) -> tuple[bool, bytes]:
    """A file of several buffers written while ``writers - 1`` other files are written
    around the cache, each direct write taking the next of ``seconds``: whether it is still
    written around the cache at its end, and the bytes written."""
    monkeypatch.setattr(direct_files, "_slow_devices", set())
    monkeypatch.setattr(direct_files, "time", _Clock(seconds))
    monkeypatch.setattr(direct_files, "_direct_files", writers - 1)
    pieces = _pieces(direct_files.JUDGED_AFTER + 2 * BUFFER_BYTES + 5)
    with direct_file(path) as sink:
        for piece in pieces:
            sink.write(piece)
        direct = sink.direct
    assert path.read_bytes() == b"".join(pieces)
    return direct, b"".join(pieces)


def _pace(seconds: float) -> float:
    """Seconds of a buffer's write at ``seconds`` times the slowest pace kept."""
    return seconds * BUFFER_BYTES / direct_files.SLOWEST_DIRECT


def test_a_disk_whose_one_write_stalls_keeps_the_direct_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_suits: None
) -> None:
    # the first write three times too slow, the others four times faster than needed: the
    # file's pace over its first writes is the disk's, and it is fast enough
    path = tmp_path / "out.bin"
    direct, _ = _write_with_clock(path, monkeypatch, [_pace(3.0), _pace(0.25)])
    assert direct
    assert not direct_files._slow_devices


def test_a_disk_slow_over_many_writes_goes_back_to_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_suits: None
) -> None:
    path = tmp_path / "out.bin"
    direct, _ = _write_with_clock(path, monkeypatch, [_pace(1.5)])
    assert not direct
    assert os.stat(path).st_dev in direct_files._slow_devices


def test_a_disk_shared_by_two_direct_files_is_judged_on_their_pace_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_suits: None
) -> None:
    # each of two files written at 1.5 times the slowest pace's time: the disk writes both
    # at 1.33 times that pace, fast enough
    path = tmp_path / "out.bin"
    direct, _ = _write_with_clock(path, monkeypatch, [_pace(1.5)], writers=2)
    assert direct
    assert direct_files._direct_files == 1  # the other file's count left as it was


def test_a_full_buffer_is_written_beside_while_the_writer_fills_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_suits: None
) -> None:
    real = os.pwrite
    writer = threading.current_thread()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    threads: set[str] = set()

    def held(fd: int, data: memoryview, offset: int) -> int:
        if threading.current_thread() is not writer:
            threads.add(threading.current_thread().name)
            started.set()
            release.wait(10)  # the disk busy until the writer has filled the next buffer
            finished.set()
        return real(fd, data, offset)

    monkeypatch.setattr(direct_files.os, "pwrite", held)
    data = np.random.default_rng(9).integers(0, 256, 2 * BUFFER_BYTES + 77, np.uint8).tobytes()
    path = tmp_path / "out.bin"
    with direct_file(path) as sink:
        sink.write(data[:BUFFER_BYTES])  # the first buffer full: its write begins beside
        assert started.wait(10)
        sink.write(data[BUFFER_BYTES : 2 * BUFFER_BYTES - 1])  # filled meanwhile
        assert not finished.is_set()  # the writer did not wait for the held write
        release.set()
        sink.write(data[2 * BUFFER_BYTES - 1 :])
        assert sink.direct
    assert path.read_bytes() == data
    assert threads and writer.name not in threads


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_forked_child_writes_around_the_cache_on_threads_of_its_own(
    tmp_path: Path, direct_suits: None
) -> None:
    # the parent's write threads exist (a file written), the child has none of them
    pieces = _pieces(2 * BUFFER_BYTES + 5)
    with direct_file(tmp_path / "parent.bin") as sink:
        for piece in pieces:
            sink.write(piece)
    pid = os.fork()
    if pid == 0:  # the child: its file written, or a non-zero exit within the alarm
        import signal

        signal.alarm(20)
        try:
            with direct_file(tmp_path / "child.bin") as sink:
                for piece in pieces:
                    sink.write(piece)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "child.bin").read_bytes() == b"".join(pieces)
