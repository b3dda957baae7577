"""The rank task plans the steps and sums the copies once: what the replay, the checks and the
profile are given equals what planning again, finding the launches again or summing the copies
again would find, on real Kineto traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis.comm_split import comm_split
from perfledger.analysis.profile import analyze_rank, profile_of_rank
from perfledger.analysis.quality import rank_checks
from perfledger.analysis.steps import launch_starts, step_plan
from perfledger.analysis.transfers import copy_spellings
from perfledger.model.trace import Trace
from perfledger.sources.ascend import load_ascend
from perfledger.sources.kineto import load_kineto

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
ASCEND = Path(__file__).resolve().parents[1] / "data" / "ascend"
# Ascend exports carry their own step ids: the plan must not depend on them either
CASES = [f"kineto/{p.name}" for p in sorted(DATA.glob("*.json.gz"))] + [
    f"ascend/{p.relative_to(ASCEND)}" for p in sorted(ASCEND.glob("torch_npu_*/level*"))
]


def _traces(case: str) -> list[Trace]:
    kind, name = case.split("/", 1)
    if kind == "kineto":
        return [load_kineto(DATA / name)]
    return load_ascend(ASCEND / name)


@pytest.mark.parametrize("case", CASES)
def test_windows_and_launches_found_once_are_those_found_again(case: str) -> None:
    traces = _traces(case)
    assert traces
    for trace in traces:
        _check_once_equals_again(trace)


def _check_once_equals_again(trace: Trace) -> None:
    rank = analyze_rank(trace)
    events = rank.events  # the step column filled: what the replay plans on
    assert step_plan(events).windows == rank.windows
    launches = launch_starts(events)
    # found before the steps were assigned: the same without the step column filled
    unassigned = events.set_column(
        events.schema.get_field_index("step"),
        events.schema.field("step"),
        pa.array(np.full(events.num_rows, -1, dtype=np.int32)),
    )
    assert np.array_equal(launches, launch_starts(unassigned))
    assert step_plan(unassigned).windows == rank.windows
    assert rank.trace.events is events  # the imported step column not kept
    given = comm_split(events, 25.0, 8, launches=launches)
    found = comm_split(events, 25.0, 8)
    assert np.array_equal(given.wait_ns, found.wait_ns)
    assert np.array_equal(given.bytes, found.bytes)
    assert given.collective == found.collective and given.source == found.source
    windows, accounting = rank.windows, rank.accounting
    assert rank_checks(events, windows, accounting, launches=launches) == rank_checks(
        events, windows, accounting
    )


@pytest.mark.parametrize("name", ["v100_rank1_ddp.json.gz", "a100_alexnet.json.gz"])
def test_transfers_from_the_spellings_made_once_are_those_of_the_events(name: str) -> None:
    rank = analyze_rank(load_kineto(DATA / name))
    spellings = copy_spellings(rank.events)
    assert spellings.num_rows > 0  # copies to sum
    given = profile_of_rank(rank, spellings=spellings).transfers
    assert given.equals(profile_of_rank(rank).transfers)
    assert sum(given.column("count").to_pylist()) == sum(spellings.column("count").to_pylist())
