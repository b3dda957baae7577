"""The ranks of an analysed profile replayed together (what ``perfledger analyze`` does once its
rank tasks are back), on hand-built ranks of known answers.

Two ranks run one step each: a compute kernel, then an all-reduce queued behind it on the
same stream. Rank 0's kernel takes 1 ms, rank 1's 3 ms: rank 0 arrives at the all-reduce at
1,030 µs and waits 2 ms for rank 1, which arrives at 3,030 µs; both then transfer for 500 µs
and end together at 3,530 µs, which ends each step (the host's step mark ends at 100 µs).
Every expected figure is derived by hand in the test.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from perfledger.analysis.advisor import AdvisorConfig, Finding, diagnose
from perfledger.analysis.advisor.ranks import merge_rank_findings
from perfledger.analysis.advisor.together import advice_together, replayed_together
from perfledger.analysis.critical_path import predicted_gains, prepare_rank, replay_profile
from perfledger.analysis.profile import analyze_traces
from perfledger.analysis.replay_together import RanksTogether, replayed_alone, unsettled_arrivals
from perfledger.model import schema
from perfledger.model.findings import RankAdvice, StepBasis
from perfledger.model.profile import ProfileAnalysis
from perfledger.model.quality import REPLAYED_ALONE, UNSETTLED_ARRIVALS
from perfledger.model.trace import Trace
from perfledger.model.whatif import Scale, StepGains, WhatIf
from tests.synth import EventsBuilder

US = 1_000
KERNEL_START = 30 * US
TRANSFER = 500 * US
LATE_KERNEL = 3_000 * US
STEP = KERNEL_START + LATE_KERNEL + TRANSFER  # 3,530 µs: every rank's step
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"
FASTER_LATE_KERNEL = WhatIf((Scale("kernel:slow_gemm", 0.5),))
FIX = "fusion_candidates"  # a rule whose fix is a change of the graph


def rank_trace(rank: int, kernel: str, kernel_us: int, *, allreduces: int = 1) -> Trace:
    """One rank's step (see the module doc); ``allreduces``: how many all-reduces it runs
    (0: none; more: the first as above, the others 10 µs each after it)."""
    arrival = KERNEL_START + kernel_us * US
    b = EventsBuilder(rank=rank, pid=100 + rank).step_mark(0, 100 * US, 1)
    b.launch(10 * US, 5 * US, KERNEL_START, kernel_us * US, kernel)
    if allreduces:
        b.launch(20 * US, 5 * US, arrival, STEP - arrival, ALLREDUCE, kind=schema.COMM)
    for k in range(1, allreduces):
        b.launch(
            (20 + k) * US, 1 * US, STEP + 10 * US * (k - 1), 10 * US, ALLREDUCE, kind=schema.COMM
        )
    return Trace(b.table(), schema.empty_counters(), {}, "synthetic")


def profile(*traces: Trace) -> ProfileAnalysis:
    return analyze_traces(list(traces))


EARLY = rank_trace(0, "gemm", 1_000)
LATE = rank_trace(1, "slow_gemm", 3_000)


def test_the_late_rank_made_faster_shortens_the_early_rank_s_step() -> None:
    """Rank 1's kernel 1.5 ms: it arrives at 1,530 µs and both ranks end 500 µs later; alone,
    rank 0 (whose kernels did not change) gains nothing."""
    analysis = profile(EARLY, LATE)
    together = RanksTogether(analysis.ranks)
    assert together.together and together.alone == ()
    gains = together.gains([{1: FASTER_LATE_KERNEL}])[0]
    predicted = KERNEL_START + 1_500 * US + TRANSFER
    assert gains == {0: StepGains(1, STEP, predicted), 1: StepGains(1, STEP, predicted)}
    alone = predicted_gains(prepare_rank(analysis.ranks[0].events), WhatIf())
    assert alone == StepGains(1, STEP, STEP)


def test_with_three_ranks_the_next_latest_arrival_ends_the_collective() -> None:
    """A third rank arrives at 2,030 µs (a 2 ms kernel): with rank 1's kernel halved it is the
    last to arrive, and every rank ends 500 µs after it."""
    middle = rank_trace(2, "mid_gemm", 2_000)
    gains = RanksTogether(profile(EARLY, LATE, middle).ranks).gains([{1: FASTER_LATE_KERNEL}])
    predicted = KERNEL_START + 2_000 * US + TRANSFER
    assert gains[0] == {r: StepGains(1, STEP, predicted) for r in (0, 1, 2)}


def test_the_early_rank_made_faster_gains_nothing() -> None:
    gains = RanksTogether(profile(EARLY, LATE).ranks).gains([{0: WhatIf((Scale("compute", 0.5),))}])
    assert gains[0] == {0: StepGains(1, STEP, STEP), 1: StepGains(1, STEP, STEP)}


def test_the_early_rank_s_critical_path_goes_through_its_wait() -> None:
    """Rank 0's path ends with the all-reduce from its arrival (1,030 µs) to the end: its
    2 ms wait and 500 µs transfer, then its 1 ms kernel."""
    reports = RanksTogether(profile(EARLY, LATE).ranks).reports()
    (step,) = reports[0].steps
    assert step.measured_ns == step.baseline_ns == STEP
    assert step.bound_by_ns["communication"] == STEP - KERNEL_START - 1_000 * US
    allreduce = [s for s in step.path_spans if s.label.startswith(ALLREDUCE)]
    assert allreduce[0].start_ns == KERNEL_START + 1_000 * US and allreduce[-1].end_ns == STEP
    assert sum(s.end_ns - s.start_ns for s in allreduce) == STEP - KERNEL_START - 1_000 * US


@pytest.mark.parametrize("allreduces", [0, 2], ids=["no collective", "one more collective"])
def test_a_rank_whose_collectives_match_none_replays_alone(allreduces: int) -> None:
    """Counted in ``replayed_alone`` where it has collectives; a rank without any has nothing
    to match, and is replayed alone as it should be."""
    odd = rank_trace(2, "other_gemm", 2_000, allreduces=allreduces)
    analysis = profile(EARLY, LATE, odd)
    together = RanksTogether(analysis.ranks)
    counted = [2] if allreduces else []
    assert list(together.alone) == counted
    checks = replayed_alone(together)
    assert list(checks) == counted
    assert all(c.id == REPLAYED_ALONE and c.count == 1 for c in checks.values())
    # the two others still replay together; the odd rank's own change gains what it gains
    # alone: its kernel 1 ms shorter
    halve_odd = WhatIf((Scale("kernel:other_gemm", 0.5),))
    gains = together.gains([{1: FASTER_LATE_KERNEL, 2: halve_odd}])[0]
    predicted = KERNEL_START + 1_500 * US + TRANSFER
    assert gains[0] == gains[1] == StepGains(1, STEP, predicted)
    assert gains[2] == predicted_gains(prepare_rank(analysis.ranks[2].events), halve_odd)
    assert gains[2].baseline_ns - gains[2].predicted_ns == 1_000 * US
    # in the profile's quality report
    merged = replayed_together(analysis, [FIX])
    assert [(c.id, c.count) for c in merged.quality if c.id == REPLAYED_ALONE] == [
        (REPLAYED_ALONE, 1) for _ in counted
    ]


def chain_trace(rank: int, kernel: str, kernel_us: int, collectives: int) -> Trace:
    """The step of :func:`rank_trace`, then ``collectives - 1`` more rounds of a 1 ms kernel
    and a 500 µs all-reduce on the same stream (both ranks arrive at those together)."""
    arrival = KERNEL_START + kernel_us * US
    b = EventsBuilder(rank=rank, pid=100 + rank).step_mark(0, 100 * US, 1)
    b.launch(10 * US, 1 * US, KERNEL_START, kernel_us * US, kernel)
    b.launch(12 * US, 1 * US, arrival, STEP - arrival, ALLREDUCE, kind=schema.COMM)
    end = STEP
    for k in range(1, collectives):
        b.launch((12 + 2 * k) * US, 1 * US, end, 1_000 * US, "k2")
        b.launch((13 + 2 * k) * US, 1 * US, end + 1_000 * US, TRANSFER, ALLREDUCE, kind=schema.COMM)
        end += 1_000 * US + TRANSFER
    return Trace(b.table(), schema.empty_counters(), {}, "synthetic")


def test_a_chain_of_collectives_settles_within_the_rounds_or_is_counted() -> None:
    """Each round of the replay together settles one more all-reduce of the chain: four
    settle (every rank ends 1.5 ms earlier), twelve do not within the 8 rounds (counted; the
    last round's gains kept). The rounds replay the graphs built again at each round; the
    joint pass over kept graphs gives the rounds' figures where they settle."""
    ranks = profile(chain_trace(0, "gemm", 1_000, 4), chain_trace(1, "slow_gemm", 3_000, 4)).ranks
    short = RanksTogether(ranks, kept_rows=0)
    gains = short.gains([{1: FASTER_LATE_KERNEL}])[0]
    chain = STEP + 3 * (1_000 * US + TRANSFER)
    assert gains == {r: StepGains(1, chain, chain - 1_500 * US) for r in (0, 1)}
    assert short.unsettled == 0 and not unsettled_arrivals(short)
    joint = RanksTogether(ranks)
    assert joint.gains([{1: FASTER_LATE_KERNEL}])[0] == gains
    assert joint.unsettled == joint.in_rounds == 0
    long = RanksTogether(
        profile(chain_trace(0, "gemm", 1_000, 12), chain_trace(1, "slow_gemm", 3_000, 12)).ranks,
        kept_rows=0,
    )
    long.gains([{1: FASTER_LATE_KERNEL}])
    (check,) = unsettled_arrivals(long)
    assert long.unsettled == 1 and check.id == UNSETTLED_ARRIVALS and check.count == 1


@pytest.mark.parametrize("collectives", [12, 40])
def test_the_joint_pass_settles_a_long_chain_of_collectives(collectives: int) -> None:
    """Rank 1's kernel halved (1.5 ms earlier at the first all-reduce): every later all-reduce
    waits for the one before on both ranks, so the whole chain, and each rank's step, ends
    1.5 ms earlier, in one pass (the rounds settle one all-reduce each)."""
    ranks = profile(
        chain_trace(0, "gemm", 1_000, collectives),
        chain_trace(1, "slow_gemm", 3_000, collectives),
    ).ranks
    together = RanksTogether(ranks)
    gains = together.gains([{1: FASTER_LATE_KERNEL}, {0: FASTER_LATE_KERNEL}])
    chain = STEP + (collectives - 1) * (1_000 * US + TRANSFER)
    assert gains[0] == {r: StepGains(1, chain, chain - 1_500 * US) for r in (0, 1)}
    # rank 0 runs no slow_gemm: nothing changes
    assert gains[1] == {r: StepGains(1, chain, chain) for r in (0, 1)}
    assert together.unsettled == together.in_rounds == 0 and not unsettled_arrivals(together)


def test_a_rank_whose_own_change_is_none_moves_with_the_others() -> None:
    """perfledger whatif with a change of rank 1 only: rank 0, unchanged itself, no longer
    waits 2 ms but 0.5 ms for rank 1, and its predicted step is 1.5 ms shorter too."""
    analysis = profile(EARLY, LATE)
    events = pa.concat_tables([r.events for r in analysis.ranks])
    report = replay_profile(events, by_rank={1: FASTER_LATE_KERNEL})
    predicted = {s.rank: s.predicted_ns for s in report.steps}
    assert predicted == {0: STEP - 1_500 * US, 1: STEP - 1_500 * US}
    step0 = next(s for s in report.steps if s.rank == 0)
    assert step0.bound_by_parts_ns["communication"]["wait"] == 500 * US


def test_graphs_built_again_at_each_round_give_the_same_figures() -> None:
    """Beyond the kept rows one rank's graph at a time is built, at each round."""
    ranks = profile(EARLY, LATE).ranks
    changes = [{1: FASTER_LATE_KERNEL}, {0: FASTER_LATE_KERNEL}, {}]
    kept, rebuilt = RanksTogether(ranks), RanksTogether(ranks, kept_rows=0)
    assert kept.gains(changes) == rebuilt.gains(changes)
    assert kept.reports() == rebuilt.reports()


def _finding(rank: int) -> Finding:
    return Finding(FIX, f"{FIX} on {rank}", 1.0, 1.0, {}, "fuse", "re-profile", "by hand")


def _advice(rank: int, fixes: dict[str, WhatIf], *findings: Finding) -> RankAdvice:
    return RankAdvice(
        rank=rank,
        basis=StepBasis(1, STEP, annotated=True),
        findings=findings,
        skipped=(),
        config=AdvisorConfig(),
        fixes=fixes,
        gains={FIX: StepGains(1, STEP, STEP - 1_500 * US)} if fixes else {},
        baseline=StepGains(1, STEP, STEP),
    )


def test_a_fix_on_the_late_rank_gains_on_both_ranks_in_whatif_ms() -> None:
    """The fix (rank 1's kernel twice as fast) fires on rank 1 only: alone it gains 1.5 ms on
    rank 1's one step of the two ranks' two (0.75 ms per step); together both ranks' steps end
    1.5 ms earlier (1.5 ms per step), and so does the top fixes' combination."""
    analysis = profile(EARLY, LATE)
    alone = (_advice(0, {}), _advice(1, {FIX: FASTER_LATE_KERNEL}, _finding(1)))
    (merged_alone,), _ = merge_rank_findings(alone, [FIX])
    assert merged_alone.whatif_ms == 0.75
    advice = advice_together(RanksTogether(analysis.ranks), alone, [FIX])
    assert advice[0].gains[FIX] == advice[1].gains[FIX] == StepGains(1, STEP, STEP - 1_500 * US)
    assert advice[0].baseline == StepGains(1, STEP, STEP)
    (merged,), _ = merge_rank_findings(advice, [FIX])
    assert merged.whatif_ms == 1.5
    report = diagnose(replace(analysis, rank_advice=advice))
    assert report.combined is not None and report.combined.findings == (FIX,)
    assert report.combined.gains == StepGains(2, 2 * STEP, 2 * (STEP - 1_500 * US))


def test_one_rank_or_no_collective_leaves_the_profile_as_it_is() -> None:
    one = profile(EARLY)
    assert replayed_together(one, [FIX]) is one
    none = profile(*(rank_trace(r, "gemm", 1_000, allreduces=0) for r in (0, 1)))
    assert replayed_together(none, [FIX]) is none


def test_ranks_without_a_match_keep_their_own_replays_and_are_counted() -> None:
    """Rank 1's collective matches none (rank 0 has none): counted; rank 0, without
    collectives, is not."""
    apart = profile(rank_trace(0, "gemm", 1_000, allreduces=0), LATE)
    merged = replayed_together(apart, [FIX])
    assert [r.replay for r in merged.ranks] == [r.replay for r in apart.ranks]
    (check,) = [c for c in merged.quality if c.id == REPLAYED_ALONE]
    assert check.count == 1 and check.message.startswith("rank 1: ")


def crossed_trace(rank: int) -> Trace:
    """Two all-reduces on two communication streams, issued in opposite orders by the two
    ranks: each rank's first arrives at 100 µs, its second at 150 µs; both end at 400 µs (each
    collective transfers 250 µs after its last participant arrives)."""
    first, second = ("ar_x", "ar_y") if rank == 0 else ("ar_y", "ar_x")
    b = EventsBuilder(rank=rank, pid=100 + rank).step_mark(0, 50 * US, 1)
    b.launch(20 * US, 1 * US, 100 * US, 300 * US, first, kind=schema.COMM, stream=8)
    b.launch(22 * US, 1 * US, 150 * US, 250 * US, second, kind=schema.COMM, stream=9)
    return Trace(b.table(), schema.empty_counters(), {}, "synthetic")


def test_collectives_reached_in_different_orders_are_replayed_in_rounds_and_counted() -> None:
    """The joint walk deadlocks (rank 0 waits at ar_x for rank 1, which waits at ar_y): the
    change is replayed in rounds instead. Communication twice as fast: each collective's
    250 µs transfer takes 125 µs from the last arrival (150 µs), so both steps end at 275 µs."""
    together = RanksTogether(profile(crossed_trace(0), crossed_trace(1)).ranks)
    assert len(together.arrivals.instances) == 2
    faster = WhatIf((Scale("communication", 0.5),))
    (gains,) = together.gains([{0: faster, 1: faster}])
    assert gains == {r: StepGains(1, 400 * US, 275 * US) for r in (0, 1)}
    assert together.in_rounds == 1 and together.unsettled == 0
    # perfledger whatif's replay of the same ranks falls back the same way
    events = pa.concat_tables([crossed_trace(r).events for r in (0, 1)])
    report = replay_profile(events, faster)
    assert {(s.rank, s.predicted_ns) for s in report.steps} == {(0, 275 * US), (1, 275 * US)}
