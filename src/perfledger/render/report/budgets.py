"""How much of each table, timeline and counter the report's payload holds.

Together the budgets keep the report far below the page's size limit on any profile; a page
still too big is rendered again with the budgets halved (:meth:`PayloadLimits.shrunk`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

TIMELINE_STEPS: Final = 6
TIMELINE_EVENTS_PER_STEP: Final = 12_000
TABLE_ROWS: Final = {
    "op_statistic": 1_000,
    "op_summary": 1_500,
    "api_statistic": 500,
    "kernel_details": 1_000,
    "transfers": 100,
    "communication": 500,
    "worst_gaps": 50,
    "cluster_ranks": 1_000,
}
COUNTER_POINTS: Final = 1_200
# Ranks whose critical path a step timeline draws (the first ones; each at most 256 spans).
TIMELINE_PATH_RANKS: Final = 8
# Strings of tables and timeline tooltips are cut at this length (the CSV files keep them).
TEXT_CHARS: Final = 300
COUNTER_SERIES: Final = 12
# Profiled steps marked on the counter charts (evenly spaced beyond it).
COUNTER_STEP_MARKS: Final = 400
ACCOUNTING_STEPS: Final = 2_000
# Cells of each rank x step heat map (the first steps of the first devices beyond it).
CLUSTER_CELLS: Final = 40_000
# The communication matrix shows the pairs of its first source and destination ranks; its
# slow-link table lists the slowest links of the whole matrix.
MATRIX_SRC_RANKS: Final = 64
MATRIX_DST_RANKS: Final = 64
MATRIX_SLOW_LINKS: Final = 50


@dataclass(frozen=True)
class PayloadLimits:
    """How much of each table and timeline the payload holds; halved while it is too big."""

    timeline_steps: int = TIMELINE_STEPS
    timeline_events: int = TIMELINE_EVENTS_PER_STEP
    table_scale: float = 1.0
    counter_points: int = COUNTER_POINTS
    text_chars: int = TEXT_CHARS

    def shrunk(self) -> PayloadLimits:
        """The next, smaller budgets: fewer steps, events, rows, samples and characters."""
        return PayloadLimits(
            timeline_steps=max(2, self.timeline_steps - 2),
            timeline_events=max(500, self.timeline_events // 2),
            table_scale=self.table_scale / 2,
            counter_points=max(100, self.counter_points // 2),
            text_chars=max(60, self.text_chars // 2),
        )
