"""The ranks replayed together in one joint pass on a real trace's step of hundreds of
chained collectives: two copies of kineto/v100_rank1_ddp as ranks 0 and 1 (every collective
matched, none waiting for the other copy). Under the same change on both copies each
collective's participants still arrive together, so every rank gains exactly what the copy
gains replayed alone, without any of the others' arrivals: the answer the rounds did not
reach (about 400 chained collectives per step, one settled per round)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from perfledger.analysis.critical_path import predicted_gains
from perfledger.analysis.profile import analyze_traces
from perfledger.analysis.replay_together import RanksTogether, unsettled_arrivals
from perfledger.model.trace import Trace
from perfledger.model.whatif import Scale, WhatIf
from perfledger.sources import load_traces
from tests.paths import DATA


def copy_as_rank(trace: Trace, rank: int) -> Trace:
    events = trace.events
    column = pa.array([rank] * events.num_rows, events.schema.field("rank").type)
    index = events.schema.get_field_index("rank")
    return replace(trace, events=events.set_column(index, events.schema.field("rank"), column))


def test_two_copies_of_a_real_rank_settle_in_one_pass() -> None:
    (trace,) = load_traces([DATA / "kineto" / "v100_rank1_ddp.json.gz"])
    ranks = analyze_traces([copy_as_rank(trace, 0), copy_as_rank(trace, 1)]).ranks
    together = RanksTogether(ranks)
    assert len(together.arrivals.instances) > 2_000 and together.alone == ()
    faster_launch = WhatIf((Scale("launch", 0.5),))
    (gains,) = together.gains([{0: faster_launch, 1: faster_launch}])
    assert together.unsettled == together.in_rounds == 0 and not unsettled_arrivals(together)
    alone = predicted_gains(together.prepared(0), faster_launch)
    assert alone.predicted_ns < alone.baseline_ns  # the change gains something
    assert gains == {0: alone, 1: alone}
