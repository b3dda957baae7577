"""The advisor replays each change once per rank: fixes of the same change, and a combination
that is one of them, share a replay; a change of nothing is the baseline, not a replay."""

from __future__ import annotations

import numpy as np
import pytest

from perfledger.analysis.advisor import context as context_module
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.critical_path import RankReplay, predicted_gains
from perfledger.analysis.graph import build_graph
from perfledger.analysis.replay import effective_change, replay
from perfledger.model.findings import AdvisorConfig
from perfledger.model.whatif import NO_CHANGE, Scale, StepGains, TaskChange, WhatIf, together
from tests.advisor_synth import US, analyse
from tests.synth import EventsBuilder


def dispatch_bound() -> EventsBuilder:
    """One 1 ms step: 4 launches 250 µs apart (10 µs calls), 100 µs kernels 20 µs after each
    call, 235 µs of host operator between them."""
    b = EventsBuilder().step_mark(0, 1_000 * US, 1)
    for at in (0, 250, 500, 750):
        b.launch(at * US, 10 * US, (at + 20) * US, 100 * US, "add_kernel")
        b.cpu_op((at + 15) * US, 235 * US, "host_work")
    return b


def test_each_change_is_replayed_once_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    context = AdvisorContext(analyse(dispatch_bound()), AdvisorConfig())
    replayed: list[WhatIf] = []

    def counted(prepared: RankReplay, change: WhatIf) -> StepGains:
        if not change.unchanged:
            replayed.append(change)
        return predicted_gains(prepared, change)

    monkeypatch.setattr(context_module, "predicted_gains", counted)
    launch = WhatIf((Scale("launch", 0.5),))
    first = context.step_gains(launch)
    # the same change again, with a scale by 1 and a task change of no task, and combined
    # with itself (two rules with the same fix)
    again = context.step_gains(
        WhatIf((Scale("launch", 0.5), Scale("compute", 1.0)), tasks=(TaskChange((), ()),))
    )
    combined = context.step_gains(together([launch, launch]))
    assert first == again == combined
    assert replayed == [launch]
    # launch overhead x 0.5: the last call ends at 3 x 125 + 5 = 380 µs, its kernel at 485
    # µs, the mark's 240 µs after the last call put the step's end at 620 µs (from 1,000)
    assert first.gain_ms == pytest.approx(0.380, abs=1e-9)
    # a change of nothing: the baseline, without a replay
    nothing = context.step_gains(WhatIf((Scale("host", 1.0),), tasks=(TaskChange((), ()),)))
    assert nothing.steps == 1 and nothing.predicted_ns == nothing.baseline_ns
    assert replayed == [launch]
    # a different change is replayed
    context.step_gains(WhatIf((Scale("launch", 0.1),)))
    assert len(replayed) == 2


def test_what_an_effective_change_leaves_out_changes_nothing() -> None:
    events = dispatch_bound().table()
    graph = build_graph(events)
    change = WhatIf(
        (Scale("compute", 1.0), Scale("kernel:add*", 1.0), Scale("launch", 0.5)),
        tasks=(TaskChange((), ()),),
    )
    effective = effective_change(change)
    assert effective == WhatIf((Scale("launch", 0.5),))
    for a, b in zip(
        (replay(graph, change), replay(graph, NO_CHANGE)),
        (replay(graph, effective), replay(graph, effective_change(NO_CHANGE))),
        strict=True,
    ):
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
        assert np.array_equal(a.via, b.via) and np.array_equal(a.how, b.how)
    # a scale of an unknown selector stays, to be refused by the replay
    assert effective_change(WhatIf((Scale("gpu", 1.0),))).scales == (Scale("gpu", 1.0),)
