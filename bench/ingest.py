"""Ingest benchmark: ``perfledger analyze`` against HTA on a ~500 MB Kineto trace, same run.

Generates (once, cached under --workdir) a scaled copy of a real Kineto trace, then times in
child processes, one after the other on the same file:
  - ``perfledger analyze TRACE -o DIR --force`` (import + accounting + every output file);
  - HTA (HolisticTraceAnalysis 0.5.0, in its own venv with pandas 2.2 / numpy 1.26):
    ``TraceAnalysis(trace_dir=...)`` + ``get_temporal_breakdown()``;
  - a floor: the trace's events decoded by the importer's typed msgspec decoder, one process,
    nothing else (what any importer built on that decoder spends before laying out a column).
Prints wall time, throughput (MB of raw JSON per second), peak RSS (sum over the process tree,
sampled every 50 ms, or the largest single process from wait4 if higher) as a multiple of the
raw JSON size, and the throughput ratio. Targets: ratio >= 20, perfledger peak RSS <= raw size.

Usage: python bench/ingest.py [--size-mb 500] [--gzip] [--workdir bench/out] [--check]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_WORKDIR,
    ChildRun,
    HtaRun,
    ensure_hta_venv,
    hta_trace_dir,
    mb,
    perfledger_argv,
    run_hta,
    run_measured,
)
from make_trace import DEFAULT_SOURCE, ScaledTrace, make_scaled_trace, open_trace  # noqa: E402

TARGET_RATIO = 20.0  # perfledger throughput / HTA throughput
TARGET_RSS_MULTIPLE = 1.0  # perfledger peak RSS / raw JSON size
REPORT_SHARE_LIMIT = 0.10  # report.html written in under 10% of the analyze time


@dataclass(frozen=True)
class ToolFigures:
    """What one tool did on the bench trace."""

    tool: str
    wall_s: float
    mb_per_s: float
    peak_rss_mb: float
    rss_multiple: float  # peak RSS / raw JSON size
    max_single_rss_mb: float


def _figures(tool: str, child: ChildRun, raw_bytes: int) -> ToolFigures:
    return ToolFigures(
        tool=tool,
        wall_s=child.wall_s,
        mb_per_s=mb(raw_bytes) / child.wall_s,
        peak_rss_mb=mb(child.peak_rss),
        rss_multiple=child.peak_rss / raw_bytes,
        max_single_rss_mb=mb(child.max_rss),
    )


def _trace_rank(trace: ScaledTrace) -> int:
    """The rank in the trace's distributedInfo (read from its first lines, as HTA does)."""
    with open_trace(trace.path) as fh:
        head = fh.read(1 << 16).decode("utf-8", errors="replace")
    found = re.search(r'"rank":\s*(\d+)', head)
    return int(found.group(1)) if found else 0


def _perfledger_phases(profile: Path, stdout: str) -> dict[str, float]:
    """Phase timings (seconds) the profile records, if any: meta.json or summary.json."""
    for name in ("meta.json", "summary.json"):
        path = profile / name
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        for key in ("timings", "phases", "timing", "phase_seconds"):
            section = doc.get(key)
            if isinstance(section, dict):
                return {str(k): float(v) for k, v in section.items() if isinstance(v, int | float)}
    # Otherwise lines such as "import 3.2 s" printed by the CLI.
    phases: dict[str, float] = {}
    for line in stdout.splitlines():
        found = re.match(r"\s*([a-z][a-z _/]+?)\s*[:=]?\s+([0-9.]+)\s*s\b", line)
        if found:
            phases[found.group(1).strip()] = float(found.group(2))
    return phases


def _span_row(profile: Path) -> dict[str, str] | None:
    """perfledger's step -1 row of step_trace.csv (the device's whole span), if written."""
    path = profile / "step_trace.csv"
    if not path.exists():
        return None
    with path.open(newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row.get("step") == "-1"]
    return rows[0] if rows else None


def _print_span_check(hta_row: dict[str, Any], span: dict[str, str]) -> None:
    """HTA's temporal breakdown next to perfledger's whole-span row (both µs)."""
    non_compute_ns = sum(
        int(span[column]) for column in ("communication_ns", "memcpy_ns", "memset_ns")
    )
    print(
        "whole span, idle / compute / non-compute µs: "
        f"HTA {hta_row['idle_time(us)']:.0f} / {hta_row['compute_time(us)']:.0f} / "
        f"{hta_row['non_compute_time(us)']:.0f}; perfledger {int(span['idle_ns']) / 1e3:.0f} / "
        f"{int(span['compute_ns']) / 1e3:.0f} / {non_compute_ns / 1e3:.0f}"
    )


# A child that only decodes the trace's events with the importer's typed msgspec decoder (the
# fastest decoder measured for these files, DESIGN.md), one process, nothing kept: a floor for
# any importer written on that decoder, measured in the same run as the two tools.
_DECODE_ONLY = """
import sys
from pathlib import Path
from perfledger.sources.kineto_stream import read_events
result, chunks = read_events(Path(sys.argv[1]))
events = sum(len(chunk.events) for chunk in chunks)
print(events)
"""


def _decode_floor(trace: Path) -> ChildRun:
    child = run_measured([sys.executable, "-c", _DECODE_ONLY, str(trace)])
    if child.returncode != 0:
        raise SystemExit(f"the decode-only run failed: {child.stderr[-2000:]}")
    return child


def _print_table(figures: list[ToolFigures], raw_bytes: int) -> None:
    print(f"\ntrace: {mb(raw_bytes):.1f} MB raw JSON")
    print(f"{'tool':<12}{'wall s':>9}{'MB/s':>9}{'peak RSS MB':>13}{'x raw':>8}{'max 1 proc':>12}")
    for f in figures:
        print(
            f"{f.tool:<12}{f.wall_s:>9.1f}{f.mb_per_s:>9.1f}{f.peak_rss_mb:>13.0f}"
            f"{f.rss_multiple:>8.2f}{f.max_single_rss_mb:>12.0f}"
        )


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Generate the trace, run both tools, print and return the figures."""
    workdir: Path = args.workdir
    t0 = time.perf_counter()
    trace = make_scaled_trace(
        workdir,
        source=args.source,
        size_mb=args.size_mb,
        copies=args.copies,
        compress=args.gzip,
    )
    print(
        f"trace {trace.path} ({trace.copies} copies of {Path(trace.source).name}, "
        f"{trace.events} events, {mb(trace.raw_bytes):.1f} MB raw, "
        f"{mb(trace.file_bytes):.1f} MB on disk) ready in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    result: dict[str, Any] = {"trace": {**asdict(trace), "path": str(trace.path)}}
    figures: list[ToolFigures] = []

    if not args.skip_perfledger:
        profile = workdir / "profile"
        print("running perfledger analyze ...", flush=True)
        child = run_measured(perfledger_argv(trace.path, profile))
        if child.returncode != 0:
            print(child.stdout[-4000:], child.stderr[-4000:], sep="\n", file=sys.stderr)
            raise SystemExit(f"perfledger analyze failed with exit code {child.returncode}")
        pl = _figures("perfledger", child, trace.raw_bytes)
        figures.append(pl)
        phases = _perfledger_phases(profile, child.stdout + child.stderr)
        by_second = [round(mb(rss)) for rss in child.rss_by_second]
        result["perfledger"] = {
            **asdict(pl),
            "phases": phases,
            "rss_mb_by_second": by_second,
            "span_row": _span_row(profile),
        }
        result["perfledger"]["cpu_s"] = child.cpu_s
        print(
            f"perfledger: {pl.wall_s:.1f} s ({child.cpu_s:.1f} s of CPU), "
            f"peak RSS {pl.peak_rss_mb:.0f} MB",
            flush=True,
        )
        print("perfledger RSS MB, largest in each second: " + " ".join(map(str, by_second)))
        if phases:
            print("perfledger phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
            report = next((v for k, v in phases.items() if "report" in k), None)
            if report is not None:
                share = report / pl.wall_s
                verdict = "ok" if share < REPORT_SHARE_LIMIT else "over"
                print(f"report written in {report:.2f} s = {share:.1%} of analyze time ({verdict})")

    if not args.skip_hta:
        python = ensure_hta_venv(workdir)
        folder = hta_trace_dir(trace.path, _trace_rank(trace), workdir)
        print("running HTA TraceAnalysis + get_temporal_breakdown ...", flush=True)
        hta: HtaRun = run_hta(python, folder)
        hf = _figures(f"HTA {hta.hta_version}", hta.child, trace.raw_bytes)
        figures.append(hf)
        result["hta"] = {
            **asdict(hf),
            "phases": {"import": hta.import_s, "parse": hta.parse_s, "breakdown": hta.breakdown_s},
            "temporal_breakdown": hta.temporal_breakdown,
        }
        print(
            f"HTA: {hf.wall_s:.1f} s (import {hta.import_s:.1f}, parse {hta.parse_s:.1f}, "
            f"breakdown {hta.breakdown_s:.1f}), peak RSS {hf.peak_rss_mb:.0f} MB",
            flush=True,
        )

    if not args.skip_perfledger:
        print("running the decode-only floor ...", flush=True)
        floor = _decode_floor(trace.path)
        result["decode_only"] = {
            "wall_s": floor.wall_s,
            "mb_per_s": mb(trace.raw_bytes) / floor.wall_s,
            "peak_rss_mb": mb(floor.peak_rss),
        }
        print(
            f"decode only (typed msgspec, one process, interpreter start included): "
            f"{floor.wall_s:.1f} s, {mb(trace.raw_bytes) / floor.wall_s:.0f} MB/s",
            flush=True,
        )

    _print_table(figures, trace.raw_bytes)
    if "perfledger" in result and "hta" in result:
        ratio = figures[0].mb_per_s / figures[1].mb_per_s
        result["throughput_ratio"] = ratio
        met_ratio = ratio >= TARGET_RATIO
        met_rss = figures[0].rss_multiple <= TARGET_RSS_MULTIPLE
        result["targets_met"] = {"throughput_ratio": met_ratio, "peak_rss": met_rss}
        print(
            f"\nthroughput ratio perfledger/HTA: {ratio:.1f}x "
            f"(target >= {TARGET_RATIO:.0f}x: {'met' if met_ratio else 'MISSED'})"
        )
        print(
            f"perfledger peak RSS {figures[0].rss_multiple:.2f}x raw JSON "
            f"(target <= {TARGET_RSS_MULTIPLE:.1f}x: {'met' if met_rss else 'MISSED'}); "
            f"HTA {figures[1].rss_multiple:.2f}x"
        )
        budget = figures[1].wall_s / TARGET_RATIO
        result["target_wall_s"] = budget
        if "decode_only" in result:
            print(
                f"the ratio target means the whole analyze in {budget:.1f} s; decoding the "
                f"events alone took {result['decode_only']['wall_s']:.1f} s in one process"
            )
        span = result["perfledger"]["span_row"]
        if span is not None and hta.temporal_breakdown:
            _print_span_check(hta.temporal_breakdown[0], span)
    stem = trace.path.name.replace(".json", "").replace(".gz", "_gz")
    out = workdir / f"ingest_result_{stem}.json"
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"figures written to {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line of the ingest benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real trace to scale")
    parser.add_argument("--size-mb", type=float, default=500.0, help="target raw JSON size")
    parser.add_argument("--copies", type=int, default=None, help="copies of the source (overrides)")
    parser.add_argument("--gzip", action="store_true", help="bench a .json.gz trace")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--skip-perfledger", action="store_true")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    result = run_bench(args)
    if args.check and not all(result.get("targets_met", {"ran": False}).values()):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
