"""Import of one large Kineto trace in one process against import by worker processes, same run.

Each mode runs in a fresh child interpreter (``load_kineto(path, workers=N)`` only: no analysis,
no output), one after the other on the same cached file, ``--rounds`` times in alternating
order. Prints per mode the median wall time of the import; the CPU seconds of the importing
process during the import (interpreter start and imports left out), of which ``layout`` is the
final sort and layout of the table (one process whatever the workers), and of the workers
(their start included); the peak RSS of the importing process and of the largest worker
(``ru_maxrss``). The trace is ``make_trace.py``'s (default: the 486 MB bench trace).

Usage: python bench/import_workers.py [--size-mb 500] [--workers 0 2] [--rounds 3] [--gzip]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_WORKDIR, mb  # noqa: E402
from make_trace import DEFAULT_SOURCE, make_scaled_trace  # noqa: E402

_CHILD = """
import json, resource, sys, time
from pathlib import Path
from perfledger.sources import kineto

def cpu():
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime

if __name__ == "__main__":
    layout = []
    lay_out = kineto._events_table

    def timed(*args, **kwargs):
        began = cpu()
        try:
            return lay_out(*args, **kwargs)
        finally:
            layout.append(cpu() - began)

    kineto._events_table = timed  # the final sort and layout, in the importing process
    before = cpu()
    start = time.perf_counter()
    trace = kineto.load_kineto(Path(sys.argv[1]), workers=int(sys.argv[2]))
    wall = time.perf_counter() - start
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({
        "wall_s": wall,
        "events": trace.events.num_rows,
        "cpu_s": cpu() - before,
        "layout_cpu_s": sum(layout),
        "workers_cpu_s": kids.ru_utime + kids.ru_stime,
        "peak_rss_mb": me.ru_maxrss / 1024,
        "worker_peak_rss_mb": kids.ru_maxrss / 1024,
    }))
"""


def _run(trace: Path, workers: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(trace), str(workers)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the import with {workers} workers failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line of the import benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=500.0, help="target raw JSON size")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gzip", action="store_true", help="time a .json.gz trace")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args(argv)
    trace = make_scaled_trace(
        args.workdir, source=DEFAULT_SOURCE, size_mb=args.size_mb, compress=args.gzip
    )
    print(f"trace {trace.path} ({mb(trace.raw_bytes):.1f} MB raw, {trace.events} events)")
    runs: dict[int, list[dict[str, Any]]] = {w: [] for w in args.workers}
    for round_index in range(args.rounds):
        order = args.workers if round_index % 2 == 0 else args.workers[::-1]
        for workers in order:
            runs[workers].append(_run(trace.path, workers))
    counts = {r["events"] for rs in runs.values() for r in rs}
    if len(counts) != 1:
        raise SystemExit(f"the modes imported different event counts: {sorted(counts)}")
    print(
        f"{'workers':>8}{'wall s':>9}{'MB/s':>8}{'CPU s':>8}{'layout':>8}{'workers CPU s':>15}"
        f"{'RSS MB':>9}{'worker RSS MB':>15}"
    )
    summary: dict[str, Any] = {"trace": str(trace.path), "raw_mb": mb(trace.raw_bytes)}
    for workers, results in runs.items():
        row = {
            key: statistics.median(r[key] for r in results)
            for key in (
                "wall_s",
                "cpu_s",
                "layout_cpu_s",
                "workers_cpu_s",
                "peak_rss_mb",
                "worker_peak_rss_mb",
            )
        }
        summary[f"workers_{workers}"] = {**row, "runs": results}
        print(
            f"{workers:>8}{row['wall_s']:>9.2f}{mb(trace.raw_bytes) / row['wall_s']:>8.0f}"
            f"{row['cpu_s']:>8.2f}{row['layout_cpu_s']:>8.2f}{row['workers_cpu_s']:>15.2f}"
            f"{row['peak_rss_mb']:>9.0f}{row['worker_peak_rss_mb']:>15.0f}"
        )
    out = args.workdir / f"import_workers_result{'_gz' if args.gzip else ''}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
