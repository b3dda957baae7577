"""Traces whose names are bombs: what ``perfledger analyze`` spends and writes on them.

Two traces are built from the clean synthetic run of ``tests/odd_traces.py``:

- ``one``: one kernel named by 300 MiB of the same letter (a .json.gz of about 300 KB);
- ``many``: 3,000 extra events, each with its own 100 kB name (300 MB of JSON).

Each is analysed by ``python -m perfledger analyze TRACE -o OUT --force`` in a child process,
and, as the reference measured in the same run, decoded by ``json.load`` of the gunzipped file
in another child (nothing kept, nothing written): any reader of the trace spends that. Printed
per trace: wall time and peak RSS of both, their ratios, and the bytes written to the profile
(the ``raw/`` copy of the input aside).

Usage: python bench/name_bombs.py [--workdir DIR] [--mib 300] [--names 3000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))
from _common import DEFAULT_WORKDIR, mb, run_measured  # noqa: E402

from tests.kineto_gen import write_kineto  # noqa: E402
from tests.odd_traces import clean_run  # noqa: E402

_DECODE = "import gzip, json, sys; json.load(gzip.open(sys.argv[1], 'rt'))"


def one_huge_name(path: Path, mib: int) -> Path:
    events = clean_run()
    kernel = next(e for e in events if e.get("cat") == "kernel")
    kernel["name"] = "k" * (mib << 20)
    return write_kineto(path, events)


def many_long_names(path: Path, count: int, length: int = 100_000) -> Path:
    events = clean_run()
    pick = random.Random(0)
    host = [e for e in events if e.get("cat") in ("kernel", "cpu_op", "cuda_runtime")]
    for index in range(count):
        event = dict(pick.choice(host))
        event["args"] = dict(event.get("args", {}))
        event["name"] = f"{index}" + "n" * length
        events.append(event)
    return write_kineto(path, events)


def written_bytes(profile: Path) -> int:
    raw = profile / "raw"
    return sum(p.stat().st_size for p in profile.rglob("*") if p.is_file() and raw not in p.parents)


def measure(trace: Path, workdir: Path) -> dict[str, float]:
    out = workdir / f"{trace.name}.profile"
    analyze = run_measured(
        [sys.executable, "-m", "perfledger", "analyze", str(trace), "-o", str(out), "--force"]
    )
    if analyze.returncode != 0:
        raise SystemExit(f"analyze failed on {trace}: {analyze.stderr.strip()}")
    decode = run_measured([sys.executable, "-c", _DECODE, str(trace)])
    return {
        "file_mb": mb(trace.stat().st_size),
        "analyze_s": analyze.wall_s,
        "analyze_peak_mb": mb(max(analyze.peak_tree_rss, analyze.max_rss)),
        "decode_s": decode.wall_s,
        "decode_peak_mb": mb(max(decode.peak_tree_rss, decode.max_rss)),
        "time_ratio": analyze.wall_s / decode.wall_s,
        "memory_ratio": max(analyze.peak_tree_rss, analyze.max_rss)
        / max(decode.peak_tree_rss, decode.max_rss),
        "written_mb": mb(written_bytes(out)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR / "name_bombs")
    parser.add_argument("--mib", type=int, default=300, help="length of the one huge name")
    parser.add_argument("--names", type=int, default=3000, help="count of 100 kB names")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    traces = {
        "one": one_huge_name(args.workdir / "one_huge_name.json.gz", args.mib),
        "many": many_long_names(args.workdir / "many_long_names.json.gz", args.names),
    }
    results = {name: measure(path, args.workdir) for name, path in traces.items()}
    (args.workdir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for name, figures in results.items():
        print(
            f"{name}: {figures['file_mb']:.1f} MB file; analyze {figures['analyze_s']:.1f} s, "
            f"{figures['analyze_peak_mb']:.0f} MB peak; json.load {figures['decode_s']:.1f} s, "
            f"{figures['decode_peak_mb']:.0f} MB peak; ratios time {figures['time_ratio']:.2f} "
            f"memory {figures['memory_ratio']:.2f}; written {figures['written_mb']:.1f} MB"
        )


if __name__ == "__main__":
    main()
