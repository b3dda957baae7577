"""A rank task's tables in Arrow IPC files, read back through memory maps.

A table read through a map of an uncompressed IPC file costs no private memory: its pages are
the system's file cache, read in as a pass reads them and let go between passes
(:func:`perfledger.memory.drop_mapped_pages`). A file that cannot be written or mapped (a full
disk, a filesystem without memory maps) leaves its table in the heap, with the same results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from perfledger.files import replacing

__all__ = ["PlacedColumns", "mapped_copy", "read_ipc", "same_buffers", "with_columns", "write_ipc"]


class PlacedColumns:
    """Groups of the import's columns written to Arrow IPC files and read back through maps of
    them, as the layout makes them (``load_kineto``'s ``place_columns``): beside the layout
    of the others, the heap's copy let go at once. ``files``: each group's file (a group not
    named there is left as it is); ``placed``: the mapped columns of each file written."""

    def __init__(self, files: Mapping[str, Path]) -> None:
        self.files = dict(files)
        self.placed: dict[Path, pa.Table] = {}

    def __call__(self, group: str, columns: pa.Table) -> pa.Table | None:
        path = self.files.get(group)
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        mapped = mapped_copy(columns, path)
        if mapped is not None:
            self.placed[path] = mapped
        return mapped

    def holds(self, events: pa.Table, path: Path, names: Sequence[str]) -> bool:
        """Whether the columns ``names`` of ``events`` are those read from the file ``path``
        (not replaced since: names cut to their limits, steps marked)."""
        placed = self.placed.get(path)
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
