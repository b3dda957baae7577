"""The advisor's rules as a table: what each checks, its thresholds with default, unit,
meaning and source, and the known devices (``perfledger analyze --rules``)."""

from __future__ import annotations

from collections.abc import Sequence

from perfledger.analysis.advisor import RULES
from perfledger.analysis.advisor.base import Rule
from perfledger.model import devices


def rules_table(rules: Sequence[Rule] | None = None) -> str:
    """Every rule, what it checks, and its thresholds with default, unit, meaning and source."""
    rules = RULES if rules is None else rules
    lines: list[str] = []
    for rule in rules:
        lines.append(f"{rule.id}: {rule.title}")
        lines.append(f"    checks: {rule.checks}")
        for t in rule.thresholds:
            value = f"{t.default:g}"
            lines.append(f"    {rule.id}.{t.name} = {value} {t.unit}  {t.meaning}  [{t.source}]")
    lines.append("")
    lines.append(
        "known devices: "
        + ", ".join(d.name for d in devices.KNOWN_DEVICES)
        + " (--device-model NAME, or --peak-tflops / --peak-bandwidth)"
    )
    return "\n".join(lines) + "\n"
