"""The profile directory's layout: the names of its files and folders (README, "The profile
directory"), in one place for its writer and its reader."""

from __future__ import annotations

import time
from typing import Final

from perfledger.files import PROFILE_META, PROFILE_SUMMARY

META_JSON: Final = PROFILE_META
SUMMARY_JSON: Final = PROFILE_SUMMARY
RAW_DIR: Final = "raw"
TABLES_DIR: Final = "tables"
REPORT_HTML: Final = "report.html"
TIMELINE: Final = "timeline.json.gz"
TIMELINE_DIR: Final = "timeline"
CLUSTER_SUMMARY_JSON: Final = "cluster_summary.json"
CLUSTER_STEP_TRACE_CSV: Final = "cluster_step_trace.csv"
CLUSTER_MATRIX_CSV: Final = "cluster_communication_matrix.csv"

OP_SUMMARY_CSV: Final = "op_summary.csv"
OP_STATISTIC_CSV: Final = "op_statistic.csv"
KERNEL_DETAILS_CSV: Final = "kernel_details.csv"
API_STATISTIC_CSV: Final = "api_statistic.csv"
STEP_TRACE_CSV: Final = "step_trace.csv"
GAPS_CSV: Final = "gaps.csv"
TRANSFERS_CSV: Final = "transfers.csv"
COMMUNICATION_CSV: Final = "communication.csv"

# The canonical tables under tables/: one Parquet file each, or for the events of a profile
# analysed rank by rank a folder of per-rank files (tables/events/rank=<N>.parquet).
EVENTS_TABLE: Final = "events"
COUNTERS_TABLE: Final = "counters"
STEPS_TABLE: Final = "steps"
GAPS_TABLE: Final = "gaps"
STEP_TIMES_TABLE: Final = "step_times"
CRITICAL_PATH_TABLE: Final = "critical_path"  # the replayed steps' critical paths
WHATIF_FIXES_TABLE: Final = "whatif_fixes"  # the graph change of each finding's fix
RANK_PART_PREFIX: Final = "rank="

# Everything analyze writes at the top of a profile: what ``--force`` may replace. A profile
# holding anything else (a file of the user's put there since) is not replaced.
PROFILE_ENTRIES: Final = frozenset(
    {
        META_JSON,
        SUMMARY_JSON,
        RAW_DIR,
        TABLES_DIR,
        REPORT_HTML,
        TIMELINE,
        TIMELINE_DIR,
        CLUSTER_SUMMARY_JSON,
        CLUSTER_STEP_TRACE_CSV,
        CLUSTER_MATRIX_CSV,
        OP_SUMMARY_CSV,
        OP_STATISTIC_CSV,
        KERNEL_DETAILS_CSV,
        API_STATISTIC_CSV,
        STEP_TRACE_CSV,
        GAPS_CSV,
        TRANSFERS_CSV,
        COMMUNICATION_CSV,
    }
)


def default_profile_name(now: float | None = None) -> str:
    """``prof_YYYYmmdd_HHMMSS`` in local time."""
    return time.strftime("prof_%Y%m%d_%H%M%S", time.localtime(now))


def rank_part_name(rank: int) -> str:
    """The file name of one rank's part of a table split by rank."""
    return f"{RANK_PART_PREFIX}{rank}.parquet"
