"""What AdvisorContext derives once for every rule: launch dimensions, Ascend operator types,
host thread ids, and the grouping of rows by several codes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis.advisor import AdvisorConfig
from perfledger.analysis.advisor.common import group_ids
from perfledger.analysis.advisor.context import AdvisorContext, thread_ids
from perfledger.analysis.advisor.memory_bound_ops import operator_units
from tests.advisor_synth import US, analyse
from tests.synth import EventsBuilder

# (task name, its args, the grid and block kernel_details gives them)
LAUNCHED: list[tuple[str, Any, str | None, str | None]] = [
    ("gemm", {"grid": [4, 1, 1], "block": [256, 1, 1]}, "4,1,1", "256,1,1"),
    ("floats", {"grid": [2.0, 3.0, 1.0], "block": [64.0, 1, 1]}, "2,3,1", "64,1,1"),
    ("ascend_kernel", {"block_dim": 8}, "8", None),
    ("broken", '{"grid": [1, 1', None, None),
    ("bare", None, None, None),
]


def _launches() -> EventsBuilder:
    b = EventsBuilder()
    b.step_mark(0, 1000 * US, 1)
    at = 100
    for i, (name, args, _, _) in enumerate(LAUNCHED):
        b.launch(10 * i * US, 2 * US, at * US, 20 * US, name, args=args)
        at += 30
    # a collective and a copy: the copy has no launch dimensions whatever its args say
    b.launch(60 * US, 2 * US, at * US, 20 * US, "allreduce", kind="comm", args={"grid": [5]})
    b.launch(70 * US, 2 * US, (at + 30) * US, 20 * US, "copy", kind="memcpy", args={"grid": [9]})
    return b


def _dimensions(context: AdvisorContext) -> dict[str, tuple[str | None, str | None]]:
    grid, block = context.launch_dimensions
    names = context.tasks["name"].to_pylist()
    return dict(zip(names, zip(grid.to_pylist(), block.to_pylist(), strict=True), strict=True))


def test_launch_dimensions_are_kernel_details_and_the_args_read_the_same_way() -> None:
    analysis = analyse(_launches())
    expected = {name: (grid, block) for name, _, grid, block in LAUNCHED}
    expected["allreduce"] = ("5", None)
    expected["copy"] = (None, None)

    from_details = _dimensions(AdvisorContext(analysis, AdvisorConfig()))
    # kernel_details that are not these tasks' (here: none): read from the tasks' args
    without = replace(analysis, kernel_details=analysis.kernel_details.slice(0, 0))
    from_args = _dimensions(AdvisorContext(without, AdvisorConfig()))

    assert from_details == expected
    assert from_args == expected


def test_ascend_operator_types_come_from_the_args_that_name_them() -> None:
    cases: list[tuple[str, Any, str | None]] = [
        ("matmul", {"op_type": "MatMul", "aic_mac_ratio": 0.8}, "MatMul"),
        ("ratios_only", {"aiv_vec_ratio": 0.5}, None),  # an Ascend key, no op_type
        ("truncated", '{"op_type": "Cast"', None),  # not JSON
        ("quoted", {"note": 'the "op_type" key'}, None),  # named inside a value only
        ("kineto", {"grid": [1, 1, 1]}, None),
        ("copy", {"op_type": "MemCopy"}, "MemCopy"),
    ]
    b = EventsBuilder()
    b.step_mark(0, 1000 * US, 1)
    for i, (name, args, _) in enumerate(cases):
        kind = "memcpy" if name == "copy" else "kernel"
        b.launch(10 * i * US, 2 * US, (100 + 30 * i) * US, 20 * US, name, kind=kind, args=args)
    context = AdvisorContext(analyse(b), AdvisorConfig())

    got = dict(
        zip(context.tasks["name"].to_pylist(), context.task_op_types.to_pylist(), strict=True)
    )

    assert got == {name: want for name, _, want in cases}
    # every task's args parsed the plain way agree
    for name, args, want in cases:
        text = json.dumps(args, sort_keys=True) if isinstance(args, dict) else args
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        plain = parsed.get("op_type") if isinstance(parsed, dict) else None
        assert plain == want, name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thread_ids_number_the_threads_in_their_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 500
    events = pa.table(
        {
            "rank": pa.array(rng.integers(0, 3, n), pa.int32()),
            "pid": pa.array(rng.integers(-2, 4, n) * 1000, pa.int64()),
            "stream": pa.array(rng.integers(-(2**40), 2**40, n) // 2**38, pa.int64()),
        }
    )
    rows = rng.permutation(n)[: n // 2]
    keys = list(
        zip(
            *(np.asarray(events[c], dtype=np.int64)[rows].tolist() for c in events.column_names),
            strict=True,
        )
    )
    numbering = {key: i for i, key in enumerate(sorted(set(keys)))}

    assert thread_ids(events, rows).tolist() == [numbering[k] for k in keys]
    assert thread_ids(events, np.zeros(0, dtype=np.int64)).size == 0


@pytest.mark.parametrize("width", [3, 1 << 20, 1 << 40])
def test_group_ids_number_the_rows_tuples_in_their_order(width: int) -> None:
    rng = np.random.default_rng(width)
    size = 400
    # few distinct values of a wide range: the combined digits overflow unless made dense
    parts = [rng.choice(rng.integers(0, width, 6), size) for _ in range(5)]
    tuples = list(zip(*(p.tolist() for p in parts), strict=True))
    numbering = {key: i for i, key in enumerate(sorted(set(tuples)))}

    assert group_ids(parts, size).tolist() == [numbering[t] for t in tuples]


@pytest.mark.parametrize(("low", "high"), [(0, 1 << 61), (0, 1 << 62), (-(1 << 63), (1 << 63) - 1)])
def test_group_ids_number_tuples_of_huge_codes_in_their_order(low: int, high: int) -> None:
    # each part alone fits in an int64, but its digits times the groups before it do not
    rng = np.random.default_rng(high)
    size = 300
    parts = [
        rng.choice(np.append(rng.integers(low, high, 5, endpoint=True), [low, high]), size)
        for _ in range(4)
    ]
    tuples = list(zip(*(p.tolist() for p in parts), strict=True))
    numbering = {key: i for i, key in enumerate(sorted(set(tuples)))}

    assert group_ids(parts, size).tolist() == [numbering[t] for t in tuples]


def test_operator_units_the_same_whether_or_not_the_args_are_parsed() -> None:
    """Kernels of operators with and without recorded shapes, several kernels per operator,
    one without an operator: the units read without parsing any args are those the query
    over the parsed args gives (args naming an Ascend key that changes nothing)."""

    def profile(formats: bool) -> AdvisorContext:
        b = EventsBuilder()
        ext = 0
        for s in range(3):
            t0 = s * 1000 * US
            b.step_mark(t0, 1000 * US, s + 1)
            for i, (op, shapes) in enumerate(
                [("aten::mm", "[[8, 8], [8, 8]]"), ("aten::add", None)]
            ):
                ext += 1
                fields = {"shapes": shapes, "dtypes": '["float", "float"]'} if shapes else {}
                b.cpu_op(t0 + 10 * i * US, 8 * US, op, external_id=ext, **fields)
                for k in range(2):  # two kernels per operator call
                    args = {"input_formats": "ND"} if formats else None
                    at = t0 + (100 + 50 * i + 20 * k) * US
                    host = t0 + (10 * i + 1 + 3 * k) * US
                    b.launch(host, 1 * US, at, 15 * US, f"k{i}{k}", external_id=ext, args=args)
            b.kernel(t0 + 300 * US, 5 * US, "orphan")
        return AdvisorContext(analyse(b), AdvisorConfig())

    plain, parsed = profile(False), profile(True)
    assert parsed.ascend_task_positions.size > 0 and plain.ascend_task_positions.size == 0

    units = operator_units(plain)

    assert units.equals(operator_units(parsed))
    # 3 steps x (mm, add, orphan); each operator's two kernels in one unit
    assert units.num_rows == 9
    assert sorted(set(units["name"].to_pylist())) == ["aten::add", "aten::mm", "orphan"]
    assert set(units["tasks"].to_pylist()) == {1, 2}
    assert sum(units["time_ns"].to_pylist()) == 3 * (4 * 15 + 5) * US
