"""``perfledger whatif`` run as users run it: on a profile written by ``analyze``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import perfledger
from tests.kineto_gen import complete, cpu_op, device_task, runtime, write_kineto
from tests.paths import DATA


def _device_bound_trace(path: Path) -> Path:
    """One step: 10 kernels of 1 ms launched in 100 µs, run back to back."""
    events = [complete("user_annotation", "ProfilerStep#1", 0, 200)]
    for i in range(10):
        host = 10 + 10 * i
        events.append(cpu_op("aten::mm", host, 6, external_id=100 + i))
        events.append(runtime("cudaLaunchKernel", host, 5, correlation=i + 1, external_id=100 + i))
        events.append(
            device_task(
                "kernel", "gemm_kernel", 30 + 1000 * i, 1000, correlation=i + 1, external_id=100 + i
            )
        )
    write_kineto(path, events)
    return path


@pytest.fixture(scope="module")
def device_bound_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("whatif")
    trace = _device_bound_trace(root / "device_bound.json")
    out = root / "profile"
    done = perfledger("analyze", trace, "-o", out)
    assert done.returncode == 0, done.stderr
    return out


def test_json_gives_measured_baseline_and_predicted_steps(device_bound_profile: Path) -> None:
    done = perfledger("whatif", device_bound_profile, "--scale", "compute=0.5", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    (step,) = document["steps"]
    assert step["step"] == 1
    assert step["measured_ns"] == step["baseline_ns"] == 10_030_000
    assert step["predicted_ns"] == 10_030_000 - 5_000_000
    assert "compute:matmul" in document["critical_path"]["bound_by_ms"]


def test_text_names_each_step_and_the_critical_path(device_bound_profile: Path) -> None:
    done = perfledger("whatif", device_bound_profile, "--scale", "host=0.5", "--no-sync")
    assert done.returncode == 0, done.stderr
    assert "10.030" in done.stdout  # measured, replayed and predicted alike
    assert "critical path per step: compute:matmul" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scale", "gpu=0.5"], "unknown selector 'gpu'"),
        (["--scale", "compute=0"], "above 0"),
        (["--scale", "compute=-1"], "above 0"),
        (["--scale", "compute=fast"], "not a number"),
        (["--scale", "compute"], "SELECTOR=FACTOR"),
        (["--scale", "kernel:=2"], "unknown selector"),
    ],
)
def test_bad_changes_are_one_line_errors(
    device_bound_profile: Path, args: list[str], message: str
) -> None:
    done = perfledger("whatif", device_bound_profile, *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_no_such_profile_is_a_one_line_error(tmp_path: Path) -> None:
    done = perfledger("whatif", tmp_path / "missing")
    assert done.returncode == 2
    assert "no such profile" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_trace_is_not_a_profile() -> None:
    done = perfledger("whatif", DATA / "kineto" / "a100_triton.json.gz")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1


def _with_stdout_closed(*args: str | Path) -> tuple[int, str]:
    """``perfledger ARGS`` writing into a pipe whose reader is gone before the first byte
    (as in ``perfledger ... | head -c 10``): its exit code and stderr."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "perfledger", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    stderr = child.stderr.read().decode()
    return child.wait(timeout=600), stderr


@pytest.mark.parametrize(
    "args",
    [
        ["whatif", "{profile}", "--scale", "compute=0.5", "--json"],
        ["whatif", "{profile}"],
        ["query", "{profile}", "select * from range(200000)", "--format", "csv"],
    ],
)
def test_a_reader_gone_early_ends_the_command_quietly(
    device_bound_profile: Path, args: list[str]
) -> None:
    code, stderr = _with_stdout_closed(*(a.format(profile=device_bound_profile) for a in args))
    assert stderr == ""
    assert code == 1
