"""The rank task plans the steps once: what the replay and the checks are given equals what
planning again, or finding the launches again, would find, on every real Kineto trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfledger.analysis.comm_split import comm_split
from perfledger.analysis.profile import analyze_rank
from perfledger.analysis.quality import rank_checks
from perfledger.analysis.steps import launch_starts, step_plan
from perfledger.sources.kineto import load_kineto

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json.gz")))
def test_windows_and_launches_found_once_are_those_found_again(name: str) -> None:
    rank = analyze_rank(load_kineto(DATA / name))
    events = rank.events  # the step column filled: what the replay plans on
    assert step_plan(events).windows == rank.windows
    launches = launch_starts(events)
    assert np.array_equal(launches, launch_starts(rank.trace.events))
    given = comm_split(events, 25.0, 8, launches=launches)
    found = comm_split(events, 25.0, 8)
    assert np.array_equal(given.wait_ns, found.wait_ns)
    assert np.array_equal(given.bytes, found.bytes)
    assert given.collective == found.collective and given.source == found.source
    windows, accounting = rank.windows, rank.accounting
    assert rank_checks(events, windows, accounting, launches=launches) == rank_checks(
        events, windows, accounting
    )
