"""A rank task's tables in Arrow IPC files, read back through memory maps.

A table read through a map of an uncompressed IPC file costs no private memory: its pages are
the system's file cache, read in as a pass reads them and let go between passes
(:func:`perfledger.memory.drop_mapped_pages`). A file that cannot be written or mapped (a full
disk, a filesystem without memory maps) leaves its table in the heap, with the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from perfledger.files import replacing

__all__ = ["TextFile", "mapped_copy", "read_ipc", "same_buffers", "with_columns", "write_ipc"]


class TextFile:
    """The import's text columns written to an Arrow IPC file and read back through a map of
    it, as the layout makes them (``load_kineto``'s ``place_text``): beside the layout of the
    other columns, the heap's copy let go at once. ``placed``: the mapped columns, once
    written (None: not written, or not writable there)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.placed: pa.Table | None = None

    def __call__(self, text: pa.Table) -> pa.Table | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        self.placed = mapped_copy(text, self.path)
        return self.placed

    def holds(self, events: pa.Table, names: Sequence[str]) -> bool:
        """Whether the columns ``names`` of ``events`` are those read from the file (not
        replaced since: names cut to their limits, steps marked)."""
        placed = self.placed
        return (
            placed is not None
            and bool(names)
            and all(
                name in placed.column_names and same_buffers(events[name], placed[name])
                for name in names
            )
        )


def mapped_copy(table: pa.Table, path: Path) -> pa.Table | None:
    """``table`` read back through a memory map of an Arrow IPC file written at ``path``, or
    None where the file cannot be written or mapped (a full disk, a filesystem without memory
    maps): the map only saves memory, and the task goes on with the table in the heap."""
    try:
        return read_ipc(write_ipc(table, path))
    except OSError:
        path.unlink(missing_ok=True)
        return None


def with_columns(table: pa.Table, columns: pa.Table) -> pa.Table:
    """``table`` with its columns named in ``columns`` replaced by those."""
    for name in columns.column_names:
        index = table.schema.get_field_index(name)
        table = table.set_column(index, table.schema.field(index), columns[name])
    return table


def same_buffers(one: pa.ChunkedArray, other: pa.ChunkedArray) -> bool:
    """Whether two columns are the very same memory (chunk for chunk: buffers and offsets)."""
    if one.num_chunks != other.num_chunks:
        return False
    for a, b in zip(one.chunks, other.chunks, strict=True):
        if len(a) != len(b) or a.offset != b.offset:
            return False
        if [x.address if x is not None else None for x in a.buffers()] != [
            x.address if x is not None else None for x in b.buffers()
        ]:
            return False
    return True


def write_ipc(table: pa.Table, path: Path) -> Path:
    """Write an uncompressed Arrow IPC file (what :func:`read_ipc` maps without copying)."""
    # The IPC file format holds one dictionary per column: chunks must share it.
    table = table.unify_dictionaries()
    with (
        replacing(path) as temporary,
        pa.OSFile(str(temporary), "wb") as sink,
        pa.ipc.new_file(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    return path


def read_ipc(path: Path) -> pa.Table:
    """Memory-map an Arrow IPC file written by :func:`write_ipc` (no copy into the heap)."""
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()
