"""``perfledger diff`` in a subprocess: real trace pairs, the --fail-on gate, bad input.

Expected figures are recomputed here from the profiles' CSV files with the csv module (step
walls from step_trace.csv, task times from op_summary.csv), not read from diff.json.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.cli import perfledger as _perfledger
from tests.kineto_gen import complete, cpu_op, device_task, runtime, write_kineto
from tests.paths import data_file


def analyze(trace: Path, out: Path) -> Path:
    done = perfledger("analyze", trace, "-o", out, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("profiles")
    return {
        "a100": analyze(data_file("kineto/a100_rank3_control.json.gz"), root / "a100"),
        "v100": analyze(data_file("kineto/v100_rank1_test.json.gz"), root / "v100"),
        "npu": analyze(data_file("ascend/torch_npu_text/level1/rank0_ascend_pt"), root / "npu"),
    }


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def step_walls_ms(profile: Path) -> list[float]:
    return [int(r["wall_ns"]) / 1e6 for r in rows(profile / "step_trace.csv") if r["step"] != "-1"]


def share(profile: Path, column: str) -> float:
    steps = [r for r in rows(profile / "step_trace.csv") if r["step"] != "-1"]
    return 100 * sum(int(r[column]) for r in steps) / sum(int(r["wall_ns"]) for r in steps)


def diff(base: Path, current: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return perfledger("diff", base, current, "-o", out, *extra, cwd=out.parent)


def document(out: Path) -> dict:
    return json.loads((out / "diff.json").read_text(encoding="utf-8"))


def test_real_gpu_pair_regression_fails_the_gate(profiles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "a100_v100"
    done = diff(profiles["a100"], profiles["v100"], out, "--fail-on", "step_time>+5%")
    assert done.returncode == 1, done.stderr
    assert "FAILED step_time>+5%" in done.stdout
    result = document(out)
    base_median = statistics.median(step_walls_ms(profiles["a100"]))
    current_median = statistics.median(step_walls_ms(profiles["v100"]))
    step = result["step_time_ms"]
    assert step["base"] == round(base_median, 3)
    assert step["current"] == round(current_median, 3)
    assert step["change_pct"] == round(100 * (current_median / base_median - 1), 2)
    assert step["within_noise"] is False
    (failed,) = result["failed"]
    assert failed["threshold"] == "step_time>+5%"
    idle = result["categories"]["idle"]
    assert idle["base_pct"] == round(share(profiles["a100"], "idle_ns"), 2)
    assert idle["current_pct"] == round(share(profiles["v100"], "idle_ns"), 2)
    assert (out / "diff.html").stat().st_size > 500_000  # ECharts inlined


def test_real_gpu_pair_improvement_passes(profiles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "v100_a100"
    done = diff(profiles["v100"], profiles["a100"], out, "--fail-on", "step_time>+5%", "--no-html")
    assert done.returncode == 0, done.stderr
    result = document(out)
    assert result["failed"] == []
    assert [c["status"] for c in result["checks"]] == ["ok"]
    assert not (out / "diff.html").exists()


def test_raw_traces_compare_like_their_profiles(profiles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "raw"
    done = diff(
        data_file("kineto/a100_rank3_control.json.gz"),
        data_file("kineto/v100_rank1_test.json.gz"),
        out,
        "--no-html",
    )
    assert done.returncode == 0, done.stderr
    from_profiles = tmp_path / "dirs"
    assert diff(profiles["a100"], profiles["v100"], from_profiles, "--no-html").returncode == 0
    raw, dirs = document(out), document(from_profiles)
    assert raw["step_time_ms"] == dirs["step_time_ms"]
    assert raw["categories"] == dirs["categories"]
    assert raw["op_classes"] == dirs["op_classes"]
    assert raw["gaps"] == dirs["gaps"]


def class_ms_per_step(profile: Path, words: Sequence[str]) -> float:
    """Time per step of the kernels whose name holds one of ``words``, from op_summary.csv.

    Ascend names the memset a convolution or matmul issues after it ("Conv2DBackpropFilter6_
    MemSet", "aclnnMm_MatMulCommon_MemSet"): those are memsets, not the op's work.
    """
    windows = {
        (r["rank"], r["step"]) for r in rows(profile / "step_trace.csv") if r["step"] != "-1"
    }
    total = sum(
        int(r["dur_ns"])
        for r in rows(profile / "op_summary.csv")
        if r["step"] != "-1"
        and r["kind"] == "kernel"
        and any(w in r["name"] for w in words)
        and not r["name"].endswith("MemSet")
    )
    return total / 1e6 / len(windows)


def test_ascend_against_gpu_by_op_class(profiles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "npu_a100"
    done = diff(profiles["npu"], profiles["a100"], out)
    assert done.returncode == 0, done.stderr
    result = document(out)
    assert result["base"]["source_kind"] == "torch_npu_text"
    assert result["current"]["source_kind"] == "kineto"
    classes = {c["class"]: c for c in result["op_classes"]}
    # Ascend's Conv2D* kernels against no convolution at all in the A100 recommender trace
    assert classes["conv"]["base_ms"] == round(class_ms_per_step(profiles["npu"], ["Conv2D"]), 3)
    assert classes["conv"]["current_ms"] == 0.0
    assert classes["matmul"]["base_ms"] == round(class_ms_per_step(profiles["npu"], ["MatMul"]), 3)
    assert classes["matmul"]["current_ms"] > 0
    # HCCL against NCCL: both runs' communication lands in one class
    assert classes["communication"]["base_ms"] > 0 and classes["communication"]["current_ms"] > 0
    assert "op classes per step" in done.stdout


def test_raw_ascend_folder_against_gpu_trace(tmp_path: Path) -> None:
    out = tmp_path / "raw_npu"
    done = diff(
        data_file("ascend/torch_npu_text/level1/rank0_ascend_pt"),
        data_file("kineto/a100_rank3_control.json.gz"),
        out,
        "--no-html",
        "--fail-on",
        "step_time>+5%",
    )
    assert done.returncode == 0, done.stderr
    assert document(out)["step_time_ms"]["change_pct"] < -40


# The gate on synthetic traces: five steps of known length -------------------------------------


def synthetic_trace(path: Path, walls_us: Sequence[float]) -> Path:
    """One step annotation per wall; one kernel in the first half of each step."""
    events = []
    t = 1000.0
    for i, wall in enumerate(walls_us):
        events.append(complete("user_annotation", f"ProfilerStep#{i + 1}", t, wall))
        events.append(runtime("cudaLaunchKernel", t + 1, 2, correlation=i + 1))
        events.append(
            device_task("kernel", "ampere_sgemm_128x64_nn", t + 5, wall / 2, correlation=i + 1)
        )
        t += wall
    return write_kineto(path, events)


NOISY = [1000.0, 1100.0, 900.0, 1050.0, 950.0]


def test_gate_within_noise_does_not_fail(tmp_path: Path) -> None:
    base = synthetic_trace(tmp_path / "base.json", NOISY)
    current = synthetic_trace(tmp_path / "current.json", [w + 60 for w in NOISY])
    out = tmp_path / "noisy"
    done = diff(base, current, out, "--fail-on", "step_time>+5%", "--no-html")
    assert done.returncode == 0, done.stdout + done.stderr
    (check,) = document(out)["checks"]
    assert check["value"] == 6.0
    assert check["status"] == "within_noise"
    assert "within noise step_time>+5%" in done.stdout
    forced = diff(base, current, out, "--fail-on", "step_time>+5%", "--ignore-noise", "--no-html")
    assert forced.returncode == 1
    assert document(out)["failed"][0]["threshold"] == "step_time>+5%"


def test_gate_beyond_noise_fails_and_names_every_crossed_threshold(tmp_path: Path) -> None:
    quiet = [1000.0, 1010.0, 990.0, 1005.0, 995.0]
    base = synthetic_trace(tmp_path / "base.json", quiet)
    current = synthetic_trace(tmp_path / "current.json", [w * 1.2 for w in quiet])
    out = tmp_path / "quiet"
    done = diff(
        base,
        current,
        out,
        "--no-html",
        "--fail-on",
        "step_time>+5%",
        "--fail-on",
        "throughput<-10%",
        "--fail-on",
        "idle>+2pp",
    )
    assert done.returncode == 1
    result = document(out)
    assert [c["threshold"] for c in result["failed"]] == ["step_time>+5%", "throughput<-10%"]
    # the kernel fills half of every step in both runs: the idle share does not move
    assert result["checks"][2]["status"] == "ok"
    assert "FAILED step_time>+5%" in done.stdout
    assert "FAILED throughput<-10%" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on", "step_time>5"], "--fail-on 'step_time>5'"),
        (["--fail-on", "latency>+5%"], "unknown metric 'latency'"),
    ],
)
def test_bad_threshold_exits_2(tmp_path: Path, args: list[str], message: str) -> None:
    trace = synthetic_trace(tmp_path / "t.json", NOISY)
    done = diff(trace, trace, tmp_path / "out", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_missing_and_corrupt_inputs_exit_2(profiles: dict[str, Path], tmp_path: Path) -> None:
    done = diff(tmp_path / "nowhere", profiles["a100"], tmp_path / "out")
    assert done.returncode == 2
    assert "nowhere: no such profile directory or trace" in done.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.json").write_text('{"format_version": 1}')
    (broken / "summary.json").write_text("{not json")
    done = diff(broken, profiles["a100"], tmp_path / "out")
    assert done.returncode == 2
    assert f"{broken / 'summary.json'}: cannot read" in done.stderr
    assert "Traceback" not in done.stderr
    (broken / "meta.json").write_text("{}")
    done = diff(broken, profiles["a100"], tmp_path / "out")
    assert done.returncode == 2
    assert "no valid format_version: not a perfledger profile" in done.stderr


def test_users_files_of_the_output_names_are_never_replaced(tmp_path: Path) -> None:
    base = synthetic_trace(tmp_path / "base.json", NOISY)
    current = synthetic_trace(tmp_path / "current.json", [w * 0.9 for w in NOISY])
    out = tmp_path / "work"
    out.mkdir()
    mine = b'{"format_version": 1, "my": "notes"}\n'
    (out / "diff.json").write_bytes(mine)
    done = perfledger("diff", base, current, cwd=out)  # the default folder: the current one
    assert done.returncode == 2
    assert "error: diff.json exists and was not written by perfledger" in done.stderr
    assert "-o" in done.stderr and "Traceback" not in done.stderr
    assert (out / "diff.json").read_bytes() == mine
    assert sorted(p.name for p in out.iterdir()) == ["diff.json"]
    # a page of the user's named diff.html, and a link, are refused the same way
    (out / "diff.json").unlink()
    page = b"<html>my own diff of the configs</html>"
    (out / "diff.html").write_bytes(page)
    done = perfledger("diff", base, current, cwd=out)
    assert done.returncode == 2 and "diff.html exists and was not written" in done.stderr
    assert (out / "diff.html").read_bytes() == page and not (out / "diff.json").exists()
    # --no-html leaves diff.html alone: only diff.json is written
    assert perfledger("diff", base, current, "--no-html", cwd=out).returncode == 0
    assert (out / "diff.html").read_bytes() == page
    (out / "diff.html").unlink()
    (out / "diff.html").symlink_to(out / "diff.json")
    done = perfledger("diff", base, current, cwd=out)
    assert done.returncode == 2 and "diff.html exists and is not a file perfledger wrote" in (
        done.stderr
    )
    # perfledger's own outputs of an earlier diff are replaced: a CI job runs it again
    (out / "diff.html").unlink()
    assert perfledger("diff", base, current, cwd=out).returncode == 0
    first = (out / "diff.json").read_bytes()
    again = perfledger("diff", current, base, cwd=out)
    assert again.returncode == 0, again.stderr
    assert (out / "diff.json").read_bytes() != first
    assert document(out)["base"]["path"] == str(current)


def test_unknown_figure_writes_json_and_exits_2(tmp_path: Path) -> None:
    flat = tmp_path / "flat.json"
    write_kineto(
        flat,
        [
            runtime("cudaLaunchKernel", 1, 2, correlation=1),
            device_task("kernel", "k", 5, 10, correlation=1),
        ],
    )
    steps = synthetic_trace(tmp_path / "steps.json", NOISY)
    out = tmp_path / "flat"
    done = diff(flat, steps, out, "--no-html", "--fail-on", "step_time>+5%")
    assert done.returncode == 2
    assert "cannot evaluate --fail-on step_time>+5%" in done.stderr
    assert document(out)["checks"][0]["status"] == "unknown"


def test_outputs_are_deterministic(tmp_path: Path) -> None:
    base = synthetic_trace(tmp_path / "base.json", NOISY)
    current = synthetic_trace(tmp_path / "current.json", [w * 0.9 for w in NOISY])
    first, second = tmp_path / "first", tmp_path / "second"
    assert diff(base, current, first).returncode == 0
    assert diff(base, current, second).returncode == 0
    for name in ("diff.json", "diff.html"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def perfledger(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return _perfledger(*args, cwd=cwd, inherit_env=True)


# Workloads and batch sizes ---------------------------------------------------------------------


def test_different_workloads_warn_in_terminal_json_and_page(
    profiles: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "npu_a100_warned"
    done = diff(profiles["npu"], profiles["a100"], out)
    assert done.returncode == 0, done.stderr
    result = document(out)
    # Ascend's torch_npu trace against a CUDA trace: the vendors differ, and no op type of the
    # Ascend run (Conv2D, aclnn... host ops) is an op type of the A100 run (aten:: ops)
    npu_ops = {r["name"] for r in rows(profiles["npu"] / "op_statistic.csv")}
    a100_ops = {r["name"] for r in rows(profiles["a100"] / "op_statistic.csv")}
    common = round(100 * len(npu_ops & a100_ops) / len(npu_ops | a100_ops))
    assert result["workload"]["same"] is False
    assert result["workload"]["differences"] == [
        "vendors ascend vs cuda",
        f"{common}% of op types in common",
    ]
    warning = result["workload_warning"]
    assert warning.startswith("different workloads (vendors ascend vs cuda;")
    lines = [line for line in done.stdout.splitlines() if "different workloads" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: different workloads")
    page = (out / "diff.html").read_text(encoding="utf-8")
    assert 'id="banner-workload"' in page and "different workloads (vendors ascend" in page


def test_same_workload_has_no_warning(profiles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "npu_ranks"
    rank1 = analyze(data_file("ascend/torch_npu_text/level1/rank1_ascend_pt"), tmp_path / "npu1")
    done = diff(profiles["npu"], rank1, out, "--no-html")
    assert done.returncode == 0, done.stderr
    result = document(out)
    assert result["workload_warning"] is None
    assert result["workload"]["same"] is True
    assert "different workloads" not in done.stdout


def conv_trace(path: Path, walls_us: Sequence[float], batch: int) -> Path:
    """A CPU run: one step annotation per wall, holding a data-loader op on one sample and the
    model's first layer, a convolution over ``batch`` images of 3x32x32."""
    events = []
    t = 1000.0
    for i, wall in enumerate(walls_us):
        events.append(complete("user_annotation", f"ProfilerStep#{i + 1}", t, wall))
        events.append(
            cpu_op(
                "aten::normal_", t + 1, 2, external_id=3 * i + 1, **{"Input Dims": [[3, 32, 32]]}
            )
        )
        dims = [[batch, 3, 32, 32], [8, 3, 3, 3], [8]]
        events.append(
            cpu_op("aten::conv2d", t + 5, wall / 2, external_id=3 * i + 2, **{"Input Dims": dims})
        )
        t += wall
    return write_kineto(path, events)


QUIET = [1000.0, 1010.0, 990.0, 1005.0, 995.0]


def test_per_sample_compares_time_per_sample(tmp_path: Path) -> None:
    base = conv_trace(tmp_path / "bs32.json", QUIET, 32)
    # twice the batch in 1.6 times the step: 20 % less time per sample
    current = conv_trace(tmp_path / "bs64.json", [1.6 * w for w in QUIET], 64)
    out = tmp_path / "bs"
    plain = diff(base, current, out, "--no-html")
    assert plain.returncode == 0, plain.stderr
    result = document(out)
    assert result["workload"]["base"]["batch_size"] == 32
    assert result["workload"]["current"]["batch_size"] == 64
    assert result["workload"]["batch_sizes_differ"] is True
    assert result["per_sample"] is None
    assert "note: batch sizes differ (32 vs 64 samples per step)" in plain.stdout
    assert result["workload_warning"] is None  # another batch size is the same workload
    per_sample = diff(
        base, current, out, "--no-html", "--per-sample", "--fail-on", "sample_time>+5%"
    )
    assert per_sample.returncode == 0, per_sample.stdout + per_sample.stderr
    result = document(out)
    figures = result["per_sample"]
    assert figures["time_ms"]["base"] == round(1000.0 / 32 / 1000, 5)  # 31.25 µs
    assert figures["time_ms"]["current"] == round(1600.0 / 64 / 1000, 5)  # 25 µs
    assert figures["time_ms"]["change_pct"] == -20.0
    assert figures["throughput_samples_per_s"]["base"] == 32000.0
    assert result["verdict"].startswith("time per sample 0.0312 ms -> 0.0250 ms")
    assert result["workload"]["batch_note"] is None
    assert result["checks"][0]["status"] == "ok"
    # the batch sizes given replace the trace's: 2 and 2 samples, per-sample = step / 2
    given = diff(base, current, out, "--no-html", "--batch-size", "2,2")
    assert given.returncode == 0, given.stderr
    given_document = document(out)
    assert given_document["per_sample"]["time_ms"]["change_pct"] == 60.0
    assert given_document["workload"]["base"]["batch_size_source"] == "--batch-size"
    assert result["workload"]["base"]["batch_size_source"] == "aten::conv2d (5 of 5 steps)"


def test_per_sample_without_a_batch_size_exits_2(tmp_path: Path) -> None:
    steps = synthetic_trace(tmp_path / "steps.json", NOISY)  # kernels only, no shapes
    done = diff(steps, steps, tmp_path / "none", "--no-html", "--per-sample")
    assert done.returncode == 2
    assert "the batch size is unknown" in done.stderr and "--batch-size" in done.stderr
    bad = diff(steps, steps, tmp_path / "none", "--no-html", "--batch-size", "64")
    assert bad.returncode == 2 and "two batch sizes" in bad.stderr
