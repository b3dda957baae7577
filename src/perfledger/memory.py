"""Freed memory between the phases of a large analysis: handed back to the system, or held
for the next phase.

Arrow's memory pool and glibc's heap keep freed blocks for reuse, but what runs next (numpy,
other libraries, another thread) may allocate elsewhere: without a hand-back a process keeps the
high-water mark of every phase stacked (bench/README.md has the figures). Where every allocator
draws from one heap (``perfledger analyze``: :func:`holding_freed_memory`) the next phase reuses
what the last one freed, and the hand-backs are left out.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import ctypes.util
import dataclasses
import mmap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa


def _load_trim() -> Callable[[], object]:
    """glibc's malloc_trim, or a no-op where there is none."""
    # glibc by its usual name first: find_library runs ldconfig in a child process
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
        except OSError:
            return lambda: None
    try:
        trim = libc.malloc_trim
    except AttributeError:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


_malloc_trim = _load_trim()


def _load_madvise() -> Callable[[int, int], object] | None:
    """madvise(MADV_DONTNEED), or None where the system has no such call."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    try:
        libc = ctypes.CDLL("libc.so.6")
        call = libc.madvise
    except (OSError, AttributeError):
        return None
    if advice is None:
        return None
    call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return lambda address, length: call(address, length, advice)


_madvise_dontneed = _load_madvise()
_MAPS: Final = Path("/proc/self/maps")
ARROW_SUFFIX: Final = ".arrow"  # the files whose maps drop_mapped_pages may let go


def release_freed_memory() -> None:
    """Return the blocks Arrow's pool and the C heap hold freed to the system, unless a
    command holds them for its next phase (:func:`holding_freed_memory`)."""
    if _holders:
        return
    pa.default_memory_pool().release_unused()
    _malloc_trim()


_holding_lock = threading.Lock()
_holders = 0


@contextlib.contextmanager
def holding_freed_memory(*, release: bool = True) -> Iterator[None]:
    """:func:`release_freed_memory` hands nothing back inside the block (everything once the
    last block of any thread ends, unless ``release`` is False: a process that ends with the
    block, whose memory the system takes back whole, need not hand it back first), and Arrow
    allocates from the C heap meanwhile (:func:`returning_pool`).

    For a process whose allocators all draw from glibc's one heap
    (:func:`perfledger.heap.keep_freed_heap`: no block mapped on its own, one heap for every
    thread): the memory a phase frees is what the next one allocates from, so the phases'
    high-water marks do not stack, and the pages are faulted in once. Handed back, each phase
    faults its pages in afresh, and on virtual machines that report freed pages to their host
    (within a second or two) such a page costs about thirty times one just freed and taken
    again (``python bench/page_cost.py``: 3.1 against 0.10 s of system time per GiB;
    bench/README.md, "Growth", has an analyze's figures both ways).
    """
    global _holders
    with _holding_lock:
        _holders += 1
    try:
        with returning_pool():
            yield
    finally:
        with _holding_lock:
            _holders -= 1
        if release:
            release_freed_memory()


_pool_lock = threading.Lock()
_pool_users = 0
_pool_before: list[pa.MemoryPool] = []


@contextlib.contextmanager
def returning_pool() -> Iterator[None]:
    """Arrow allocates from the C heap inside the block (its previous pool again after it).

    Arrow's own pool (mimalloc in the wheels) keeps the pages of freed buffers mapped for
    reuse, so a large table freed between two passes still counts in the process's memory
    while the next pass allocates elsewhere; the C heap hands a large buffer's pages back as
    soon as it is freed (glibc maps each one on its own). Buffers keep the pool that made
    them: tables made inside the block are freed to it after the block too. The pool is the
    process's: blocks entered by several threads at once (tasks of a threaded worker) share
    it, and the previous pool comes back when the last of them ends.
    """
    global _pool_users
    with _pool_lock:
        if _pool_users == 0:
            _pool_before.append(pa.default_memory_pool())
            pa.set_memory_pool(pa.system_memory_pool())
        _pool_users += 1
    try:
        yield
    finally:
        with _pool_lock:
            _pool_users -= 1
            if _pool_users == 0:
                pa.set_memory_pool(_pool_before.pop())


def drop_mapped_pages(
    *tables: pa.Table | pa.ChunkedArray | pa.Array | None,
    maps: list[tuple[int, int]] | None = None,
) -> None:
    """Take the pages this process has read of the memory-mapped files of ``tables`` (the
    table's, for one; None skipped) out of its memory.

    A table read from a file through a memory map (Arrow IPC) costs no private memory, but
    every page a pass reads stays in the process's resident memory while the map is open. The
    pages of a read-only file map can be let go at any time: the system keeps them in its file
    cache and maps them again on the next read, with the same bytes. Only read-only maps of
    Arrow IPC files (``*.arrow``) that hold some of the table's buffers are touched; buffers in
    the heap (or anywhere else) are left as they are. A no-op where /proc/self/maps or madvise
    is missing.

    ``maps``: the maps as :func:`arrow_maps` read them earlier, while ``tables`` were already
    held (a pass that lets go column after column reads /proc/self/maps once): a map holding
    a buffer of a table held all along cannot have moved since, and only such maps are let go.
    """
    maps = _read_only_arrow_maps() if maps is None else maps
    if not maps:
        return
    starts = [start for start, _ in maps]
    chosen: set[tuple[int, int]] = set()
    for table in tables:
        if table is None:
            continue
        for address in _buffer_addresses(table):
            at = bisect.bisect_right(starts, address) - 1
            if at >= 0 and address < maps[at][1]:
                chosen.add(maps[at])
    _let_go(sorted(chosen))


def _let_go(maps: list[tuple[int, int]]) -> None:
    """madvise(MADV_DONTNEED) of each address range."""
    madvise = _madvise_dontneed
    if madvise is not None:
        for start, end in maps:
            madvise(start, end - start)


def arrow_maps() -> list[tuple[int, int]] | None:
    """The maps :func:`drop_mapped_pages` chooses from, read now (its ``maps``)."""
    return _read_only_arrow_maps()


def _read_only_arrow_maps() -> list[tuple[int, int]] | None:
    """The address ranges of this process's read-only maps of Arrow IPC files, in order;
    None where /proc/self/maps or madvise is missing."""
    return None if _madvise_dontneed is None else _arrow_maps()


def _arrow_maps() -> list[tuple[int, int]] | None:
    """The address ranges of this process's read-only maps of Arrow IPC files, in order;
    None where /proc/self/maps cannot be read."""
    try:
        # bytes: a mapped file's path need not be UTF-8
        text = _MAPS.read_bytes()
    except OSError:
        return None
    # the lines naming an Arrow file found by searching the text for the suffix, not by
    # splitting every line (hundreds of libraries' and the heap's maps, read between passes)
    suffix = ARROW_SUFFIX.encode()
    maps: list[tuple[int, int]] = []
    at = text.find(suffix)
    while at >= 0:
        begin = text.rfind(b"\n", 0, at) + 1
        end = text.find(b"\n", at)
        end = len(text) if end < 0 else end
        fields = text[begin:end].split(maxsplit=5)
        # address, permissions, offset, device, inode, path: an Arrow file mapped to be read
        # (not a library's read-only pages, which the loader may have written before)
        if len(fields) == 6 and b"w" not in fields[1] and _arrow_file(fields[5]):
            low, high = fields[0].split(b"-")
            maps.append((int(low, 16), int(high, 16)))
        at = text.find(suffix, end)
    maps.sort()
    return maps


def _arrow_file(path: bytes) -> bool:
    """Whether a path of /proc/self/maps names an Arrow IPC file (removed since, or not)."""
    return path.removesuffix(b" (deleted)").endswith(ARROW_SUFFIX.encode())


def _buffer_addresses(data: pa.Table | pa.ChunkedArray | pa.Array) -> Iterator[int]:
    """The address of every non-empty buffer of ``data`` (dictionaries' too)."""
    columns = data.columns if isinstance(data, pa.Table) else [data]
    arrays: list[pa.Array] = []
    for column in columns:
        arrays.extend(column.chunks if isinstance(column, pa.ChunkedArray) else [column])
    while arrays:
        array = arrays.pop()
        for buffer in array.buffers():
            if buffer is not None and buffer.size:
                yield buffer.address
        if pa.types.is_dictionary(array.type):
            arrays.append(array.dictionary)


@contextlib.contextmanager
def dropping_mapped_pages(*tables: pa.Table | None, every_s: float = 0.25) -> Iterator[None]:
    """:func:`drop_mapped_pages` of ``tables`` every ``every_s`` seconds while the block runs,
    and once after it: a pass that reads a whole mapped table (a file written from it) keeps
    a few seconds' worth of its pages, not all of them."""
    with _dropping(lambda: drop_mapped_pages(*tables), every_s):
        yield


@contextlib.contextmanager
def _dropping(drop: Callable[[], None], every_s: float) -> Iterator[None]:
    """``drop()`` every ``every_s`` seconds in a thread while the block runs, and once after."""
    done = threading.Event()

    def run() -> None:
        while not done.wait(every_s):
            drop()

    dropper = threading.Thread(target=run, name="page-dropper", daemon=True)
    dropper.start()
    try:
        yield
    finally:
        done.set()
        dropper.join()
        drop()


def in_mapped_files(table: pa.Table) -> bool:
    """Whether every buffer of ``table`` lies in a memory map of an Arrow IPC file (False for
    an empty table, or where /proc/self/maps cannot be read): such a table takes no private
    memory, and mapping it again from another file gains nothing."""
    maps = _arrow_maps()
    if maps is None:
        return False
    starts = [start for start, _ in maps]
    found = False
    for address in _buffer_addresses(table):
        at = bisect.bisect_right(starts, address) - 1
        if at < 0 or address >= maps[at][1]:
            return False
        found = True
    return found


def tables_within(value: object, depth: int = 4) -> list[pa.Table]:
    """The Arrow tables held by ``value`` (a dataclass of results, a tuple, list or dict of
    them), down to ``depth`` levels: what a phase reading many of a profile's tables lets
    go the pages of, with a reference to each while it does (a table freed under the
    dropper would leave its address range to other memory)."""
    found: dict[int, pa.Table] = {}
    level = [value]
    for _ in range(depth + 1):
        inner: list[object] = []
        for item in level:
            if isinstance(item, pa.Table):
                found.setdefault(id(item), item)
            elif dataclasses.is_dataclass(item) and not isinstance(item, type):
                inner.extend(getattr(item, f.name) for f in dataclasses.fields(item))
            elif isinstance(item, tuple | list):
                inner.extend(item)
            elif isinstance(item, dict):
                inner.extend(item.values())
        level = inner
    return list(found.values())


def let_go_beside(held: list[Any]) -> threading.Thread:
    """Empty ``held`` on a thread of its own (started here, returned): what its items free
    goes there, not on the caller's thread. For values whose freeing is slow and that the
    caller no longer needs: maps of files already removed, whose pages the system frees as
    the last map of each goes (a trace's blocks: about a tenth of a second per GB of them).
    The caller holds no other reference to the items (else they are freed where that one
    goes)."""
    thread = threading.Thread(target=held.clear, name="let-go", daemon=True)
    thread.start()
    return thread
