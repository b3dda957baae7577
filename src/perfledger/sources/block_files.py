"""A worker's decoded block handed to the main process through a file, not a pipe.

Pickled through the pool's pipe, a block's arrays are copied four times: into the pickle,
into the pipe, out of it, and into the arrays the main process rebuilds (and each copy
faults in fresh pages). Here the worker writes the arrays' buffers once into a file of a
folder the main process made (:func:`spill_folder`) and sends only the pickle's small rest
(:class:`BlockFile`); the main process maps the file (private, copy-on-write maps) and
rebuilds the arrays on the mapped bytes, unlinks the file at once, and the pages go when the
arrays do (:meth:`BlockFile.load`). Each large buffer has a map of its own, so that one let
go (the layout lets a block's text go as soon as it has read it) takes its pages with it,
whatever the rest of the block; the small ones share one.

Where the folder has no room (a trace's worth of free space is asked for) or a file cannot
be written, the block goes through the pipe as before: the tables are the same either way.
"""

from __future__ import annotations

import mmap
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfledger.interrupts import interrupts_held
from perfledger.pages import write_pieces

# A small buffer starts at a multiple of this in its file (Arrow's own alignment)...
_ALIGN = 64
# ... a buffer of at least this many bytes at a page of its own, mapped on its own.
_OWN_MAP_BYTES = 1 << 16


@dataclass(frozen=True)
class BlockFile:
    """A pickled object whose buffers lie in the file ``path`` (``spans``: offset and size of
    each, in the pickle's order); the file holds nothing else."""

    header: bytes
    path: str
    spans: tuple[tuple[int, int], ...]
    small: int  # the small buffers lie in the file's first bytes, up to here

    def load(self) -> Any:
        """The object, its arrays on private maps of the file, which is unlinked here."""
        try:
            with open(self.path, "rb") as source:
                descriptor = source.fileno()
                shared = (
                    memoryview(mmap.mmap(descriptor, self.small, access=mmap.ACCESS_COPY))
                    if self.small
                    else memoryview(b"")
                )
                views = [
                    memoryview(mmap.mmap(descriptor, n, access=mmap.ACCESS_COPY, offset=o))
                    if n >= _OWN_MAP_BYTES
                    else shared[o : o + n]
                    for o, n in self.spans
                ]
        finally:
            os.unlink(self.path)
        return pickle.loads(self.header, buffers=views)


def to_file(value: Any, folder: str) -> BlockFile | Any:
    """``value`` with its buffers written to a new file in ``folder`` (:class:`BlockFile`),
    or ``value`` itself where they cannot be (a buffer not contiguous, no room, no rights)."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
    except (BufferError, pickle.PicklingError):
        return value
    # the small buffers first, packed; then the large ones, each at a page of its own
    spans: list[tuple[int, int]] = [(0, 0)] * len(views)
    size = 0
    for i, view in enumerate(views):
        if view.nbytes < _OWN_MAP_BYTES:
            size = -(-size // _ALIGN) * _ALIGN
            spans[i] = (size, view.nbytes)
            size += view.nbytes
    small = size
    for i, view in enumerate(views):
        if view.nbytes >= _OWN_MAP_BYTES:
            size = -(-size // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY
            spans[i] = (size, view.nbytes)
            size += view.nbytes
    try:
        descriptor, path = tempfile.mkstemp(dir=folder, suffix=".block")
    except OSError:
        return value
    try:
        try:
            for view, (offset, _) in zip(views, spans, strict=True):
                write_pieces(descriptor, view, offset)
            os.ftruncate(descriptor, size)
        finally:
            os.close(descriptor)
    except OSError:
        Path(path).unlink(missing_ok=True)
        return value
    return BlockFile(header, path, tuple(spans), small)


def loaded(outcome: Any) -> Any:
    """A worker's outcome as it was made there (:meth:`BlockFile.load` where it came in a
    file)."""
    return outcome.load() if isinstance(outcome, BlockFile) else outcome


@contextmanager
def spill_folder(needed: int) -> Iterator[str | None]:
    """A folder of the system's temporary space for the blocks' files, made for the block and
    removed after it with whatever is left in it (the files not taken back); None where the
    space has less than ``needed`` bytes free (the blocks then come through the pipes)."""
    base = tempfile.gettempdir()
    folder: str | None = None
    try:
        try:
            room = shutil.disk_usage(base).free >= needed
            # a Ctrl-C or SIGTERM answered once the folder is named here, to be removed below
            with interrupts_held():
                folder = tempfile.mkdtemp(prefix=".perfledger-blocks-", dir=base) if room else None
        except OSError:
            folder = None
        yield folder
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
