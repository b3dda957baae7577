"""The steps the report embeds (median, slowest, fastest, those of findings) and the step
timeline of each: host threads above the device streams, idle gaps on a row of their device."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from perfledger.analysis.figures import REPRESENTATIVE_STEPS, representative_steps, step_hulls
from perfledger.model import schema, vendors
from perfledger.render.report.budgets import TIMELINE_PATH_RANKS, PayloadLimits
from perfledger.render.report.data import ReportData
from perfledger.render.report.rows import Int64Array, PreparedRows, Span, distinct_rows
from perfledger.render.report.tables import cut
from perfledger.render.report.values import finite, jsonable, number

if TYPE_CHECKING:
    from perfledger.model.whatif import PathSpan

# The phases of a host-only step's main thread, coloured apart on its timeline (code 0: none).
HOST_PHASES = ("", "forward", "backward", "optimizer", "dataloader")


def step_choices(data: ReportData) -> list[dict[str, Any]]:
    """Every step (hull of its windows over ranks), labelled median / slowest / fastest."""
    return step_choices_of(step_hulls(data.windows, data.events))


def step_choices_of(hulls: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Every step of ``(step, start_ns, end_ns)`` hulls, labelled median / slowest /
    fastest."""
    steps: list[dict[str, Any]] = [
        {"step": s, "start_ns": lo, "end_ns": hi, "wall_ms": (hi - lo) / 1e6, "labels": []}
        for s, lo, hi in hulls
    ]
    by_step = {s["step"]: s for s in steps}
    chosen = representative_steps([s for s, _, _ in hulls], [hi - lo for _, lo, hi in hulls])
    for label, step in chosen.items():
        by_step[step]["labels"].append(label)
    return steps


def step_marks(steps: list[dict[str, Any]], origin_ns: int | None, limit: int) -> list[list[float]]:
    """``[step, start_s, end_s]`` of every profiled step from the profile start (the
    counters' time axis); evenly spaced steps when there are more than ``limit``."""
    if origin_ns is None or not steps:
        return []
    picked = steps
    if len(steps) > limit:
        at = np.linspace(0, len(steps) - 1, limit).round().astype(np.int64)
        picked = [steps[i] for i in sorted(set(at.tolist()))]
    return [
        [
            s["step"],
            round((s["start_ns"] - origin_ns) / 1e9, 6),
            round((s["end_ns"] - origin_ns) / 1e9, 6),
        ]
        for s in picked
    ]


def timeline_steps(
    steps: list[dict[str, Any]], findings: list[dict[str, Any]], limit: int
) -> list[int]:
    """Which steps the report embeds: median first, slowest, fastest, those of findings."""
    chosen: list[int] = []
    for label in REPRESENTATIVE_STEPS:
        chosen += [i for i, s in enumerate(steps) if label in s["labels"] and i not in chosen]
    index = {s["step"]: i for i, s in enumerate(steps)}
    for f in findings:
        for target in f["targets"]:
            i = index.get(target["step"])
            if i is not None and i not in chosen:
                chosen.append(i)
    for i in range(len(steps)):  # then the first steps, while the budget lasts
        if i not in chosen:
            chosen.append(i)
    return chosen[:limit]


def timeline_spans(data: ReportData, limits: PayloadLimits) -> list[Span]:
    """The hulls [start_ns, end_ns) of the steps whose timelines the payload embeds."""
    steps = step_choices(data)
    findings = [report_finding(f, steps) for f in data.findings]
    chosen = timeline_steps(steps, findings, limits.timeline_steps)
    return [(int(steps[k]["start_ns"]), int(steps[k]["end_ns"])) for k in chosen]


def report_finding(finding: Mapping[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """A finding as the page shows it, with one "show on timeline" link per step it spans."""
    targets: list[dict[str, Any]] = []
    for span in finding.get("spans") or ():
        try:
            lo, hi = int(span["start_ns"]), int(span["end_ns"])
        except (KeyError, TypeError, ValueError):
            continue
        home = next((s for s in steps if s["start_ns"] <= lo < s["end_ns"]), None)
        if home is None:
            home = next((s for s in steps if lo < s["end_ns"] and hi > s["start_ns"]), None)
        if home is not None and all(t["step"] != home["step"] for t in targets):
            # one link per step: the first (most severe) span of the finding in it
            targets.append(
                {
                    "step": home["step"],
                    "start_us": (lo - home["start_ns"]) / 1e3,
                    "end_us": (hi - home["start_ns"]) / 1e3,
                }
            )
    return {
        "id": str(finding.get("id", "")),
        "title": str(finding.get("title", "")),
        "severity_ms": number(finding.get("severity_ms")),
        "severity_pct": number(finding.get("severity_pct")),
        "whatif_ms": number(finding.get("whatif_ms")),
        "evidence": finite(jsonable(finding.get("evidence"))),
        "suggestion": finite(jsonable(finding.get("suggestion"))),
        "verify": finite(jsonable(finding.get("verify"))),
        "targets": targets,
    }


def step_timeline(
    p: PreparedRows,
    step: dict[str, Any],
    limit: int,
    path: Sequence[tuple[int, PathSpan]] = (),
    chars: int = 300,
) -> dict[str, Any]:
    """Host threads above the device streams, one step; gaps on a row of their device; each
    rank's critical path (``path``: (rank, span) of the step) on a row above its threads."""
    lo, hi = int(step["start_ns"]), int(step["end_ns"])
    rows_in = np.flatnonzero((p.start < hi) & (p.start + p.dur > lo))
    total = p.events_total[(lo, hi)]
    if rows_in.size > limit:
        # the longest events: the short ones are below a pixel at step scale anyway
        keep = np.argsort(-p.dur[rows_in], kind="stable")[:limit]
        rows_in = np.sort(rows_in[keep])
    rank = p.rank[rows_in]
    device = p.device[rows_in]
    stream = p.stream[rows_in]
    pid = p.pid[rows_in]
    start = p.start[rows_in]
    dur = p.dur[rows_in]
    g_rows = np.flatnonzero((p.gap_start < hi) & (p.gap_end > lo))
    if g_rows.size > limit:  # many ranks: the longest gaps, as for the events
        keep = np.argsort(p.gap_start[g_rows] - p.gap_end[g_rows], kind="stable")[:limit]
        g_rows = np.sort(g_rows[keep])
    g_rank = p.gap_rank[g_rows]
    g_device = p.gap_device[g_rows]

    # rows: host threads first (the one holding the step marks first), then per device a row
    # of idle gaps above its streams
    host = device < 0
    is_step = p.kind[rows_in] == p.step_kind
    row_keys: dict[tuple[int, ...], str] = {}
    threads = distinct_rows(rank[host], pid[host], stream[host])
    several_pids = len({(r, q) for r, q, _t in threads}) > len({r for r, _q, _t in threads})
    for r, q, t in threads:
        main = 0 if is_step[host & (rank == r) & (pid == q) & (stream == t)].any() else 1
        where = f"rank {r} pid {q}" if several_pids else f"rank {r}"
        row_keys[(r, 0, main, q, t)] = f"{where} {'thread' if main else 'main thread'} {t}"
    devices = sorted(
        set(distinct_rows(rank[~host], device[~host])) | set(distinct_rows(g_rank, g_device))
    )
    path_ranks = sorted({r for r, _span in path})
    path_ranks_total = len(path_ranks)
    if len(path_ranks) > TIMELINE_PATH_RANKS:  # many ranks: the paths of the first ones
        path_ranks = path_ranks[:TIMELINE_PATH_RANKS]
        path = [(r, span) for r, span in path if r <= path_ranks[-1]]
    for r in path_ranks:
        row_keys[(r, -1, 0, 0, 0)] = f"rank {r} critical path"
    for r, d in devices:
        row_keys[(r, 1, d, -1, -1)] = f"rank {r} device {d} idle"
        for (t,) in distinct_rows(stream[~host & (rank == r) & (device == d)]):
            row_keys[(r, 1, d, 0, t)] = f"rank {r} device {d} stream {t}"
    ordered = sorted(row_keys)
    row = np.zeros(rows_in.size, dtype=np.int64)
    g_row = np.zeros(g_rows.size, dtype=np.int64)
    band_end = np.zeros(g_rows.size, dtype=np.int64)
    for i, (r, cat, a, b, c) in enumerate(ordered):
        if cat < 0:
            continue  # the critical path's row: its spans are laid out below
        if cat == 0:
            row[host & (rank == r) & (pid == b) & (stream == c)] = i
        elif b == -1:
            g_row[(g_rank == r) & (g_device == a)] = i
        else:
            row[~host & (rank == r) & (device == a) & (stream == c)] = i
            # a gap's band spans its device's rows, down to the last stream
            band_end[(g_rank == r) & (g_device == a)] = i
    depth = _nesting_depth(row, start, start + dur)
    g_start = p.gap_start[g_rows]
    phase = np.zeros(rows_in.size + g_rows.size, dtype=np.int64)
    if rows_in.size and host.all():  # a host-only step: its main thread's phases
        on_main = np.zeros(rows_in.size, dtype=bool)
        for r, _cat, main, q, t in ordered:  # a loop over rows
            if main == 0:
                on_main |= (rank == r) & (pid == q) & (stream == t)
        # calls that reach outside the step (the script's outer Python frames) have no phase
        inside = (start >= lo) & (start + dur <= hi)
        phase[: rows_in.size] = _host_phases(p, rows_in, on_main & ~is_step & inside)
    return {
        "step": step["step"],
        "start_ns": lo,
        "wall_us": (hi - lo) / 1e3,
        "rows": [row_keys[k] for k in ordered],
        "row_is_gap": [k[1] == 1 and k[3] == -1 for k in ordered],
        "row_is_device": [k[1] == 1 for k in ordered],
        "row": np.concatenate([row, g_row]).tolist(),
        "start_us": np.round((np.concatenate([start, g_start]) - lo) / 1e3, 3).tolist(),
        "dur_us": np.round(np.concatenate([dur, p.gap_end[g_rows] - g_start]) / 1e3, 3).tolist(),
        "depth": np.concatenate([depth, np.zeros(g_rows.size, np.int64)]).tolist(),
        # codes into the profile's names and kinds, renumbered once all steps are chosen
        "name": np.concatenate([p.name[rows_in], p.gap_label[g_rows]]),
        "kind": np.concatenate([p.kind[rows_in], p.gap_kind[g_rows]]),
        "gap_band_end": band_end.tolist(),
        "row_is_path": [k[1] < 0 for k in ordered],
        "path": _path_rows(path, {k[0]: i for i, k in enumerate(ordered) if k[1] < 0}, lo, chars),
        "path_ranks_total": path_ranks_total,
        # codes into HOST_PHASES, all 0 where the step has device work
        "phase": phase.tolist() if phase.any() else None,
        "events_total": total,
        "events_shown": int(rows_in.size),
    }


def _path_rows(
    path: Sequence[tuple[int, PathSpan]], rows: dict[int, int], lo: int, chars: int
) -> dict[str, Any] | None:
    """The critical path's spans of a step as the timeline draws them: row, start and
    duration (µs from the step start), class (code into ``categories``), label and lane."""
    if not path:
        return None
    categories = sorted({span.category for _r, span in path})
    at = {c: i for i, c in enumerate(categories)}
    # labels and lanes repeat (a kernel on every step, "thread 7"): each written once
    texts = sorted({cut(span.shown, chars) for _r, span in path} | {span.lane for _r, span in path})
    text_at = {t: i for i, t in enumerate(texts)}
    return {
        "categories": categories,
        "texts": texts,
        "row": [rows[r] for r, _span in path],
        "start_us": [round((span.start_ns - lo) / 1e3, 3) for _r, span in path],
        "dur_us": [round((span.end_ns - span.start_ns) / 1e3, 3) for _r, span in path],
        "category": [at[span.category] for _r, span in path],
        "label": [text_at[cut(span.shown, chars)] for _r, span in path],
        "lane": [text_at[span.lane] for _r, span in path],
    }


def _host_phases(p: PreparedRows, rows: Int64Array, on_main: npt.NDArray[np.bool_]) -> Int64Array:
    """The phase (code into HOST_PHASES) of each event of a host-only step, as the host
    accounting splits the main thread (:func:`perfledger.analysis.accounting`): data loading,
    the optimizer's calls and what runs inside them, the backward phase (from the step's first
    to its last autograd operator), and forward for the other work of the main thread."""
    start, end = p.start[rows], p.start[rows] + p.dur[rows]
    codes, at = np.unique(p.name[rows], return_inverse=True)
    names = [p.labels[int(c)] for c in codes]  # a loop over the step's distinct names
    optimizer_name = np.array([n.startswith(vendors.OPTIMIZER_PREFIXES) for n in names])[at]
    backward_name = np.array([n.startswith(vendors.BACKWARD_PREFIXES) for n in names])[at]
    kind = np.array(p.kinds, dtype=object)[p.kind[rows]]
    loader = on_main & (kind == schema.DATALOADER)
    optimizer = on_main & optimizer_name
    backward = on_main & backward_name & (kind == schema.CPU_OP)
    phase = np.where(on_main, HOST_PHASES.index("forward"), 0)
    if backward.any():
        lo, hi = start[backward].min(), end[backward].max()
        phase[on_main & (start >= lo) & (end <= hi)] = HOST_PHASES.index("backward")
    for sel, name in ((optimizer, "optimizer"), (loader, "dataloader")):
        phase[on_main & _inside(start, end, start[sel], end[sel])] = HOST_PHASES.index(name)
    return phase


def _inside(
    start: Int64Array, end: Int64Array, span_start: Int64Array, span_end: Int64Array
) -> npt.NDArray[np.bool_]:
    """Whether each interval lies inside one of the spans (the union of the spans)."""
    if span_start.size == 0:
        return np.zeros(start.size, dtype=bool)
    order = np.argsort(span_start, kind="stable")
    lo, hi = span_start[order], np.maximum.accumulate(span_end[order])
    at = np.searchsorted(lo, start, side="right") - 1
    return (at >= 0) & (end <= hi[np.maximum(at, 0)])


def _nesting_depth(group: Int64Array, start: Int64Array, end: Int64Array) -> Int64Array:
    """Nesting depth of each interval inside its group (0: outermost), for drawing only."""
    depth = np.zeros(start.size, dtype=np.int64)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        order = rows[np.lexsort((-(end[rows] - start[rows]), start[rows]))]
        s = start[order]
        closed = np.searchsorted(np.sort(end[order]), s, side="right")
        depth[order] = np.arange(order.size) - closed
    return np.clip(depth, 0, 7)
