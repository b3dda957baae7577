"""A Kineto import worker's own work on some chunks of a trace, two source trees alternating.

Each run is a fresh child interpreter importing ``perfledger`` from one tree
(``PYTHONPATH=<tree>/src``) that cuts the trace into chunks as the import does
(``kineto_stream.open_splitter``), skips the first ``--skip`` chunks, and gives each of the
next ``--chunks`` to ``kineto_parallel.chunk_result_at`` with a folder for its block file, as
a worker process does (the file is unlinked once written, as the importing process does once
it has mapped it). It runs the chunks ``--passes`` times and prints the CPU seconds of the
loop alone (its system seconds apart: the block files' pages), then a digest of every chunk's
block and side data made outside the timing: the script fails when two runs, of either tree,
made different blocks.

Usage: python bench/worker_chunks.py TRACE BEFORE_TREE AFTER_TREE [--chunks 120] [--skip 100]
[--passes 3] [--rounds 4] (make the trees with ``git archive <commit> | tar -x -C <dir>`` and
copy the built ``*.so`` files in, as for ``import_trees.py``).

The worker's share of the import is what the import's wall time follows on a machine with
as many cores as workers (``perfledger analyze`` of one large trace reads it with a worker per
core); this measures it without the pool, the main process's share or the page cache of a
whole trace's blocks in the way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import tree_child  # noqa: E402

_CHILD = """
import hashlib, json, os, resource, sys, tempfile
from pathlib import Path
import numpy as np
import pyarrow as pa
from perfledger.sources import kineto_parallel
from perfledger.sources.block_files import loaded
from perfledger.sources.kineto_stream import open_splitter

def cpu():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime, use.ru_stime

def feed(hasher, value):
    if value is None:
        hasher.update(b"none")
    elif isinstance(value, np.ndarray):
        hasher.update(str(value.dtype).encode() + value.tobytes())
    elif isinstance(value, pa.DictionaryArray):
        feed(hasher, value.dictionary)
        hasher.update(value.indices.to_numpy(zero_copy_only=False).tobytes())
    elif isinstance(value, pa.Array):
        hasher.update(json.dumps(value.to_pylist(), default=str).encode())
    elif isinstance(value, (tuple, list)):
        for item in value:
            feed(hasher, item)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            hasher.update(name.encode())
            feed(hasher, getattr(value, name))
    else:
        hasher.update(repr(value).encode())

if __name__ == "__main__":
    trace, skip, count, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    _, splitter = open_splitter(Path(trace), None)
    spans = []
    for span in splitter.spans():
        spans.append(span)
        if len(spans) >= skip + count:
            break
    spans = spans[skip:]
    source = kineto_parallel.shared_file(splitter.source.fileno())
    folder = tempfile.mkdtemp(prefix="worker-chunks-")
    try:
        user, system = cpu()
        for _ in range(passes):
            for _, first, stop in spans:
                outcome = kineto_parallel.chunk_result_at(source, first, stop, folder)
                if hasattr(outcome, "path"):
                    os.unlink(outcome.path)
        user_after, system_after = cpu()
        hasher = hashlib.sha256()
        for _, first, stop in spans:
            feed(hasher, loaded(kineto_parallel.chunk_result_at(source, first, stop, folder)))
    finally:
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    print(json.dumps({
        "chunks": len(spans),
        "bytes": sum(stop - first for _, first, stop in spans),
        "cpu_s": (user_after - user) + (system_after - system),
        "sys_s": system_after - system,
        "digest": hasher.hexdigest()[:16],
    }))
"""


def main(argv: list[str] | None = None) -> int:
    """Command line of the two-tree worker benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--chunks", type=int, default=120)
    parser.add_argument("--skip", type=int, default=100)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    # one hash seed for the children: the side data holds sets, whose repr follows it
    os.environ["PYTHONHASHSEED"] = "0"
    command = [str(args.trace), str(args.skip), str(args.chunks), str(args.passes)]
    trees = {"before": args.before, "after": args.after}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for round_index in range(args.rounds):  # before, after, after, before ...
        for label in list(trees)[:: 1 if round_index % 2 == 0 else -1]:
            runs[label].append(tree_child(_CHILD, trees[label], command))
            print(label, json.dumps(runs[label][-1]), flush=True)
    digests = {r["digest"] for rs in runs.values() for r in rs}
    if len(digests) != 1:
        print(f"the trees made different blocks: {sorted(digests)}", file=sys.stderr)
        return 1
    first = runs["before"][0]
    per_pass = first["bytes"] * args.passes / 2**20
    print(f"{first['chunks']} chunks, {first['bytes'] / 2**20:.1f} MB, {args.passes} passes")
    medians = {}
    for label, results in runs.items():
        cpu_s = [r["cpu_s"] for r in results]
        sys_s = [r["sys_s"] for r in results]
        medians[label] = statistics.median(cpu_s)
        print(
            f"{label:>7}: CPU s {[round(c, 3) for c in cpu_s]} (median {medians[label]:.3f}, "
            f"{per_pass / medians[label]:.0f} MB/s), of it system "
            f"{[round(s, 3) for s in sys_s]}"
        )
    print(f"after / before (medians): CPU {medians['after'] / medians['before']:.3f}x")
    print("blocks: identical in every run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
