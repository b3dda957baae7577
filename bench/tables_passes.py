"""CPU seconds and peak memory of a rank's analysis passes and of the CSV tables' writing, two
source trees alternating, with a digest of everything they make.

Each run is a fresh child interpreter importing ``perfledger`` from one tree
(``PYTHONPATH=<tree>/src``) that imports TRACE as ``perfledger analyze`` does (``load_kineto``
inside ``returning_pool``), then runs what the rank task runs before its replay
(``analyze_rank``; ``copy_spellings``, ``profile_of_rank``, ``collective_tasks``,
``link_usage``) and writes the profile's CSV tables (``csv_tables``, ``write_csv``) into a
temporary folder. Per run: the CPU seconds of each phase (``process_time``), the highest RSS
sampled while the passes ran less the RSS right after the import (``passes_peak_mb``), the
highest RSS while the CSVs were written less the RSS when they began (``csv_peak_mb``), and a
digest of the results (windows, checks, accounts, split, every table and every CSV's bytes):
the script fails when the trees' digests differ.

Usage: python bench/tables_passes.py TRACE BEFORE_TREE AFTER_TREE [--runs 2] [--workers 2]
(make the trees with ``git archive <commit> | tar -x -C <dir>``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_FIGURES = (
    "analyze_rank_s",
    "profile_s",
    "passes_s",
    "csv_s",
    "passes_peak_mb",
    "csv_peak_mb",
)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


class _Peak:
    """The highest RSS sampled every few ms while it runs."""

    def __init__(self) -> None:
        self.high = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.high = max(self.high, _rss_mb())
            time.sleep(0.002)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.high, _rss_mb())


def _child(trace: Path, workers: int) -> None:
    import gc

    import numpy as np
    import pyarrow as pa

    from perfledger.analysis.cluster.collectives import collective_tasks, link_usage
    from perfledger.analysis.profile import analyze_rank, profile_of_rank
    from perfledger.analysis.transfers import copy_spellings
    from perfledger.memory import release_freed_memory, returning_pool
    from perfledger.profiledir.artefacts import csv_tables
    from perfledger.render.csvs import write_csv
    from perfledger.sources.kineto import load_kineto

    digest = hashlib.sha256()

    def table_digest(table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        table = table.combine_chunks()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        digest.update(sink.getvalue().to_pybytes())

    figures: dict[str, Any] = {}
    with returning_pool():
        loaded = load_kineto(trace, workers=workers)
        gc.collect()
        release_freed_memory()
        base = _rss_mb()
        peak = _Peak()
        cpu = time.process_time()
        rank = analyze_rank(loaded)
        figures["analyze_rank_s"] = time.process_time() - cpu
        del loaded
        cpu = time.process_time()
        spellings = copy_spellings(rank.events)
        profile = profile_of_rank(rank, spellings=spellings)
        tables = [collective_tasks(profile.events), link_usage(profile.events), spellings]
        figures["profile_s"] = time.process_time() - cpu
        figures["passes_peak_mb"] = peak.stop() - base
        figures["passes_s"] = figures["analyze_rank_s"] + figures["profile_s"]
        release_freed_memory()
        with tempfile.TemporaryDirectory() as folder:
            began = _rss_mb()
            peak = _Peak()
            cpu = time.process_time()
            for name, table in csv_tables(profile).items():
                write_csv(table, Path(folder) / name)
            figures["csv_s"] = time.process_time() - cpu
            figures["csv_peak_mb"] = peak.stop() - began
            for path in sorted(Path(folder).iterdir()):
                digest.update(path.name.encode() + path.read_bytes())
    accounting = rank.accounting
    digest.update(repr((rank.windows, rank.quality, accounting.windows, accounting.host)).encode())
    split = rank.comm
    if split is not None:
        for array in (split.rows, split.wait_ns, split.bytes, split.group_size):
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(repr((split.source, split.collective)).encode())
    digest.update(repr(profile.gap_report).encode())
    for table in (
        rank.events,
        accounting.gaps,
        profile.gaps,
        profile.transfers,
        profile.communication,
        profile.op_summary,
        profile.kernel_details,
        *tables,
    ):
        table_digest(table)
    figures["digest"] = digest.hexdigest()
    print(json.dumps(figures))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(Path(sys.argv[2]), int(sys.argv[3]))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import alternate_trees

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    trees = [args.before.resolve(), args.after.resolve()]
    results = alternate_trees(
        str(Path(__file__).resolve()),
        trees,
        args.runs,
        ["--child", str(args.trace.resolve()), str(args.workers)],
    )
    before, after = (results[str(t)] for t in trees)
    digests = {r["digest"] for r in before + after}
    if len(digests) != 1:
        raise SystemExit(f"the trees' results differ: {sorted(digests)}")
    print(f"{'figure':<16}{'before':>10}{'after':>10}{'after/before':>14}")
    for figure in _FIGURES:
        old = statistics.median(r[figure] for r in before)
        new = statistics.median(r[figure] for r in after)
        ratio = f"{new / old:.2f}" if old > 0 else "-"
        print(f"{figure:<16}{old:>10.3f}{new:>10.3f}{ratio:>14}")
    print(f"results identical ({len(before) + len(after)} runs): {digests.pop()[:16]}")


if __name__ == "__main__":
    main()
