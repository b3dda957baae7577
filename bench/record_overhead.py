"""What ``perfledger record`` costs a program: step times without a profiler, with plain
torch.profiler, and under ``perfledger record`` with the same options, in the same run.

    python bench/record_overhead.py [--rounds 3] [--batches 60] [--skip 10] [--steps 20]
                                    [--model cnn|mlp] [--threads 1] [--level default]
                                    [--levels] [--out FILE]

The workload is the example CNN (examples/train_cnn.py's model and data; ``--model mlp``: a
deep MLP of small operators, the profiler's worst case) trained for ``--batches`` steps with
``--threads`` intra-op threads (1 by default: steadier figures on a shared machine). It times
every step itself, wall and CPU time (loop top to loop top: the batch fetch, the optimizer step
and the profiler's step call included), so the three modes are measured by the same clocks in
the same place:

- ``none``: no profiler at all;
- ``torch``: ``torch.profiler.profile`` with torch's own schedule (skip, one warm-up step,
  ``--steps`` recorded) and exactly the settings perfledger uses for the level, trace exported
  as JSON;
- ``perfledger``: ``perfledger record --skip S --steps M --level L -- python <workload>``, the
  workload unchanged (the recorder's hooks, step log and host sampler all running).

Reported per mode: the median step time, wall and CPU, over the recorded window (steps
skip..skip+steps-1) and over the steps after it, pooled over rounds (the modes run
interleaved, in a rotating order, to spread the noise of a shared machine). Ratios: torch / none,
perfledger / none and perfledger / torch over the window (the target: perfledger adds at most
1 % to plain torch.profiler), and perfledger / none after the window (what the hooks and the
sampler cost unprofiled steps). ``--levels`` adds perfledger at light, default and full.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIGURES = ("window_ms", "after_ms", "cpu_window_ms", "cpu_after_ms")
BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
EXAMPLES = ROOT / "examples"


# -- the workload (run in a child process) --------------------------------------------------


def workload(args: argparse.Namespace) -> None:
    """Train ``--model`` for ``--batches`` steps; write each step's wall and CPU time (s)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    sys.path.insert(0, str(EXAMPLES))
    from train_cnn import SyntheticImages, small_cnn  # type: ignore[import-not-found]

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model: torch.nn.Module
    if args.model == "cnn":
        dataset: Any = SyntheticImages(args.batch_size * args.batches)
        model = small_cnn(args.width)
    else:  # many small operators: the profiler's per-operator cost dominates
        size = args.batch_size * args.batches
        dataset = TensorDataset(torch.randn(size, 64), torch.randint(0, 10, (size,)))
        layers: list[torch.nn.Module] = []
        for _ in range(24):
            layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 10))
    loader = DataLoader(dataset, batch_size=args.batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    profiler = _plain_torch_profiler(args) if args.workload == "torch" else None
    if profiler is not None:
        profiler.start()
    times: list[float] = []
    cpu_times: list[float] = []
    last, last_cpu = time.perf_counter(), time.process_time()
    for images, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
        if profiler is not None:
            profiler.step()
        now, now_cpu = time.perf_counter(), time.process_time()
        times.append(now - last)
        cpu_times.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    if profiler is not None:
        profiler.stop()
    Path(args.times_out).write_text(json.dumps({"wall": times, "cpu": cpu_times}))


def _plain_torch_profiler(args: argparse.Namespace) -> Any:
    """torch.profiler as a user would write it, with perfledger's settings for the level."""
    import torch.profiler

    from perfledger.record.inprocess import profiler_settings

    trace_path = Path(args.times_out).with_suffix(".trace.json")
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(
            skip_first=max(args.skip - 1, 0),
            wait=0,
            warmup=1 if args.skip > 0 else 0,
            active=args.steps,
            repeat=1,
        ),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_path)),
        **profiler_settings(args.level),
    )


# -- the driver -----------------------------------------------------------------------------


def run_mode(
    mode: str, level: str, args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, list[float]], float]:
    """One run of the workload in ``mode``: its steps' wall and CPU times (s), its wall time."""
    times_out = workdir / f"{mode}-{level}-{time.monotonic_ns()}.json"
    workload_command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--workload",
        "torch" if mode == "torch" else "none",
        "--times-out",
        str(times_out),
        "--batches",
        str(args.batches),
        "--batch-size",
        str(args.batch_size),
        "--width",
        str(args.width),
        "--skip",
        str(args.skip),
        "--steps",
        str(args.steps),
        "--level",
        level,
        "--threads",
        str(args.threads),
        "--model",
        args.model,
    ]
    if mode == "perfledger":
        command = [
            sys.executable,
            "-m",
            "perfledger",
            "record",
            "-o",
            str(workdir / f"profile-{level}"),
            "--force",
            "--skip",
            str(args.skip),
            "--steps",
            str(args.steps),
            "--level",
            level,
            "--",
            *workload_command,
        ]
    else:
        command = workload_command
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if not times_out.exists():  # the workload itself failed
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
    return json.loads(times_out.read_text()), wall


def step_samples(times: dict[str, list[float]], skip: int, steps: int) -> dict[str, list[float]]:
    """Step wall and CPU times (ms) of the recorded window and of the steps after it.

    CPU time (all threads of the program) measures the work a profiler adds even when other
    jobs share the machine and stretch wall times.
    """
    samples = {}
    for clock, prefix in (("wall", ""), ("cpu", "cpu_")):
        ms = [1000 * t for t in times[clock]]
        samples[f"{prefix}window_ms"] = ms[skip : skip + steps]
        # The first step after the window runs while the profiler tears down: left out.
        samples[f"{prefix}after_ms"] = ms[skip + steps + 1 :]
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--model",
        choices=("cnn", "mlp"),
        default="cnn",
        help="cnn: the example CNN (heavy convolutions); mlp: 49 small operators per forward",
    )
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads; 1 keeps the figures steady on a shared machine",
    )
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--level", default="default", choices=("light", "default", "full"))
    parser.add_argument("--levels", action="store_true", help="also perfledger at every level")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "out" / "record_overhead.json")
    parser.add_argument("--workload", choices=("none", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--times-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload:
        workload(args)
        return
    if args.batches < args.skip + args.steps + 3:
        parser.error("--batches must leave at least 3 steps after the recorded window")

    runs: list[tuple[str, str]] = [
        ("none", args.level),
        ("torch", args.level),
        ("perfledger", args.level),
    ]
    if args.levels:
        runs += [
            ("perfledger", level) for level in ("light", "default", "full") if level != args.level
        ]
    results: dict[str, list[dict[str, float]]] = {f"{m}/{lv}": [] for m, lv in runs}
    pooled: dict[str, dict[str, list[float]]] = {
        f"{m}/{lv}": {f: [] for f in FIGURES} for m, lv in runs
    }
    with tempfile.TemporaryDirectory(prefix="record-overhead-") as tmp:
        workdir = Path(tmp)
        for round_index in range(args.rounds):
            shift = round_index % len(runs)
            for mode, level in runs[shift:] + runs[:shift]:
                times, wall = run_mode(mode, level, args, workdir)
                samples = step_samples(times, args.skip, args.steps)
                for name, values in samples.items():
                    pooled[f"{mode}/{level}"][name] += values
                figures = {name: statistics.median(v) for name, v in samples.items()}
                results[f"{mode}/{level}"].append({**figures, "wall_s": wall})
                print(
                    f"round {round_index + 1} {mode:>10} {level:>7}: "
                    f"window {figures['window_ms']:7.1f} ms (cpu {figures['cpu_window_ms']:7.1f})"
                    f"  after {figures['after_ms']:7.1f} ms (cpu {figures['cpu_after_ms']:7.1f})"
                    f"  run {wall:5.1f} s",
                    flush=True,
                )

    def summary(key: str, figure: str) -> float:
        # The median of every step of every round: steadier than a median of run medians.
        return statistics.median(pooled[key][figure])

    level = args.level
    none, torch, ours = (f"{m}/{level}" for m in ("none", "torch", "perfledger"))
    report: dict[str, Any] = {
        "workload": {
            "batches": args.batches,
            "batch_size": args.batch_size,
            "model": args.model,
            "width": args.width,
            "threads": args.threads,
            "skip": args.skip,
            "steps": args.steps,
            "level": level,
            "rounds": args.rounds,
            "cpu_count": os.cpu_count(),
        },
        "median_step_ms": {key: {f: round(summary(key, f), 2) for f in FIGURES} for key in results},
        "ratios": {
            f"{clock}{name}": round(summary(a, f"{clock}{x}") / summary(b, f"{clock}{x}"), 4)
            for clock in ("", "cpu_")
            for name, a, b, x in (
                ("torch_vs_none", torch, none, "window_ms"),
                ("perfledger_vs_none", ours, none, "window_ms"),
                ("perfledger_vs_torch", ours, torch, "window_ms"),
                ("perfledger_unprofiled_vs_none", ours, none, "after_ms"),
            )
        },
        "levels_vs_none": {
            key.split("/")[1]: {
                clock: round(summary(key, f"{p}window_ms") / summary(none, f"{p}window_ms"), 4)
                for clock, p in (("wall", ""), ("cpu", "cpu_"))
            }
            for key in results
            if key.startswith("perfledger/")
        },
        "runs": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps({k: report[k] for k in ("median_step_ms", "ratios", "levels_vs_none")}, indent=2)
    )
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
