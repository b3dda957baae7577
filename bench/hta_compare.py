"""Accounting reference check: HTA's temporal breakdown next to perfledger's whole-span rows.

For each trace (default: v100_rank1_ddp and a100_rank3_control from tests/data/kineto)
prints, per rank, idle / compute / non-compute / span in µs from three sources:
  - HTA 0.6.1, precomputed in tests/data/reference/hta-0.6.1/<trace>/temporal_breakdown.csv;
  - HTA 0.5.0, run now in its own venv (a second opinion; --skip-hta to leave it out);
  - perfledger, the ``step = -1`` rows of step_trace.csv written by ``perfledger analyze``.
perfledger's non-compute is its exposed communication + memcpy + memset (HTA: time when only
non-compute kernels run). With --check, exits 1 when perfledger differs from HTA 0.6.1 by more
than 1 µs in any figure.

Usage: python bench/hta_compare.py [--traces NAME ...] [--skip-hta] [--check]
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_WORKDIR,
    TEST_TRACES,
    ensure_hta_venv,
    hta_trace_dir,
    perfledger_argv,
    run_hta,
    run_measured,
)

DEFAULT_TRACES: tuple[str, ...] = ("v100_rank1_ddp", "a100_rank3_control")
REFERENCE_DIR = TEST_TRACES / "reference" / "hta-0.6.1"
TOLERANCE_US = 1.0


@dataclass(frozen=True)
class Breakdown:
    """One rank's whole-span temporal breakdown in µs, from one source."""

    source: str
    rank: int
    idle_us: float
    compute_us: float
    non_compute_us: float
    span_us: float


def from_hta_row(source: str, row: dict[str, Any]) -> Breakdown:
    """A row of HTA's temporal breakdown (CSV or DataFrame record); its kernel_time is the span."""
    return Breakdown(
        source=source,
        rank=int(row["rank"]),
        idle_us=float(row["idle_time(us)"]),
        compute_us=float(row["compute_time(us)"]),
        non_compute_us=float(row["non_compute_time(us)"]),
        span_us=float(row["kernel_time(us)"]),
    )


def from_step_trace_row(source: str, row: dict[str, str]) -> Breakdown:
    """perfledger's step -1 row of step_trace.csv (integer ns) as µs."""
    non_compute_ns = int(row["communication_ns"]) + int(row["memcpy_ns"]) + int(row["memset_ns"])
    return Breakdown(
        source=source,
        rank=int(row["rank"]),
        idle_us=int(row["idle_ns"]) / 1e3,
        compute_us=int(row["compute_ns"]) / 1e3,
        non_compute_us=non_compute_ns / 1e3,
        span_us=int(row["wall_ns"]) / 1e3,
    )


def largest_difference_us(a: Breakdown, b: Breakdown) -> float:
    """Largest absolute difference between two breakdowns over the four figures."""
    return max(
        abs(a.idle_us - b.idle_us),
        abs(a.compute_us - b.compute_us),
        abs(a.non_compute_us - b.non_compute_us),
        abs(a.span_us - b.span_us),
    )


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _reference(trace_name: str) -> list[Breakdown]:
    path = REFERENCE_DIR / trace_name / "temporal_breakdown.csv"
    if not path.exists():
        raise SystemExit(f"reference figures missing: {path}")
    return [from_hta_row("HTA 0.6.1 (reference)", row) for row in _read_csv(path)]


def _perfledger(trace: Path, workdir: Path) -> list[Breakdown]:
    profile = workdir / "compare" / trace.name.removesuffix(".gz").removesuffix(".json")
    child = run_measured(perfledger_argv(trace, profile))
    if child.returncode != 0:
        tail = (child.stderr or child.stdout).strip().splitlines()[-3:]
        print(f"  perfledger analyze failed (exit {child.returncode}): {' | '.join(tail)}")
        return []
    step_trace = profile / "step_trace.csv"
    if not step_trace.exists():
        print(f"  {step_trace} was not written")
        return []
    # Host-only rows (device -1) have their own categories: only device rows compare with HTA.
    return [
        from_step_trace_row(f"perfledger (device {row['device']})", row)
        for row in _read_csv(step_trace)
        if row["step"] == "-1" and row["device"] != "-1"
    ]


def _print_rows(rows: list[Breakdown]) -> None:
    print(f"  {'source':<26}{'rank':>5}{'idle':>13}{'compute':>13}{'non-compute':>13}{'span':>13}")
    for r in rows:
        print(
            f"  {r.source:<26}{r.rank:>5}{r.idle_us:>13.1f}{r.compute_us:>13.1f}"
            f"{r.non_compute_us:>13.1f}{r.span_us:>13.1f}"
        )


def compare_trace(trace_name: str, args: argparse.Namespace) -> bool:
    """Print the three sources for one trace; True when perfledger matches the reference."""
    trace = TEST_TRACES / "kineto" / f"{trace_name}.json.gz"
    if not trace.exists():
        raise SystemExit(f"test trace missing: {trace}")
    print(f"\n{trace_name} (µs)")
    reference = _reference(trace_name)
    rows = list(reference)
    if not args.skip_hta:
        python = ensure_hta_venv(args.workdir)
        hta = run_hta(python, hta_trace_dir(trace, reference[0].rank, args.workdir))
        rows += [from_hta_row(f"HTA {hta.hta_version}", row) for row in hta.temporal_breakdown]
    ours = [] if args.skip_perfledger else _perfledger(trace, args.workdir)
    rows += ours
    _print_rows(rows)
    matched = bool(ours)
    for mine in ours:
        ref = next((r for r in reference if r.rank == mine.rank), None)
        if ref is None:
            print(f"  rank {mine.rank}: no reference row")
            matched = False
            continue
        diff = largest_difference_us(mine, ref)
        verdict = "match" if diff <= TOLERANCE_US else "DIFFER"
        print(f"  rank {mine.rank}: largest difference to HTA 0.6.1 {diff:.1f} µs ({verdict})")
        matched = matched and diff <= TOLERANCE_US
    return matched


def main(argv: list[str] | None = None) -> int:
    """Command line of the reference check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", default=list(DEFAULT_TRACES))
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--skip-hta", action="store_true", help="leave out the HTA 0.5.0 run")
    parser.add_argument("--skip-perfledger", action="store_true")
    parser.add_argument("--check", action="store_true", help="exit 1 unless perfledger matches")
    args = parser.parse_args(argv)
    results = [compare_trace(name, args) for name in args.traces]
    if args.check and not all(results):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
