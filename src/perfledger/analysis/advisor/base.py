"""What a diagnosis rule is and what it returns: thresholds, findings, skips, configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfledger.model.findings import Finding, Skipped, Threshold

if TYPE_CHECKING:
    from perfledger.analysis.advisor.context import AdvisorContext


Params = Mapping[str, float]
Outcome = Finding | Skipped | None  # None: the rule ran and found nothing


@dataclass(frozen=True)
class Rule:
    """A diagnosis rule: an id, its thresholds and the function that checks a profile."""

    id: str
    title: str
    checks: str  # what the rule looks at, one line (the rules table)
    thresholds: tuple[Threshold, ...]
    check: Callable[[AdvisorContext, Params], Outcome]
    # whether its finding may carry a replayed gain (it calls AdvisorContext.whatif_ms): the
    # advisor checks those rules first and replays their top fixes together while the others
    # run (the combination is made again, from the replays kept, once all have run)
    replays: bool = False

    def defaults(self) -> dict[str, float]:
        """Threshold name → default value."""
        return {t.name: t.default for t in self.thresholds}
