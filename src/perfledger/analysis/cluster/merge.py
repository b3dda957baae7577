"""Profile-wide tables from per-rank pieces, equal to what the analyses give on all ranks at once.

Each analysis partitions its work by rank; these functions put the per-rank results back in
the order the whole-profile analysis sorts them, so that a profile analysed rank by rank in
separate tasks writes the same bytes as one analysed in a single process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from perfledger.analysis.gaps import WORST_GAPS
from perfledger.model.accounts import IDLE_CAUSES
from perfledger.model.gaps import CauseShare, GapBucket, GapReport


def merge_gap_reports(reports: Sequence[GapReport], worst: int = WORST_GAPS) -> GapReport:
    """One gap report from the reports of each rank (histograms summed, worst gaps re-ranked)."""
    seen = {c.cause for r in reports for b in r.buckets for c in b.by_cause}
    extra = sorted(seen - set(IDLE_CAUSES))
    causes = [*IDLE_CAUSES, *extra]
    buckets = []
    for position, first in enumerate(reports[0].buckets):
        shares = [r.buckets[position] for r in reports]
        by_cause = []
        for cause in causes:
            found = [c for b in shares for c in b.by_cause if c.cause == cause]
            by_cause.append(
                CauseShare(cause, sum(c.count for c in found), sum(c.total_ns for c in found))
            )
        buckets.append(
            GapBucket(
                label=first.label,
                lower_ns=first.lower_ns,
                upper_ns=first.upper_ns,
                count=sum(b.count for b in shares),
                total_ns=sum(b.total_ns for b in shares),
                by_cause=tuple(by_cause),
            )
        )
    tops = pa.concat_tables([r.worst for r in reports])
    # the whole-profile order: longest first, then start, rank, device
    order = np.lexsort(
        (
            np.asarray(tops["device"], dtype=np.int64),
            np.asarray(tops["rank"], dtype=np.int64),
            np.asarray(tops["start_ns"], dtype=np.int64),
            -np.asarray(tops["dur_ns"], dtype=np.int64),
        )
    )[:worst]
    return GapReport(
        buckets=tuple(buckets),
        count=sum(r.count for r in reports),
        total_ns=sum(r.total_ns for r in reports),
        worst=tops.take(pa.array(order, pa.int64())).combine_chunks(),
    )
