"""CPU seconds of the parts of analyze that read a written profile's tables back, for versions
of the code side by side: the ledger's record of the run, the report's op statistic with its
device tasks, the report's counter series, and the numbering of host threads that links
launches to operators.

For every source tree given (``--src DIR``, a ``git archive`` of a version: its ``src`` folder
goes on PYTHONPATH), one child process reads PROFILE's tables (not timed) and times, each the
best of ``--repeat`` calls (``time.process_time``):

  - ``ledger_files``: ``ledger.run_record`` of the profile directory (its CSVs read back);
  - ``ledger_names``: the same with the kernels' names handed over as analyze hands them
    (``StoredProfile.kernel_names``, from kernel_details.csv's ``name`` as a dictionary
    column, its distinct values taken by ``columns.distinct_strings``: timed with it); left
    out for a tree without that field;
  - ``op_tasks``: ``render.report.tables.op_statistic_tasks`` of op_statistic.csv and
    op_summary.csv (``kind``, ``name`` and ``host_op`` dictionary-encoded, as the analysis
    holds them);
  - ``counters``: ``render.report.tables.counter_series`` of tables/counters.parquet;
  - ``threads``: ``analysis.ops._thread_ids`` of the events' host operators and runtime
    calls (tables/events.parquet).

Each result is hashed: the trees must give the same (the run fails otherwise). Rounds alternate
the trees' order.

Usage: python bench/report_parts.py PROFILE --src TREE_A --src TREE_B [--rounds 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import tree_child  # noqa: E402

_CHILD = r"""
import dataclasses, hashlib, json, sys, time
from pathlib import Path
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from perfledger.analysis import ops
from perfledger.ledger import run_record
from perfledger.profiledir import load_profile
from perfledger.render.report import tables

profile_dir, repeat = Path(sys.argv[1]), int(sys.argv[2])

def best(call):
    out, spent = None, float("inf")
    for _ in range(repeat):
        begin = time.process_time()
        out = call()
        spent = min(spent, time.process_time() - begin)
    return out, spent

def digest(value):
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]

def coded(path, names):
    table = pacsv.read_csv(path)
    for name in names:
        if name in table.column_names:
            at = table.column_names.index(name)
            table = table.set_column(at, name, pc.dictionary_encode(table.column(name)))
    return table

figures, hashes = {}, {}
stored = load_profile(profile_dir)
record, figures["ledger_files"] = best(lambda: run_record(stored, registered_ns=1))
hashes["ledger_files"] = digest(record.workload)
if "kernel_names" in {f.name for f in dataclasses.fields(stored)}:
    from perfledger.analysis.columns import distinct_strings
    read = pacsv.ConvertOptions(include_columns=["name"])
    names = pacsv.read_csv(profile_dir / "kernel_details.csv", convert_options=read)
    column = pc.dictionary_encode(names.column("name"))
    def with_names():
        given = dataclasses.replace(stored, kernel_names=tuple(distinct_strings(column)))
        return run_record(given, registered_ns=1)
    record, figures["ledger_names"] = best(with_names)
    hashes["ledger_names"] = digest(record.workload)

statistic = coded(profile_dir / "op_statistic.csv", ["kind"])
summary = coded(profile_dir / "op_summary.csv", ["kind", "name", "host_op"])
shown, figures["op_tasks"] = best(lambda: tables.op_statistic_tasks(statistic, summary, 120))
hashes["op_tasks"] = digest(shown.to_pylist())

class Prepared:
    origin_ns = None
counters = pq.read_table(profile_dir / "tables" / "counters.parquet")
series, figures["counters"] = best(lambda: tables.counter_series(counters, Prepared(), 2000))
hashes["counters"] = digest(series)

events = pq.read_table(
    profile_dir / "tables" / "events.parquet", columns=["rank", "pid", "stream", "kind"]
)
kind = pc.cast(events.column("kind"), pa.string())
host = np.flatnonzero(np.asarray(pc.is_in(kind, pa.array(["cpu_op", "runtime"]))))
rank, pid, stream = (
    np.asarray(events.column(c), dtype=np.int64)[host] for c in ("rank", "pid", "stream")
)
ids, figures["threads"] = best(lambda: ops._thread_ids(rank, pid, stream))
hashes["threads"] = digest(ids.tolist())
print(json.dumps({"figures": figures, "hashes": hashes}))
"""

_PARTS = ("ledger_files", "ledger_names", "op_tasks", "counters", "threads")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--src", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.src]
    spent: dict[Path, dict[str, list[float]]] = {t: {p: [] for p in _PARTS} for t in trees}
    for round_ in range(1, args.rounds + 1):
        results = {
            tree: tree_child(_CHILD, tree, [str(args.profile), str(args.repeat)])
            for tree in (trees if round_ % 2 else trees[::-1])
        }
        first = results[trees[0]]["hashes"]
        for tree in trees:
            figures, hashes = results[tree]["figures"], results[tree]["hashes"]
            differ = [p for p in hashes if p in first and hashes[p] != first[p]]
            if "ledger_names" in hashes and hashes["ledger_names"] != hashes["ledger_files"]:
                differ.append("ledger_names (against ledger_files)")
            if differ:
                raise SystemExit(f"{tree}: results differ from the first tree's: {differ}")
            for part, value in figures.items():
                spent[tree][part].append(value)
            shown = " ".join(f"{p} {v:.3f}" for p, v in figures.items())
            print(f"round {round_} {tree}: {shown}", flush=True)
    for tree in trees:
        medians = {p: statistics.median(v) for p, v in spent[tree].items() if v}
        print(f"{tree} medians (s): " + " ".join(f"{p} {v:.3f}" for p, v in medians.items()))
    print("results: the same in every tree")


if __name__ == "__main__":
    main()
