"""What every importer returns: one rank's trace in canonical form."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfledger.model.quality import QualityCheck


@dataclass(frozen=True)
class Trace:
    """One rank's trace in canonical form.

    Attributes:
        events: rows in :data:`perfledger.model.schema.EVENTS_SCHEMA`, sorted by start_ns.
        counters: rows in :data:`perfledger.model.schema.COUNTERS_SCHEMA`.
        meta: run metadata found in the source (device properties, distributed info,
            versions, base time ...); JSON-serialisable.
        source_kind: e.g. ``"kineto"``.
        source_files: the files the trace was read from.
        loss: what could not be read (a truncated file), or None when nothing was lost; one
            message per problem, each naming the file it is about.
        communication_matrix: rank-to-rank link figures when the source has them
            (:data:`perfledger.model.schema.COMM_MATRIX_SCHEMA`), else None.
        quality: what the importer repaired or skipped (negative durations, malformed rows).
    """

    events: pa.Table
    counters: pa.Table
    meta: dict[str, Any] = field(default_factory=dict)
    source_kind: str = "unknown"
    source_files: tuple[Path, ...] = ()
    loss: str | None = None
    communication_matrix: pa.Table | None = None
    quality: tuple[QualityCheck, ...] = ()

    @property
    def rank(self) -> int:
        """The rank its rows carry (its meta's when it has no rows; 0 when neither says)."""
        if self.events.num_rows:
            return int(self.events.column("rank")[0].as_py())
        rank = self.meta.get("rank")
        return rank if isinstance(rank, int) else 0
