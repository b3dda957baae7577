"""The findings of the communication split made again on each rank once the ranks' waits are
measured across them (:func:`perfledger.analysis.advisor.realigned_advice`): a finding gone
on a rank takes its fix with it, so that tables/whatif_fixes.parquet stores (and
``perfledger whatif --apply-finding`` replays) only the fixes of findings that are there.

On tests/data/kineto/sampled_2ranks ``exposed_communication`` fires on both ranks with a
replayed fix; rank 1's advice is then made again with a threshold it cannot reach."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from perfledger.analysis.advisor import realigned_advice
from perfledger.model.findings import RankAdvice
from perfledger.profiledir.artefacts import advisor_fixes
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from tests.paths import DATA

RULE = "exposed_communication"


def test_a_finding_gone_on_a_rank_leaves_no_fix_of_that_rank(tmp_path: Path) -> None:
    built = build_profile(
        [DATA / "kineto" / "sampled_2ranks"],
        tmp_path / "profile",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    made = built.analysis.rank_advice
    assert made is not None and [a.rank for a in made] == [0, 1]
    for advice in made:  # where the test starts from: the finding and its fix on each rank
        assert RULE in {f.id for f in advice.findings} and RULE in advice.fixes
        assert RULE in advice.gains

    def unreachable(advice: RankAdvice) -> RankAdvice:
        thresholds = {**advice.config.thresholds, f"{RULE}.exposed_pct": 1e9}
        return replace(advice, config=replace(advice.config, thresholds=thresholds))

    analysis = replace(built.analysis, rank_advice=(made[0], unreachable(made[1])))
    realigned = realigned_advice(analysis)
    assert realigned is not None
    first, second = realigned
    assert RULE in {f.id for f in first.findings} and RULE in first.fixes
    assert first.gains == made[0].gains
    assert RULE not in {f.id for f in second.findings}
    assert RULE not in second.fixes and RULE not in second.gains
    # the other fixes of rank 1 stay, with their gains
    assert set(second.fixes) == set(made[1].fixes) - {RULE}
    assert {r: second.gains[r] for r in second.fixes} == {r: made[1].gains[r] for r in second.fixes}
    assert second.combined is None or RULE not in second.combined.findings
    stored = {
        (rank, rule)
        for rank, rule, _ in advisor_fixes(replace(analysis, rank_advice=realigned), None)
    }
    assert (0, RULE) in stored and (1, RULE) not in stored
