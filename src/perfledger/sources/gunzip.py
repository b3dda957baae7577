"""Reading gzip data: ISA-L's inflate where it is installed, zlib's otherwise.

python-isal (a dependency where it has wheels) inflates about four times as fast as zlib, and
its reader is written to read as ``gzip.GzipFile`` does. On damaged data it holds back more of
what it inflated before the damage than zlib's reader does, so a reader that must salvage
every byte goes on with zlib's at its first error (``kineto_stream``'s source does).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol, cast

from perfledger.files import open_regular
from perfledger.pages import write_pieces


class Inflater(Protocol):
    """What gzip data is read through (``gzip.GzipFile`` and ISA-L's reader alike)."""

    def read1(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


def _fast_reader() -> tuple[Callable[[IO[bytes]], Inflater] | None, tuple[type[Exception], ...]]:
    """ISA-L's gzip reader and the error it adds to zlib's; None where it is not installed."""
    try:
        from isal import igzip, isal_zlib
    except ImportError:  # pragma: no cover - platforms without its wheels read with zlib
        return None, ()
    reader: Any = igzip.IGzipFile
    error = cast(type[Exception], isal_zlib.error)
    return (lambda raw: cast(Inflater, reader(fileobj=raw, mode="rb"))), (error,)


_FAST, _FAST_ERRORS = _fast_reader()
# What either reader raises on damaged data (gzip.BadGzipFile is an OSError).
INFLATE_ERRORS: tuple[type[Exception], ...] = (EOFError, OSError, zlib.error, *_FAST_ERRORS)
GZIP_MAGIC = b"\x1f\x8b"
# The most inflated at once.
_PIECE_BYTES = 4 << 20


def is_gzip(path: Path) -> bool:
    """Whether the file ``path`` starts as gzip data does (False where it cannot be read)."""
    try:
        with open_regular(path) as raw:
            return raw.read(2) == GZIP_MAGIC
    except OSError:
        return False


def inflated_size(path: Path) -> int:
    """The size gzip's trailer gives the data of ``path`` (its last member's, modulo 4 GiB:
    a floor, not a measure, for a large or many-member file); 0 where it cannot be read."""
    try:
        with open_regular(path) as raw:
            size = os.fstat(raw.fileno()).st_size
            if size < 18:  # a header and a trailer at least
                return 0
            raw.seek(size - 4)
            return int.from_bytes(raw.read(4), "little")
    except OSError:
        return 0


def fast() -> bool:
    """Whether gzip data is inflated by ISA-L here."""
    return _FAST is not None


def inflating(raw: IO[bytes], *, prefer_fast: bool = True) -> Inflater:
    """A reader of the gzip data of ``raw`` from its current place: ISA-L's where installed
    (and ``prefer_fast``), else zlib's."""
    if prefer_fast and _FAST is not None:
        return _FAST(raw)
    return gzip.GzipFile(fileobj=raw, mode="rb")


def inflate_to(
    source: Path, target: Path, progress: Callable[[int, int], None] | None = None
) -> bool:
    """Write the data of the gzip file ``source`` into the new file ``target``; False, with
    ``target`` removed, where it is not read whole (damaged data, no room left). ``progress``:
    told (compressed bytes read, file size) as it goes."""
    try:
        with open_regular(source) as raw:
            total = os.fstat(raw.fileno()).st_size
            reader = inflating(raw)
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                written = 0
                while piece := reader.read1(_PIECE_BYTES):
                    write_pieces(out, piece, written)  # new file pages taken in small blocks
                    written += len(piece)
                    if progress is not None:
                        progress(min(raw.tell(), total), total)
            finally:
                os.close(out)
                reader.close()
    except INFLATE_ERRORS:
        target.unlink(missing_ok=True)
        return False
    return True
