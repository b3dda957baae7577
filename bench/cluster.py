"""Many ranks: time `perfledger analyze` on N synthetic rank traces with 1 and 2 local workers
and on a 2-worker Dask LocalCluster; peak RSS of the parent and of each worker.

Each rank is the bench trace of make_trace.py (v100_rank1_ddp repeated to about --size-mb)
with its distributedInfo saying its own rank. Figures are written to
bench/out/cluster_result_<ranks>x<copies>.json.

Usage: python bench/cluster.py [--ranks 32] [--size-mb 100] [--workers 1 2] [--dask-workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_WORKDIR, PROJECT_ROOT  # noqa: E402
from make_trace import make_scaled_trace  # noqa: E402

RANKS_VERSION = 1
_DISTRIBUTED = b'"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2}'


@dataclass(frozen=True)
class TrackedRun:
    """Wall time and the peak RSS of the parent process and of each descendant."""

    label: str
    returncode: int
    wall_s: float
    parent_peak_mb: float
    parent_anon_peak_mb: float  # private memory (RssAnon): the heap, without mapped files
    worker_peaks_mb: list[float]  # every descendant seen (pool workers, Dask nannies/workers)
    tree_peak_mb: float  # largest sum over the whole tree
    meta_worker_peaks_mb: list[float] = field(default_factory=list)  # ru_maxrss in the tasks
    timings: dict[str, float] = field(default_factory=dict)
    stderr_tail: str = ""


def rank_dir(workdir: Path, ranks: int, size_mb: float) -> tuple[Path, int, int]:
    """Write (once) ``ranks`` copies of the bench trace, each naming its rank; (dir, copies,
    raw bytes per rank)."""
    base = make_scaled_trace(workdir, size_mb=size_mb)
    directory = workdir / f"cluster_{ranks}x{base.copies}"
    marker = directory.with_name(directory.name + ".info.json")  # beside: not a trace
    if marker.exists() and json.loads(marker.read_text()).get("version") == RANKS_VERSION:
        return directory, base.copies, base.raw_bytes
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    text = base.path.read_bytes()
    head = text[:8192]
    if _DISTRIBUTED not in head:
        raise SystemExit(f"{base.path}: distributedInfo not where expected")
    body = text[len(head) :]
    for rank in range(ranks):
        info = (
            f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {ranks}}}'
        ).encode()
        with (directory / f"rank-{rank}.json").open("wb") as out:
            out.write(head.replace(_DISTRIBUTED, info))
            out.write(body)
    marker.write_text(json.dumps({"version": RANKS_VERSION, "source": str(base.path)}) + "\n")
    return directory, base.copies, base.raw_bytes


def _rss_anon(pid: int) -> int:
    """RssAnon of a process in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_tracked(label: str, argv: list[str], poll_s: float = 0.1) -> TrackedRun:
    """Run ``argv``, sampling the RSS of the process and of each of its descendants."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        popen = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=PROJECT_ROOT)
        root = psutil.Process(popen.pid)
        peaks: dict[int, int] = {}
        anon_peak = 0
        tree_peak = 0
        done = threading.Event()

        def poll() -> None:
            nonlocal tree_peak, anon_peak
            while not done.is_set():
                anon_peak = max(anon_peak, _rss_anon(popen.pid))
                try:
                    members = [root, *root.children(recursive=True)]
                except psutil.Error:
                    members = []
                total = 0
                for member in members:
                    try:
                        rss = int(member.memory_info().rss)
                    except psutil.Error:
                        continue
                    total += rss
                    peaks[member.pid] = max(peaks.get(member.pid, 0), rss)
                tree_peak = max(tree_peak, total)
                done.wait(poll_s)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        _, status, usage = os.wait4(popen.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        poller.join()
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    parent = max(peaks.pop(popen.pid, 0), 0)
    return TrackedRun(
        label=label,
        returncode=os.waitstatus_to_exitcode(status),
        wall_s=round(wall, 2),
        parent_peak_mb=round(parent / 1e6, 1),
        parent_anon_peak_mb=round(anon_peak / 1e6, 1),
        worker_peaks_mb=sorted((round(v / 1e6, 1) for v in peaks.values()), reverse=True),
        tree_peak_mb=round(tree_peak / 1e6, 1),
        stderr_tail=stderr[-2000:],
    )


def _with_meta(run: TrackedRun, profile: Path) -> TrackedRun:
    meta_path = profile / "meta.json"
    if run.returncode != 0 or not meta_path.exists():
        return run
    meta = json.loads(meta_path.read_text())
    tasks = meta.get("tasks", {}).get("ranks", [])
    by_worker: dict[str, float] = {}
    for task in tasks:
        by_worker[task["worker"]] = max(
            by_worker.get(task["worker"], 0.0), task["worker_peak_rss_mb"]
        )
    timings = {k: v for k, v in meta.get("timings", {}).items() if isinstance(v, (int, float))}
    return TrackedRun(
        **{
            **asdict(run),
            "meta_worker_peaks_mb": sorted(by_worker.values(), reverse=True),
            "timings": timings,
        }
    )


ONE_TASK = """
import sys
from pathlib import Path
from perfledger.run.tasks import RankTask, run_rank_task
result = run_rank_task(RankTask(0, "kineto", Path(sys.argv[1]), Path(sys.argv[2])))
print(type(result).__name__)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--size-mb", type=float, default=100.0, help="raw JSON size per rank")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dask-workers", type=int, default=2, help="0: skip the Dask run")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args(argv)

    directory, copies, raw_bytes = rank_dir(args.workdir, args.ranks, args.size_mb)
    print(
        f"{args.ranks} ranks x {raw_bytes / 1e6:.1f} MB ({copies} copies of v100_rank1_ddp) "
        f"in {directory}"
    )
    python = sys.executable
    runs: list[TrackedRun] = []

    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
        one = run_tracked(
            "one rank task alone",
            [python, "-c", ONE_TASK, str(directory / "rank-0.json"), f"{scratch}/task"],
        )
        runs.append(one)
        print(f"one rank task alone: {one.wall_s} s, peak RSS {one.parent_peak_mb} MB")

    configs = [
        (f"{n} local worker{'s' if n > 1 else ''}", ["--workers", str(n)]) for n in args.workers
    ]
    if args.dask_workers:
        n = args.dask_workers
        configs.append(
            (f"Dask LocalCluster, {n} workers", ["--dask", "local", "--workers", str(n)])
        )
    profile = args.workdir / "cluster_profile"
    for label, options in configs:
        command = [python, "-m", "perfledger", "analyze", str(directory), "-o", str(profile)]
        run = _with_meta(run_tracked(label, [*command, "--force", *options]), profile)
        runs.append(run)
        print(
            f"{label}: {run.wall_s} s (exit {run.returncode}), parent peak {run.parent_peak_mb} MB"
            f" (private {run.parent_anon_peak_mb} MB),"
            f" worker peaks {run.worker_peaks_mb[:4]} MB (tasks say {run.meta_worker_peaks_mb})"
        )
        if run.returncode != 0:
            print(run.stderr_tail)
        else:
            print("  phases:", {k: round(v, 1) for k, v in run.timings.items()})

    result = {
        "ranks": args.ranks,
        "raw_mb_per_rank": round(raw_bytes / 1e6, 1),
        "copies": copies,
        "cpus": os.cpu_count(),
        "runs": [asdict(r) for r in runs],
    }
    out = args.workdir / f"cluster_result_{args.ranks}x{copies}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"figures written to {out}")
    return 0 if all(r.returncode == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
