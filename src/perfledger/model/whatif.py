"""What-if changes to a step graph and the results of replaying it (docs/whatif.md).

A change scales the durations of a class of work (``compute=0.5``: kernels twice as fast),
removes the host's synchronisation waits, or lets collectives run beside the compute of their
stream; the step graph is then replayed. Results are per rank and step, in integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

# What a scale applies to.
COMPUTE: Final = "compute"  # compute kernels (not communication, not copies)
COMMUNICATION: Final = "communication"  # communication tasks
MEMCPY: Final = "memcpy"  # copies and memsets
HOST: Final = "host"  # host work between calls and the host calls themselves
KERNEL_PREFIX: Final = "kernel:"  # kernel:GLOB, a task or host operator name pattern
SELECTORS: Final = (COMPUTE, COMMUNICATION, MEMCPY, HOST)

# Replay error (|replayed - measured| / measured) beyond which the graph does not explain the
# trace well enough to trust a prediction (quality check ``replay_error``).
REPLAY_MEDIAN_ERROR_PCT: Final = 3.0
REPLAY_WORST_ERROR_PCT: Final = 10.0


@dataclass(frozen=True)
class Scale:
    """Multiply the durations of the work ``selector`` names by ``factor`` (> 0)."""

    selector: str
    factor: float


@dataclass(frozen=True)
class WhatIf:
    """A change to replay; the default is no change (the baseline replay)."""

    scales: tuple[Scale, ...] = ()
    no_sync: bool = False
    overlap_comm: bool = False

    @property
    def unchanged(self) -> bool:
        return not self.scales and not self.no_sync and not self.overlap_comm


# The baseline: the graph replayed as measured.
NO_CHANGE: Final = WhatIf()


# A step's critical path keeps at most this many spans (adjacent pieces merged beyond it).
MAX_PATH_SPANS: Final = 256


class PathSpan(NamedTuple):
    """One piece of a step's critical path, in the trace's own (measured) time.

    Attributes:
        start_ns, end_ns: absolute ns, the events' time base; the spans of a step are in time
            order, do not overlap and lie inside the measured step window.
        category: what the time is spent on, a ``bound_by`` class (``host``, ``launch``,
            ``compute:matmul`` ...; docs/whatif.md).
        label: the work: a task's or host call's name, ``host work``, ``launch latency``,
            ``stream gap``, ``sync wait``, or ``N pieces: <longest>`` where pieces were merged.
        lane: where it ran: ``thread <tid>`` (host), ``stream <id>`` or ``device <d> stream
            <id>`` (device), ``""`` for the time between two pieces of work (a latency, host
            work before a thread's first node).
    """

    start_ns: int
    end_ns: int
    category: str
    label: str
    lane: str


@dataclass(frozen=True)
class StepReplay:
    """One step of one rank: measured, replayed unchanged (baseline) and predicted, in ns;
    ``bound_by_ns``: the predicted critical path's time by class (sums to predicted_ns);
    ``path_spans``: that path laid on the measured trace (:class:`PathSpan`, at most
    :data:`MAX_PATH_SPANS`)."""

    rank: int
    step: int
    measured_ns: int
    baseline_ns: int
    predicted_ns: int
    bound_by_ns: dict[str, int] = field(default_factory=dict)
    path_nodes: int = 0
    path_spans: tuple[PathSpan, ...] = ()

    @property
    def error_pct(self) -> float:
        """The replay error of the baseline against the measured step, in percent."""
        if self.measured_ns <= 0:
            return 0.0
        return 100.0 * abs(self.baseline_ns - self.measured_ns) / self.measured_ns


@dataclass(frozen=True)
class ReplayReport:
    """The replay of every step of a profile under one change."""

    steps: tuple[StepReplay, ...]
    change: WhatIf = field(default_factory=WhatIf)
    dropped_edges: int = 0
    # the longest critical-path tasks by name: (name, class, ns on the path), most first
    top_path_tasks: tuple[tuple[str, str, int], ...] = ()

    @property
    def median_error_pct(self) -> float | None:
        errors = sorted(s.error_pct for s in self.steps)
        if not errors:
            return None
        middle = len(errors) // 2
        if len(errors) % 2:
            return errors[middle]
        return (errors[middle - 1] + errors[middle]) / 2

    @property
    def worst_error_pct(self) -> float | None:
        return max((s.error_pct for s in self.steps), default=None)

    def bound_by_ns(self) -> dict[str, int]:
        """The critical paths' time by class over every step."""
        total: dict[str, int] = {}
        for step in self.steps:
            for key, value in step.bound_by_ns.items():
                total[key] = total.get(key, 0) + value
        return total

    def mean_bound_by_ns(self) -> dict[str, int]:
        """The critical path's time by class, averaged over the steps (classes never on a
        path left out), largest first."""
        if not self.steps:
            return {}
        total = self.bound_by_ns()
        mean = {k: round(v / len(self.steps)) for k, v in total.items() if v > 0}
        return dict(sorted(mean.items(), key=lambda item: (-item[1], item[0])))

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (ns; the CLI's ``--json`` and summary.json lay it out)."""
        return {
            "steps": [
                {
                    "rank": s.rank,
                    "step": s.step,
                    "measured_ns": s.measured_ns,
                    "baseline_ns": s.baseline_ns,
                    "predicted_ns": s.predicted_ns,
                    "bound_by_ns": dict(s.bound_by_ns),
                }
                for s in self.steps
            ],
            "dropped_edges": self.dropped_edges,
        }
