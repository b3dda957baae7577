"""CPU seconds of analyze's first phases, each on its own: the import, the analysis passes and
a whole timeline, against the decode floor measured in the same run.

On a shared machine wall seconds stretch with the other jobs' load; the CPU seconds of one
phase, taken inside one child process, move far less. Each round runs, in child processes:
  - the decode floor (bench/ingest.py's: the events decoded by the importer's typed msgspec
    decoder, one process, nothing kept);
  - the import of TRACE with two worker processes (CPU of the importing process and of its
    workers apart), then the analysis passes on it (``analyze_rank`` and
    ``profile_of_rank``: what ``analyze_s`` of meta.json times);
  - with ``--profile DIR`` (a profile of TRACE), ``perfledger timeline DIR``: the whole
    timeline's formatting and compression (the code that writes the step slices).
Run it once per version of the code (``PYTHONPATH=<tree>/src``), alternating the versions,
and compare the ratios to the floor.

Usage: python bench/passes_cpu.py TRACE [--profile DIR] [--rounds 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_measured  # noqa: E402
from ingest import _decode_floor  # noqa: E402

_PASSES = """
import json, resource, sys, time
from pathlib import Path
from perfledger.analysis.profile import analyze_rank, profile_of_rank
from perfledger.sources.kineto import load_kineto

if __name__ == "__main__":
    began, cpu = time.perf_counter(), time.process_time()
    trace = load_kineto(Path(sys.argv[1]), workers=int(sys.argv[2]))
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = {
        "import_wall_s": time.perf_counter() - began,
        "import_cpu_s": time.process_time() - cpu,
        "import_workers_cpu_s": workers.ru_utime + workers.ru_stime,
    }
    cpu = time.process_time()
    profile_of_rank(analyze_rank(trace))
    figures["analysis_cpu_s"] = time.process_time() - cpu
    print(json.dumps(figures))
"""


def _passes(trace: Path, workers: int) -> dict[str, float]:
    child = run_measured([sys.executable, "-c", _PASSES, str(trace), str(workers)])
    if child.returncode != 0:
        raise SystemExit(f"the import and analysis run failed: {child.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(child.stdout.strip().splitlines()[-1])
    return figures


def _timeline(profile: Path) -> float:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "timeline.json.gz"
        argv = [sys.executable, "-m", "perfledger", "timeline", str(profile), "-o", str(out)]
        child = run_measured(argv)
    if child.returncode != 0:
        raise SystemExit(f"perfledger timeline failed: {child.stderr[-2000:]}")
    return child.cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--profile", type=Path, help="a profile of TRACE: time its timeline")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    for round_ in range(1, args.rounds + 1):
        floor = _decode_floor(args.trace).cpu_s
        figures = _passes(args.trace, args.workers)
        line = (
            f"round {round_}: floor {floor:.2f} s CPU; import {figures['import_wall_s']:.1f} s"
            f" wall, CPU {figures['import_cpu_s']:.2f} here + "
            f"{figures['import_workers_cpu_s']:.2f} workers"
            f" = {(figures['import_cpu_s'] + figures['import_workers_cpu_s']) / floor:.2f}x"
            f" the floor; analysis passes {figures['analysis_cpu_s']:.2f} s CPU"
            f" = {figures['analysis_cpu_s'] / floor:.2f}x"
        )
        if args.profile is not None:
            timeline = _timeline(args.profile)
            line += f"; whole timeline {timeline:.2f} s CPU = {timeline / floor:.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
