"""What the cluster pass finds over the ranks of a profile: per-rank accounts, their spread,
the slow ranks, the alignment of collectives, link usage and the communication matrix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

COLLECTIVES_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("step", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("start_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("wait_ns", pa.int64()),
        pa.field("row", pa.int64()),  # the task's row in its rank's events table
        # the process group, as the trace names it (Kineto's Process Group Name, else its
        # ranks); "" when the trace does not say
        pa.field("group", pa.string()),
    ]
)


LINKS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("link", pa.string()),
        pa.field("collectives", pa.int64()),
        pa.field("transit_bytes", pa.int64()),
        pa.field("transit_ns", pa.int64()),
        pa.field("gbps", pa.float64()),  # GB/s = bytes per ns
    ]
)


@dataclass(frozen=True)
class CollectiveSkew:
    """One collective matched on every rank that issues it."""

    name: str
    occurrence: int  # the k-th task of that name on each rank (0-based)
    step: int  # the step of the last arrival's task
    ranks: int
    first_start_ns: int  # earliest arrival
    arrival_spread_ns: int  # latest arrival - earliest arrival
    first_rank: int
    last_rank: int  # the rank the others waited for


@dataclass(frozen=True)
class RankArrivals:
    """How one rank arrived at the aligned collectives."""

    rank: int
    collectives: int  # aligned collectives the rank took part in
    last_arrivals: int  # times it was the last to arrive (what the others waited for)
    waited_ns: int  # sum over collectives of (last arrival - own arrival)
    library_wait_ns: int  # the library's own wait figure summed (-1: unknown)


@dataclass(frozen=True)
class CollectiveAlignment:
    """Aligned collectives, their skew, each rank's arrivals and what could not be aligned."""

    aligned: int
    worst: tuple[CollectiveSkew, ...]  # largest arrival spread first
    arrivals: tuple[RankArrivals, ...]  # by rank
    median_spread_ns: int
    max_spread_ns: int
    unaligned_names: tuple[str, ...]


# One row per (group, source, destination, transport): the communication matrix of the run.
# Sources number the members of each communication group from 0 (``src_rank``, ``dst_rank``);
# the profiled rank that is a member is its ``*_global_rank`` (null: that member's output
# is not in the profile).
MATRIX_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("src_rank", pa.int32()),
        pa.field("dst_rank", pa.int32()),
        pa.field("src_global_rank", pa.int32()),
        pa.field("dst_global_rank", pa.int32()),
        pa.field("transport", pa.string()),
        pa.field("steps", pa.int64()),  # step labels the pair appears in
        pa.field("transit_bytes", pa.int64()),
        pa.field("transit_ns", pa.int64()),
        pa.field("gbps", pa.float64()),  # transit_bytes / transit_ns (NaN without time)
        pa.field("vs_transport_median_pct", pa.float64()),  # gbps against the transport's median
    ]
)


# cluster_step_trace.csv: one row per compared window (step, rank, device), sorted so; the
# ``*_vs_median_pct`` columns compare the row with the median over the ranks of the same step.
CLUSTER_STEP_NS_COLUMNS: Final = (
    "start_ns",
    "end_ns",
    "wall_ns",
    "compute_ns",
    "communication_ns",
    "overlapped_communication_ns",
    "memcpy_ns",
    "memset_ns",
    "idle_ns",
)
CLUSTER_STEPS_SCHEMA: Final = pa.schema(
    [
        pa.field("step", pa.int32()),
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        *(pa.field(name, pa.int64()) for name in CLUSTER_STEP_NS_COLUMNS),
        pa.field("wall_vs_median_pct", pa.float64()),
        pa.field("compute_vs_median_pct", pa.float64()),
        pa.field("communication_vs_median_pct", pa.float64()),
        pa.field("idle_vs_median_pct", pa.float64()),
    ]
)


@dataclass(frozen=True)
class RankAccount:
    """One rank's time account summed over its windows (see the module doc)."""

    rank: int
    windows: int
    steps: int
    wall_ns: int
    compute_ns: int
    communication_ns: int
    overlapped_communication_ns: int
    memcpy_ns: int
    memset_ns: int
    idle_ns: int
    # added with the communication split and the idle causes, for the slow rank's cause
    communication_wait_ns: int = 0
    idle_host_dispatch_ns: int = 0
    idle_sync_ns: int = 0
    idle_dataloader_ns: int = 0
    idle_launch_latency_ns: int = 0

    def per_window(self, category: str) -> float:
        """Mean ns per window of ``category`` (wall, compute, communication, ...)."""
        total: int = getattr(self, f"{category}_ns")
        return total / self.windows if self.windows else 0.0

    @property
    def outside_communication_ns(self) -> int:
        """Time not spent in exposed communication: compute, copies and idle."""
        return self.wall_ns - self.communication_ns


@dataclass(frozen=True)
class Spread:
    """How unevenly one category is spread over the ranks (means per window)."""

    category: str
    mean_ns: float
    min_ns: float
    max_ns: float
    min_rank: int
    max_rank: int

    @property
    def spread_pct(self) -> float:
        """(max - min) / mean, in %; 0 when the mean is 0."""
        return 100.0 * (self.max_ns - self.min_ns) / self.mean_ns if self.mean_ns > 0 else 0.0


# What a slow rank can be doing while the others wait, by the account category that shows it
# (DESIGN's causes, with UNPROFILED_PEER for a late rank outside the profile).
SLOW_CAUSES: Final = {
    "idle_dataloader": "data loader",
    "idle_host_dispatch": "host dispatch",
    "idle_sync": "sync",
    "compute": "compute",
    "copies": "copies",
}
UNPROFILED_PEER: Final = "unprofiled peer"


@dataclass(frozen=True)
class SlowRank:
    """A rank suspected of holding the others back, with the figures that say so (per window).

    ``wait_caused_ns`` is how much longer the other ranks wait for peers in collectives than
    this one (their median minus its own; their exposed communication when the trace cannot
    split it into waiting and transfer): the time they wait for it.
    """

    rank: int
    wait_caused_ns: float
    compute_excess_pct: float  # its compute over the other ranks' median, %
    outside_excess_pct: float  # its time outside communication over the others' median, %
    compute_ns: float
    others_compute_ns: float
    outside_communication_ns: float
    others_outside_communication_ns: float
    communication_ns: float
    others_communication_ns: float
    last_arrivals: int  # aligned collectives it arrived last at (0 when none aligned)
    collectives: int
    # what the rank did instead while the others waited: the category of its time account
    # that exceeds the other ranks' median the most (SLOW_CAUSES), and by how much per window
    cause: str = SLOW_CAUSES["compute"]
    wait_ns: float = 0.0  # its waiting for peers per window (exposed communication if unsplit)
    others_wait_ns: float = 0.0  # the other ranks' median of it
    cause_excess_ns: float = 0.0
    # when the cause is more compute: the kernels it spends longer in than the others'
    # median, (name, ns per window more), most first
    cause_ops: tuple[tuple[str, float], ...] = ()

    @property
    def excess_pct(self) -> float:
        """The larger of the compute and outside-communication excesses."""
        return max(self.compute_excess_pct, self.outside_excess_pct)

    def evidence(self) -> dict[str, Any]:
        """The figures as JSON evidence (ms per step window, rounded to the µs)."""
        return {
            "rank": self.rank,
            "wait_caused_ms": _ms(self.wait_caused_ns),
            "compute_excess_pct": round(self.compute_excess_pct, 2),
            "outside_communication_excess_pct": round(self.outside_excess_pct, 2),
            "compute_ms": _ms(self.compute_ns),
            "others_compute_ms": _ms(self.others_compute_ns),
            "outside_communication_ms": _ms(self.outside_communication_ns),
            "others_outside_communication_ms": _ms(self.others_outside_communication_ns),
            "communication_ms": _ms(self.communication_ns),
            "others_communication_ms": _ms(self.others_communication_ns),
            "last_arrivals": self.last_arrivals,
            "aligned_collectives": self.collectives,
            "collectives": self.collectives,
            "late_per_step_ms": _ms(self.wait_caused_ns),
            "wait_ms": _ms(self.wait_ns),
            "others_wait_ms": _ms(self.others_wait_ns),
            "cause": self.cause,
            "cause_excess_ms": _ms(self.cause_excess_ns),
            "cause_ops": [{"name": n, "excess_ms": _ms(ns)} for n, ns in self.cause_ops],
        }


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


@dataclass(frozen=True)
class ClusterReport:
    """Everything the cluster pass finds (see the module doc)."""

    ranks: tuple[int, ...]
    basis: str  # "steps" or "span": which windows the per-rank figures cover
    per_rank: tuple[RankAccount, ...]
    balance: tuple[Spread, ...]
    slow_ranks: tuple[SlowRank, ...]
    collectives: CollectiveAlignment
    links: pa.Table = field(default_factory=LINKS_SCHEMA.empty_table)  # LINKS_SCHEMA
    steps: pa.Table = field(default_factory=CLUSTER_STEPS_SCHEMA.empty_table)
    matrix: pa.Table = field(default_factory=MATRIX_SCHEMA.empty_table)  # MATRIX_SCHEMA
    # the matrix's pairs far below their transport's median bandwidth, slowest first
    slow_links: pa.Table = field(default_factory=MATRIX_SCHEMA.empty_table)  # MATRIX_SCHEMA
    # per rank, how far its clock runs ahead of the first rank's (from the collectives' ends)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)

    def spread(self, category: str) -> Spread | None:
        """The spread of one category, None when absent."""
        return next((s for s in self.balance if s.category == category), None)
