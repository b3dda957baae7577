"""Graph changes ``perfledger whatif`` builds from a profile's own events (docs/whatif.md):
the synchronisation calls a name pattern picks, whose waits are then removed."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.analysis import columns
from perfledger.model import schema

IntArray = npt.NDArray[np.int64]


def sync_calls_matching(events: pa.Table, patterns: Sequence[str]) -> IntArray:
    """Rows of the synchronisation calls (``sync`` rows of the host: stream, device and event
    synchronise, blocking copies) whose name, or the name of a host slice around them on their
    thread (``aten::item`` around the stream synchronise it waits in), matches one of the glob
    ``patterns`` (case-sensitive); in row order."""
    host = columns.int64(events, "device") < 0
    syncs = np.flatnonzero(host & columns.isin(events, "kind", [schema.SYNC]))
    named = np.flatnonzero(
        host & columns.matches(events, "name", lambda n: any(fnmatchcase(n, p) for p in patterns))
    )
    if syncs.size == 0 or named.size == 0:
        return np.zeros(0, dtype=np.int64)
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    rows = np.concatenate([syncs, named])
    keys = np.stack([columns.int64(events, c)[rows] for c in ("pid", "stream")], axis=1)
    _, thread = np.unique(keys, axis=0, return_inverse=True)
    thread = np.asarray(thread, dtype=np.int64).reshape(-1)
    sync_thread, named_thread = thread[: syncs.size], thread[syncs.size :]
    chosen = np.zeros(syncs.size, dtype=bool)
    for t in np.unique(sync_thread).tolist():  # a loop over threads
        around = named[named_thread == t]
        if around.size == 0:
            continue
        around = around[np.argsort(start[around], kind="stable")]
        # a call lies inside a matching slice when one begun by its start ends at or after its
        # end: the latest end among the slices begun by then says whether one does
        reach = np.maximum.accumulate(end[around])
        mine = np.flatnonzero(sync_thread == t)
        at = np.searchsorted(start[around], start[syncs[mine]], side="right") - 1
        inside = at >= 0
        inside[inside] = reach[at[inside]] >= end[syncs[mine][inside]]
        chosen[mine] = inside
    return syncs[chosen]
