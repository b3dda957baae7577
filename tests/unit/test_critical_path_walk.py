"""The walk back along a step's critical path in C (``_schedule.c``'s ``path``) is the
Python walk of ``critical_path._Lanes.path``: the same nodes and the same stop, on random
schedules and on the reports of real traces."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis import replay as replay_module
from perfledger.analysis.critical_path import _Lanes, prepare_rank, rank_report
from perfledger.analysis.profile import analyze_rank
from perfledger.analysis.replay import AWAITED, CHAIN, LAUNCHED, RELEASE, WAITED, WOKEN
from perfledger.sources import load_traces
from tests.paths import data_file
from tests.unit.test_replay_windows import TRACES

HOWS = (RELEASE, CHAIN, LAUNCHED, WAITED, WOKEN, AWAITED)


def _compiled() -> None:
    if replay_module._COMPILED is None:
        pytest.skip("no C compiler where the project was installed")


@st.composite
def schedules(draw: st.DrawFn) -> tuple[SimpleNamespace, int, int]:
    """A schedule of n nodes whose start was set by an earlier node (or by none: RELEASE),
    times in a small range so that ties and stops at the step's start happen; the node the
    walk starts from and the step's start."""
    n = draw(st.integers(1, 30))
    start = np.array(draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)), np.int64)
    end = start + np.array(draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)))
    how = draw(st.lists(st.sampled_from(HOWS), min_size=n, max_size=n))
    via = [-1 if how[v] == RELEASE or v == 0 else draw(st.integers(0, v - 1)) for v in range(n)]
    how = [RELEASE if via[v] < 0 else how[v] for v in range(n)]
    lanes = SimpleNamespace(
        start=start,
        end=end.astype(np.int64),
        via=np.array(via, np.int64),
        how=np.array(how, np.uint8).tobytes(),
    )
    return lanes, draw(st.integers(0, n - 1)), draw(st.integers(-5, 70))


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_the_compiled_walk_is_the_python_walk(case: tuple[SimpleNamespace, int, int]) -> None:
    _compiled()
    lanes, v, lo = case
    compiled = _Lanes.path(lanes, v, lo)  # type: ignore[arg-type]
    module = replay_module._COMPILED
    replay_module._COMPILED = None
    try:
        python = _Lanes.path(lanes, v, lo)  # type: ignore[arg-type]
    finally:
        replay_module._COMPILED = module
    assert compiled[0].tolist() == python[0].tolist()
    assert compiled[1] is python[1]


def test_the_compiled_walk_leaves_nodes_outside_the_arrays_to_python() -> None:
    _compiled()
    start = np.array([0, 10], np.int64)
    end = np.array([10, 20], np.int64)
    how = np.array([CHAIN, CHAIN], np.uint8).tobytes()
    path = replay_module.compiled_path
    # node 1 set by node 0, node 0 by a node that does not exist (read: the step starts
    # before node 0)
    assert path(start, end, np.array([5, 0], np.int64), how, 1, -10) is None
    assert path(start, end, np.array([5, 0], np.int64), how, 1, 0) == (
        np.array([1, 0], np.int64).tobytes(),
        True,
    )
    assert path(start, end, np.array([-1, 0], np.int64), how, 2, 0) is None
    # nothing to walk: the step ends before its start
    assert path(start, end, np.array([-1, 0], np.int64), how, 1, 25) == (b"", False)
    with pytest.raises(ValueError, match="differ in length"):
        path(start, end[:1], np.array([-1, 0], np.int64), how, 1, 0)


# the traces whose steps have a critical path (a CPU-only trace's steps have no device task)
WALKED = [name for name in TRACES if "cpu_only" not in name]


@pytest.mark.parametrize("name", WALKED)
def test_reports_of_real_traces_are_those_of_the_python_walks(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every step's critical path, its classes and spans, with the compiled walks and without
    _compiled()
    prepared = [prepare_rank(analyze_rank(t).events) for t in load_traces([data_file(name)])]
    compiled = [rank_report(rank) for rank in prepared]
    monkeypatch.setattr(replay_module, "_COMPILED", None)
    python = [rank_report(rank) for rank in prepared]
    assert compiled == python
    assert any(s.path_nodes for report in compiled for s in report.steps)
