"""Workloads: the program of a command, same or different workloads, the batch size of a step,
and the baseline table's Δ only between runs of one workload."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from perfledger.analysis import diff
from perfledger.analysis.diff.workload import (
    BatchSize,
    Workload,
    batch_size,
    operator_digests,
    program_of,
    same_workload,
    workload_differences,
)
from perfledger.ledger.store import RunRecord
from perfledger.ledger.table import baseline_table, text_cells
from perfledger.model.tables import HOST_OP_SUMMARY_SCHEMA, OP_SUMMARY_SCHEMA
from tests.unit.test_diff import run

ROOT = Path("/project")


def test_program_is_the_script_whatever_the_folder_and_the_arguments() -> None:
    from_root = program_of(["python", "examples/train.py", "--epochs", "1"], ROOT, ROOT)
    from_sub = program_of(
        ["/venv/bin/python3.11", "-u", "train.py", "--workers", "4"], ROOT / "examples", ROOT
    )
    assert from_root == from_sub == "examples/train.py"
    assert program_of(["torchrun", "--nproc-per-node", "8", "train.py"], ROOT, ROOT) == "train.py"
    assert program_of(["python", "-m", "pkg.train", "--lr", "1"], ROOT, ROOT) == "-m pkg.train"
    assert program_of(["./launch.sh", "--fast"], ROOT, ROOT) == "launch.sh"
    # outside the project: the absolute path
    assert program_of(["python", "../x/t.py"], ROOT, ROOT) == "/x/t.py"
    assert program_of([], ROOT, ROOT) is None


def ops(*names: str) -> frozenset[str]:
    return operator_digests(names)


def test_differences_name_every_part_that_differs() -> None:
    model = ops("conv", "relu", "linear", "add")
    cnn = Workload(program="train.py", vendor="cuda", device="A100", operators=model)
    # a data-loader fix: 3 of the 5 names of both runs in common (3/5 = 60 %)
    fixed = Workload(
        program="train.py",
        vendor="cuda",
        device="A100",
        operators=ops("conv", "relu", "linear", "stack"),
    )
    assert workload_differences(cnn, fixed) == ()
    other = Workload(
        program="bert.py", vendor="cuda", device="V100", operators=ops("conv", "gelu", "softmax")
    )
    # 1 name in common of 6 together: 1/6 = 16.7 %
    assert workload_differences(cnn, other) == (
        "programs train.py vs bert.py",
        "devices A100 vs V100",
        "17% of op types in common",
    )
    npu = Workload(vendor="ascend", device="Ascend910B", operators=model)
    # the vendor says it; the device names are not repeated
    assert workload_differences(cnn, npu) == ("vendors cuda vs ascend",)


def test_unknown_parts_are_not_compared() -> None:
    assert same_workload(Workload(), Workload(program="a.py", device="cpu"))
    assert same_workload(Workload(program="a.py"), Workload(device="cpu", operators=ops("x")))
    # half the names in common is still the same workload; fewer is not
    assert same_workload(
        Workload(operators=ops("a", "b", "c")), Workload(operators=ops("a", "b", "d"))
    )
    assert not same_workload(
        Workload(operators=ops("a", "b")), Workload(operators=ops("a", "c", "d"))
    )


def test_a_script_as_typed_matches_its_resolved_path() -> None:
    typed = Workload(program="train.py", program_as_typed=True)
    assert same_workload(typed, Workload(program="examples/train.py"))
    assert not same_workload(typed, Workload(program="examples/eval.py"))
    nested = Workload(program="b/train.py", program_as_typed=True)
    assert not same_workload(nested, Workload(program="a/train.py"))


def test_the_same_kernels_replayed_from_a_cuda_graph_are_the_same_workload() -> None:
    # eager, every kernel has the operator that launched it; replayed from a CUDA graph, the
    # same kernels have none (their op types are their own names): 80 % of kernels in common
    eager = Workload(
        program="llm.py", operators=ops("aten::mm", "aten::add_"), kernels=ops("k1", "k2", "k3")
    )
    graphs = Workload(
        program="llm.py", operators=ops("k1", "k2", "k3", "k4"), kernels=ops("k1", "k2", "k3", "k4")
    )
    assert same_workload(eager, graphs)
    # another model: few kernels in common either, and the warning counts kernels
    other = Workload(program="llm.py", operators=ops("x", "y"), kernels=ops("k1", "x", "y", "z"))
    assert workload_differences(eager, other) == ("17% of kernels in common",)
    # a CPU run has no kernels: op types alone
    cpu = Workload(program="llm.py", operators=ops("aten::mm", "aten::relu"))
    assert workload_differences(eager, cpu) == ("33% of op types in common",)


def test_workload_round_trips_through_its_json_form() -> None:
    workload = Workload(
        program="t.py", vendor="cuda", device="A100", operators=ops("a", "b"), kernels=ops("k")
    )
    assert Workload.from_dict(workload.as_dict()) == workload
    assert workload.describe() == "t.py · A100"
    assert Workload(vendor="ascend").describe() == "trace · ascend"
    assert Workload(program="-m pkg.train").describe() == "-m pkg.train"


# Batch size ----------------------------------------------------------------------------------


def host_ops(rows: list[tuple[int, int, str, str | None]]) -> pa.Table:
    """(step, start_ns, op name, shapes) per host operator."""
    return pa.Table.from_pylist(
        [
            {
                "rank": 0,
                "device": -1,
                "stream": 1,
                "step": step,
                "kind": "cpu_op",
                "name": name,
                "start_ns": start,
                "dur_ns": 10,
                "self_ns": 10,
                "shapes": shapes,
                "dtypes": None,
            }
            for step, start, name, shapes in rows
        ],
        schema=HOST_OP_SUMMARY_SCHEMA,
    )


def test_batch_size_is_the_first_model_layer_input_of_each_step() -> None:
    table = host_ops(
        [
            # the data loader's per-sample work comes first: not a model layer
            (1, 0, "aten::normal_", "[[3, 32, 32], [], [], []]"),
            (1, 10, "aten::conv2d", "[[16, 3, 32, 32], [8, 3, 3, 3], [8]]"),
            (1, 20, "aten::linear", "[[16, 128], [10, 128], [10]]"),
            (2, 105, "aten::linear", "[[16, 128], [10, 128], [10]]"),
            (2, 100, "aten::conv2d", "[[16, 3, 32, 32], [8, 3, 3, 3], [8]]"),
            # the last, partial batch
            (3, 200, "aten::conv2d", "[[4, 3, 32, 32], [8, 3, 3, 3], [8]]"),
            (-1, 0, "aten::conv2d", "[[99, 3, 32, 32], [8, 3, 3, 3], [8]]"),  # outside steps
        ]
    )
    assert batch_size(table) == BatchSize(samples=16, operator="aten::conv2d", steps=2, of_steps=3)


def test_the_loss_gives_the_batch_before_any_layer_of_the_data_loader() -> None:
    # An image pipeline decoding in the training process blurs every image with a convolution
    # of one image, before the model's own layers; the loss sees the batch once per step.
    table = host_ops(
        [
            (step, 100 * step + offset, name, shapes)
            for step in (1, 2)
            for offset, name, shapes in (
                (0, "aten::conv2d", "[[1, 3, 192, 192], [3, 1, 5, 5]]"),
                (1, "aten::conv2d", "[[1, 3, 192, 192], [3, 1, 5, 5]]"),
                (5, "aten::conv2d", "[[64, 3, 32, 32], [16, 3, 3, 3], [16]]"),
                (9, "aten::cross_entropy_loss", "[[64, 10], [64], [], [], [], []]"),
            )
        ]
    )
    assert batch_size(table) == BatchSize(
        samples=64, operator="aten::cross_entropy_loss", steps=2, of_steps=2
    )


def test_batch_size_of_device_tasks_reads_their_host_operator() -> None:
    rows = [
        ("Memcpy HtoD", "aten::copy_", 0, "[[64, 512], [64, 512], []]"),
        ("sm80_xmma_gemm", "aten::addmm", 5, "[[10], [64, 512], [512, 10], [], []]"),
        ("embedding_kernel", "aten::embedding", 9, "[[30000, 512], [64, 128]]"),
    ]
    table = pa.Table.from_pylist(
        [
            {
                "step": 1,
                "kind": "kernel",
                "name": name,
                "host_op": host,
                "start_ns": start,
                "shapes": shapes,
            }
            for name, host, start, shapes in rows
        ],
        schema=pa.schema(
            [
                OP_SUMMARY_SCHEMA.field(c)
                for c in ("step", "kind", "name", "host_op", "start_ns", "shapes")
            ]
        ),
    )
    # addmm(bias, input, weight): the input's first dimension
    assert batch_size(table) == BatchSize(samples=64, operator="aten::addmm", steps=1, of_steps=1)
    without_shapes = table.set_column(5, "shapes", pa.array([None, None, None], pa.string()))
    assert batch_size(without_shapes) is None


# The baseline table: Δ within a workload -------------------------------------------------------

S = 1_000_000_000
CNN = ["conv", "relu", "linear", "nll_loss", "randn", "flip", "stack", "add_", "mm", "sum"]


def ledger_run(
    run_id: int, step_ms: float | None, program: str | None, device: str, names: list[str]
) -> RunRecord:
    workload = Workload(program=program, device=device, operators=ops(*names))
    return RunRecord(
        id=run_id,
        label=f"run{run_id}",
        registered_ns=run_id * S,
        step_median_ms=step_ms,
        workload=workload.as_dict(),
    )


def test_delta_only_between_runs_of_one_workload() -> None:
    fixed = [n for n in CNN if n not in ("randn", "flip")]  # data loading moved to workers
    runs = [
        ledger_run(1, 1500.0, "examples/train.py", "cpu", CNN),
        ledger_run(2, 10.0, None, "Ascend910B", ["Conv2D", "MatMul"]),
        ledger_run(3, 1000.0, "examples/train.py", "cpu", fixed),
        ledger_run(4, 4.481, None, "Tesla V100", ["aten::addmm", "aten::mm"]),
        ledger_run(5, 1200.0, "examples/other.py", "cpu", CNN),
    ]
    rows = baseline_table(runs)
    assert [r.is_baseline for r in rows] == [True, True, False, True, True]
    assert rows[2].delta_pct == 100 * (1000.0 - 1500.0) / 1500.0  # -33.3 %, against run 1
    assert rows[2].baseline_id == 1
    assert rows[3].delta_pct is None  # the V100 run is never compared with the Ascend run
    assert [r.workload for r in rows] == [
        "train.py · cpu",
        "trace · Ascend910B",
        "train.py · cpu",
        "trace · Tesla V100",
        "other.py · cpu",
    ]
    assert text_cells(rows[2])[4] == "-33.33%"
    # a named baseline is its workload's; other workloads keep their own
    named = baseline_table(runs, runs[2])
    assert named[0].delta_pct == 50.0  # 100 * (1500 - 1000) / 1000
    assert named[1].is_baseline and named[4].is_baseline
    # ... unless every run is compared with it on request, and the cell says so
    across = baseline_table(runs, runs[2], across_workloads=True)
    assert across[4].delta_pct == 20.0  # 100 * (1200 - 1000) / 1000
    assert text_cells(across[4])[4] == "+20.00% (other workload)"
    assert not across[0].other_workload


def test_same_description_of_two_workloads_is_numbered() -> None:
    runs = [
        ledger_run(1, 10.0, "a/train.py", "cpu", CNN),
        ledger_run(2, 10.0, "b/train.py", "cpu", CNN),
    ]
    assert [r.workload for r in baseline_table(runs)] == ["train.py · cpu", "train.py · cpu #2"]


def test_rows_without_a_workload_use_the_command_as_typed() -> None:
    old = RunRecord(
        id=1,
        label="old",
        registered_ns=S,
        step_median_ms=20.0,
        kind="record",
        command=("python", "train.py", "--bs", "64"),
        device="cpu",
    )
    new = ledger_run(2, 15.0, "examples/train.py", "cpu", CNN)
    other = ledger_run(3, 5.0, "examples/eval.py", "cpu", CNN)
    rows = baseline_table([old, new, other])
    assert rows[1].delta_pct == -25.0  # 100 * (15 - 20) / 20
    assert rows[2].is_baseline


# Per sample ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_walls", "base_batch", "current_walls", "current_batch"),
    [
        ([10.0, 11.0, 9.0, 30.0], 32, [12.0, 12.5, 11.5], 64),
        ([1.0], 1, [2.0, 2.0], 3),
        ([5.0, 5.0, 5.0], 7, [5.0, 5.0, 5.0], 7),
    ],
)
def test_time_per_sample_is_step_time_over_the_batch(
    base_walls: list[float], base_batch: int, current_walls: list[float], current_batch: int
) -> None:
    base = replace(run(base_walls), batch=BatchSize(base_batch, "given", 0, 0))
    current = replace(run(current_walls), batch=BatchSize(current_batch, "given", 0, 0))
    result = diff.diff_runs(base, current, per_sample=True)
    assert result.per_sample is not None
    time, step = result.per_sample.time_ms, result.step_time.median
    # the median of walls over a constant batch is the median wall over that batch
    assert time.base == pytest.approx(step.base / base_batch)
    assert time.current == pytest.approx(step.current / current_batch)
    assert result.per_sample.throughput.base == pytest.approx(1000.0 / time.base)
    assert result.verdict.startswith("time per sample")


def test_per_sample_needs_both_batch_sizes() -> None:
    with pytest.raises(ValueError, match="batch sizes"):
        diff.diff_runs(run([1.0]), run([1.0]), per_sample=True)


def test_another_batch_size_also_shows_its_change_per_sample() -> None:
    base = replace(ledger_run(1, 1000.0, "t.py", "cpu", CNN), batch_size=64)
    smaller = replace(ledger_run(2, 400.0, "t.py", "cpu", CNN), batch_size=32)
    same = replace(ledger_run(3, 900.0, "t.py", "cpu", CNN), batch_size=64)
    unknown = ledger_run(4, 800.0, "t.py", "cpu", CNN)
    rows = baseline_table([base, smaller, same, unknown])
    # per step: 400 against 1000 ms; per sample: 12.5 against 15.625 ms
    assert rows[1].delta_pct == -60.0
    assert rows[1].per_sample_delta_pct == pytest.approx(100 * (400 / 32 - 1000 / 64) / (1000 / 64))
    assert text_cells(rows[1])[4] == "-60.00% (-20.00% per sample)"
    assert rows[2].per_sample_delta_pct is None and text_cells(rows[2])[4] == "-10.00%"
    assert rows[3].per_sample_delta_pct is None
