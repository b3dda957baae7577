"""``perfledger whatif PROFILE [--scale SELECTOR=FACTOR ...] [--no-sync] [--overlap-comm]``:
how long would each step take if part of the work were faster?

Replays the step graph of a stored profile (docs/whatif.md) unchanged and under the change
asked for, and prints per step the measured, replayed and predicted time and the critical path
of the prediction; ``--json`` prints the same as one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from perfledger.analysis.critical_path import replay_profile
from perfledger.errors import PerfledgerError
from perfledger.model import schema, whatif
from perfledger.model.whatif import ReplayReport, Scale, WhatIf
from perfledger.profiledir import load_profile
from perfledger.profiledir.layout import EVENTS_TABLE


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
        "--overlap-comm",
        action="store_true",
        help="let collectives run beside the compute of their stream",
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
    change = WhatIf(
        scales=tuple(parse_scale(s) for s in args.scale),
        no_sync=args.no_sync,
        overlap_comm=args.overlap_comm,
    )
    profile = load_profile(args.profile)
    events = profile.read_table(EVENTS_TABLE)
    assert events is not None  # required
    report = replay_profile(schema.conform_events(events), change)
    if not report.steps:
        raise PerfledgerError(f"{args.profile}: the profile has no step to replay")
    if args.json:
        print(json.dumps(whatif_document(report), indent=2))
    else:
        print("\n".join(whatif_lines(report)))
    return 0


def whatif_document(report: ReplayReport) -> dict[str, Any]:
    """The ``--json`` document: every step in ns, and the predicted critical path."""
    return {
        "steps": [
            {key: value for key, value in step.items() if key != "bound_by_ns"}
            for step in report.to_dict()["steps"]
        ],
        "critical_path": {
            "bound_by_ms": {k: round(v / 1e6, 3) for k, v in report.mean_bound_by_ns().items()},
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


def whatif_lines(report: ReplayReport) -> list[str]:
    """The terminal text: a row per step, then the predicted critical path."""
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
    bound = report.mean_bound_by_ns()
    total = sum(bound.values())
    if total > 0:
        parts = ", ".join(
            f"{k} {v / 1e6:.3f} ms ({100.0 * v / total:.0f}%)" for k, v in bound.items()
        )
        lines.append(f"critical path per step: {parts}")
    for name, klass, ns in report.top_path_tasks:
        lines.append(f"  on the path: {ns / 1e6:10.3f} ms  {klass:<22} {name[:80]}")
    return lines


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
