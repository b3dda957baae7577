"""Fresh memory taken in ordinary pages: numpy's large arrays kept off huge pages, files
written in pieces.

On a virtual machine whose host takes the guest's freed memory back, a page the process takes
afresh must first be found by the host; taken as a 2 MB huge page (numpy asks for them for
every array of 4 MB or more), or as a large block of the file cache (the system gives a write
of 1 MB or more, and a write through a shared map as the map reads ahead, blocks of up to 2
MB), it costs the guest several times what the same memory costs in 4 KiB pages
(``python bench/page_cost.py``: 1.1–3.0 s of system time per GiB in huge pages against
0.6–0.9 in ordinary ones; a new file written at once 4.6–5.9 s per GiB, 1 MiB at a time up to
3.5, 64 KiB at a time 0.6; bench/README.md, "What touching memory costs here"). The analysis
of a large trace takes a few GB of such memory in a run. Everything here changes only how
memory is taken, never what is written.

The standard library only at import: the command line and the import's workers set numpy's
switch here before they load anything heavy.
"""

from __future__ import annotations

import os
from typing import Any, Final

# numpy's switch for the huge pages it asks for its large arrays, read as numpy loads
NUMPY_HUGE_PAGES: Final = "NUMPY_MADVISE_HUGEPAGE"
# its value for none: the environment of perfledger's own processes before numpy loads
ORDINARY_PAGES_ENVIRONMENT: Final = {NUMPY_HUGE_PAGES: "0"}
# The largest write given to the system at once. The file cache takes the pages of a write in
# blocks as large as the write (up to 2 MB), and the large ones cost as huge pages do
# (bench/page_cost.py's file cases: 1 MiB writes up to 3.5 s per GiB, 64 KiB writes 0.6):
# 64 KiB, for a few thousand writes a GB.
WRITE_PIECE_BYTES: Final = 64 << 10


def ordinary_pages() -> None:
    """numpy's arrays allocated from now on in this process on ordinary pages, not huge ones.

    Where numpy loads after it, :data:`ORDINARY_PAGES_ENVIRONMENT` (which the command line
    sets for its own processes, the import's workers included) does the same; this is for a
    process that loaded numpy first (``perfledger record``'s, whose program's environment is
    not ours to change, and a worker it starts). The user's own NUMPY_MADVISE_HUGEPAGE is
    kept; no-op where numpy has no such switch."""
    if os.environ.get(NUMPY_HUGE_PAGES, "0") != "0":
        return  # the user asked for them
    import numpy as np  # loaded by every caller already

    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if callable(switch):
        switch(False)


def write_pieces(descriptor: int, data: Any, offset: int) -> None:
    """Write all of ``data`` (bytes-like) at ``offset`` of the open file ``descriptor``, at
    most :data:`WRITE_PIECE_BYTES` per write."""
    view = memoryview(data).cast("B")
    written = 0
    while written < view.nbytes:
        written += os.pwrite(
            descriptor, view[written : written + WRITE_PIECE_BYTES], offset + written
        )


class PieceSink:
    """A file opened for writing at ``path``, written at most :data:`WRITE_PIECE_BYTES` at a
    time: what an Arrow writer writes through (``pyarrow.PythonFile``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        write_pieces(self._descriptor, view, self._position)
        self._position += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass  # nothing held here

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._descriptor)

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False
