"""CPU seconds and memory of a rank's analysis passes, two source trees alternating.

Each run is a fresh child interpreter importing ``perfledger`` from one tree
(``PYTHONPATH=<tree>/src``) that imports TRACE as ``perfledger analyze`` does for one large
trace (``load_kineto`` inside ``returning_pool``), then runs what the rank task runs before
its replay: ``analyze_rank``, ``profile_of_rank``, and the collectives, link and copy tables
(``collective_tasks``, ``link_usage``, ``copy_spellings``). Per run: the CPU seconds of each
(``process_time``: all the process's threads) and the wall seconds of the first two, the
highest RSS sampled while they ran and the RSS once they are done (freed memory handed back),
both less the RSS right after the import, and a digest of their results (step windows, quality
checks, communication split, accounts, gaps and the tables): the script fails when the trees'
digests differ.

Usage: python bench/rank_passes.py TRACE BEFORE_TREE AFTER_TREE [--rounds 2] [--workers 2]
(make the trees with ``git archive <commit> | tar -x -C <dir>``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

_CHILD = r"""
import gc, hashlib, json, sys, threading, time
from pathlib import Path
import numpy as np
import pyarrow as pa
from perfledger.analysis.cluster.collectives import collective_tasks, link_usage
from perfledger.analysis.profile import analyze_rank, profile_of_rank
from perfledger.analysis.transfers import copy_spellings
from perfledger.memory import release_freed_memory, returning_pool
from perfledger.sources.kineto import load_kineto


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


def table_digest(digest, table):
    sink = pa.BufferOutputStream()
    table = table.combine_chunks()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest.update(sink.getvalue().to_pybytes())


def main():
    with returning_pool():
        trace = load_kineto(Path(sys.argv[1]), workers=int(sys.argv[2]))
        gc.collect()
        release_freed_memory()
        base = rss()
        peak = [base]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss())
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        figures = {}
        cpu, wall = time.process_time(), time.perf_counter()
        rank = analyze_rank(trace)
        figures["analyze_rank_s"] = time.process_time() - cpu
        figures["analyze_rank_wall_s"] = time.perf_counter() - wall
        cpu, wall = time.process_time(), time.perf_counter()
        profile = profile_of_rank(rank)
        figures["profile_of_rank_s"] = time.process_time() - cpu
        figures["profile_of_rank_wall_s"] = time.perf_counter() - wall
        cpu = time.process_time()
        tables = [collective_tasks(profile.events), link_usage(profile.events)]
        tables.append(copy_spellings(profile.events))
        figures["collectives_links_copies_s"] = time.process_time() - cpu
        stop.set()
        sampler.join()
        del trace
        gc.collect()
        release_freed_memory()
        figures["passes_s"] = sum(v for k, v in figures.items() if k.endswith("_s"))
        figures["passes_peak_mb"] = peak[0] - base
        figures["held_after_mb"] = rss() - base
        digest = hashlib.sha256()
        digest.update(repr((rank.windows, rank.quality, rank.accounting.windows)).encode())
        split = rank.comm
        for array in (split.rows, split.wait_ns, split.bytes, split.group_size):
            digest.update(np.ascontiguousarray(array).tobytes())
        worst = profile.gap_report.worst.to_pylist()
        digest.update(repr((split.source, split.collective, worst)).encode())
        for table in (rank.events, profile.gaps, profile.transfers, profile.communication, *tables):
            table_digest(digest, table)
        figures["digest"] = digest.hexdigest()
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
"""

_FIGURES = (
    "analyze_rank_s",
    "analyze_rank_wall_s",
    "profile_of_rank_s",
    "profile_of_rank_wall_s",
    "collectives_links_copies_s",
    "passes_s",
    "passes_peak_mb",
    "held_after_mb",
)


def _run(tree: Path, trace: Path, workers: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(trace), str(workers)],
        env=env,
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        raise SystemExit(f"{tree}: the passes failed: {child.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
        for name in order:
            figures = _run(trees[name], args.trace, args.workers)
            runs[name].append(figures)
            print(name, json.dumps(figures), file=sys.stderr, flush=True)
    medians = {
        name: {f: round(statistics.median(r[f] for r in rows), 3) for f in _FIGURES}
        for name, rows in runs.items()
    }
    digests = {r["digest"] for rows in runs.values() for r in rows}
    ratios = {
        f: round(medians["before"][f] / medians["after"][f], 2)
        for f in _FIGURES
        if medians["after"][f] > 0
    }
    print(json.dumps({"same_results": len(digests) == 1, "medians": medians, "ratios": ratios}))
    if len(digests) != 1:
        raise SystemExit("the trees' results differ")


if __name__ == "__main__":
    main()
