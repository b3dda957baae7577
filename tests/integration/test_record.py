"""``perfledger record`` end to end: real torch on CPU, real processes, real signals.

Every run records tests/programs/tiny_train.py (or the examples) in a subprocess and checks the
profile directory: the step times of every step, which steps were profiled, the raw traces (read
here with the standard json module, independently of the importer), meta.json and counters.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "programs" / "tiny_train.py"
HEARTBEAT = ROOT / "tests" / "programs" / "heartbeat.py"
EXAMPLES = ROOT / "examples"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
RECORD = [sys.executable, "-m", "perfledger", "record"]

pytestmark = pytest.mark.slow


def run_record(
    cwd: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``perfledger record ARGS`` in ``cwd``; stdout and stderr captured."""
    done = subprocess.run(
        [*RECORD, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
        check=False,
    )
    return done


def step_times(profile: Path) -> list[dict[str, Any]]:
    return pq.read_table(profile / "tables" / "step_times.parquet").to_pylist()


def profiled_steps(profile: Path, rank: int = 0) -> list[int]:
    return [r["step"] for r in step_times(profile) if r["rank"] == rank and r["profiled"]]


def all_steps(profile: Path, rank: int = 0) -> list[int]:
    return [r["step"] for r in step_times(profile) if r["rank"] == rank]


def raw_trace(profile: Path, name: str = "rank0.json.gz") -> dict[str, Any]:
    with gzip.open(profile / "raw" / name, "rt") as handle:
        document: dict[str, Any] = json.load(handle)
    return document


def annotations(trace: dict[str, Any], prefix: str) -> list[str]:
    return sorted(
        (
            e["name"]
            for e in trace["traceEvents"]
            if e.get("cat") == "user_annotation" and e.get("name", "").startswith(prefix)
        ),
        key=lambda name: int(name.rsplit("#", 1)[1]),
    )


def categories(trace: dict[str, Any]) -> set[str]:
    return {str(e.get("cat")) for e in trace["traceEvents"]}


def meta(profile: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((profile / "meta.json").read_text())
    return document


def assert_nothing_half_written(directory: Path, profile: Path) -> None:
    """Only whole profiles beside the output: no staging or partial files left behind."""
    # (.perfledger/ is the experiments ledger, kept on purpose)
    leftovers = [
        p.name for p in directory.iterdir() if p.name.startswith(".") and p.name != ".perfledger"
    ]
    assert leftovers == [], leftovers
    assert not [p for p in profile.rglob("*") if "partial" in p.name]


def test_the_example_is_recorded_and_explained_step_by_step(tmp_path: Path) -> None:
    done = run_record(
        tmp_path,
        "-o", "prof_bs16", "--label", "bs=16", "--skip", "2", "--steps", "3", "--interleave",
        "--",
        sys.executable, str(EXAMPLES / "train_cnn.py"),
        "--epochs", "1", "--steps-per-epoch", "7", "--batch-size", "16",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    profile = tmp_path / "prof_bs16"
    assert f"profile: {profile}" in done.stdout
    # Seven optimizer steps end steps 0-6; the time after the last one is not a step.
    assert all_steps(profile) == [0, 1, 2, 3, 4, 5, 6]
    # interleaved: 1 warms up, 2 is recorded, 3 runs plain, 4 warms up, 5 is recorded, 6 runs
    # plain (the third recorded step, 8, is beyond the run)
    assert profiled_steps(profile) == [2, 5]
    actions = {r["step"]: r["profiled"] for r in step_times(profile)}
    assert not actions[3] and not actions[4] and not actions[6]
    times = step_times(profile)
    assert all(r["end_ns"] > r["start_ns"] for r in times)
    assert all(a["end_ns"] <= b["start_ns"] for a, b in zip(times, times[1:], strict=False))

    trace = raw_trace(profile)
    assert annotations(trace, "ProfilerStep#") == ["ProfilerStep#2", "ProfilerStep#5"]
    # default level: operators with shapes, and the data loader's own annotation kept
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    assert any("Input Dims" in e.get("args", {}) for e in ops)
    assert any(e["name"].startswith("enumerate(DataLoader)") for e in trace["traceEvents"])
    # The recorder's step times and the trace's step annotations share the Unix-epoch clock.
    base = int(trace["baseTimeNanoseconds"])
    step2 = next(e for e in trace["traceEvents"] if e.get("name") == "ProfilerStep#2")
    logged = next(r for r in times if r["step"] == 2)
    assert abs(base + step2["ts"] * 1000 - logged["start_ns"]) < 5_000_000

    info = meta(profile)
    assert info["label"] == "bs=16"
    assert info["command"][1:] == [str(EXAMPLES / "train_cnn.py"), "--epochs", "1",
                                   "--steps-per-epoch", "7", "--batch-size", "16"]  # fmt: skip
    assert info["options"] == {
        "skip": 2,
        "steps": 3,
        "level": "default",
        "flush_steps": 1,
        "interleave": True,
        "host_interval_s": 0.05,
    }
    assert info["torch"]["torch"].startswith("2.")
    assert info["distributed"]["ranks"] == [0]
    assert info["git"]["commit"]  # the example lives in this repository
    assert info["record"]["exit_code"] == 0
    # steps 2 and 5 against steps 3 and 6
    overhead = info["record"]["profiler_overhead"]
    assert overhead["compared"] == "each profiled step with the unprofiled step after it"
    assert (overhead["profiled_steps"], overhead["unprofiled_steps"]) == (2, 2)
    walls = {r["step"]: (r["end_ns"] - r["start_ns"]) / 1e6 for r in times}
    assert overhead["unprofiled_step_ms"] == round((walls[3] + walls[6]) / 2, 3)

    counters = pq.read_table(profile / "tables" / "counters.parquet").to_pylist()
    tree_cpu = [r for r in counters if (r["track"], r["name"]) == ("process_tree", "cpu_percent")]
    started, ended = info["record"]["started_ns"], info["record"]["ended_ns"]
    assert len(tree_cpu) > 10
    assert all(started <= r["ts_ns"] <= ended for r in tree_cpu)
    assert max(r["value"] for r in tree_cpu) > 20.0  # the program did compute
    assert any(r["track"] == "cpu_cores" for r in counters)

    # A CPU run: the host-only account of each step (no device).
    step_trace = (profile / "step_trace.csv").read_text().splitlines()
    header = step_trace[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in step_trace[1:]]
    stepped = [r for r in rows if r["step"] in ("2", "5")]
    assert len(stepped) == 2
    for row in stepped:
        assert row["device"] == "-1"
        for column in ("dataloader_ns", "forward_ns", "backward_ns", "optimizer_ns"):
            assert int(row[column]) > 0, column
    assert_nothing_half_written(tmp_path, profile)
    # the profiler library's own lines stay out of the program's output, kept in the profile
    assert "USDT" not in done.stdout + done.stderr
    assert "profiler_start" in (profile / "raw" / "profiler.log").read_text()
    summary = json.loads((profile / "summary.json").read_text())
    assert summary["source"]["files"] == ["raw/rank0.json.gz"]
    assert (profile / summary["source"]["files"][0]).is_file()


def test_the_readme_loop_finds_the_examples_bottleneck_and_its_fix_removes_it(
    tmp_path: Path,
) -> None:
    """The README's example: its top finding is the data loader, not the profiler; with the
    fix flag (--preprocessed) the finding is gone and the step is shorter."""
    example = [sys.executable, str(EXAMPLES / "train_cnn.py"), "--epochs", "1"]
    short = ["--steps-per-epoch", "12"]
    runs: dict[str, dict[str, Any]] = {}
    for name, fix in (("prof_example", []), ("prof_fixed", ["--preprocessed"])):
        done = run_record(tmp_path, "-o", name, "--no-ledger", "--", *example, *short, *fix)
        assert done.returncode == 0, done.stderr
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    findings = runs["prof_example"]["findings"]
    assert findings and findings[0]["id"] == "dataloader_bound", findings
    assert findings[0]["severity_pct"] > 30.0  # about half of every step decodes images
    assert "dataloader_bound" not in {f["id"] for f in runs["prof_fixed"]["findings"]}
    # the fix removes the decoding from the steps: well beyond any machine's step-to-step noise
    assert runs["prof_fixed"]["step_time_ms"] < 0.8 * runs["prof_example"]["step_time_ms"]
    # every file of the profile, the profiler's log too, has the mode the umask gives
    umask = os.umask(0)
    os.umask(umask)
    files = [p for p in (tmp_path / "prof_example").rglob("*") if p.is_file()]
    assert tmp_path / "prof_example" / "raw" / "profiler.log" in files
    assert {str(p): stat.S_IMODE(p.stat().st_mode) for p in files if
            stat.S_IMODE(p.stat().st_mode) != 0o666 & ~umask} == {}  # fmt: skip
    # a host-only run: the device rules are silent, listed as skipped
    skipped = {s["rule"] for s in runs["prof_example"]["advisor_skipped"]}
    assert {"host_cpu_saturated", "memory_bound_ops", "precision_mix"} <= skipped
    for summary in runs.values():
        assert summary["unprofiled_step_ms"] > 0
        overhead = summary["profiler_overhead_pct"]
        noise = summary["profiler_overhead_noise_pct"]
        if "profiler_overhead_high" in {f["id"] for f in summary["findings"]}:
            assert overhead - noise > 10.0  # only beyond its noise


@pytest.mark.parametrize(
    ("launcher", "example", "ranks"),
    [
        ([sys.executable], "infer_cnn.py", [0]),
        ([*TORCHRUN, "--nproc-per-node", "2"], "train_ddp.py", [0, 1]),
    ],
)
def test_the_other_examples_record(
    tmp_path: Path, launcher: list[str], example: str, ranks: list[int]
) -> None:
    args = ["--batches", "5"] if example == "infer_cnn.py" else ["--steps-per-epoch", "5"]
    done = run_record(
        tmp_path, "-o", "prof", "--skip", "1", "--steps", "2", "--",
        *launcher, str(EXAMPLES / example), *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for rank in ranks:
        assert all_steps(tmp_path / "prof", rank) == [0, 1, 2, 3, 4]
        assert profiled_steps(tmp_path / "prof", rank) == [1, 2]


def test_a_module_run_with_python_dash_m(tmp_path: Path) -> None:
    done = run_record(
        TINY.parent,
        "-o", str(tmp_path / "prof"), "--skip", "1", "--steps", "2", "--",
        sys.executable, "-m", "tiny_train", "--batches", "5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all_steps(tmp_path / "prof") == [0, 1, 2, 3, 4]
    assert profiled_steps(tmp_path / "prof") == [1, 2]


def test_torchrun_ranks_each_write_a_trace_and_both_are_analysed(tmp_path: Path) -> None:
    done = run_record(
        tmp_path,
        "-o", "prof", "--skip", "1", "--steps", "2", "--",
        *TORCHRUN, "--nproc-per-node", "2", str(TINY), "--mode", "ddp", "--batches", "5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    profile = tmp_path / "prof"
    # each rank's trace, and what the profiler library printed in both processes
    raw = sorted(p.name for p in (profile / "raw").iterdir())
    assert raw == ["profiler.log", "rank0.json.gz", "rank1.json.gz"]
    # both ranks ran on this machine: their traces name its clock, this boot's
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    for rank in (0, 1):
        trace = raw_trace(profile, f"rank{rank}.json.gz")
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["perfledger_clock"]["boot_id"] == boot_id
        assert annotations(trace, "ProfilerStep#") == ["ProfilerStep#1", "ProfilerStep#2"]
        assert all_steps(profile, rank) == [0, 1, 2, 3, 4]
        assert profiled_steps(profile, rank) == [1, 2]
    info = meta(profile)
    assert info["distributed"] == {"ranks": [0, 1], "world_size": 2, "backend": "gloo"}
    steps = pq.read_table(profile / "tables" / "steps.parquet").to_pylist()
    assert {r["rank"] for r in steps} == {0, 1}
    counters = pq.read_table(profile / "tables" / "counters.parquet").to_pylist()
    assert {r["rank"] for r in counters if r["track"] == "rank_process"} == {0, 1}


def test_an_inference_script_is_cut_at_its_batches(tmp_path: Path) -> None:
    done = run_record(
        tmp_path,
        "-o", "prof", "--skip", "1", "--steps", "3", "--",
        sys.executable, str(TINY), "--mode", "infer", "--batches", "6",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    profile = tmp_path / "prof"
    # Fetches 1-6 begin steps 0-5; the last, exhausted fetch ends step 5.
    assert all_steps(profile) == [0, 1, 2, 3, 4, 5]
    assert profiled_steps(profile) == [1, 2, 3]
    # Each profiled step begins with the fetch of its batch.
    events = raw_trace(profile)["traceEvents"]
    for n in (1, 2, 3):
        step = next(e for e in events if e.get("name") == f"ProfilerStep#{n}")
        fetches = [
            e
            for e in events
            if e.get("name", "").startswith("enumerate(DataLoader)")
            and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
        ]
        assert len(fetches) == 1
        assert fetches[0]["ts"] - step["ts"] < 1000  # within a millisecond of the step start


def test_explicit_marks_and_force_replace_a_profile(tmp_path: Path) -> None:
    profile = tmp_path / "prof"
    profile.mkdir()  # an older profile: --force replaces only a folder perfledger wrote
    (profile / "meta.json").write_text('{"format_version": 1, "tool_version": "0.1.0"}')
    (profile / "summary.json").write_text("{}")
    (profile / "report.html").write_text("an older profile")
    args = ["-o", "prof", "--skip", "1", "--steps", "2", "--",
            sys.executable, str(TINY), "--mode", "mark", "--batches", "6"]  # fmt: skip
    refused = run_record(tmp_path, *args)
    assert refused.returncode == 2
    assert "already exists" in refused.stderr and "--force" in refused.stderr
    assert (profile / "report.html").read_text() == "an older profile"

    done = run_record(tmp_path, "--force", *args)
    assert done.returncode == 0, done.stderr
    assert (profile / "report.html").read_text() != "an older profile"
    # Six marks: the first begins step 0, the next five end steps 0-4.
    assert all_steps(profile) == [0, 1, 2, 3, 4]
    assert profiled_steps(profile) == [1, 2]
    trace = raw_trace(profile)
    assert not any(e.get("name", "").startswith("Optimizer.step") for e in trace["traceEvents"])
    assert_nothing_half_written(tmp_path, profile)


@pytest.mark.parametrize("level", ["light", "full"])
def test_levels_choose_what_the_trace_holds(tmp_path: Path, level: str) -> None:
    done = run_record(
        tmp_path,
        "-o", "prof", "--level", level, "--skip", "1", "--steps", "2", "--",
        sys.executable, str(TINY), "--batches", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trace = raw_trace(tmp_path / "prof")
    assert annotations(trace, "ProfilerStep#") == ["ProfilerStep#1", "ProfilerStep#2"]
    found = categories(trace)
    if level == "light":
        assert "cpu_op" not in found  # annotations (and device activity) only
        assert any(e.get("name", "").startswith("Optimizer.step") for e in trace["traceEvents"])
    else:
        assert "cpu_op" in found
        assert "python_function" in found  # Python stacks
        assert any(e.get("name") == "[memory]" for e in trace["traceEvents"])  # allocations
    assert meta(tmp_path / "prof")["options"]["level"] == level


def test_a_program_that_raises_keeps_the_steps_before(tmp_path: Path) -> None:
    done = run_record(
        tmp_path,
        "-o", "prof", "--skip", "1", "--steps", "0", "--",
        sys.executable, str(TINY), "--batches", "12", "--raise-at", "6",
    )  # fmt: skip
    assert done.returncode == 1  # the program's own exit code
    assert "RuntimeError: failure in step 6" in done.stderr
    profile = tmp_path / "prof"
    assert all_steps(profile) == [0, 1, 2, 3, 4, 5]
    assert profiled_steps(profile) == [1, 2, 3, 4, 5]
    trace = raw_trace(profile)
    assert annotations(trace, "ProfilerStep#") == [f"ProfilerStep#{n}" for n in range(1, 6)]
    # The step the program died in is kept as work outside any step, not as a step.
    assert annotations(trace, "perfledger.incomplete_step#") == ["perfledger.incomplete_step#6"]
    summary = json.loads((profile / "summary.json").read_text())
    assert summary["step_count"] == 5
    assert meta(profile)["record"]["processes"][0]["end"].startswith("exception RuntimeError")
    assert_nothing_half_written(tmp_path, profile)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_launcher_stops_the_program_and_keeps_its_steps(
    tmp_path: Path, signum: int, code: int
) -> None:
    launcher = subprocess.Popen(
        [*RECORD, "-o", "prof", "--skip", "1", "--steps", "0", "--",
         sys.executable, str(TINY), "--batches", "20", "--hang-at", "5", "--announce"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert launcher.stdout is not None
    deadline = time.monotonic() + 240
    for line in launcher.stdout:
        if line.strip() == "STEP 5" or time.monotonic() > deadline:
            break
    time.sleep(0.3)  # inside step 5's endless wait
    launcher.send_signal(signum)
    out, err = launcher.communicate(timeout=240)
    assert launcher.returncode == code, err
    profile = tmp_path / "prof"
    assert all_steps(profile) == [0, 1, 2, 3, 4]
    assert profiled_steps(profile) == [1, 2, 3, 4]
    trace = raw_trace(profile)
    assert annotations(trace, "ProfilerStep#") == [f"ProfilerStep#{n}" for n in range(1, 5)]
    reason = meta(profile)["record"]["processes"][0]["end"]
    assert reason == (
        "exception KeyboardInterrupt" if signum == signal.SIGINT else "signal SIGTERM"
    )
    assert_nothing_half_written(tmp_path, profile)


def test_a_killed_torchrun_rank_leaves_the_other_ranks_trace(tmp_path: Path) -> None:
    done = run_record(
        tmp_path,
        "-o", "prof", "--skip", "1", "--steps", "0", "--",
        *TORCHRUN, "--nproc-per-node", "2", str(TINY), "--mode", "ddp", "--batches", "10",
        "--kill-rank", "1", "--kill-at", "4",
    )  # fmt: skip
    assert done.returncode != 0
    profile = tmp_path / "prof"
    # each rank's trace, and what the profiler library printed in both processes
    raw = sorted(p.name for p in (profile / "raw").iterdir())
    assert raw == ["profiler.log", "rank0.json.gz", "rank1.json.gz"]
    trace = raw_trace(profile)
    assert annotations(trace, "ProfilerStep#")[:3] == [f"ProfilerStep#{n}" for n in (1, 2, 3)]
    # Rank 1 died by SIGKILL in step 4: its step log still has steps 0-3, and its trace the
    # recorded steps 1-3, each written out as it ended.
    assert all_steps(profile, rank=1) == [0, 1, 2, 3]
    rank1 = raw_trace(profile, "rank1.json.gz")
    assert annotations(rank1, "ProfilerStep#") == [f"ProfilerStep#{n}" for n in (1, 2, 3)]
    assert all_steps(profile, rank=0)[:4] == [0, 1, 2, 3]
    ends = {p["rank"]: p["end"] for p in meta(profile)["record"]["processes"]}
    assert ends[1] == "killed"
    assert_nothing_half_written(tmp_path, profile)


@pytest.mark.parametrize(
    ("fault", "code", "ending"),
    [
        (["--exit-at", "5"], 3, "program exited with code 3"),
        (["--kill-rank", "0", "--kill-at", "5"], 137, "program killed by SIGKILL (exit code 137)"),
    ],
)
def test_a_program_that_ends_abruptly_keeps_its_written_steps(
    tmp_path: Path, fault: list[str], code: int, ending: str
) -> None:
    # os._exit and SIGKILL run no exit handler: the trace exists only because every recorded
    # step was written out as it ended.
    done = run_record(
        tmp_path, "-o", "prof", "--skip", "1", "--steps", "0", "--",
        sys.executable, str(TINY), "--batches", "12", *fault,
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    assert f"{ending}: 5 steps, 4 profiled, 4 kept (rank 0: killed or os._exit)" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    profile = tmp_path / "prof"
    assert all_steps(profile) == [0, 1, 2, 3, 4]
    assert profiled_steps(profile) == [1, 2, 3, 4]
    trace = raw_trace(profile)
    assert annotations(trace, "ProfilerStep#") == [f"ProfilerStep#{n}" for n in range(1, 5)]
    summary = json.loads((profile / "summary.json").read_text())
    assert summary["step_count"] == 4
    info = meta(profile)
    assert info["record"]["exit_code"] == code
    assert info["record"]["processes"][0]["end"] == "killed"
    assert info["record"]["processes"][0]["traces"] == ["rank0.json.gz"]
    assert_nothing_half_written(tmp_path, profile)


def test_the_trace_written_once_at_the_end_of_the_window_is_lost_to_sigkill(
    tmp_path: Path,
) -> None:
    # --flush-steps 0: one trace for the whole window, written when it ends (or at exit).
    done = run_record(
        tmp_path, "-o", "prof", "--skip", "1", "--steps", "0", "--flush-steps", "0", "--",
        sys.executable, str(TINY), "--batches", "12", "--kill-rank", "0", "--kill-at", "5",
    )  # fmt: skip
    assert done.returncode == 137
    assert "5 steps, 4 profiled, 0 kept" in done.stdout
    assert "no trace was written" in done.stdout
    assert list(tmp_path.iterdir()) == []


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_program_dies_with_a_killed_launcher_and_its_staging_goes_next_time(
    tmp_path: Path,
) -> None:
    beat = tmp_path / "program.pid"
    launcher = subprocess.Popen(
        [*RECORD, "-o", "prof", "--", sys.executable, str(HEARTBEAT), str(beat), "--child"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    child_beat = beat.with_name(beat.name + ".child")
    try:
        assert wait_for(lambda: beat.exists() and child_beat.exists(), 120), launcher.stderr
        program, grandchild = int(beat.read_text()), int(child_beat.read_text())
        assert running(program) and running(grandchild)
        launcher.kill()
        launcher.wait(timeout=30)
        # The program by the kernel's parent-death signal, its own child by its watch.
        assert wait_for(lambda: not running(program), 5)
        assert wait_for(lambda: not running(grandchild), 5)
    finally:
        for pid_file in (beat, child_beat):
            if pid_file.exists() and running(int(pid_file.read_text())):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    staging = tmp_path / f".prof.record-{launcher.pid}"
    assert staging.is_dir()  # left behind by the killed launcher

    done = run_record(tmp_path, "-o", "prof", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert f"removed the staging folders of recordings that died: {staging.name}" in done.stdout
    assert not staging.exists()


def test_only_dead_recordings_staging_folders_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / ".prof.record-99999999"  # beyond any pid: no such process
    dead.mkdir()
    (dead / "steps-4242.jsonl").write_text('{"event":"start","pid":4242}\n')
    (dead / "trace-4242-00000.json").write_text('{"traceEvents": []}')
    live = tmp_path / f".prof.record-{os.getpid()}"  # this test's own process runs
    live.mkdir()
    (live / "steps-4242.jsonl").write_text("")
    foreign = tmp_path / ".notes.record-99999999"  # named like ours, holding something else
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    (tmp_path / ".file.record-99999999").write_text("a file, not a staging folder")
    (tmp_path / "data").mkdir()
    done = run_record(tmp_path, "-o", "prof", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert not dead.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, foreign.name, ".file.record-99999999", "data"]
    )
    assert (foreign / "notes.txt").read_text() == "mine"


def test_exit_codes_pass_through_and_no_step_means_no_profile(tmp_path: Path) -> None:
    done = run_record(
        tmp_path, "-o", "prof", "--", sys.executable, "-c", "import torch, sys; sys.exit(3)"
    )
    assert done.returncode == 3
    assert "the program failed to start or exited before its first step (exit code 3" in done.stdout
    assert "no step mark" not in done.stdout
    assert list(tmp_path.iterdir()) == []
    quiet = run_record(tmp_path, "-o", "prof", "--", sys.executable, "-c", "import torch")
    assert quiet.returncode == 0
    assert "no step mark was found: the program ended (exit code 0) without a step" in (
        quiet.stdout
    )
    assert "failed to start" not in quiet.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_program_that_cannot_start_is_said_so(tmp_path: Path) -> None:
    done = run_record(tmp_path, "-o", "prof", "--", sys.executable, "nosuch.py")
    assert done.returncode == 2
    assert "the program failed to start or exited before its first step (exit code 2" in done.stdout
    assert "no step mark" not in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_program_that_dies_before_the_profiled_steps_writes_nothing(tmp_path: Path) -> None:
    done = run_record(
        tmp_path, "-o", "prof", "--skip", "5", "--steps", "2", "--",
        sys.executable, str(TINY), "--batches", "8", "--raise-at", "2",
    )  # fmt: skip
    assert done.returncode == 1
    assert "program exited with code 1: 2 steps, 0 profiled" in done.stdout
    assert (
        "the program ended after 2 steps, before the first profiled one (--skip 5); "
        "exit code 1; nothing written" in done.stdout
    )
    assert list(tmp_path.iterdir()) == []


def test_missing_programs_and_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    missing = run_record(tmp_path, "--", "no-such-program-here")
    assert missing.returncode == 127
    assert "perfledger: error: record: cannot run 'no-such-program-here'" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = run_record(tmp_path, "--steps", "-3", "--", sys.executable, "-c", "pass")
    assert bad.returncode == 2
    assert (
        bad.stderr.strip() == "perfledger: error: record: --steps must be >= 0, 0 for all (got -3)"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = 'yes'\n")
    done = run_record(
        tmp_path,
        "--", sys.executable, "-c", "import os; print('site', os.environ.get('SITE_RAN'))",
        env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "site yes" in done.stdout


PROGRAM_WITH_API = """
import sys, torch, perfledger
square = torch.randn(64, 64)
with perfledger.profile(sys.argv[1], steps=3, skip=1, label="api") as prof:
    for _ in range(6):
        torch.tanh(square @ square)
        prof.step()
print("path", prof.path)
"""


def test_the_python_api_writes_a_profile(tmp_path: Path) -> None:
    program = tmp_path / "api_program.py"
    program.write_text(PROGRAM_WITH_API)
    done = subprocess.run(
        [sys.executable, str(program), "api_prof"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    profile = tmp_path / "api_prof"
    assert f"path {profile}" in done.stdout
    # __enter__ begins step 0; six prof.step() calls end steps 0-5.
    assert all_steps(profile) == [0, 1, 2, 3, 4, 5]
    assert profiled_steps(profile) == [1, 2, 3]
    assert meta(profile)["label"] == "api"
    assert_nothing_half_written(tmp_path, profile)


def test_the_python_api_under_record_marks_the_recorders_steps(tmp_path: Path) -> None:
    program = tmp_path / "api_program.py"
    program.write_text(PROGRAM_WITH_API)
    done = run_record(
        tmp_path, "-o", "prof", "--skip", "1", "--steps", "2", "--",
        sys.executable, str(program), "api_prof",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "api_prof").exists()  # one profiler at a time: the recorder's
    assert "path None" in done.stdout
    assert all_steps(tmp_path / "prof") == [0, 1, 2, 3, 4]
    assert profiled_steps(tmp_path / "prof") == [1, 2]


def test_record_is_a_perfledger_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "record", "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--host-interval" in done.stdout
