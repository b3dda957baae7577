"""Findings of two runs, matched by id: resolved, new, changed (severity moved) and unchanged."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FindingChange:
    """A finding present in both runs whose severity moved."""

    id: str
    title: str
    base_severity_ms: float | None
    current_severity_ms: float | None
    base_severity_pct: float | None
    current_severity_pct: float | None


@dataclass(frozen=True)
class FindingsDiff:
    """Findings resolved (base only), new (current only), changed and unchanged."""

    resolved: tuple[Mapping[str, Any], ...]
    new: tuple[Mapping[str, Any], ...]
    changed: tuple[FindingChange, ...]
    unchanged: tuple[str, ...]


def finding_severity(finding: Mapping[str, Any], key: str) -> float | None:
    """A finding's ``severity_ms`` or ``severity_pct`` as a float (None: absent or not finite)."""
    value = finding.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def findings_diff(
    base: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]
) -> FindingsDiff:
    """Match findings by id: resolved, new, changed (severity moved) and unchanged."""
    by_b = {str(f.get("id")): f for f in base}
    by_c = {str(f.get("id")): f for f in current}
    resolved = tuple(f for i, f in by_b.items() if i not in by_c)
    new = tuple(f for i, f in by_c.items() if i not in by_b)
    changed: list[FindingChange] = []
    unchanged: list[str] = []
    for finding_id, b in by_b.items():
        c = by_c.get(finding_id)
        if c is None:
            continue
        severity = (
            finding_severity(b, "severity_ms"),
            finding_severity(c, "severity_ms"),
            finding_severity(b, "severity_pct"),
            finding_severity(c, "severity_pct"),
        )
        if severity[0] == severity[1] and severity[2] == severity[3]:
            unchanged.append(finding_id)
            continue
        changed.append(
            FindingChange(
                id=finding_id,
                title=str(c.get("title") or b.get("title") or finding_id),
                base_severity_ms=severity[0],
                current_severity_ms=severity[1],
                base_severity_pct=severity[2],
                current_severity_pct=severity[3],
            )
        )
    return FindingsDiff(resolved, new, tuple(changed), tuple(unchanged))
