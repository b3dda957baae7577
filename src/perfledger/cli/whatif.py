"""``perfledger whatif PROFILE [--scale SELECTOR=FACTOR ...] [--no-sync] [--drop-sync GLOB ...]
[--overlap-comm] [--no-loader] [--apply-finding RULE ...]``: how long would each step take if
part of the work were faster?

Replays the step graph of a stored profile (docs/whatif.md) unchanged and under the change
asked for, and prints per step the measured, replayed and predicted time and the critical path
of the prediction; ``--json`` prints the same as one JSON document on stdout.
``--apply-finding RULE`` replays the very change the advisor replayed for that rule's finding
(stored in tables/whatif_fixes.parquet), so its gain per step is the finding's ``whatif_ms``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.cluster.arrivals import clock_of
from perfledger.analysis.comm_split import stored_comm_waits
from perfledger.analysis.critical_path import replay_profile
from perfledger.analysis.whatif_changes import sync_calls_matching
from perfledger.errors import PerfledgerError
from perfledger.model import schema, whatif
from perfledger.model.whatif import (
    ReplayReport,
    Scale,
    WhatIf,
    fixes_from_table,
    step_gains,
    together,
    with_change,
)
from perfledger.profiledir import load_profile
from perfledger.profiledir.layout import EVENTS_TABLE, TABLES_DIR, WHATIF_FIXES_TABLE
from perfledger.profiledir.reader import StoredProfile


def add_parser(subparsers: Any) -> None:
    """Register the ``whatif`` subcommand."""
    parser = subparsers.add_parser(
        "whatif",
        help="predict the step time if part of the work were faster",
        description=(
            "Replay the step graph of a profile (host threads, launches, device streams, "
            "synchronisations) with some work made faster, and print the measured, replayed "
            "and predicted time of each step and what the predicted step is bound by."
        ),
        epilog=(
            "The advisor's fixes: --apply-finding RULE replays exactly the change behind a "
            "finding's whatif_ms. By hand (every rank, default thresholds): "
            "host_dispatch_bound --scale launch=0.5, small_op_explosion --scale launch=0.1, "
            "exposed_communication --overlap-comm, dataloader_bound --no-loader, "
            "excessive_sync --drop-sync GLOB or --no-sync; fusion_candidates and memcpy_heavy "
            "only with --apply-finding (docs/whatif.md)."
        ),
    )
    parser.add_argument("profile", type=Path, help="profile directory")
    parser.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="SELECTOR=FACTOR",
        help="multiply durations by FACTOR (> 0; 0.5: twice as fast); SELECTOR is compute, "
        "communication, memcpy, host, launch (launch calls, latency and dispatch) or "
        "kernel:GLOB (a kernel or operator name pattern); may be given several times",
    )
    parser.add_argument(
        "--no-sync", action="store_true", help="remove the host's waits for the device"
    )
    parser.add_argument(
        "--drop-sync",
        action="append",
        default=[],
        metavar="GLOB",
        help="remove the waits of the synchronisation calls whose name, or the name of a host "
        "operator around them, matches GLOB (e.g. 'aten::item', 'cudaStreamSynchronize'); "
        "may be given several times",
    )
    parser.add_argument(
        "--overlap-comm",
        action="store_true",
        help="let collectives run beside the compute of their stream",
    )
    parser.add_argument(
        "--no-loader",
        action="store_true",
        help="remove the data loader's host time (the next batch is ready when asked for)",
    )
    parser.add_argument(
        "--apply-finding",
        action="append",
        default=[],
        metavar="RULE",
        help="apply the change the advisor replayed for this rule's finding in the profile "
        "(its gain per step is the finding's whatif_ms); several combine as the advisor's "
        "whatif_combined does; the other changes add to them",
    )
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")
    parser.set_defaults(run=run)


def parse_scale(text: str) -> Scale:
    """``"compute=0.5"`` as a :class:`Scale`; a one-line error for anything else."""
    selector, sep, value = text.partition("=")
    selector = selector.strip()
    if not sep:
        raise PerfledgerError(f"--scale {text}: expected SELECTOR=FACTOR, e.g. compute=0.5")
    known = selector in whatif.SELECTORS or (
        selector.startswith(whatif.KERNEL_PREFIX) and len(selector) > len(whatif.KERNEL_PREFIX)
    )
    if not known:
        raise PerfledgerError(
            f"--scale {text}: unknown selector {selector!r} (one of "
            f"{', '.join(whatif.SELECTORS)}, kernel:GLOB)"
        )
    try:
        factor = float(value)
    except ValueError:
        raise PerfledgerError(f"--scale {text}: the factor is not a number") from None
    if not math.isfinite(factor) or factor <= 0:
        raise PerfledgerError(f"--scale {text}: the factor must be a number above 0")
    return Scale(selector, factor)


def run(args: argparse.Namespace) -> int:
    try:
        scales = tuple(parse_scale(s) for s in args.scale)
    except PerfledgerError as error:
        raise PerfledgerError(f"{args.profile}: {error}") from None
    for pattern in args.drop_sync:
        if not pattern.strip():
            raise PerfledgerError(f"{args.profile}: --drop-sync: an empty name pattern")
    change = WhatIf(
        scales=scales,
        no_sync=args.no_sync,
        overlap_comm=args.overlap_comm,
        no_dataloader=args.no_loader,
    )
    profile = load_profile(args.profile)
    # a finding named twice is applied once (its task factors would compound)
    rules = list(dict.fromkeys(args.apply_finding))
    fixes = finding_fixes(profile, rules)
    events = schema.conform_events(replay_events(profile))
    by_rank = rank_changes(args.profile, events, change, args.drop_sync, fixes)
    ranks_meta = profile.meta.get("ranks")
    metas = ranks_meta if isinstance(ranks_meta, dict) else {}
    waits = stored_comm_waits(events, metas)
    clocks = {
        int(rank): clock
        for rank, meta in metas.items()
        if isinstance(meta, dict) and str(rank).isdigit() and (clock := clock_of(meta))
    }
    report = replay_profile(events, change, by_rank, comm_wait=waits, clocks=clocks)
    if not report.steps:
        raise PerfledgerError(f"{args.profile}: the profile has no step to replay")
    if args.json:
        print(json.dumps(whatif_document(report), indent=2))
    else:
        print("\n".join(whatif_lines(report, applied_lines(profile, rules))))
    return 0


# The events whose args the replay reads: communication tasks (their message and process
# group: comm_split, the collectives across ranks) and device annotations (a stream's wait on
# an event: the step graph). The other rows' args are left on disk.
REPLAY_ARG_KINDS: Final = (schema.COMM, schema.DEVICE_ANNOTATION)


def replay_events(profile: StoredProfile) -> pa.Table:
    """The profile's events as the replay reads them: every column, the args text only at the
    rows of :data:`REPLAY_ARG_KINDS` (null elsewhere), so that the largest column of a large
    profile is not held in memory."""
    names = [name for name in schema.EVENTS_SCHEMA.names if name != "args"]
    events = profile.read_table(EVENTS_TABLE, columns=names)
    kinds = list(REPLAY_ARG_KINDS)
    texts = profile.read_table(EVENTS_TABLE, columns=["args"], filters=[("kind", "in", kinds)])
    assert events is not None and texts is not None  # required
    rows = np.flatnonzero(columns.isin(events, "kind", kinds))
    if rows.size != texts.num_rows:  # the table changed between the two reads
        raise PerfledgerError(f"{profile.path}: the events table changed while it was read")
    index = np.full(events.num_rows, -1, dtype=np.int64)
    index[rows] = np.arange(rows.size)
    args = texts.column("args").combine_chunks().take(pa.array(index, mask=index < 0))
    return events.append_column("args", args)


def finding_fixes(profile: StoredProfile, rules: Sequence[str]) -> list[dict[int, WhatIf]]:
    """For each of ``rules``, the change the advisor replayed for its finding in ``profile``,
    by rank (tables/whatif_fixes.parquet); a one-line error naming the profile for a rule that
    is not one, has no finding here, or whose finding has no replayed fix."""
    if not rules:
        return []
    from perfledger.analysis.advisor import RULES  # the rules' registry, only when asked

    known = [r.id for r in RULES]
    findings = {str(f.get("id")): f for f in profile.findings}
    for rule in rules:
        if rule not in known:
            raise PerfledgerError(
                f"{profile.path}: --apply-finding {rule}: unknown rule (one of {', '.join(known)})"
            )
        if rule not in findings:
            raise PerfledgerError(
                f"{profile.path}: --apply-finding {rule}: the profile has no {rule} finding"
            )
        if findings[rule].get("whatif_ms") is None:
            raise PerfledgerError(
                f"{profile.path}: --apply-finding {rule}: its finding has no replayed fix "
                "(whatif_ms is null)"
            )
    table = profile.read_table(WHATIF_FIXES_TABLE, required=False)
    stored = fixes_from_table(_fixes_conformed(profile, table)) if table is not None else {}
    for rule in rules:
        if rule not in stored:
            raise PerfledgerError(
                f"{profile.path}: --apply-finding {rule}: the profile does not store the "
                f"change its finding replayed (tables/{WHATIF_FIXES_TABLE}.parquet; written by "
                "perfledger analyze from this version on): analyze the trace again"
            )
    return [stored[rule] for rule in rules]


def _fixes_conformed(profile: StoredProfile, table: pa.Table) -> pa.Table:
    """The stored fixes as :data:`~perfledger.model.whatif.FIXES_SCHEMA` types them; a
    one-line error naming the file for a table without its columns or types."""
    path = profile.path / TABLES_DIR / f"{WHATIF_FIXES_TABLE}.parquet"
    missing = [f.name for f in whatif.FIXES_SCHEMA if f.name not in table.column_names]
    if missing:
        raise PerfledgerError(f"{path}: not a table of fixes: no column {', '.join(missing)}")
    try:
        return table.select(whatif.FIXES_SCHEMA.names).cast(whatif.FIXES_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        reason = " ".join(str(error).split())
        raise PerfledgerError(f"{path}: not a table of fixes: {reason}") from None


def rank_changes(
    path: Path,
    events: pa.Table,
    change: WhatIf,
    drop_sync: Sequence[str],
    fixes: Sequence[dict[int, WhatIf]],
) -> dict[int, WhatIf] | None:
    """Each rank's own change where one depends on the rank (rows of its events): ``change``
    with the syncs ``drop_sync`` picks and the findings' fixes of that rank, which combine as
    the advisor combines them (:func:`~perfledger.model.whatif.together`); None when no rank
    has one."""
    if not drop_sync and not fixes:
        return None
    by_rank: dict[int, WhatIf] = {}
    found = 0
    for rank in np.unique(columns.int64(events, "rank")).tolist():  # a loop over ranks
        mine = change
        if drop_sync:
            # rows of the rank's own events, as its step graph numbers them
            own = events.filter(pc.equal(events["rank"], rank))
            rows = sync_calls_matching(own, drop_sync)
            found += rows.size
            mine = with_change(mine, WhatIf(unsynced_rows=tuple(rows.tolist())))
        applied = [f[rank] for f in fixes if rank in f]
        if applied:
            mine = with_change(mine, together(applied))
        by_rank[int(rank)] = mine
    if drop_sync and found == 0:
        raise PerfledgerError(
            f"{path}: --drop-sync {' '.join(drop_sync)}: no synchronisation call matches"
        )
    return by_rank


def applied_lines(profile: StoredProfile, rules: Sequence[str]) -> list[str]:
    """What the advisor said the applied findings' fixes gain, to compare with the line above."""
    if not rules:
        return []
    findings = {str(f.get("id")): f for f in profile.findings}
    lines = [
        f"  {rule}: the advisor's whatif_ms {findings[rule]['whatif_ms']} ms" for rule in rules
    ]
    combined = profile.summary.get("whatif_combined")
    if (
        len(set(rules)) > 1
        and isinstance(combined, dict)
        and set(combined.get("findings") or ()) == set(rules)
    ):
        lines.append(f"  together: the advisor's whatif_combined {combined.get('gain_ms')} ms")
    return ["findings applied:", *lines]


def whatif_document(report: ReplayReport) -> dict[str, Any]:
    """The ``--json`` document: every step in ns, and the predicted critical path."""
    return {
        "steps": [
            {
                key: value
                for key, value in step.items()
                if key not in ("bound_by_ns", "bound_by_parts_ns")
            }
            for step in report.to_dict()["steps"]
        ],
        "critical_path": {
            "bound_by_ms": {k: round(v / 1e6, 3) for k, v in report.mean_bound_by_ns().items()},
            "bound_by_parts_ms": whatif.parts_ms(report.mean_bound_by_parts_ns()),
            "top_tasks": [
                {"name": name, "class": klass, "ms": round(ns / 1e6, 3)}
                for name, klass, ns in report.top_path_tasks
            ],
        },
        "replay_error_pct": {
            "median": _round(report.median_error_pct),
            "worst": _round(report.worst_error_pct),
        },
    }


def whatif_lines(report: ReplayReport, notes: Sequence[str] = ()) -> list[str]:
    """The terminal text: a row per step, the gain per step (then ``notes``), then the
    predicted critical path."""
    lines = [
        f"{'rank':>4} {'step':>6} {'measured ms':>12} {'replayed ms':>12} "
        f"{'predicted ms':>13} {'change':>8}"
    ]
    for s in report.steps:
        change = (
            f"{100.0 * (s.predicted_ns - s.baseline_ns) / s.baseline_ns:+.1f}%"
            if s.baseline_ns > 0
            else "-"
        )
        lines.append(
            f"{s.rank:>4} {s.step:>6} {s.measured_ns / 1e6:>12.3f} {s.baseline_ns / 1e6:>12.3f} "
            f"{s.predicted_ns / 1e6:>13.3f} {change:>8}"
        )
    median, worst = report.median_error_pct, report.worst_error_pct
    if median is not None and worst is not None:
        lines.append(f"replay error: median {median:.2f}%, worst {worst:.2f}%")
    gains = step_gains(report)
    lines.append(
        f"gain per step: {gains.gain_ms:.3f} ms (replayed {gains.baseline_ms:.3f} ms, "
        f"predicted {gains.predicted_ms:.3f} ms, over {gains.steps} steps; a rank predicted "
        "slower counts as no gain)"
    )
    lines.extend(notes)
    bound = report.mean_bound_by_ns()
    split = report.mean_bound_by_parts_ns()
    total = sum(bound.values())
    if total > 0:
        parts = ", ".join(
            f"{k} {v / 1e6:.3f} ms ({100.0 * v / total:.0f}%{_waited(split.get(k))})"
            for k, v in bound.items()
        )
        lines.append(f"critical path per step: {parts}")
    for name, klass, ns in report.top_path_tasks:
        lines.append(f"  on the path: {ns / 1e6:10.3f} ms  {klass:<22} {name[:80]}")
    return lines


def _waited(parts: dict[str, int] | None) -> str:
    """What of a class's entry waited for peers (communication's), where any did."""
    waited = (parts or {}).get(whatif.WAIT, 0)
    return f"; waiting for peers {waited / 1e6:.3f} ms" if waited > 0 else ""


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
