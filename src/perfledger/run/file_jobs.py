"""Files to write, shared out among the threads that have time for them.

The profile's writer thread writes the files that do not need the findings (the Parquet
tables, the CSVs) while the command's own thread writes the report; once the report is
written, that thread takes files from the same list instead of waiting for the writer: the
largest first, so that the two end at about the same time (bench/README.md, "Growth").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from perfledger.errors import PerfledgerError


@dataclass
class FileJobs:
    """Files to write (:meth:`add`), each written once by whichever thread calls :meth:`work`
    first, the largest first. ``stop``: once set, no thread begins another file (the file
    being written is finished)."""

    stop: threading.Event
    _jobs: list[tuple[int, int, str, Callable[[], None]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    _failed: bool = False

    def add(self, size: int, kind: str, write: Callable[[], None]) -> None:
        """A file of about ``size`` bytes of data, of the group ``kind`` (whose span of time
        :meth:`span_s` gives), written by ``write()``."""
        with self._lock:
            self._jobs.append((size, -len(self._jobs), kind, write))
            self._jobs.sort()  # the largest last (popped first); equal sizes in order added

    def work(self) -> None:
        """Write files until none is left (or :attr:`stop` is set: the profile abandoned).
        A write's error is raised here, and the other threads begin no other file."""
        while True:
            with self._lock:
                if not self._jobs or self._failed:
                    return
                _, _, kind, write = self._jobs.pop()
            if self.stop.is_set():
                raise PerfledgerError("the profile was abandoned")
            began = time.perf_counter()
            try:
                write()
            except BaseException:
                with self._lock:
                    self._failed = True
                raise
            ended = time.perf_counter()
            with self._lock:
                low, high = self._spans.get(kind, (began, ended))
                self._spans[kind] = (min(low, began), max(high, ended))

    def span_s(self, kind: str, since: float | None = None) -> float:
        """Seconds from the first file of ``kind`` begun (or ``since``) to the last one
        written; 0 where none was."""
        span = self._spans.get(kind)
        if span is None:
            return 0.0
        return span[1] - (span[0] if since is None else since)
