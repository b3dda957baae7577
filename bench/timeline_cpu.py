"""CPU (and wall) seconds of writing a profile's timelines and CSVs, versions side by side.

Each round runs, for every source tree given (``--src DIR``, a ``git archive`` of a version:
its ``src`` folder goes on PYTHONPATH), one child process that reads the profile's stored
tables (not timed), then times in CPU seconds (``time.process_time``: every thread of the
process, the compression thread and the step writers included):
  - ``steps``: the step slices as ``perfledger analyze`` writes them (one
    ``step_<n>.json.gz`` per step of the steps table, the same caps);
  - with ``--whole``: the whole timeline, as ``perfledger timeline PROFILE`` writes it;
  - with ``--csv``: the CSVs of the stored tables that analyze writes the same way
    (kernel_details.csv, gaps.csv ...: every top-level CSV of the profile re-written from
    the CSV text read back, so the formatting of each column type is timed);
The wall seconds of the timelines are given too (``*_wall_s``): what the step writers'
overlap with the preparation of the rows shows in. Versions alternate within a round, so
the load of other jobs on a shared machine falls on each alike; each figure is also given
as a ratio to the first tree's in the same round.
Every file written is checked to hold the same text (decompressed) under every tree, and
the gzip bytes are compared too (``same gz`` / ``differs``).

Usage: python bench/timeline_cpu.py PROFILE --src TREE_A --src TREE_B [--rounds 3]
       [--whole] [--csv]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import tree_child  # noqa: E402

_CHILD = r"""
import glob, gzip, hashlib, json, sys, time
from pathlib import Path
import pyarrow.compute as pc
from perfledger.model.accounts import StepWindow
from perfledger.model.whatif import path_spans_by_rank
from perfledger.profiledir import load_profile
from perfledger.render import timeline

profile_dir, out, whole, step_cap = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
profile = load_profile(profile_dir)
events = profile.read_table("events")  # every rank's
gaps = profile.read_table("gaps", required=False)
counters = profile.read_table("counters", required=False)
steps = profile.read_table("steps")
spans = path_spans_by_rank(profile.read_table("critical_path", required=False))
findings = profile.findings
windows = [StepWindow(**row) for row in steps.drop_columns(["wall_ns"]).to_pylist()]
ranks = sorted(set(pc.unique(events.column("rank")).to_pylist()))
parts = [
    timeline.TimelinePart(
        r,
        events.filter(pc.equal(events.column("rank"), r)),
        gaps.filter(pc.equal(gaps.column("rank"), r)) if gaps is not None else None,
        spans.get(r, ()),
    )
    for r in ranks
]
figures = {}
cpu, wall = time.process_time(), time.perf_counter()
timeline.write_profile_timelines(
    None, out / "timeline", parts, windows, counters=counters, findings=findings,
    step_max_events=int(step_cap),
)
figures["steps_cpu_s"] = time.process_time() - cpu
figures["steps_wall_s"] = time.perf_counter() - wall
if whole == "1":
    cpu, wall = time.process_time(), time.perf_counter()
    timeline.write_profile_timelines(
        out / "timeline.json.gz", out / "unused", parts, [], counters=counters,
        findings=findings,
    )
    figures["whole_cpu_s"] = time.process_time() - cpu
    figures["whole_wall_s"] = time.perf_counter() - wall
files = {}
for path in sorted(out.rglob("*.json.gz")):
    raw = path.read_bytes()
    files[str(path.relative_to(out))] = [
        hashlib.sha256(gzip.decompress(raw)).hexdigest(), hashlib.sha256(raw).hexdigest()
    ]
figures["files"] = files
print(json.dumps(figures))
"""

_CSV_CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
import pyarrow.csv as pacsv
from perfledger.render.csvs import write_csv

profile_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
import pyarrow as pa
tables = {}
for path in sorted(profile_dir.glob("*.csv")):
    table = pacsv.read_csv(path)
    # an empty column reads as null: as text
    tables[path.name] = table.cast(pa.schema(
        [f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in table.schema]
    ))
cpu = time.process_time()
for name, table in tables.items():
    write_csv(table, out / name)
figures = {"csv_cpu_s": time.process_time() - cpu, "files": {
    name: [hashlib.sha256((out / name).read_bytes()).hexdigest()] * 2 for name in tables
}}
print(json.dumps(figures))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--src", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--whole", action="store_true", help="also the whole timeline")
    parser.add_argument("--csv", action="store_true", help="also the CSVs")
    parser.add_argument("--step-max-events", type=int, default=200_000)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.src]
    for round_ in range(1, args.rounds + 1):
        results: list[dict[str, object]] = []
        for tree in trees if round_ % 2 else trees[::-1]:
            with tempfile.TemporaryDirectory() as folder:
                figures = tree_child(
                    _CHILD,
                    tree,
                    [
                        str(args.profile),
                        folder,
                        "1" if args.whole else "0",
                        str(args.step_max_events),
                    ],
                )
            if args.csv:
                with tempfile.TemporaryDirectory() as folder:
                    csv = tree_child(_CSV_CHILD, tree, [str(args.profile), folder])
                figures["csv_cpu_s"] = csv["csv_cpu_s"]
                figures["files"] = {**figures["files"], **csv["files"]}
            figures["tree"] = str(tree)
            results.append(figures)
        results.sort(key=lambda f: trees.index(Path(str(f["tree"]))))
        reference = results[0]
        for figures in results:
            line = f"round {round_} {figures['tree']}:"
            keys = ("steps_cpu_s", "steps_wall_s", "whole_cpu_s", "whole_wall_s", "csv_cpu_s")
            for key in keys:
                if key in figures:
                    value = float(figures[key])  # type: ignore[arg-type]
                    ratio = value / float(reference[key])  # type: ignore[arg-type]
                    line += f" {key} {value:.2f} ({ratio:.3f}x)"
            files = figures["files"]
            assert isinstance(files, dict)
            ref_files = reference["files"]
            assert isinstance(ref_files, dict)
            text_same = files.keys() == ref_files.keys() and all(
                files[k][0] == ref_files[k][0] for k in files
            )
            gz_same = text_same and all(files[k][1] == ref_files[k][1] for k in files)
            digest = hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()[:12]
            line += (
                f"; {len(files)} files, text {'same' if text_same else 'DIFFERS'},"
                f" gz {'same' if gz_same else 'differs'} ({digest})"
            )
            print(line, flush=True)


if __name__ == "__main__":
    main()
