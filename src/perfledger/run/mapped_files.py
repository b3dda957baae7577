"""A rank task's tables in Arrow IPC files, read back through memory maps.

A table read through a map of an uncompressed IPC file costs no private memory: its pages are
the system's file cache, read in as a pass reads them and let go between passes
(:func:`perfledger.memory.drop_mapped_pages`). A file that cannot be written or mapped (a full
disk, a filesystem without memory maps) leaves its table in the heap, with the same results.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from perfledger.files import replacing, temporary_name
from perfledger.pages import PieceSink
from perfledger.run.filled_columns import FilledColumns, filled_columns, filled_text
from perfledger.sources.kineto_layout import TextPiece

__all__ = [
    "PlacedColumns",
    "mapped_batches",
    "mapped_copy",
    "read_ipc",
    "same_buffers",
    "with_columns",
    "write_ipc",
]

# The IPC file format's opening (magic and padding); the stream format follows it.
_FILE_MAGIC_BYTES = 8


class PlacedColumns:
    """Groups of the import's columns written to Arrow IPC files and read back through maps of
    them, as the layout makes them (``load_kineto``'s ``place_columns``): beside the layout
    of the others, the heap's copy let go at once. ``files``: each group's file (a group not
    named there is left as it is); ``placed``: the mapped columns of each file written."""

    def __init__(self, files: Mapping[str, Path]) -> None:
        self.files = dict(files)
        self.placed: dict[Path, pa.Table] = {}

    def __call__(self, group: str, columns: pa.RecordBatchReader) -> pa.Table:
        path = self.files.get(group)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                path = None
        if path is None:
            return columns.read_all()
        table, mapped = mapped_batches(columns, path)
        if mapped:
            self.placed[path] = table
        return table

    def in_place(
        self, group: str, schema: pa.Schema, layout: int | list[list[TextPiece]]
    ) -> FilledColumns | None:
        """The group's file laid out for ``schema``'s columns, to be filled in place
        (:mod:`.filled_columns`; its columns then count as placed): ``layout`` rows of
        numbers, or the text of record batches of :class:`TextPiece`. None where the group has
        no file or it cannot be made so (the group is placed as usual)."""
        path = self.files.get(group)
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        if isinstance(layout, int):
            return filled_columns(path, schema, layout, self.placed.__setitem__)
        return filled_text(path, schema, layout, self.placed.__setitem__)

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


def mapped_batches(batches: pa.RecordBatchReader, path: Path) -> tuple[pa.Table, bool]:
    """The record batches of ``batches`` written to an uncompressed Arrow IPC file at ``path``
    one at a time (each let go once written: the table is never whole in the heap), then read
    back through a memory map of it; True with them. Where the file cannot be written or
    mapped (a full disk, a filesystem without memory maps) the same table in the heap, and
    False: the batches written before the failure read back from the file, the rest taken
    as they come. An error of ``batches`` itself is raised as it is."""
    temporary = temporary_name(path)
    written = 0
    held: pa.RecordBatch | None = None  # the batch being written
    reading = False  # an error now is the batches' own
    try:
        with _sink(temporary) as sink, pa.ipc.new_file(sink, batches.schema) as writer:
            while True:
                reading = True
                try:
                    held = batches.read_next_batch()
                except StopIteration:
                    held = None
                reading = False
                if held is None:
                    break
                writer.write_batch(held)
                held = None
                written += 1
        os.replace(temporary, path)
    except OSError:
        if not reading:
            return _in_heap(batches, temporary, written, held), False
        temporary.unlink(missing_ok=True)
        raise
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    try:
        return read_ipc(path), True
    except OSError:
        return _in_heap(batches, path, written, None), False


def _in_heap(
    batches: pa.RecordBatchReader, source: Path, written: int, held: pa.RecordBatch | None
) -> pa.Table:
    """The table of :func:`mapped_batches` where its file failed: the ``written`` batches
    read back from ``source`` (removed then), ``held`` and the rest of ``batches``."""
    try:
        if written:
            with pa.OSFile(str(source), "rb") as file:
                data = file.read_buffer()
            stream = pa.ipc.open_stream(data.slice(_FILE_MAGIC_BYTES))
            kept = [stream.read_next_batch() for _ in range(written)]
        else:
            kept = []
    finally:
        source.unlink(missing_ok=True)
    if held is not None:
        kept.append(held)
    kept.extend(batches)
    return pa.Table.from_batches(kept, batches.schema)


def _sink(path: Path) -> pa.NativeFile:
    """The file an IPC writer writes at ``path`` (in pieces: perfledger.pages)."""
    return pa.PythonFile(PieceSink(path), mode="w")


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
        _sink(temporary) as sink,
        pa.ipc.new_file(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    return path


def read_ipc(path: Path) -> pa.Table:
    """Memory-map an Arrow IPC file written by :func:`write_ipc` (no copy into the heap)."""
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()
