"""One large Kineto trace read by several processes: chunks decoded and laid out in workers.

The main process cuts the traceEvents array at the separators the streaming reader guesses
(:meth:`Splitter.payloads`; in an uncompressed file :meth:`Splitter.spans`, which reads only
the bytes it searches for a cut, not the whole file; a compressed one is gunzipped whole).
Spawned worker processes decode each chunk and build its columns (:func:`chunk_columns`) and
send back the block with its side data (metadata, flows, counters). The main process takes them
in file order, so the tables are those of the one-process import, row for row. An uncompressed
file is not sent through the pipes: each worker reads its chunk's bytes itself from the file
the main process opened (through ``/proc/<pid>/fd``, so a file replaced under the same name
meanwhile is not mixed in), and only the chunk's place in the file travels
(:meth:`Splitter.spans`). Where a worker may not open it there (a hardened container, a
process that is not dumpable), the chunks' text goes through the pipes from that chunk on, as
for a compressed file, and the module's logger says so.

A chunk that does not decode (a guessed separator inside a string, a malformed event, damage in
the file) is read again in this process from where it began, on the same open file, with the
exact scan of the one-process import; the workers then take over again from the end of that
stretch, unless it found the damage that ends the readable data. Chunks the workers decoded
past it are dropped. The last stretch of the file (where a trace cut short ends) is always
read in this process.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # not a POSIX system: the pipe keeps its size
    fcntl = None  # type: ignore[assignment]

from perfledger import import_pool
from perfledger.errors import TraceFormatError
from perfledger.import_pool import GZIP_RATIO, MAX_WORKERS
from perfledger.memory import returning_pool
from perfledger.sources import gunzip
from perfledger.sources.block_files import BlockFile, loaded, spill_folder, to_file
from perfledger.sources.kineto_columns import Block, Side, chunk_columns
from perfledger.sources.kineto_scan import scanned_block
from perfledger.sources.kineto_stream import (
    DECODE_ERRORS,
    Chunk,
    ReadResult,
    Splitter,
    decode_payload,
    finish,
    open_splitter,
    restart_at,
)

__all__ = [
    "OpenFile",
    "SharedFileUnreadable",
    "WorkersUnavailable",
    "chunk_result",
    "chunk_result_at",
    "discard_read_ahead",
    "read_ahead",
    "read_blocks",
    "read_inflated_blocks",
]

_log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
ChunkResult = tuple[Block | None, Side, int]

# The pipe the workers' blocks come back through, widened to this where the system allows
# (Linux's default for a process without privileges: /proc/sys/fs/pipe-max-size): a worker then
# writes its block (a few MB) in a few large writes rather than stopping at every 64 KB for
# this process to read them (bench/README.md, "Growth").
RESULT_PIPE_BYTES = 1 << 20
# Chunks in flight per worker: enough to keep every worker busy while the next one is cut,
# few enough that the bytes waiting stay small (each chunk is about 4 MB of JSON).
_AHEAD_PER_WORKER = 2


@dataclass(frozen=True)
class OpenFile:
    """The file the main process reads, as a worker can open it: the path of the main
    process's descriptor, and the device and inode the worker must find there."""

    path: str
    device: int
    inode: int


_opened: dict[OpenFile, int] = {}


def _descriptor(source: OpenFile) -> int:
    """A descriptor of ``source`` in this worker, opened once."""
    if source not in _opened:
        fd = os.open(source.path, os.O_RDONLY)
        found = os.fstat(fd)
        if (found.st_dev, found.st_ino) != (source.device, source.inode):
            os.close(fd)
            raise OSError(f"{source.path} is no longer the file being read")
        _opened[source] = fd
    return _opened[source]


def shared_file(fd: int) -> OpenFile | None:
    """How workers can open this process's open file ``fd`` themselves; None where they
    cannot (no ``/proc``, or it shows another file)."""
    path = f"/proc/{os.getpid()}/fd/{fd}"
    try:
        mine = os.fstat(fd)
        seen = os.stat(path)
    except OSError:
        return None
    if (seen.st_dev, seen.st_ino) != (mine.st_dev, mine.st_ino):
        return None
    return OpenFile(path, mine.st_dev, mine.st_ino)


def chunk_result_at(
    source: OpenFile, first: int, stop: int, folder: str | None = None
) -> ChunkResult | BlockFile | None:
    """:func:`chunk_result` of the elements in bytes ``first:stop`` of ``source``, read here;
    with ``folder``, its arrays handed back in a file there (:mod:`.block_files`)."""
    try:
        fd = _descriptor(source)
    except OSError as exc:
        raise SharedFileUnreadable(f"{source.path}: {exc.strerror or exc}") from None
    # The elements are read between the brackets of the array they make, in place: no
    # second copy of the chunk's text.
    payload = bytearray(stop - first + 2)
    if os.preadv(fd, [memoryview(payload)[1:-1]], first) != stop - first:
        return None  # read again in the main process, which reads the file as it is
    payload[0], payload[-1] = ord("["), ord("]")
    result = chunk_result(payload)
    del payload
    return to_file(result, folder) if folder is not None and result is not None else result


def chunk_result(payload: bytes | bytearray) -> ChunkResult | None:
    """The columns of one chunk, its side data and its event count; None when the chunk is
    not a JSON array of events (then it is read again with the exact scan)."""
    side = Side()
    scanned = scanned_block(payload, side, pooled=False)  # pickled back to the main process
    if scanned is not None:
        return scanned[0], side, scanned[1]
    try:
        chunk = decode_payload(payload)
    except DECODE_ERRORS:
        return None
    return chunk_columns(chunk, side, pooled=False), side, len(chunk.events)


class WorkersUnavailable(Exception):
    """The worker processes could not start, or one died: read the file in this process."""


class SharedFileUnreadable(Exception):
    """A worker could not open the main process's file through ``/proc``: send the chunks'
    text through the pipes instead."""


class _Abandoned(Exception):
    """A read ahead stopped: nobody takes it (:func:`discard_read_ahead`)."""


class _ThroughPipes(Exception):
    """The chunk at data offset ``start`` and those after it go through the pipes."""

    def __init__(self, start: int, reason: str) -> None:
        super().__init__(reason)
        self.start = start


def read_blocks(
    path: Path, workers: int, progress: Progress | None = None
) -> tuple[ReadResult, list[Block], Side]:
    """The blocks of ``path``'s events in file order, decoded by ``workers`` processes
    (at most :data:`MAX_WORKERS`); the read :func:`read_ahead` started of the same file with
    as many workers, where there is one.

    Raises:
        TraceFormatError: the file is missing, empty, not JSON, or not a trace.
        WorkersUnavailable: the pool could not start or lost a worker (nothing of the
            partial read is kept; the file is closed).
    """
    workers = max(1, min(workers, MAX_WORKERS))
    ahead = _take_ahead(path, workers)
    if ahead is not None:
        return ahead.outcome(progress)
    return _read(path, workers, progress)


def read_inflated_blocks(
    path: Path, workers: int, progress: Progress | None = None
) -> tuple[ReadResult, list[Block], Side] | None:
    """:func:`read_blocks` of a gzip file inflated first (by ISA-L, at about 2 GB/s) into a
    file of the system's temporary space, removed after: the workers then read their chunks
    from it, as from a trace that is not compressed, instead of this process inflating the
    chunks one after the other and sending them through the pipes. None where that cannot be
    (ISA-L not installed, no room, damaged data, or text that is not a readable trace): the
    caller reads the gzip file itself then, and that read names any damage.

    Raises:
        WorkersUnavailable: as :func:`read_blocks`.
    """
    if not gunzip.fast() or not gunzip.is_gzip(path):
        return None
    size = path.stat().st_size
    # room for the text (gzip's own figure, or the usual tenfold where larger) and the
    # blocks' files (about as large): a disk short of it is not filled up to find out
    text = max(size * GZIP_RATIO, gunzip.inflated_size(path))
    with spill_folder(2 * text) as folder:
        if folder is None:
            return None
        plain = Path(folder) / "inflated.json"
        # the progress in the gzip file's bytes: a fifth of it the inflating, the rest the read
        if not gunzip.inflate_to(path, plain, _share(progress, size, 0.0, 0.2)):
            return None
        try:
            return read_blocks(plain, workers, _share(progress, size, 0.2, 1.0))
        except TraceFormatError:
            return None


def _share(progress: Progress | None, size: int, low: float, high: float) -> Progress | None:
    """``progress`` told a part's (done, total) as the span ``low``..``high`` of ``size``."""
    if progress is None:
        return None

    def told(done: int, total: int) -> None:
        fraction = done / total if total > 0 else 1.0
        progress(int(size * (low + (high - low) * min(fraction, 1.0))), size)

    return told


def _read(
    path: Path, workers: int, progress: Progress | None, stop: threading.Event | None = None
) -> tuple[ReadResult, list[Block], Side]:
    """:func:`read_blocks` itself; :class:`_Abandoned` once ``stop`` is set."""
    result, splitter = open_splitter(path, _forward_only(progress))
    blocks: list[Block] = []
    side = Side()

    def add(chunk: Chunk | None) -> None:
        block = chunk_columns(chunk, side) if chunk is not None and chunk.events else None
        if block is not None:
            blocks.append(block)

    shared = True  # the workers read their chunks from the file while they can open it
    try:
        # the pool ends (its chunks done) before the folder its workers write in is removed
        with spill_folder(path.stat().st_size) as folder, _pool(workers) as pool:
            while True:
                if stop is not None and stop.is_set():
                    raise _Abandoned
                try:
                    failed_at = _read_in_workers(
                        pool, splitter, workers, blocks, side, shared, folder, stop
                    )
                except _ThroughPipes as switch:
                    _log.info(
                        "%s: the workers cannot open the file (%s); its chunks go to them "
                        "through the pipes",
                        path,
                        switch,
                    )
                    shared = False
                    splitter = restart_at(splitter, switch.start)
                    continue
                if failed_at < 0:
                    break
                # The chunk from there is read again here, on the same open file (a trace
                # rewritten meanwhile under the same name is not mixed in), with the exact
                # scan; the workers take over again after it unless it found the damage.
                splitter = restart_at(splitter, failed_at)
                add(splitter.read_chunk())
                if splitter.finished:
                    break
        for chunk in finish(splitter):
            add(chunk)
    except BaseException:
        blocks.clear()  # let the partial read go before the caller reads the file again
        raise
    finally:
        splitter.source.close()
    return result, blocks, side


# --- the read started ahead -------------------------------------------------------------------

# How often the caller waiting for a read ahead passes its progress on, seconds.
_PROGRESS_EVERY_S = 0.1


class _Ahead:
    """A read of one file started on a thread of its own (:func:`read_ahead`), for the
    first :func:`read_blocks` of that file."""

    def __init__(self, path: Path, workers: int) -> None:
        self.identity = _identity(path)
        self.workers = workers
        self.stop = threading.Event()
        self.reached: tuple[int, int] | None = None  # the read's progress so far
        self.done: Future[tuple[ReadResult, list[Block], Side]] = Future()
        self.thread = threading.Thread(
            target=self._run, args=(path,), name="kineto-read-ahead", daemon=True
        )

    def _run(self, path: Path) -> None:
        def reached(done: int, total: int) -> None:
            self.reached = (done, total)

        try:
            with returning_pool():  # as the analysis the read is for allocates
                self.done.set_result(_read(path, self.workers, reached, self.stop))
        except BaseException as exc:  # the taker's to raise, as the read would have
            # the frames the error passed through hold the partial read (its side data, the
            # splitter): let go now, not at the collector's next pass (off while a trace loads)
            traceback.clear_frames(exc.__traceback__)
            self.done.set_exception(exc)

    def outcome(self, progress: Progress | None) -> tuple[ReadResult, list[Block], Side]:
        """The read's blocks once it ends (its error raised here), its progress passed on
        to ``progress`` meanwhile; the read is stopped if the wait is interrupted."""
        try:
            while not wait([self.done], timeout=_PROGRESS_EVERY_S).done:
                if progress is not None and self.reached is not None:
                    progress(*self.reached)
            return self.done.result()
        except BaseException:
            self.abandon()
            raise
        finally:
            self.thread.join()

    def abandon(self) -> None:
        """Stop the read and wait for it to let go of its workers and block files."""
        self.stop.set()
        self.thread.join()


_ahead_lock = threading.Lock()
_ahead: _Ahead | None = None


def _identity(path: Path) -> tuple[int, int, int, int]:
    found = path.stat()
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def read_ahead(path: str | Path, workers: int) -> bool:
    """Start reading ``path`` with ``workers`` workers now, on a thread, for the first
    :func:`read_blocks` of the same file with as many (the command line calls it once it
    has started the workers, and loads the rest of its modules while the workers read);
    False where it cannot be read (the import then says why). A read nobody takes is
    stopped by :func:`discard_read_ahead`."""
    global _ahead
    if gunzip.is_gzip(Path(path)):
        return False  # inflated first by the import itself (read_inflated_blocks)
    try:
        ahead = _Ahead(Path(path), max(1, min(workers, MAX_WORKERS)))
    except (OSError, ValueError):
        return False
    with _ahead_lock:
        if _ahead is not None:
            return False
        try:
            ahead.thread.start()  # before anyone may take it (and join its thread)
        except RuntimeError:  # no thread to be had (a limit on them): the import reads itself
            return False
        _ahead = ahead
    return True


def _take_ahead(path: Path, workers: int) -> _Ahead | None:
    """The read started ahead when it is of ``path`` (the same file, unchanged since) with
    ``workers`` workers, now the caller's; None otherwise (any other is stopped)."""
    ahead = _popped()
    if ahead is None:
        return None
    try:
        same = ahead.identity == _identity(path) and ahead.workers == workers
    except (OSError, ValueError):
        same = False
    if not same:
        ahead.abandon()
        return None
    return ahead


def discard_read_ahead() -> None:
    """Stop the read started ahead, if nobody took it (the run took another road)."""
    ahead = _popped()
    if ahead is not None:
        ahead.abandon()


def _popped() -> _Ahead | None:
    """The read started ahead, if any, no longer anyone else's to take."""
    global _ahead
    with _ahead_lock:
        ahead, _ahead = _ahead, None
    return ahead


@contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    # the workers the command line started while this process loaded its libraries, if any
    pool = import_pool.take(workers)
    try:
        if pool is None:
            pool = import_pool.new_pool(workers, __name__)
    except OSError as exc:  # no semaphores here (no /dev/shm ...)
        raise WorkersUnavailable(str(exc)) from None
    widen_result_pipe(pool)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def widen_result_pipe(pool: ProcessPoolExecutor, size: int = RESULT_PIPE_BYTES) -> int:
    """Set the pipe ``pool``'s results come back through to ``size`` bytes, or to the most
    the system allows below it; the pipe's size after (0 where it cannot be read: not Linux,
    or a pool without the result queue of CPython's implementation). Only speed depends on
    it: a pipe left as it was works the same."""
    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    getter = getattr(fcntl, "F_GETPIPE_SZ", None)
    reader = getattr(getattr(pool, "_result_queue", None), "_reader", None)
    if setter is None or getter is None or reader is None:
        return 0
    try:
        fd = reader.fileno()
    except (OSError, ValueError):
        return 0
    # above what the system allows this process, the most it allows; where that is not
    # known either, the pipe stays as it is
    for wanted in (size, min(size, _pipe_max_size())):
        widened = _set_pipe_size(fd, setter, wanted) if wanted > 0 else 0
        if widened:
            return widened
    return _set_pipe_size(fd, getter, None)


def _set_pipe_size(fd: int, command: int, size: int | None) -> int:
    """fcntl ``command`` on pipe ``fd`` (with ``size``): the pipe's size, 0 where refused."""
    assert fcntl is not None
    try:
        return int(fcntl.fcntl(fd, command) if size is None else fcntl.fcntl(fd, command, size))
    except OSError:
        return 0


def _pipe_max_size() -> int:
    """The largest pipe a process without privileges may ask for (0: unknown)."""
    try:
        return int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except (OSError, ValueError):
        return 0


def _read_in_workers(
    pool: ProcessPoolExecutor,
    splitter: Splitter,
    workers: int,
    blocks: list[Block],
    side: Side,
    shared: bool = True,
    folder: str | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Send the splitter's payloads to the workers and take their outcomes in file order into
    ``blocks`` and ``side``, up to the first chunk that does not decode: its offset (-1 when
    the data ran out first). With ``shared``, an uncompressed file's chunks are read by the
    workers from the file itself; :class:`_ThroughPipes` where a worker cannot open it. With
    ``folder``, the workers hand their blocks back in files there (:mod:`.block_files`).
    :class:`_Abandoned` once ``stop`` is set (checked at each chunk)."""
    pending: deque[tuple[int, Future[ChunkResult | BlockFile | None]]] = deque()
    source = (
        shared_file(splitter.source.fileno()) if shared and not splitter.source.compressed else None
    )
    chunks: Generator[tuple[int, Future[ChunkResult | BlockFile | None]], None, None] = (
        ((start, pool.submit(chunk_result, payload)) for start, payload in splitter.payloads())
        if source is None
        else (
            (start, pool.submit(chunk_result_at, source, first, stop, folder))
            for start, first, stop in splitter.spans()
        )
    )

    def next_failure() -> int:
        """Take the oldest chunk's outcome; its offset if it did not decode, else -1."""
        if stop is not None and stop.is_set():
            raise _Abandoned
        start, future = pending.popleft()
        try:
            outcome = loaded(future.result())
        except SharedFileUnreadable as exc:
            raise _ThroughPipes(start, str(exc)) from None
        if outcome is None:
            return start
        block, found, events = outcome
        if block is not None:
            blocks.append(block)
        side.absorb(found)
        splitter.result.events_seen += events
        return -1

    failed_at = -1
    try:
        for submitted in chunks:
            pending.append(submitted)
            while failed_at < 0 and pending:
                if len(pending) <= _AHEAD_PER_WORKER * workers and not pending[0][1].done():
                    break
                failed_at = next_failure()
            if failed_at >= 0:
                break
        while failed_at < 0 and pending:
            failed_at = next_failure()
    except (BrokenProcessPool, OSError) as exc:
        raise WorkersUnavailable(str(exc)) from None
    finally:
        chunks.close()
        for _, future in pending:
            future.cancel()
        pending.clear()  # chunks decoded past a failure are read again: let them go now
    return failed_at


def _forward_only(progress: Progress | None) -> Progress | None:
    """``progress``, never moving back (a re-read from an earlier offset reports less)."""
    if progress is None:
        return None
    furthest = 0

    def report(done: int, total: int) -> None:
        nonlocal furthest
        furthest = max(furthest, done)
        progress(furthest, total)

    return report
