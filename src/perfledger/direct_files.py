"""Large output files written around the page cache (``O_DIRECT``), where that is safe.

A file written the usual way goes through the page cache: every page of it is a page of memory
the system must find and fill before the write returns, and keeps until it has written the
file out. For the large files of a profile that nothing reads back while the command runs
(the operator and kernel CSVs, the Parquet tables: hundreds of MB for a GB-sized trace), those
pages are most of what the write costs: on a virtual machine that hands its free memory back
to its host, a page taken afresh costs several times the copy into it (``python
bench/direct_writes.py``, 1 GiB: 0.23–3.16 s through the cache, 0.59–0.74 s around it;
bench/README.md, "Growth", 2026-12-06).
Written with ``O_DIRECT``, the bytes go from the buffers of this process, reused for every
file, straight to the disk: each full buffer on a thread of its own while the file's writer
fills the other, so that the disk's time is not the writer's.

:func:`direct_file` gathers a file's first :data:`BUFFER_BYTES` in a buffer: a file that
ends before is written the usual way. A longer one turns to ``O_DIRECT`` only on a filesystem of a
block device, and keeps to it only while the disk writes at :data:`SLOWEST_DIRECT` or more: a
network filesystem (NFS and the like), tmpfs, FUSE or a slow (spinning) disk keeps the page
cache, whose writing behind the command's back is what they need. Where the system refuses
``O_DIRECT``, or a direct write fails, the rest of the file is written the usual way: the
bytes are the same either way.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from perfledger.pages import write_pieces

# The size every direct write is a multiple of, and its buffer's alignment: 4 KiB covers the
# logical block sizes of the disks in use (512 B or 4 KiB).
ALIGNMENT: Final = 4096
# The bytes gathered before each write (a few large writes per file); a file shorter than
# this is written the usual way.
BUFFER_BYTES: Final = 8 << 20

# Direct writes slower than this (bytes a second) leave the page cache to do the writing: a
# spinning disk, a busy or throttled one, whose writes behind the command's back cost it
# less than waiting for them (the disks the system calls rotational cannot be told apart:
# virtual ones call themselves so whatever backs them). The disk's pace is judged on a
# file's first JUDGED_AFTER bytes written around the cache, not on one write (a virtual
# disk's single writes stall now and then), and shared among the files written around the
# cache at the time (two of them each get about half of it).
SLOWEST_DIRECT: Final = 400 << 20
JUDGED_AFTER: Final = 4 * BUFFER_BYTES

_O_DIRECT: Final = getattr(os, "O_DIRECT", 0)
# The devices whose direct writes were found slower than SLOWEST_DIRECT.
_slow_devices: set[int] = set()
# The files being written around the page cache now (their disks' pace shared among them).
_direct_files = 0
_direct_lock = threading.Lock()
# Each thread's two buffers, kept from file to file: their pages taken once.
_buffers = threading.local()
# The threads the direct writes are made on (a file has at most one at a time).
_WRITE_THREADS: Final = 4
_writes: ThreadPoolExecutor | None = None
_writes_lock = threading.Lock()


def _buffer_pair() -> tuple[mmap.mmap, mmap.mmap]:
    held: tuple[mmap.mmap, mmap.mmap] | None = getattr(_buffers, "held", None)
    if held is None:
        # anonymous: page-aligned
        held = (mmap.mmap(-1, BUFFER_BYTES), mmap.mmap(-1, BUFFER_BYTES))
        _buffers.held = held
    return held


def _write_threads() -> ThreadPoolExecutor:
    global _writes
    with _writes_lock:
        if _writes is None:
            _writes = ThreadPoolExecutor(_WRITE_THREADS, thread_name_prefix="direct-writes")
        return _writes


def _forget_write_threads() -> None:
    """In a forked child: the parent's write threads are not there; new ones when needed."""
    global _writes, _writes_lock
    _writes, _writes_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_write_threads)


def _timed_write(fd: int, view: memoryview, offset: int) -> float:
    """``view`` written at ``offset`` of ``fd``; the seconds it took."""
    began = time.perf_counter()
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return time.perf_counter() - began


@dataclass
class _Pending:
    """A direct write under way: the file's bytes ``offset`` on, ``kept`` of the ``size``
    written (the rest: padding), from ``buffer``."""

    done: Future[float]
    offset: int
    kept: int
    size: int
    buffer: mmap.mmap


def direct_writes_suit(fd: int) -> bool:
    """Whether the open file ``fd`` may be written around the page cache: it lies on a
    filesystem of a block device (network filesystems, tmpfs and FUSE have device numbers of
    major 0) whose direct writes this process has not found slow (:data:`SLOWEST_DIRECT`).
    False where the system has no O_DIRECT."""
    if not _O_DIRECT:
        return False
    device = os.fstat(fd).st_dev
    return os.major(device) != 0 and device not in _slow_devices


class DirectFile:
    """A file written a buffer at a time, around the page cache once it outgrows the buffer
    (:func:`direct_file`)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer: mmap.mmap | None
        self._buffer, self._spare = _buffer_pair()
        self._pending: _Pending | None = None  # the other buffer's write, under way
        self._direct = False
        self._held = 0  # bytes in the buffer
        self._written = 0  # bytes of the file written, or being written
        self._direct_bytes = 0  # of them written around the page cache, and in how long
        self._direct_s = 0.0

    @property
    def direct(self) -> bool:
        """Whether the file is being written around the page cache."""
        return self._direct

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        """The bytes written so far (those in the buffer too)."""
        return self._written + self._held

    def flush(self) -> None:
        """Nothing: the buffer is written when full and when the file is closed."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; its length."""
        view = memoryview(data).cast("B")
        size = len(view)
        while view:
            if self._buffer is None:  # written the usual way from here on
                self._write_all(view)
                break
            take = min(len(view), BUFFER_BYTES - self._held)
            self._buffer[self._held : self._held + take] = view[:take]
            self._held += take
            view = view[take:]
            if self._held == BUFFER_BYTES:
                self._flush_full()
        return size

    def close(self) -> None:
        """Write what the buffer holds and close the file (its length exactly the bytes
        written); nothing once closed."""
        if self._fd < 0:
            return
        try:
            padded = False
            if self._buffer is not None and self._held:
                held = self._held
                if not self._direct:
                    self._settle()
                    self._write_all(memoryview(self._buffer)[:held])
                else:
                    size = -(-held // ALIGNMENT) * ALIGNMENT
                    self._buffer[held:size] = bytes(size - held)
                    self._write_direct(size, held)
                    padded = size != held
                self._held = 0
            self._settle()
            if padded:  # the padding written past the file's end cut off
                os.ftruncate(self._fd, self._written)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Close the file without writing what the buffer holds (an error came first); a
        write under way is waited for first."""
        if self._fd >= 0:
            pending, self._pending = self._pending, None
            if pending is not None:
                futures.wait([pending.done])
            self._count_direct(False)
            os.close(self._fd)
            self._fd = -1

    def _flush_full(self) -> None:
        """Write the full buffer: the first time, around the page cache where that suits
        the file's disk; the usual way otherwise."""
        assert self._buffer is not None
        if not self._direct and self._written == 0:
            self._count_direct(direct_writes_suit(self._fd) and self._set_direct(True))
        if self._direct:
            self._write_direct(BUFFER_BYTES, BUFFER_BYTES)
        else:  # a file the page cache keeps: no buffer of ours in the way any more
            self._settle()
            self._write_all(memoryview(self._buffer)[:BUFFER_BYTES])
            self._buffer = None
        self._held = 0

    def _write_direct(self, size: int, kept: int) -> None:
        """Have the buffer's first ``size`` bytes (a multiple of ALIGNMENT), of which the
        first ``kept`` are the file's, written around the page cache on a write thread, once
        the write before is done, and fill the other buffer meanwhile; the usual way where
        that write failed or found the disk slow."""
        assert self._buffer is not None
        self._settle()
        if not self._direct:
            self._write_all(memoryview(self._buffer)[:kept])
            return
        view = memoryview(self._buffer)[:size]
        done = _write_threads().submit(_timed_write, self._fd, view, self._written)
        self._pending = _Pending(done, self._written, kept, size, self._buffer)
        self._written += kept
        self._buffer, self._spare = self._spare, self._buffer

    def _settle(self) -> None:
        """Wait for the direct write under way, if any. Where it failed, its bytes and the
        rest of the file go the usual way; where the disk is found slow, the rest of this
        file and the next ones."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            seconds = pending.done.result()
        except OSError:
            os.ftruncate(self._fd, pending.offset)  # what the failed write may have left
            self._set_direct(False)
            self._count_direct(False)
            write_pieces(self._fd, memoryview(pending.buffer)[: pending.kept], pending.offset)
            return
        self._direct_s += seconds
        self._direct_bytes += pending.size
        if self._slow_disk():
            # the rest of this file and the next ones through the cache
            _slow_devices.add(os.fstat(self._fd).st_dev)
            self._count_direct(not self._set_direct(False))

    def _slow_disk(self) -> bool:
        """Whether this file's writes around the cache so far (once there are enough to
        tell) show a disk slower than SLOWEST_DIRECT, shared among the files written so."""
        if self._direct_bytes < JUDGED_AFTER:
            return False
        with _direct_lock:
            sharing = max(1, _direct_files)
        return self._direct_bytes / max(self._direct_s, 1e-9) < SLOWEST_DIRECT / sharing

    def _count_direct(self, direct: bool) -> None:
        """The file is (no longer) written around the cache: counted among those that are."""
        global _direct_files
        if direct != self._direct:
            with _direct_lock:
                _direct_files += 1 if direct else -1
        self._direct = direct

    def _set_direct(self, on: bool) -> bool:
        """Turn O_DIRECT on or off for the file; whether the system did."""
        try:
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, flags | _O_DIRECT if on else flags & ~_O_DIRECT)
        except OSError:
            return False
        return True

    def _write_all(self, view: memoryview) -> None:
        # through the page cache: in pieces, which it takes in ordinary pages
        write_pieces(self._fd, view, self._written)
        self._written += len(view)


@contextmanager
def direct_file(path: Path) -> Iterator[DirectFile]:
    """``path`` created (or emptied) for writing, around the page cache once it outgrows
    :data:`BUFFER_BYTES` where its disk suits (:func:`direct_writes_suit`); closed when the
    block ends (the file's bytes all written unless the block raised)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
    sink = DirectFile(fd)
    try:
        yield sink
    except BaseException:
        sink.abandon()
        raise
    sink.close()


def write_parquet(table: pa.Table, path: Path, **options: Any) -> None:
    """``table`` as a Parquet file at ``path`` (``pyarrow.parquet.write_table``'s
    ``options``), around the page cache as :func:`direct_file` writes."""
    import pyarrow.parquet as pq

    with direct_file(path) as sink:
        pq.write_table(table, pa.PythonFile(sink, mode="w"), **options)
