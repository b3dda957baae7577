"""Which host calls may have launched each device task of a rank (see
:func:`perfledger.analysis.steps.launch_keys`): found once by the rank's analysis, read again
by its replays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.signedinteger[Any]]


@dataclass(frozen=True)
class LaunchKeys:
    """Which host calls may have launched each device task (what does not depend on the
    times, so that the launches of replayed times are found again cheaply).

    Attributes:
        task_rows: the tasks whose (rank, correlation) some call carries unambiguously.
        task_key: for each of them, its key (an index into ``bounds``).
        launch_rows: the calls carrying those keys, grouped by key (no call of a key that
            no task carries: every key is some task's).
        bounds: where each key's calls begin in ``launch_rows``.
    """

    task_rows: IntArray
    task_key: IntArray
    launch_rows: IntArray
    bounds: IntArray

    def starts(self, launch_start: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """For each of ``task_rows``, its launch's start (the earliest of its key's calls),
        given the start of each of ``launch_rows``."""
        if self.task_rows.size == 0:
            return np.zeros(0, dtype=np.int64)
        earliest = np.minimum.reduceat(launch_start, self.bounds)
        return np.asarray(earliest[self.task_key], dtype=np.int64)

    def narrowed(self) -> LaunchKeys:
        """The same keys, each array at 4 bytes an entry where all of its values fit (what a
        rank keeps for its replays)."""
        return LaunchKeys(
            *(_narrow(a) for a in (self.task_rows, self.task_key, self.launch_rows, self.bounds))
        )


def _narrow(values: IntArray) -> IntArray:
    if values.size and (int(values.max()) > np.iinfo(np.int32).max or int(values.min()) < 0):
        return values
    return values.astype(np.int32)
