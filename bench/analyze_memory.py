"""Peak RSS and CPU of a whole ``perfledger analyze``, two source trees alternating.

Each run is a child process per tree (``PYTHONPATH=<tree>/src``, A B B A ...) that times one
``perfledger analyze TRACE`` (its own CPU and its workers', and the largest RSS of any of its
processes, see _common.run_measured). The outputs of every run are hashed file by file
(meta.json and report.html left out: they carry the run's timings and its folder name; a
.gz file by its decompressed bytes, a Parquet file by its table): the script fails when two
runs, of either tree, wrote different bytes.

    python bench/analyze_memory.py TRACE --trees /tmp/before /work/main --runs 2

(TRACE: a trace file, or an export folder such as an Ascend one from make_ascend.py, whose
files' sizes together are the size the peak is compared with.)

prints, per tree, the peak RSS (MB, and as a multiple of the trace's size), the CPU, system
and wall seconds of each run, what the machine did meanwhile (the MB of file pages dirtied and
of huge pages faulted in, from /proc/vmstat: the fresh memory the run took, which its system
time follows; run it on an otherwise quiet machine) and the phases its meta.json records
(``timeline_s``, ``total_s`` ...), and the ratios of the second tree's medians to the first's.
The trace is read through once before each run, outside its timing, so that every run finds
it in the page cache. It also prints the **paired** ratios:
the runs alternate A B B A A B ..., so each tree's i-th run lies next to the other's i-th run,
and the median (and range) of those runs' own ratios follows the machine's drift between the
rounds, which the medians of each tree's runs mix in (on a shared VM the same code's runs took
11.5 to 16.7 s within an hour: bench/README.md, "Growth", 2026-12-06 07:10).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    alternate_trees,
    mb,
    perfledger_argv,
    run_measured,
    system_counters,
    trace_bytes,
    warm,
)

# the phases printed first (the others follow in name order)
_MAIN_PHASES = ("total_s", "import_s", "analysis_s", "replay_s", "advisor_s", "timeline_s")


def _phase_order(name: str) -> tuple[int, str]:
    return (_MAIN_PHASES.index(name) if name in _MAIN_PHASES else len(_MAIN_PHASES), name)


# per-run figures beside CPU and wall: the system seconds, and what the machine did meanwhile
# (pages of files dirtied, huge pages faulted in: the fresh memory the run took)
_COUNTED = (("sys_s", "system s"), ("dirtied_mb", "dirtied MB"), ("huge_mb", "huge pages MB"))

# the files that carry the run itself (timings, peak memory, the folder's name)
UNCOMPARED = frozenset({"meta.json", "report.html"})


def _table_bytes(path: Path) -> bytes:
    """A Parquet file's table (schema, metadata and values) as Arrow IPC stream bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def _digest(out_dir: Path) -> str:
    """One hash of every output file's path and bytes but the UNCOMPARED ones (a .gz file's
    decompressed bytes: versions may deflate the same text with different libraries; a
    Parquet file's table: versions may store the same columns in other encodings)."""
    total = hashlib.sha256()
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        if path.name in UNCOMPARED:
            continue
        total.update(str(path.relative_to(out_dir)).encode())
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        elif path.suffix == ".parquet":
            data = _table_bytes(path)
        total.update(hashlib.sha256(data).digest())
    return total.hexdigest()


def _child(trace: Path) -> None:
    """One analyze of ``trace`` by the tree on PYTHONPATH: a JSON line of its figures."""
    work = Path(tempfile.mkdtemp(prefix="analyze_memory-"))
    try:
        warm(trace)
        counted = system_counters()
        run = run_measured(perfledger_argv(trace, work / "profile"))
        counted = {k: v - counted[k] for k, v in system_counters().items()}
        if run.returncode != 0:
            raise SystemExit(f"analyze failed ({run.returncode}): {run.stderr[-2000:]}")
        meta = json.loads((work / "profile" / "meta.json").read_text())
        figures = {
            "peak_rss_mb": round(mb(run.max_rss), 1),
            "cpu_s": round(run.cpu_s, 2),
            "sys_s": round(run.sys_s, 2),
            "wall_s": round(run.wall_s, 2),
            # the whole machine's, meanwhile (4 KiB pages dirtied, 2 MiB huge pages faulted)
            "dirtied_mb": counted["nr_dirtied"] * 4 // 1024,
            "huge_mb": counted["thp_fault_alloc"] * 2,
            "phases": meta.get("timings", {}),
            "outputs": _digest(work / "profile"),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))


def paired_ratios(
    before: list[dict[str, Any]], after: list[dict[str, Any]], key: str
) -> tuple[float, float, float] | None:
    """The median, least and largest of ``after[i][key] / before[i][key]`` over the runs both
    trees made (a phase looked up in ``phases``); None where no pair has the figure."""
    ratios = []
    for old, new in zip(before, after, strict=False):
        a, b = _figure(old, key), _figure(new, key)
        if a and b is not None:
            ratios.append(b / a)
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def _figure(run: dict[str, Any], key: str) -> float | None:
    value = run.get(key, run.get("phases", {}).get(key))
    return float(value) if isinstance(value, (int, float)) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--trees", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    trace = args.trace.resolve()
    if args.child:
        _child(trace)
        return
    if args.trees is None:
        parser.error("--trees BEFORE AFTER is required")
    trees = [t.resolve() for t in args.trees]
    if trees[0] == trees[1]:  # their runs would be filed together: compare a copy
        parser.error("--trees names one folder twice: give a copy of it as the second")
    results = alternate_trees(__file__, trees, args.runs, [str(trace), "--child"])
    size_mb = mb(trace_bytes(trace))
    medians: dict[str, dict[str, float]] = {}
    for tree in trees:
        runs = results[str(tree)]
        peaks = [r["peak_rss_mb"] for r in runs]
        cpus = [r["cpu_s"] for r in runs]
        walls = [r["wall_s"] for r in runs]
        phases = sorted({k for r in runs for k in r.get("phases", {})}, key=_phase_order)
        figures = {"peak RSS": peaks, "CPU": cpus, "wall": walls}
        for key, label in _COUNTED:
            figures[label] = [r.get(key, 0) for r in runs]
        figures.update({p: [r.get("phases", {}).get(p, 0.0) for r in runs] for p in phases})
        medians[str(tree)] = {k: statistics.median(v) for k, v in figures.items()}
        print(
            f"{tree}: peak RSS MB {peaks} (median {medians[str(tree)]['peak RSS']:.0f}, "
            f"{medians[str(tree)]['peak RSS'] / size_mb:.2f}x the {size_mb:.0f} MB trace); "
            f"CPU s {cpus}; wall s {walls}"
        )
        print("    " + "; ".join(f"{label} {figures[label]}" for _, label in _COUNTED))
        print("    phases: " + "  ".join(f"{p} {figures[p]}" for p in phases))
    before, after = (medians[str(t)] for t in trees)
    compared = [
        k
        for k in ("peak RSS", "CPU", "wall", *(label for _, label in _COUNTED), *_MAIN_PHASES)
        if before.get(k)
    ]
    ratios = ", ".join(f"{k} {after.get(k, 0.0) / before[k]:.3f}x" for k in compared)
    print(f"after / before (medians): {ratios}")
    runs_before, runs_after = (results[str(t)] for t in trees)
    paired = []
    labels = [("peak_rss_mb", "peak RSS"), ("cpu_s", "CPU"), ("wall_s", "wall"), *_COUNTED]
    for key, label in [*labels, *((phase, phase) for phase in _MAIN_PHASES)]:
        found = paired_ratios(runs_before, runs_after, key)
        if found is not None:
            paired.append(f"{label} {found[0]:.3f}x [{found[1]:.3f}-{found[2]:.3f}]")
    print(f"after / before (paired runs, median [range]): {', '.join(paired)}")
    digests = {r["outputs"] for t in trees for r in results[str(t)]}
    if len(digests) != 1:
        raise SystemExit(f"the outputs differ between runs: {sorted(digests)}")
    print("outputs: identical in every run (meta.json and report.html not compared)")


if __name__ == "__main__":
    main()
