"""The split of communication tasks into waiting for peers and transfer (see
:mod:`perfledger.analysis.comm_split`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CommSplit:
    """The split of one rank's communication tasks.

    Attributes:
        rows: the tasks, as rows of the rank's events table.
        wait_ns: how long each waited at its start (0 <= wait <= duration).
        source: where each wait comes from (:data:`SOURCES`).
        collective: the collective each task performs (None: unknown).
        bytes: the message each moved (-1: unknown).
        group_size: the ranks taking part (0: unknown).
    """

    rows: IntArray
    wait_ns: IntArray
    source: tuple[str, ...]
    collective: tuple[str | None, ...]
    bytes: IntArray
    group_size: IntArray

    def wait_by_row(self, rows: int) -> IntArray:
        """Per row of the events table: the wait of a communication task, else 0."""
        waits = np.zeros(rows, dtype=np.int64)
        waits[self.rows] = self.wait_ns
        return waits
