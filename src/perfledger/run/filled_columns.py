"""Columns written straight into their places in the Arrow IPC file that will hold them.

A table written to an IPC file (``mapped_files.mapped_batches``) is first made whole in the
heap, then copied into the file. Here the file is laid out first with the columns' bodies left
as holes (only the schema, the batches' metadata, what the caller gives whole and the footer
are written: the IPC writer is given placeholder buffers for the rest, and the sink it writes
through skips them), the holes are reserved on disk (``posix_fallocate``: a full disk shows
now, as an error), and the caller makes each body in the heap and has it written into its hole
once made (:meth:`FilledColumns.written`: the text a piece at a time, so that the heap holds a
piece, never the whole text), in the small writes whose pages the file cache takes as ordinary
pages (``perfledger.pages``; through a shared writable map of the file it took them up to 2 MB
at a time: bench/README.md, "Growth", 2026-12-06 14:10). Read back through a read-only map,
the columns are then the file's pages, as ``mapped_batches`` gives them.

Two layouts: :func:`filled_columns`, fixed-width columns without nulls (integers, floats) in
one batch, each column's values a hole; :func:`filled_text`, string columns in batches whose
offsets and validity are known before their text (given whole), each text a hole. A file that
cannot be made or reserved gives None: the caller makes its columns in the heap.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.files import temporary_name
from perfledger.pages import write_pieces
from perfledger.sources.kineto_layout import TextPiece

__all__ = ["FilledColumns", "filled_columns", "filled_text"]

Done = Callable[[Path, pa.Table], None]


class FilledColumns:
    """The columns of one IPC file being filled (:func:`filled_columns`, :func:`filled_text`).

    :meth:`target` gives a body to make, as a numpy array; :meth:`written` writes a body made
    into its place in the file (and lets it go); :meth:`finish` writes those not written yet
    and gives the columns read back through a read-only map of the file."""

    def __init__(
        self,
        path: Path,
        temporary: Path,
        bodies: dict[tuple[int, str], tuple[int, int, Any]],
        descriptor: int,
        done: Done | None,
    ) -> None:
        self.path = path
        self._temporary = temporary
        self._bodies = bodies  # (batch, name): offset in the file, count, numpy type
        self._made: dict[tuple[int, str], npt.NDArray[Any]] = {}
        self._descriptor = descriptor
        self._done = done

    def target(self, name: str, batch: int = 0) -> npt.NDArray[Any]:
        """Column ``name``'s body in record batch ``batch``: its values (an array of the
        column's type and the batch's length), or its text (bytes, as many as the batch's
        offsets say); the same array until it is written."""
        key = (batch, name)
        made = self._made.get(key)
        if made is None:
            _, count, dtype = self._bodies[key]
            made = self._made[key] = np.empty(count, dtype)
        return made

    def written(self, name: str, batch: int = 0) -> None:
        """Column ``name``'s body in record batch ``batch`` is made: written into its place
        in the file now (in pieces: perfledger.pages), and let go here."""
        made = self._made.pop((batch, name), None)
        if made is not None and made.size:
            write_pieces(self._descriptor, made, self._bodies[batch, name][0])

    def finish(self) -> pa.Table:
        """The columns as written (the bodies not written yet written now), read through a
        read-only map of the file (renamed to its path now); where the file cannot be renamed
        or mapped, the same columns read from a copy of it in the heap (the file removed)."""
        try:
            for batch, name in list(self._made):
                self.written(name, batch)
        except BaseException:  # a write refused (a disk error): nothing of the file left
            self.abandon()
            raise
        os.close(self._descriptor)
        self._descriptor = -1
        try:
            os.replace(self._temporary, self.path)
            with pa.memory_map(str(self.path), "r") as source:
                table = pa.ipc.open_file(source).read_all()
        except OSError:
            with open(self._existing(), "rb") as file:
                data = file.read()
            with pa.BufferReader(pa.py_buffer(data)) as copy:
                table = pa.ipc.open_file(copy).read_all()
            self._temporary.unlink(missing_ok=True)
            self.path.unlink(missing_ok=True)
            return table
        if self._done is not None:
            self._done(self.path, table)
        return table

    def _existing(self) -> Path:
        """The file's name now: its path once renamed, else the temporary one."""
        return self._temporary if self._temporary.exists() else self.path

    def abandon(self) -> None:
        """Give the file up (the caller makes its columns otherwise)."""
        self._made.clear()
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1
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


@dataclass(frozen=True)
class _Body:
    """A column of a batch whose body is left a hole: its type and length, the bytes of its
    body, the numpy type of its target, the buffers written before the body (validity,
    offsets) and its null count."""

    type: pa.DataType
    length: int
    nbytes: int
    dtype: Any
    before: list[pa.Buffer | None]
    null_count: int = 0


def _laid_out(
    path: Path, schema: pa.Schema, batches: Sequence[Sequence[pa.Array | _Body]], done: Done | None
) -> FilledColumns | None:
    """The IPC file of ``batches`` (each column an array written whole, or a :class:`_Body`
    left a hole: :class:`_HoleSink`)."""
    reserve = getattr(os, "posix_fallocate", None)
    if reserve is None:  # no way to reserve the holes here (macOS): a full disk would fault
        return None
    bodies = [
        (b, field.name, column)
        for b, columns in enumerate(batches)
        for field, column in zip(schema, columns, strict=True)
        if isinstance(column, _Body)
    ]
    space = mmap.mmap(-1, max([1, *(body.nbytes for _, _, body in bodies)]))
    placeholder = pa.py_buffer(space)
    temporary = temporary_name(path)
    try:
        with open(temporary, "w+b") as file:
            sink = _HoleSink(file, placeholder)
            with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema) as writer:
                for columns in batches:
                    arrays = [
                        column
                        if isinstance(column, pa.Array)
                        else pa.Array.from_buffers(
                            column.type,
                            column.length,
                            [*column.before, placeholder.slice(0, column.nbytes)],
                            column.null_count,
                        )
                        for column in columns
                    ]
                    writer.write_batch(pa.record_batch(arrays, schema=schema))
                    del arrays
            file.flush()
            size = file.seek(0, os.SEEK_END)
            holes = sink.holes
            if [n for _, n in holes] != [b.nbytes for _, _, b in bodies if b.nbytes] or (
                holes and sum(holes[-1]) > size
            ):
                raise OSError("the IPC writer laid the columns out otherwise")
            reserve(file.fileno(), 0, size)
            descriptor = os.dup(file.fileno())
    except (OSError, ValueError, pa.ArrowException):
        temporary.unlink(missing_ok=True)
        return None
    finally:
        del placeholder
        # a column of the placeholder still held (an error mid-write): it goes with it
        with contextlib.suppress(BufferError):
            space.close()
    places: dict[tuple[int, str], tuple[int, int, Any]] = {}
    found = iter(holes)
    for batch, name, body in bodies:
        count = body.nbytes // np.dtype(body.dtype).itemsize
        places[batch, name] = (next(found)[0] if body.nbytes else 0, count, body.dtype)
    return FilledColumns(path, temporary, places, descriptor, done)


def filled_columns(
    path: Path, schema: pa.Schema, length: int, done: Done | None = None
) -> FilledColumns | None:
    """An IPC file at ``path`` for ``length`` rows of ``schema``'s columns (fixed-width, no
    nulls) in one batch, to fill through :meth:`FilledColumns.target`; ``done`` is given the
    path and the table read back when :meth:`FilledColumns.finish` ends. None where
    ``schema`` has another type or ``length`` is 0, or where the file cannot be written,
    reserved on disk or mapped (the caller makes its columns in the heap)."""
    if length <= 0 or not all(
        pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in schema
    ):
        return None
    columns: list[pa.Array | _Body] = [
        _Body(f.type, length, f.type.byte_width * length, f.type.to_pandas_dtype(), [None])
        for f in schema
    ]
    return _laid_out(path, schema, [columns], done)


def filled_text(
    path: Path, schema: pa.Schema, batches: Sequence[Sequence[TextPiece]], done: Done | None = None
) -> FilledColumns | None:
    """An IPC file at ``path`` of ``schema``'s string columns in ``batches`` (each a
    :class:`TextPiece` per column), every text a hole to fill through
    :meth:`FilledColumns.target` (``batch``: the batch's index; bytes, as many as its
    offsets say). None where the file cannot be written, reserved on disk or mapped."""
    if not all(pa.types.is_string(f.type) for f in schema):
        return None
    laid: list[list[pa.Array | _Body]] = []
    for pieces in batches:
        columns: list[pa.Array | _Body] = []
        for field, piece in zip(schema, pieces, strict=True):
            if piece.whole is not None:
                columns.append(piece.whole)
                continue
            assert piece.offsets is not None
            rows = piece.offsets.size - 1
            validity = None if piece.validity is None else pa.py_buffer(piece.validity)
            buffers = [validity, pa.py_buffer(piece.offsets)]
            nbytes = int(piece.offsets[-1])
            columns.append(_Body(field.type, rows, nbytes, np.uint8, buffers, piece.null_count))
        laid.append(columns)
    return _laid_out(path, schema, laid, done)
