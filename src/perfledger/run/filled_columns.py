"""Number columns made straight into the memory map of the Arrow IPC file that will hold them.

A table written to an IPC file (``mapped_files.mapped_batches``) is first made whole in the
heap, then copied into the file: its pages are taken twice, once fresh for the heap and once
for the system's file cache, and the heap's go back to the system right after. Here the file
is laid out first with its columns' bodies left as holes (only the schema, the batch's
metadata and the footer are written: the IPC writer is given placeholder buffers, and the
sink it writes through skips them), the holes are reserved on disk (``posix_fallocate``: a
full disk shows now, as an error, and never later as a fault in a write through the map),
and the caller writes each column through a shared writable map of the file, as it computes
it. Read back through a read-only map, the columns are then the file's pages, as
``mapped_batches`` gives them (``bench/page_cost.py``: pages of a file written through a map
cost a third of the heap's and the file write's together).

Only fixed-width columns without nulls (integers, floats) are laid out so; a file that cannot
be made, reserved or mapped gives None, and the caller makes its columns in the heap.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.files import temporary_name

__all__ = ["FilledColumns", "filled_columns"]


class FilledColumns:
    """The columns of one IPC file being filled through a writable map (:func:`filled_columns`).

    :meth:`target` gives a column's place in the map, as a numpy array to write into;
    :meth:`finish` ends the writing (every target let go by then) and gives the columns read
    back through a read-only map of the file."""

    def __init__(
        self,
        path: Path,
        temporary: Path,
        schema: pa.Schema,
        targets: dict[str, npt.NDArray[Any]],
        writable: mmap.mmap,
        done: Callable[[Path, pa.Table], None] | None,
    ) -> None:
        self.path = path
        self.schema = schema
        self._temporary = temporary
        self._targets = targets
        self._writable: mmap.mmap | None = writable
        self._done = done

    def target(self, name: str) -> npt.NDArray[Any]:
        """Column ``name``'s place in the file: an array of its length and type to fill."""
        return self._targets[name]

    def finish(self) -> pa.Table:
        """The columns as written, read through a read-only map of the file (renamed to its
        path now); where the file cannot be renamed or mapped, copies of them in the heap
        (the file removed). The targets must be let go first: the writable map closes here."""
        targets, self._targets = self._targets, {}
        writable, self._writable = self._writable, None
        assert writable is not None, "finished twice"
        try:
            os.replace(self._temporary, self.path)
            with pa.memory_map(str(self.path), "r") as source:
                table = pa.ipc.open_file(source).read_all()
        except OSError:
            # the values are in the writable map: copied out before it closes
            table = pa.table(
                {name: np.array(column) for name, column in targets.items()}, schema=self.schema
            )
            targets.clear()
            writable.close()
            self._temporary.unlink(missing_ok=True)
            self.path.unlink(missing_ok=True)
            return table
        targets.clear()
        writable.close()  # BufferError where a caller still holds a target: a bug
        if self._done is not None:
            self._done(self.path, table)
        return table

    def abandon(self) -> None:
        """Give the file up (the caller makes its columns otherwise)."""
        self._targets.clear()
        writable, self._writable = self._writable, None
        if writable is not None:
            with contextlib.suppress(BufferError):  # a target still held: the map goes with it
                writable.close()
        self._temporary.unlink(missing_ok=True)


class _HoleSink:
    """A file the IPC writer writes through (``pa.PythonFile``): the placeholder's buffers
    are skipped (a hole in the file each), the rest written."""

    def __init__(self, file: Any, placeholder: pa.Buffer) -> None:
        self.file = file
        self.closed = False
        self._low = placeholder.address
        self._high = placeholder.address + placeholder.size
        self.holes: list[tuple[int, int]] = []  # offset and size of each buffer skipped

    def write(self, data: Any) -> int:
        if isinstance(data, pa.Buffer) and data.size and self._low <= data.address < self._high:
            offset = self.file.tell()
            self.file.seek(data.size, os.SEEK_CUR)
            self.holes.append((offset, data.size))
            return int(data.size)
        return int(self.file.write(data))

    def tell(self) -> int:
        return int(self.file.tell())

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


def _fixed_width(schema: pa.Schema) -> bool:
    return all(pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in schema)


def filled_columns(
    path: Path,
    schema: pa.Schema,
    length: int,
    done: Callable[[Path, pa.Table], None] | None = None,
) -> FilledColumns | None:
    """An IPC file at ``path`` for ``length`` rows of ``schema``'s columns (fixed-width, no
    nulls), to fill through :meth:`FilledColumns.target`; ``done`` is given the path and the
    table read back when :meth:`FilledColumns.finish` ends. None where ``schema`` has another
    type or ``length`` is 0, or where the file cannot be written, reserved on disk or mapped
    (the caller makes its columns in the heap)."""
    if length <= 0 or not _fixed_width(schema):
        return None
    widths = [f.type.byte_width for f in schema]
    # the placeholder's pages are never read: the sink skips its buffers
    space = mmap.mmap(-1, max(widths) * length)
    placeholder = pa.py_buffer(space)
    temporary = temporary_name(path)
    try:
        with open(temporary, "w+b") as file:
            sink = _HoleSink(file, placeholder)
            columns = [
                pa.Array.from_buffers(f.type, length, [None, placeholder.slice(0, w * length)], 0)
                for f, w in zip(schema, widths, strict=True)
            ]
            with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema) as writer:
                writer.write_batch(pa.record_batch(columns, schema=schema))
            del columns
            file.flush()
            size = file.seek(0, os.SEEK_END)
            holes = sink.holes
            sizes = [n for _, n in holes]
            if sizes != [w * length for w in widths] or sum(holes[-1]) > size:
                raise OSError("the IPC writer laid the columns out otherwise")
            os.posix_fallocate(file.fileno(), 0, size)
            writable = mmap.mmap(file.fileno(), size)
    except (OSError, ValueError, pa.ArrowException):
        temporary.unlink(missing_ok=True)
        return None
    finally:
        del placeholder
        # a column of the placeholder still held (an error mid-write): it goes with it
        with contextlib.suppress(BufferError):
            space.close()
    targets = {
        f.name: np.frombuffer(writable, f.type.to_pandas_dtype(), length, offset)
        for f, (offset, _) in zip(schema, holes, strict=True)
    }
    return FilledColumns(path, temporary, schema, targets, writable, done)
