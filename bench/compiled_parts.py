"""The compiled parts against the Python paths they stand in for, in one process, alternating.

``python bench/compiled_parts.py [--trace TRACE] [--mb 84] [--rounds 3] [--profile DIR]``

- **scanner**: the traceEvents array of TRACE (default: the 486 MB bench trace of
  ``make_trace.py``) cut into chunks of about 4 MB (the import workers' size), ``--mb`` of them;
  each round reads them all through msgspec (``decode_payload`` + ``chunk_columns``: what a
  worker does without the scanner), then through the scanner (``scanned_block``), then
  msgspec's decode alone (the floor's share of the first). CPU seconds (``process_time``).
- **replay walk**: the baseline replay of each test trace's step graph (the V100 DDP and A100
  control ranks), with the compiled walk and with the Python loop (``replay._COMPILED`` set
  to None), ``--rounds`` times each, alternating; milliseconds per replay.
- **deflate** (with ``--profile DIR``): the text of the profile's step timelines
  (``timeline/step_*.json.gz``, decompressed) deflated as the timeline writer does, by ISA-L
  at level 2 and by zlib at level 3, alternating; MB/s of text (CPU) and the output's size.
- **task ids cut** (with ``--profile DIR``): the args of the profile's kernels
  (``tables/events.parquet``) with Kineto's per-task ids cut from their front, as
  kernel_details' launch configuration does, by ``kineto_scan.cut_task_ids`` and by the
  regular expression (``KINETO_TASK_IDS``), alternating.
- **Ascend keys search** (with ``--profile DIR``): the args of the profile's device tasks
  searched for the Ascend kernel keys the advisor parses, in place by
  ``kineto_scan.named_key_rows`` and by a take of each chunk's rows and the regular
  expression (``ASCEND_ARG_KEYS``), alternating.

Every round checks that both paths give the same blocks and schedules. Prints the medians
and the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from perfledger.analysis import replay as replay_module  # noqa: E402
from perfledger.analysis.critical_path import prepare_rank  # noqa: E402
from perfledger.analysis.profile import analyze_rank  # noqa: E402
from perfledger.sources import kineto_scan, load_traces  # noqa: E402
from perfledger.sources.kineto_columns import Block, Side, chunk_columns  # noqa: E402
from perfledger.sources.kineto_stream import decode_payload  # noqa: E402

_CHUNK = 4 << 20
_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_GRAPHS = ("kineto/v100_rank1_ddp.json.gz", "kineto/a100_rank3_control.json.gz")


def _chunks(path: Path, total: int) -> list[bytearray]:
    """About ``total`` bytes of whole events from the middle of the trace, in 4 MB payloads."""
    with path.open("rb") as file:
        text = file.read(total + (64 << 20))
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    start = _SEPARATOR.search(text, start + (32 << 20)).start() + 1  # type: ignore[union-attr]
    chunks: list[bytearray] = []
    while sum(map(len, chunks)) < total:
        cut = _SEPARATOR.search(text, start + _CHUNK)
        if cut is None:
            break
        chunks.append(bytearray(b"[" + text[start : cut.start() + 1].lstrip(b", \n") + b"]"))
        start = cut.start() + 1
    return chunks


def _same_blocks(one: Block | None, other: Block | None) -> bool:
    if one is None or other is None:
        return one is other
    for item in dataclasses.fields(Block):
        a, b = getattr(one, item.name), getattr(other, item.name)
        if isinstance(a, np.ndarray):
            if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
                return False
        elif isinstance(a, pa.Array):
            if not a.equals(b):
                return False
        elif a != b:
            return False
    return True


def _timed(work: Any) -> tuple[float, Any]:
    started = time.process_time()
    result = work()
    return time.process_time() - started, result


def scanner(chunks: list[bytearray], rounds: int) -> None:
    size = sum(map(len, chunks)) / 1e6
    general, scanned, decoded = [], [], []
    for _ in range(rounds):
        seconds, blocks = _timed(
            lambda: [chunk_columns(decode_payload(c), Side(), pooled=False) for c in chunks]
        )
        general.append(seconds)
        seconds, results = _timed(
            lambda: [kineto_scan.scanned_block(c, Side(), pooled=False) for c in chunks]
        )
        scanned.append(seconds)
        decoded.append(_timed(lambda: [decode_payload(c) for c in chunks])[0])
        for block, result in zip(blocks, results, strict=True):
            if result is None or not _same_blocks(result[0], block):
                raise SystemExit("the scanner and msgspec gave different blocks")
    g, s, d = (statistics.median(x) for x in (general, scanned, decoded))
    print(
        f"scanner, {len(chunks)} chunks, {size:.0f} MB: msgspec path {g:.2f} s, scanned "
        f"{s:.2f} s ({s / g:.2f}x), msgspec decode alone {d:.2f} s "
        f"(rounds: {' '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(general, scanned, strict=True))})"
    )


def replay_walk(rounds: int) -> None:
    compiled = replay_module._COMPILED
    for name in _GRAPHS:
        (trace,) = load_traces([ROOT / "tests" / "data" / name])
        graph = prepare_rank(analyze_rank(trace).events).graph
        times: dict[str, list[float]] = {"compiled": [], "python": []}
        schedules = {}
        for _ in range(rounds):
            for label in ("compiled", "python"):
                replay_module._COMPILED = compiled if label == "compiled" else None
                seconds, made = _timed(lambda g=graph: [replay_module.replay(g) for _ in range(5)])
                schedules[label] = made[0]
                times[label].append(seconds / len(made) * 1000)
        replay_module._COMPILED = compiled
        for column in ("start", "end", "via", "how"):
            got = getattr(schedules["compiled"], column)
            if not np.array_equal(got, getattr(schedules["python"], column)):
                raise SystemExit(f"{name}: the two walks gave different {column}")
        c, p = statistics.median(times["compiled"]), statistics.median(times["python"])
        print(
            f"replay walk, {name} ({graph.size:,} nodes): compiled {c:.1f} ms, Python loop "
            f"{p:.1f} ms per replay ({c / p:.2f}x)"
        )


def deflate(profile: Path, rounds: int) -> None:
    import gzip
    import zlib

    isal_zlib: Any = importlib.import_module("isal.isal_zlib")
    text = b"".join(gzip.decompress(p.read_bytes()) for p in sorted(profile.glob("timeline/*.gz")))
    if not text:
        raise SystemExit(f"{profile}: no timeline/*.json.gz to read")
    libraries = {"isal level 2": (isal_zlib, 2), "zlib level 3": (zlib, 3)}
    times: dict[str, list[float]] = {name: [] for name in libraries}
    sizes: dict[str, int] = {}
    for _ in range(rounds):
        for name, (library, level) in libraries.items():

            def run(library: Any = library, level: int = level) -> bytes:
                compressor = library.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
                return bytes(compressor.compress(text) + compressor.flush())

            seconds, out = _timed(run)
            times[name].append(seconds)
            sizes[name] = len(out)
            if zlib.decompress(out, -zlib.MAX_WBITS) != text:
                raise SystemExit(f"{name}: the deflated text does not decode to the text")
    mb = len(text) / 1e6
    print(
        f"deflate, {mb:.1f} MB of step timeline text: "
        + ", ".join(
            f"{name} {mb / statistics.median(t):.0f} MB/s -> {sizes[name] / 1e6:.2f} MB"
            for name, t in times.items()
        )
    )


def _alternating(
    ways: dict[str, Callable[[], Any]], rounds: int
) -> tuple[list[float], dict[str, Any]]:
    """Each way run once a round, in turn: the median seconds of each (in the order of
    ``ways``) and what each made in the last round."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    made: dict[str, Any] = {}
    for _ in range(rounds):
        for name, way in ways.items():
            seconds, made[name] = _timed(way)
            times[name].append(seconds)
    return [statistics.median(times[name]) for name in ways], made


def task_ids_cut(profile: Path, rounds: int) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from perfledger.analysis.ops import KINETO_TASK_IDS

    events = pq.read_table(profile / "tables" / "events.parquet", columns=["kind", "args"])
    args = events.filter(pc.equal(events["kind"], "kernel"))["args"].combine_chunks()
    del events
    ways = {
        "compiled": lambda: kineto_scan.cut_task_ids(args),
        "regex": lambda: pc.replace_substring_regex(args, KINETO_TASK_IDS, "{", max_replacements=1),
    }
    (c, r), made = _alternating(ways, rounds)
    if not made["compiled"].equals(made["regex"]):
        raise SystemExit("the two cuts of the task ids differ")
    print(
        f"task ids cut, {len(args):,} kernels' args: compiled {c:.3f} s, regular expression "
        f"{r:.3f} s ({c / r:.2f}x)"
    )


def ascend_keys_search(profile: Path, rounds: int) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from perfledger.analysis.advisor.context import ASCEND_ARG_KEYS
    from perfledger.model import schema

    events = pq.read_table(profile / "tables" / "events.parquet", columns=["kind", "args"])
    tasks = np.flatnonzero(
        np.asarray(pc.is_in(events["kind"], pa.array(list(schema.DEVICE_TASK_KINDS))))
    )
    args = events["args"].combine_chunks()
    del events

    def regex() -> np.ndarray:
        found = pc.match_substring_regex(args.take(pa.array(tasks)), ASCEND_ARG_KEYS)
        return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), bool)

    ways = {"compiled": lambda: kineto_scan.named_key_rows(args, tasks), "regex": regex}
    (c, r), made = _alternating(ways, rounds)
    if not np.array_equal(made["compiled"], made["regex"]):
        raise SystemExit("the two searches for the Ascend keys differ")
    print(
        f"Ascend keys search, {tasks.size:,} tasks' args: compiled {c:.3f} s, take and "
        f"regular expression {r:.3f} s ({c / r:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=ROOT / "bench/out/v100_rank1_ddp_x9.json")
    parser.add_argument("--mb", type=int, default=84)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="a profile whose step timelines to deflate")
    args = parser.parse_args()
    if not kineto_scan.AVAILABLE or replay_module._COMPILED is None:
        raise SystemExit(
            "the compiled parts are not built here: pip install -e . with a C compiler"
        )
    if not args.trace.exists():
        raise SystemExit(f"{args.trace}: no such trace (python bench/make_trace.py --size-mb 500)")
    scanner(_chunks(args.trace, args.mb << 20), args.rounds)
    replay_walk(args.rounds)
    if args.profile is not None:
        deflate(args.profile, args.rounds)
        task_ids_cut(args.profile, args.rounds)
        ascend_keys_search(args.profile, args.rounds)


if __name__ == "__main__":
    main()
