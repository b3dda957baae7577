"""The ``--fail-on`` grammar of ``perfledger diff``: ``METRIC OP VALUE UNIT`` into a Threshold.

``step_time>+5%`` fails when step time grows by more than 5 %, ``idle>+2pp`` when idle grows by
more than two percentage points of the step, ``compute<-3ms`` when compute shrinks by more than
3 ms per step. The metrics and the units each accepts are the analysis's
(:data:`perfledger.analysis.diff.GATE_METRICS`); this module only reads the text.
"""

from __future__ import annotations

import re
from typing import Final

from perfledger.analysis.diff import GATE_METRICS, Threshold
from perfledger.errors import PerfledgerError

GATE_UNITS: Final = ("%", "pp", "ms")
_GATE: Final = re.compile(
    r"^\s*(?P<metric>[a-z][a-z0-9_]*)\s*(?P<op>>=|<=|>|<)\s*(?P<value>[+-]?\d+(?:\.\d+)?)\s*"
    r"(?P<unit>" + "|".join(map(re.escape, GATE_UNITS)) + r")\s*$"
)


def parse_threshold(expression: str) -> Threshold:
    """Parse ``METRIC OP VALUE UNIT`` (e.g. ``step_time>+5%``, ``idle>+2pp``, ``compute<-3ms``)."""
    match = _GATE.match(expression)
    if match is None:
        raise PerfledgerError(
            f"--fail-on {expression!r}: expected METRIC>VALUE or METRIC<VALUE with a unit "
            f"(% change, pp of the step, ms), e.g. 'step_time>+5%' or 'idle>+2pp'"
        )
    metric, unit = match["metric"], match["unit"]
    accepted = GATE_METRICS.get(metric)
    if accepted is None:
        raise PerfledgerError(
            f"--fail-on {expression!r}: unknown metric {metric!r}; one of "
            + ", ".join(sorted(GATE_METRICS))
        )
    if unit not in accepted:
        raise PerfledgerError(
            f"--fail-on {expression!r}: {metric} takes {' or '.join(accepted)}, not {unit}"
        )
    return Threshold(expression.strip(), metric, match["op"], float(match["value"]), unit)
