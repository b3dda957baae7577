"""Streaming out a timeline: a gzip deflate stream written in segments, and a writer thread.

A timeline file is appended to part by part (one rank after another); nothing stays open
between parts, not even a compressor, so a profile with many step files holds none of them
while other ranks are formatted.
"""

from __future__ import annotations

import importlib
import queue
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, Final, Protocol


def _deflate_library() -> tuple[Any, int]:
    """ISA-L's deflate (the ``isal`` package, a dependency on the machines it ships wheels
    for) at its level 2, else zlib at 3.

    Measured on a profile's step slices (``bench/compiled_parts.py --profile``): ISA-L level 2
    deflates the timeline text about 4× as fast as zlib level 3, for files 12 % larger. Both
    write standard deflate streams (any gzip reader opens either) and release the GIL while
    they compress."""
    try:
        return importlib.import_module("isal.isal_zlib"), 2
    except ImportError:  # a platform without its wheel: the same text, other gzip bytes
        return zlib, 3


_DEFLATE, _GZIP_LEVEL = _deflate_library()
# What gzip.GzipFile writes with no file name, mtime 0 and a middle compression level.
GZIP_HEADER: Final = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x00\xff"


class Writable(Protocol):
    """Where bytes go: a file, or the deflate stream in front of one."""

    def write(self, data: memoryview, /) -> object: ...


class Deflate:
    """A gzip member's deflate stream, written in segments into a file reopened for each.

    Within a segment one compressor runs; a segment that more follow ends with a sync flush
    (a byte-aligned, non-final block) and lets its compressor go (a few hundred KB of
    state); the next starts a fresh one. The concatenation is one valid deflate stream.
    """

    def __init__(self) -> None:
        self.crc = 0
        self.size = 0
        self._raw: IO[bytes] | None = None
        self._compressor: Any = None  # the compressor type is not public

    def attach(self, raw: IO[bytes]) -> None:
        """Write into ``raw`` from now on; start a segment when none is open."""
        self._raw = raw
        if self._compressor is None:
            self._compressor = _DEFLATE.compressobj(
                _GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0
            )

    def write(self, data: memoryview) -> None:
        """Compress ``data`` into the open segment."""
        assert self._raw is not None and self._compressor is not None
        self.crc = _DEFLATE.crc32(data, self.crc)
        self.size += data.nbytes
        self._raw.write(self._compressor.compress(data))

    def end_segment(self) -> None:
        """End the open segment on a byte boundary, leaving the stream open."""
        assert self._raw is not None and self._compressor is not None
        self._raw.write(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        self._compressor = None
        self._raw = None

    def finish(self) -> None:
        """End the stream and the gzip member (CRC and size, as gzip.GzipFile does)."""
        assert self._raw is not None and self._compressor is not None
        self._raw.write(self._compressor.flush())
        self._raw.write(struct.pack("<LL", self.crc, self.size & 0xFFFFFFFF))
        self._compressor = None
        self._raw = None


@contextmanager
def background_writes(out: Writable) -> Iterator[Callable[[memoryview], None]]:
    """Hand chunks to a second thread that compresses and writes them, in order.

    The deflate and file writes release the GIL, so the next chunk is formatted while the
    previous one is compressed. At most one chunk waits in the queue, so memory stays that
    of a few chunks.
    """
    pending: queue.Queue[memoryview | None] = queue.Queue(maxsize=1)
    failure: list[BaseException] = []

    def drain() -> None:
        while (data := pending.get()) is not None:
            if not failure:
                try:
                    out.write(data)
                except BaseException as error:  # raised again in the calling thread
                    failure.append(error)

    worker = threading.Thread(target=drain, name="timeline-writer", daemon=True)
    worker.start()

    def write(data: memoryview) -> None:
        if failure:
            raise failure[0]
        pending.put(data)

    try:
        yield write
    finally:
        pending.put(None)
        worker.join()
    if failure:
        raise failure[0]
