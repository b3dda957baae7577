"""The Kineto import of one large trace by two source trees, alternating in the same run.

Each run is a fresh child interpreter importing ``perfledger`` from one tree
(``PYTHONPATH=<tree>/src``) that calls ``load_kineto(path, workers=N)`` inside
``returning_pool()``, as ``perfledger analyze`` does for one large trace. Per run: CPU seconds
of the importing process during the import (interpreter start and module imports left out)
and of its worker processes (``RUSAGE_CHILDREN``), the import's wall seconds, the peak RSS
of the importing process (``ru_maxrss``), its RSS right after the import, the events
table's size, and a digest of the events table, the counters table and the meta (they must
be equal across trees: the script fails otherwise).

Usage: python bench/import_trees.py TRACE BEFORE_TREE AFTER_TREE [--workers 2] [--rounds 3]
(make the trees with ``git archive <commit> | tar -x -C <dir>``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

_CHILD = """
import hashlib, json, resource, sys, time
from pathlib import Path
import pyarrow as pa
from perfledger.memory import returning_pool
from perfledger.sources.kineto import load_kineto

def cpu(who):
    use = resource.getrusage(who)
    return use.ru_utime + use.ru_stime

def rss_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

def digest(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue()).hexdigest()[:16]

if __name__ == "__main__":
    self_before = cpu(resource.RUSAGE_SELF)
    kids_before = cpu(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    with returning_pool():
        trace = load_kineto(Path(sys.argv[1]), workers=int(sys.argv[2]))
        wall = time.perf_counter() - wall
        after = rss_mb()
        parent = cpu(resource.RUSAGE_SELF) - self_before
        workers = cpu(resource.RUSAGE_CHILDREN) - kids_before
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        events = trace.events.combine_chunks()
        meta = json.dumps(trace.meta, sort_keys=True, default=str).encode()
        print(json.dumps({
            "wall_s": wall,
            "parent_cpu_s": parent,
            "workers_cpu_s": workers,
            "cpu_s": parent + workers,
            "peak_rss_mb": peak,
            "rss_after_mb": after,
            "table_mb": trace.events.nbytes / 2**20,
            "events": digest(events),
            "counters": digest(trace.counters),
            "meta": hashlib.sha256(meta).hexdigest()[:16],
            "loss": trace.loss,
            "quality": [repr(q) for q in trace.quality],
        }))
"""

_FIGURES = (
    "wall_s",
    "cpu_s",
    "parent_cpu_s",
    "workers_cpu_s",
    "peak_rss_mb",
    "rss_after_mb",
    "table_mb",
)


def _run(tree: Path, trace: Path, workers: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(trace), str(workers)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"the import by {tree} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line of the two-tree import benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    trees = {"before": args.before, "after": args.after}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for round_index in range(args.rounds):
        order = list(trees) if round_index % 2 == 0 else list(trees)[::-1]
        for label in order:
            result = _run(trees[label], args.trace, args.workers)
            runs[label].append(result)
            print(label, json.dumps({k: result[k] for k in _FIGURES}), flush=True)
    identity = ("events", "counters", "meta", "loss", "quality")
    outcomes = {json.dumps([r[k] for k in identity]) for rs in runs.values() for r in rs}
    if len(outcomes) != 1:
        raise SystemExit(f"the trees imported different tables: {sorted(outcomes)}")
    print(f"{'tree':>8}" + "".join(f"{name:>15}" for name in _FIGURES))
    medians = {
        label: {k: statistics.median(r[k] for r in rs) for k in _FIGURES}
        for label, rs in runs.items()
    }
    for label, row in medians.items():
        print(f"{label:>8}" + "".join(f"{row[k]:>15.2f}" for k in _FIGURES))
    # workers_cpu_s is 0 when the import runs in one process (--workers 0)
    ratio = {k: medians["after"][k] / (medians["before"][k] or math.nan) for k in _FIGURES}
    print(f"{'after/before':>8}" + "".join(f"{ratio[k]:>15.3f}" for k in _FIGURES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
