"""Collectives across ranks on the real multi-rank traces of tests/data: matched, and the
replay with the other ranks' measured arrivals reproduces each rank's own replay exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfledger.analysis.critical_path import collective_arrivals, prepare_rank
from perfledger.analysis.profile import analyze_rank
from perfledger.analysis.rank_arrivals import ARRIVAL_TOLERANCE_NS
from perfledger.analysis.replay import replay
from perfledger.model.whatif import NO_CHANGE
from perfledger.sources import load_traces
from tests.paths import DATA

MULTI_RANK = [
    "kineto/sampled_2ranks",
    "ascend/torch_npu_text/level1",
    "ascend/torch_npu_db/level1",
]


@pytest.mark.parametrize("name", MULTI_RANK)
def test_the_measured_arrivals_replay_every_rank_as_measured(name: str) -> None:
    prepared = [prepare_rank(analyze_rank(t).events) for t in load_traces([DATA / Path(name)])]
    arrivals = collective_arrivals(prepared)
    assert len(prepared) == 2 and arrivals.instances
    for rank, peers in zip(prepared, arrivals.peers(None), strict=True):
        assert peers.node.size and not peers.shift.any()
        with_peers = replay(rank.graph, NO_CHANGE, peers)
        assert np.array_equal(with_peers.start, rank.baseline.start)
        assert np.array_equal(with_peers.end, rank.baseline.end)
        # every participant kept was still there when the last one arrived
        assert (peers.wait <= rank.graph.dur[peers.node] + ARRIVAL_TOLERANCE_NS).all()
