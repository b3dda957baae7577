"""The quality report of a profile: what was odd in its traces, what was repaired, and how far
its headline figures can be trusted (docs/accounting.md, "Trace quality", lists every check).

A check either repaired the data (and counts what it changed) or flags figures it makes
doubtful. Confidence is ``high`` when nothing affecting a headline figure was repaired or is
doubtful, ``medium`` when such data was repaired, ``low`` when a headline figure rests on
doubtful data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

# What a check can affect: the headline figures, then the rest.
STEP_TIME: Final = "step_time"
UTILIZATION: Final = "utilization"
TIME_ACCOUNT: Final = "time_account"  # the categories and idle causes of step_trace
OPERATORS: Final = "operators"
COMMUNICATION: Final = "communication"
TIMELINE: Final = "timeline"
WHATIF: Final = "whatif"  # the replayed steps, critical paths and what-if predictions
PROFILER_OVERHEAD: Final = "profiler_overhead"  # a recording's estimate of its own cost
HEADLINE_FIGURES: Final = frozenset({STEP_TIME, UTILIZATION, TIME_ACCOUNT})

# The checks (docs/accounting.md, "Trace quality", says what each finds and does).
NEGATIVE_DURATIONS: Final = "negative_durations"
UNREADABLE_EVENTS: Final = "unreadable_events"
DEVICE_TIME_UNIT: Final = "device_time_unit"
OUTLYING_EVENTS: Final = "outlying_events"
CLOCK_DOMAINS: Final = "clock_domains"
DUPLICATE_STEP_NUMBERS: Final = "duplicate_step_numbers"
OVERLAPPING_STEPS: Final = "overlapping_steps"
WINDOW_BEYOND_DEVICE: Final = "window_beyond_device"
SHARED_CORRELATION: Final = "shared_correlation"
OVERLAPPING_STREAM_TASKS: Final = "overlapping_stream_tasks"
NON_NESTING_SLICES: Final = "non_nesting_slices"
LAUNCHLESS_TASKS: Final = "launchless_tasks"
TASKLESS_LAUNCHES: Final = "taskless_launches"
EMPTY_WINDOWS: Final = "empty_windows"
ZERO_LENGTH_TASKS: Final = "zero_length_tasks"
SKIPPED_RANKS: Final = "skipped_ranks"
RELINKED_TASKS: Final = "relinked_tasks"
INVARIANTS: Final = "invariants"
REPLAY_ERROR: Final = "replay_error"
REPLAYED_ALONE: Final = "replayed_alone"
UNSETTLED_ARRIVALS: Final = "unsettled_arrivals"
WHATIF_BOUNDS: Final = "whatif_bounds"
UNMATCHED_COLLECTIVES: Final = "unmatched_collectives"
UNPROFILED_STEPS: Final = "unprofiled_steps"

HIGH: Final = "high"
MEDIUM: Final = "medium"
LOW: Final = "low"


@dataclass(frozen=True)
class QualityCheck:
    """One finding about the data of a profile.

    Attributes:
        id: the check (docs/accounting.md lists them).
        count: how many items it concerns (events, windows, ...).
        message: one line saying what was found and done, naming the file when it is one's.
        affects: the figures it touches (:data:`HEADLINE_FIGURES` and others).
        repaired: the data was changed (True) or only flagged as doubtful (False).
    """

    id: str
    count: int
    message: str
    affects: tuple[str, ...]
    repaired: bool

    @property
    def headline(self) -> bool:
        """Whether a headline figure is touched."""
        return bool(HEADLINE_FIGURES.intersection(self.affects))

    def to_dict(self) -> dict[str, Any]:
        """summary.json's check object."""
        return {
            "id": self.id,
            "count": self.count,
            "message": self.message,
            "affects": list(self.affects),
            "repaired": self.repaired,
        }


def confidence(checks: Iterable[QualityCheck]) -> str:
    """``high``, ``medium`` or ``low`` (module docstring)."""
    headline = [c for c in checks if c.headline and c.count > 0]
    if any(not c.repaired for c in headline):
        return LOW
    return MEDIUM if headline else HIGH


def quality_document(checks: Iterable[QualityCheck]) -> dict[str, Any]:
    """summary.json's ``quality`` object: the confidence and every check."""
    listed = [c for c in checks if c.count > 0]
    return {"confidence": confidence(listed), "checks": [c.to_dict() for c in listed]}


def merge_checks(checks: Iterable[QualityCheck]) -> tuple[QualityCheck, ...]:
    """Checks of several ranks: one per id and repair kind, counts added, the messages of the
    ranks joined (each names its file), in the order first seen."""
    merged: dict[tuple[str, bool], list[QualityCheck]] = {}
    for check in checks:
        merged.setdefault((check.id, check.repaired), []).append(check)
    result = []
    for (check_id, repaired), group in merged.items():
        messages = list(dict.fromkeys(c.message for c in group))
        affects = tuple(dict.fromkeys(a for c in group for a in c.affects))
        result.append(
            QualityCheck(
                id=check_id,
                count=sum(c.count for c in group),
                message="; ".join(messages),
                affects=affects,
                repaired=repaired,
            )
        )
    return tuple(result)
