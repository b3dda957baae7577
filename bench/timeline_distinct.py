"""CPU seconds of small timeline files cut from a trace of many distinct names, by version.

A synthetic trace of ``--events`` host ops, each with a name of its own (about 125 bytes,
so 200k names are 25 MB of distinct text), is prepared once; then ``--files`` windows of
``--records`` events each are written from that preparation, as analyze writes step slices.
What a small file costs should follow its records, not the trace's distinct names.

Each round runs, for every source tree given (``--src DIR``, a ``git archive`` of a version:
its ``src`` folder goes on PYTHONPATH), one child process that builds the trace and prepares
it (not timed), then times the files' writing in CPU seconds (``time.process_time``, every
thread). Versions alternate within a round; each figure is also a ratio to the first tree's
in the same round, and every file's text is checked to be the same under every tree.

Usage: python bench/timeline_distinct.py --src TREE_A --src TREE_B [--rounds 3]
       [--events 200000] [--files 50] [--records 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import gzip, hashlib, json, sys, time
from pathlib import Path
import numpy as np
import pyarrow as pa
from perfledger.model import schema
from perfledger.render import timeline

out, n, files, records = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
US = 1000
filler = "x" * 100
columns = {
    "rank": pa.array(np.zeros(n, np.int64)),
    "kind": pa.array([schema.CPU_OP] * n),
    "name": pa.array([f"aten::op_{i:08d}_{filler}" for i in range(n)]),
    "device": pa.array(np.full(n, schema.HOST_DEVICE, np.int64)),
    "stream": pa.array(np.ones(n, np.int64)),
    "pid": pa.array(np.full(n, 100, np.int64)),
    "start_ns": pa.array(np.arange(n, dtype=np.int64) * US),
    "dur_ns": pa.array(np.full(n, US // 2, np.int64)),
    "correlation": pa.array(np.full(n, schema.NO_ID, np.int64)),
    "external_id": pa.array(np.arange(n, dtype=np.int64)),
    "step": pa.array(np.full(n, schema.NO_STEP, np.int64)),
    "bytes": pa.array(np.full(n, -1, np.int64)),
    "flops": pa.array(np.full(n, np.nan)),
    "shapes": pa.array([None] * n, pa.string()),
    "dtypes": pa.array([None] * n, pa.string()),
    "args": pa.array([None] * n, pa.string()),
}
events = pa.table(
    {f.name: columns[f.name].cast(f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
     for f in schema.EVENTS_SCHEMA}
).cast(schema.EVENTS_SCHEMA)
prepared = timeline.prepare_timeline(events, device_busy=False)
stride = max(n // files, records)
windows = [(k * stride * US, (k * stride + records) * US) for k in range(files)]
begin = time.process_time()
paths = []
for k, window in enumerate(windows):
    path = out / f"w{k}.json.gz"
    timeline.write_prepared_timeline(path, prepared, window=window)
    paths.append(path)
cpu = time.process_time() - begin
digest = hashlib.sha256()
for path in paths:
    digest.update(gzip.decompress(path.read_bytes()))
print(json.dumps({"cpu_s": cpu, "text": digest.hexdigest()[:12]}))
"""


def _child(tree: Path, args: list[str]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args()
    for round_ in range(1, args.rounds + 1):
        first: float | None = None
        texts = set()
        for tree in args.src:
            with tempfile.TemporaryDirectory() as out:
                sizes = [str(v) for v in (args.events, args.files, args.records)]
                result = _child(tree, [out, *sizes])
            cpu = float(str(result["cpu_s"]))
            first = cpu if first is None else first
            texts.add(result["text"])
            print(
                f"round {round_} {tree}: {args.files} files of {args.records} events "
                f"({args.events} distinct names) {cpu:.3f} s CPU, ratio {cpu / first:.3f}, "
                f"text {result['text']}",
                flush=True,
            )
        print(f"round {round_}: text {'same' if len(texts) == 1 else 'DIFFERS'}", flush=True)


if __name__ == "__main__":
    main()
