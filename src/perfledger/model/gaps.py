"""Device idle gaps as reported: a histogram by duration and cause, and the worst gaps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa

WORST_GAPS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("step", pa.int32()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("cause", pa.string()),
        pa.field("next_task", pa.string()),
        pa.field("host_op", pa.string()),
        pa.field("host_annotation", pa.string()),
    ]
)


@dataclass(frozen=True)
class CauseShare:
    """Gaps of one idle cause inside one duration bucket."""

    cause: str
    count: int
    total_ns: int


@dataclass(frozen=True)
class GapBucket:
    """Gaps whose duration lies in [lower_ns, upper_ns)."""

    label: str
    lower_ns: int
    upper_ns: int | None  # None: no upper bound
    count: int
    total_ns: int
    by_cause: tuple[CauseShare, ...]  # every idle cause, in IDLE_CAUSES order


@dataclass(frozen=True)
class GapReport:
    """Histogram of idle gaps and the worst ones (see the module docstring)."""

    buckets: tuple[GapBucket, ...]
    count: int
    total_ns: int
    worst: pa.Table  # WORST_GAPS_SCHEMA
