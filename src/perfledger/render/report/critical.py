"""The report's critical-path section and the critical-path rows of its step timelines: the
replayed steps' time by class (``bound_by``) and their paths laid on the measured trace, as
the replay computed them (:mod:`perfledger.analysis.critical_path`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perfledger.model.whatif import parts_ms
from perfledger.render.report.budgets import ACCOUNTING_STEPS
from perfledger.render.report.tables import cut
from perfledger.render.report.values import finite, jsonable

if TYPE_CHECKING:
    from perfledger.model.whatif import PathSpan, ReplayReport

# Per step: (rank, span) of every rank's critical path in that step.
StepPaths = Mapping[int, Sequence[tuple[int, "PathSpan"]]]


def critical_path_section(
    replay: ReplayReport | None, summary: Mapping[str, Any], chars: int
) -> dict[str, Any] | None:
    """summary.json's ``critical_path`` (replay error, mean ``bound_by_ms``, top tasks) with
    each replayed step's ``bound_by_ms`` from the replay (the first ACCOUNTING_STEPS steps);
    None when the profile has neither."""
    if not summary and (replay is None or not replay.steps):
        return None
    steps = []
    if replay is not None:
        steps = [
            {
                "rank": s.rank,
                "step": s.step,
                "measured_ms": s.measured_ns / 1e6,
                "replayed_ms": s.baseline_ns / 1e6,
                "bound_by_ms": {k: v / 1e6 for k, v in s.bound_by_ns.items() if v > 0},
                "bound_by_parts_ms": parts_ms(s.bound_by_parts_ns),
                "path_spans": len(s.path_spans),
            }
            for s in replay.steps[:ACCOUNTING_STEPS]
        ]
    top_tasks = [
        {**task, "name": cut(str(task.get("name", "")), chars)}
        for task in summary.get("top_tasks") or ()
        if isinstance(task, Mapping)
    ]
    return {
        "replay_error_pct": finite(jsonable(summary.get("replay_error_pct"))),
        "bound_by_ms": finite(jsonable(summary.get("bound_by_ms") or {})),
        "bound_by_parts_ms": finite(jsonable(summary.get("bound_by_parts_ms") or {})),
        "top_tasks": finite(jsonable(top_tasks)),
        "steps": steps,
        "total_steps": len(replay.steps) if replay is not None else 0,
    }


def step_paths(replay: ReplayReport | None) -> dict[int, list[tuple[int, PathSpan]]]:
    """The critical-path spans of every rank, by step."""
    paths: dict[int, list[tuple[int, PathSpan]]] = {}
    if replay is None:
        return paths
    for s in replay.steps:  # a loop over steps
        paths.setdefault(s.step, []).extend((s.rank, span) for span in s.path_spans)
    return paths
