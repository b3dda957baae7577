"""CPU of a few passes of the analysis against the plain numpy, Arrow or Python way they
replace, in one process, alternating, results compared:

  - ``gather``: an int64 column of one chunk read at ascending rows: ``columns.int64_at``
    (numpy's ``take`` into the result) against a gather copied into it (``result[...] =
    values[rows]``);
  - ``lexsort``: the nodes of a step graph by time, then kind (times mostly ascending, a fifth
    moved): ``columns.lexsort`` against ``np.lexsort``;
  - ``windows``: the rows of a few spans of a rank's events (ascending starts): the rows
    between the bounds of the report's ``overlap_window`` tested, against every row tested;
  - ``starts``: a profile's events' starts written as Parquet alone, zstd, plain against
    delta-encoded (the file's size too);
  - ``imports``: the CLI's modules imported (``build_parser``) in a fresh interpreter, from a
    copy of the source compiled to bytecode and from one not (PYTHONDONTWRITEBYTECODE set,
    as on these machines): what ``bench/_common.compile_bytecode`` saves every timed run.

``python bench/column_passes.py [PROFILE] [--rows 4000000] [--rounds 5]``: PROFILE is a
written profile (its tables/events.parquet gives the starts and the windows' events); without
it the starts are made up. The smallest CPU of the rounds is printed (this machine is shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PROJECT_ROOT  # noqa: E402

from perfledger.analysis import columns  # noqa: E402
from perfledger.render.report.rows import _overlap_window  # noqa: E402


def _best(call: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    """The smallest CPU seconds of ``rounds`` calls, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(rounds):
        began = time.process_time()
        result = call()
        best = min(best, time.process_time() - began)
    return best, result


def _pair(name: str, old: Callable[[], Any], new: Callable[[], Any], rounds: int) -> None:
    """Both ways alternating; their results compared; the CPU of each and the ratio printed."""
    before = after = float("inf")
    for _ in range(rounds):
        spent, expected = _best(old, 1)
        before = min(before, spent)
        spent, got = _best(new, 1)
        after = min(after, spent)
    same = all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True))
    if not same:
        raise SystemExit(f"{name}: the two ways differ")
    print(f"{name:8s} {before * 1e3:8.1f} ms -> {after * 1e3:8.1f} ms ({after / before:.2f}x)")


def _gather(rows: int, rounds: int, rng: np.random.Generator) -> None:
    values = rng.integers(0, 1 << 40, rows)
    table = pa.table({"a": pa.chunked_array([pa.array(values)])})
    at = np.sort(rng.choice(rows, rows * 2 // 3, replace=False))

    def copied() -> tuple[np.ndarray]:
        result = np.zeros(at.size, dtype=np.int64)
        result[0 : at.size] = table.column("a").chunk(0).to_numpy()[at]
        return (result,)

    _pair("gather", copied, lambda: (columns.int64_at(table, "a", at),), rounds)


def _lexsort(rows: int, rounds: int, rng: np.random.Generator) -> None:
    n = rows * 5 // 16  # a graph has about a node for three events
    key = np.sort(rng.integers(0, 5 * 10**10, n)) + 1_669_783_687_384_669_000
    moved = rng.integers(0, n, n // 5)
    key[moved] += rng.integers(-(10**6), 10**6, moved.size)
    kind = rng.integers(0, 6, n).astype(np.int8)
    _pair(
        "lexsort",
        lambda: (np.lexsort((kind, key)),),
        lambda: (columns.lexsort((kind, key)),),
        rounds,
    )


def _windows(start: np.ndarray, dur: np.ndarray, rounds: int) -> None:
    end = start + dur
    cuts = np.linspace(0, start.size - 1, 8).astype(np.int64)[1:-1]
    spans = [(int(start[c]), int(start[min(c + start.size // 140, start.size - 1)])) for c in cuts]

    def every_row() -> list[np.ndarray]:
        return [np.flatnonzero((start < hi) & (end > lo)) for lo, hi in spans]

    def bounded() -> list[np.ndarray]:
        window = _overlap_window(start, end)
        found = []
        for lo, hi in spans:
            a, b = window(lo, hi)
            found.append(a + np.flatnonzero((start[a:b] < hi) & (end[a:b] > lo)))
        return found

    _pair("windows", every_row, bounded, rounds)


def _starts(start: np.ndarray, rounds: int, folder: Path) -> None:
    table = pa.table({"start_ns": start})
    path = folder / "starts.parquet"
    for label, encoding in (("plain", None), ("delta", {"start_ns": "DELTA_BINARY_PACKED"})):
        options: dict[str, Any] = {"column_encoding": encoding} if encoding else {}

        def write(options: dict[str, Any] = options) -> None:
            pq.write_table(table, path, compression="zstd", use_dictionary=False, **options)

        spent, _ = _best(write, rounds)
        size = path.stat().st_size
        if not np.array_equal(pq.read_table(path).column(0).to_numpy(), start):
            raise SystemExit("starts: the file reads back otherwise")
        print(f"starts   {label}: {spent * 1e3:6.1f} ms of CPU, {size / 1e6:.1f} MB")


def _imports(rounds: int, folder: Path) -> None:
    code = "import perfledger.__main__ as m; m.build_parser()"
    trees = {}
    for label in ("uncompiled", "compiled"):
        tree = folder / label
        shutil.copytree(PROJECT_ROOT / "src", tree, ignore=shutil.ignore_patterns("__pycache__"))
        if label == "compiled":
            import compileall

            compileall.compile_dir(str(tree), quiet=1)
        trees[label] = tree
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    spent = {label: float("inf") for label in trees}
    for _ in range(rounds):
        for label, tree in trees.items():
            before = os.times()
            subprocess.run(
                [sys.executable, "-c", code], env={**env, "PYTHONPATH": str(tree)}, check=True
            )
            after = os.times()
            cpu = (after.children_user - before.children_user) + (
                after.children_system - before.children_system
            )
            spent[label] = min(spent[label], cpu)
    print(
        f"imports  {spent['uncompiled']:.2f} s -> {spent['compiled']:.2f} s of CPU "
        f"({spent['compiled'] / spent['uncompiled']:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, nargs="?")
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.profile is not None:
        events = pq.read_table(
            args.profile / "tables" / "events.parquet", columns=["start_ns", "dur_ns"]
        )
        start = events.column("start_ns").to_numpy()
        dur = events.column("dur_ns").to_numpy()
    else:
        start = np.cumsum(rng.integers(0, 20_000, args.rows)) + 1_669_783_687_384_669_000
        dur = rng.integers(0, 200_000, args.rows)
    _gather(args.rows, args.rounds, rng)
    _lexsort(args.rows, args.rounds, rng)
    _windows(start, dur, args.rounds)
    with tempfile.TemporaryDirectory() as folder:
        _starts(start, args.rounds, Path(folder))
        _imports(args.rounds, Path(folder))


if __name__ == "__main__":
    main()
