"""What-if changes to a step graph and the results of replaying it (docs/whatif.md).

A change scales the durations of a class of work (``compute=0.5``: kernels twice as fast),
removes the host's synchronisation waits, or lets collectives run beside the compute of their
stream; the step graph is then replayed. Results are per rank and step, in integer ns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa

# What a scale applies to.
COMPUTE: Final = "compute"  # compute kernels (not communication, not copies)
COMMUNICATION: Final = "communication"  # communication tasks
MEMCPY: Final = "memcpy"  # copies and memsets
HOST: Final = "host"  # host work between calls and the host calls themselves
# launch overhead: the launch calls, the launch latency, and the host's dispatch work between
# two launch or synchronisation calls (not the data loader's)
LAUNCH: Final = "launch"
KERNEL_PREFIX: Final = "kernel:"  # kernel:GLOB, a task or host operator name pattern
SELECTORS: Final = (COMPUTE, COMMUNICATION, MEMCPY, HOST, LAUNCH)

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
class TaskChange:
    """Some device tasks of one rank, by their rows in the rank's events table, changed.

    Attributes:
        rows: the tasks' rows.
        factors: per row, the factor its duration is multiplied by (>= 0).
        fused: per row (empty: none), whether it runs as a later part of one fused kernel:
            right after its predecessor on its stream, with no gap before it and no launch
            of its own (its launch call takes no host time).
    """

    rows: tuple[int, ...]
    factors: tuple[float, ...]
    fused: tuple[bool, ...] = ()


@dataclass(frozen=True)
class WhatIf:
    """A change to replay; the default is no change (the baseline replay).

    Attributes:
        scales: durations of classes of work scaled.
        no_sync: every synchronisation wait removed.
        overlap_comm: collectives in lanes of their own beside the compute of their stream.
        unsynced_rows: the synchronisation calls (rows of the rank's events) whose waits are
            removed.
        no_dataloader: the data loader's host time removed (the next batch is ready when the
            step asks for it).
        tasks: device tasks made faster or fused (:class:`TaskChange`).
    """

    scales: tuple[Scale, ...] = ()
    no_sync: bool = False
    overlap_comm: bool = False
    unsynced_rows: tuple[int, ...] = ()
    no_dataloader: bool = False
    tasks: tuple[TaskChange, ...] = ()

    @property
    def unchanged(self) -> bool:
        return not (
            self.scales
            or self.no_sync
            or self.overlap_comm
            or self.unsynced_rows
            or self.no_dataloader
            or self.tasks
        )


@dataclass(frozen=True)
class StepGains:
    """What a change gains, summed over replayed steps: the steps, their baseline and their
    predicted time (each rank's predicted total kept within [0, its baseline]), and how many
    rank replays predicted a longer total than their baseline (clamped; a doubtful replay).

    Totals, not steps one by one: a faster host runs ahead into the next step's window, so a
    step can lengthen while the run shortens.
    """

    steps: int = 0
    baseline_ns: int = 0
    predicted_ns: int = 0
    slower_replays: int = 0

    def __add__(self, other: StepGains) -> StepGains:
        return StepGains(
            self.steps + other.steps,
            self.baseline_ns + other.baseline_ns,
            self.predicted_ns + other.predicted_ns,
            self.slower_replays + other.slower_replays,
        )

    @property
    def gain_ms(self) -> float:
        """The gain per step, ms (3 decimals)."""
        return round((self.baseline_ns - self.predicted_ns) / max(self.steps, 1) / 1e6, 3)

    @property
    def baseline_ms(self) -> float:
        return round(self.baseline_ns / max(self.steps, 1) / 1e6, 3)

    @property
    def predicted_ms(self) -> float:
        return round(self.predicted_ns / max(self.steps, 1) / 1e6, 3)


def together(changes: Sequence[WhatIf]) -> WhatIf:
    """Several fixes applied at once. Two fixes of the same work do not compound: where
    scales share a selector (host_dispatch_bound's and small_op_explosion's launch overhead),
    the stronger one applies alone, not their product."""
    strongest: dict[str, Scale] = {}
    for scale in (s for c in changes for s in c.scales):
        kept = strongest.get(scale.selector)
        if kept is None or scale.factor < kept.factor:
            strongest[scale.selector] = scale
    return WhatIf(
        scales=tuple(strongest.values()),
        no_sync=any(c.no_sync for c in changes),
        overlap_comm=any(c.overlap_comm for c in changes),
        unsynced_rows=tuple(sorted({r for c in changes for r in c.unsynced_rows})),
        no_dataloader=any(c.no_dataloader for c in changes),
        tasks=tuple(t for c in changes for t in c.tasks),
    )


# The baseline: the graph replayed as measured.
NO_CHANGE: Final = WhatIf()


# ``bound_by_parts``, beside ``bound_by`` (whose classes alone sum to the path's length): the
# parts of a class, ``{class: {part: time}}``. A collective's time on the path
# (``communication``) is ``wait``, before its transfer starts (waiting for its peers), plus
# ``transfer``, the rest; both are always there (0 and 0 without communication on the path).
WAIT: Final = "wait"
TRANSFER: Final = "transfer"
PART_NAMES: Final = {WAIT: "waiting for peers", TRANSFER: "transfer"}


def communication_parts(wait: int, total: int) -> dict[str, dict[str, int]]:
    """``bound_by_parts`` for ``total`` of communication on a path, ``wait`` of it waiting."""
    return {COMMUNICATION: {WAIT: wait, TRANSFER: total - wait}}


def parts_ms(parts: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """``bound_by_parts`` in ms (3 decimals): the last part of a class is the class's
    rounded total less the others' rounded, so that the parts add up to the class's ms."""
    shown: dict[str, dict[str, float]] = {}
    for whole, split in parts.items():
        total = round(sum(split.values()) / 1e6, 3)
        names = list(split)
        ms = {k: round(split[k] / 1e6, 3) for k in names[:-1]}
        ms[names[-1]] = round(total - sum(ms.values()), 3)
        shown[whole] = ms
    return shown


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
        part: of a collective that waited for its peers, which part of it the piece is:
            ``wait`` (its wait) or ``transfer`` (the rest); None for every other piece.
    """

    start_ns: int
    end_ns: int
    category: str
    label: str
    lane: str
    part: str | None = None

    @property
    def shown(self) -> str:
        """The label as a timeline shows it: a part named after the work."""
        return self.label if self.part is None else f"{self.label} ({PART_NAMES[self.part]})"


# tables/critical_path.parquet: every replayed step's critical path (its :class:`PathSpan`
# pieces with their rank and step), so that a timeline written later from the profile's tables
# (``perfledger timeline``) shows the same critical-path track as the one analyze wrote.
CRITICAL_PATH_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int64(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("category", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("lane", pa.string(), nullable=False),
        pa.field("part", pa.string()),
    ]
)


@dataclass(frozen=True)
class StepReplay:
    """One step of one rank: measured, replayed unchanged (baseline) and predicted, in ns;
    ``bound_by_ns``: the predicted critical path's time by class (the classes sum to
    predicted_ns); ``bound_by_parts_ns``: the parts of a class, ``{"communication": {"wait":
    w, "transfer": t}}`` with w + t its ``communication`` (:func:`communication_parts`);
    ``path_spans``: that path laid on the measured trace (:class:`PathSpan`, at most
    :data:`MAX_PATH_SPANS`)."""

    rank: int
    step: int
    measured_ns: int
    baseline_ns: int
    predicted_ns: int
    bound_by_ns: dict[str, int] = field(default_factory=dict)
    bound_by_parts_ns: dict[str, dict[str, int]] = field(default_factory=dict)
    path_nodes: int = 0
    path_spans: tuple[PathSpan, ...] = ()

    def broken_invariant(self) -> str | None:
        """The first of the critical path's invariants this step breaks (None: none): every
        class and part >= 0; the classes sum to the predicted step; each split class equals
        the sum of its parts."""
        bound = self.bound_by_ns
        negative = sorted(k for k, v in bound.items() if v < 0)
        negative += sorted(
            f"{whole} {k}"
            for whole, parts in self.bound_by_parts_ns.items()
            for k, v in parts.items()
            if v < 0
        )
        if negative:
            return f"negative path time: {', '.join(negative)}"
        total = sum(bound.values())
        if total != self.predicted_ns:
            return f"the path's classes sum to {total} ns, not the step's {self.predicted_ns} ns"
        for whole, parts in sorted(self.bound_by_parts_ns.items()):
            split = sum(parts.values())
            if split != bound.get(whole, 0):
                named = " + ".join(parts)
                return f"{whole}: {named} = {split} ns, not {whole} = {bound.get(whole, 0)} ns"
        return None

    def self_check(self) -> None:
        """Assert the critical path's invariants (:meth:`broken_invariant`)."""
        broken = self.broken_invariant()
        assert broken is None, broken

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
    # collectives of several ranks not matched across them (ranks that ran one a different
    # number of times, or whose participant ended before the last one arrived): each of
    # their tasks keeps its observed duration, its wait for the others unknown to the replay
    unmatched_collectives: int = 0

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

    def mean_bound_by_parts_ns(self) -> dict[str, dict[str, int]]:
        """The parts of the classes (``bound_by_parts``) averaged over the steps, always with
        ``communication``'s; the transfer is the class's mean (:meth:`mean_bound_by_ns`)
        less the wait's, so that the parts add up to it exactly."""
        count = max(len(self.steps), 1)
        wait = sum(s.bound_by_parts_ns.get(COMMUNICATION, {}).get(WAIT, 0) for s in self.steps)
        whole = sum(s.bound_by_ns.get(COMMUNICATION, 0) for s in self.steps)
        return communication_parts(round(wait / count), round(whole / count))

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
                    "bound_by_parts_ns": {
                        k: dict(v)
                        for k, v in (
                            s.bound_by_parts_ns
                            or communication_parts(0, s.bound_by_ns.get(COMMUNICATION, 0))
                        ).items()
                    },
                }
                for s in self.steps
            ],
            "dropped_edges": self.dropped_edges,
        }


def path_spans_table(steps: Sequence[StepReplay]) -> pa.Table:
    """The critical paths of ``steps`` as one table (:data:`CRITICAL_PATH_SCHEMA`)."""
    rows = [(s.rank, s.step, p) for s in steps for p in s.path_spans]
    return pa.Table.from_pydict(
        {
            "rank": [r for r, _, _ in rows],
            "step": [n for _, n, _ in rows],
            "start_ns": [p.start_ns for _, _, p in rows],
            "end_ns": [p.end_ns for _, _, p in rows],
            "category": [p.category for _, _, p in rows],
            "label": [p.label for _, _, p in rows],
            "lane": [p.lane for _, _, p in rows],
            "part": [p.part for _, _, p in rows],
        },
        schema=CRITICAL_PATH_SCHEMA,
    )


def path_spans_by_rank(table: pa.Table) -> dict[int, tuple[tuple[int, int, PathSpan], ...]]:
    """:func:`path_spans_table` read back: per rank, its (rank, step, span) pieces (a table
    written before the ``part`` column: no piece is a part)."""
    spans: dict[int, list[tuple[int, int, PathSpan]]] = {}
    nothing = [None] * table.num_rows
    columns = [
        table.column(f.name).to_pylist() if f.name in table.column_names else nothing
        for f in CRITICAL_PATH_SCHEMA
    ]
    for rank, step, start, end, category, label, lane, part in zip(*columns, strict=True):
        piece = PathSpan(start, end, category, label, lane, part)
        spans.setdefault(rank, []).append((rank, step, piece))
    return {rank: tuple(pieces) for rank, pieces in spans.items()}


# tables/whatif_fixes.parquet: the graph change each finding's fix replayed (the change behind
# its ``whatif_ms``), per rank, so that ``perfledger whatif --apply-finding RULE`` replays the
# very change the advisor did. One row per piece of a change (``part``):
#   ``scale``: a :class:`Scale` (selector, factor);
#   ``no_sync``, ``overlap_comm``, ``no_dataloader``: that flag set;
#   ``unsync``: a synchronisation call (row) whose wait is removed;
#   ``task``: a task (row) of the ``group``-th :class:`TaskChange`, its factor and fused flag.
# Rows are rows of the rank's own events (the profile's events of that rank, in stored order).
FIXES_SCHEMA: Final = pa.schema(
    [
        pa.field("rule", pa.string(), nullable=False),
        pa.field("rank", pa.int64(), nullable=False),
        pa.field("part", pa.string(), nullable=False),
        pa.field("selector", pa.string()),
        pa.field("row", pa.int64(), nullable=False),
        pa.field("factor", pa.float64(), nullable=False),
        pa.field("fused", pa.bool_(), nullable=False),
        pa.field("group", pa.int64(), nullable=False),
    ]
)
_FLAGS: Final = ("no_sync", "overlap_comm", "no_dataloader")


def fixes_table(fixes: Sequence[tuple[int, str, WhatIf]]) -> pa.Table:
    """The changes of ``fixes`` ((rank, rule id, change) each) as one table
    (:data:`FIXES_SCHEMA`); :func:`fixes_from_table` reads it back."""
    parts: list[pa.Table] = []

    def add(rule: str, rank: int, part: str, **values: Any) -> None:
        size = len(values["row"])
        parts.append(
            pa.table(
                {
                    "rule": pa.array([rule] * size, pa.string()),
                    "rank": pa.array(np.full(size, rank, dtype=np.int64)),
                    "part": pa.array([part] * size, pa.string()),
                    "selector": pa.array(values.get("selector", [None] * size), pa.string()),
                    "row": pa.array(np.asarray(values["row"], dtype=np.int64)),
                    "factor": pa.array(
                        np.asarray(values.get("factor", np.ones(size)), dtype=np.float64)
                    ),
                    "fused": pa.array(np.asarray(values.get("fused", np.zeros(size)), dtype=bool)),
                    "group": pa.array(np.full(size, values.get("group", -1), dtype=np.int64)),
                },
                schema=FIXES_SCHEMA,
            )
        )

    for rank, rule, change in fixes:  # a loop over findings and ranks
        if change.scales:
            add(
                rule,
                rank,
                "scale",
                selector=[s.selector for s in change.scales],
                row=[-1] * len(change.scales),
                factor=[s.factor for s in change.scales],
            )
        for flag in _FLAGS:
            if getattr(change, flag):
                add(rule, rank, flag, row=[-1])
        if change.unsynced_rows:
            add(rule, rank, "unsync", row=change.unsynced_rows)
        for group, task in enumerate(change.tasks):
            fused = task.fused or (False,) * len(task.rows)
            add(rule, rank, "task", row=task.rows, factor=task.factors, fused=fused, group=group)
    return pa.concat_tables(parts) if parts else FIXES_SCHEMA.empty_table()


def fixes_from_table(table: pa.Table) -> dict[str, dict[int, WhatIf]]:
    """:func:`fixes_table` read back: by rule id, each rank's change."""
    fixes: dict[str, dict[int, WhatIf]] = {}
    if table.num_rows == 0:
        return fixes
    rule = np.asarray(table["rule"].to_numpy(zero_copy_only=False), dtype=object)
    rank = np.asarray(table["rank"], dtype=np.int64)
    part = np.asarray(table["part"].to_numpy(zero_copy_only=False), dtype=object)
    selector = table["selector"].to_pylist()
    row = np.asarray(table["row"], dtype=np.int64)
    factor = np.asarray(table["factor"], dtype=np.float64)
    fused = np.asarray(table["fused"], dtype=bool)
    group = np.asarray(table["group"], dtype=np.int64)
    keys = sorted({(str(r), int(k)) for r, k in zip(rule.tolist(), rank.tolist(), strict=True)})
    for rule_id, rank_id in keys:  # a loop over findings and ranks
        mine = (rule == rule_id) & (rank == rank_id)
        scales = np.flatnonzero(mine & (part == "scale"))
        flags = {flag: bool((mine & (part == flag)).any()) for flag in _FLAGS}
        unsync = row[mine & (part == "unsync")]
        tasks = []
        for g in np.unique(group[mine & (part == "task")]).tolist():  # a loop over changes
            at = mine & (part == "task") & (group == g)
            tasks.append(
                TaskChange(
                    tuple(row[at].tolist()),
                    tuple(factor[at].tolist()),
                    tuple(fused[at].tolist()) if fused[at].any() else (),
                )
            )
        fixes.setdefault(rule_id, {})[rank_id] = WhatIf(
            scales=tuple(Scale(str(selector[i]), float(factor[i])) for i in scales.tolist()),
            unsynced_rows=tuple(unsync.tolist()),
            tasks=tuple(tasks),
            **flags,
        )
    return fixes


def with_change(base: WhatIf, extra: WhatIf) -> WhatIf:
    """``base`` and ``extra`` applied together, every part kept (scales of the same work
    multiply, unlike :func:`together`'s fixes)."""
    return WhatIf(
        scales=base.scales + extra.scales,
        no_sync=base.no_sync or extra.no_sync,
        overlap_comm=base.overlap_comm or extra.overlap_comm,
        unsynced_rows=tuple(sorted({*base.unsynced_rows, *extra.unsynced_rows})),
        no_dataloader=base.no_dataloader or extra.no_dataloader,
        tasks=base.tasks + extra.tasks,
    )


def step_gains(report: ReplayReport) -> StepGains:
    """What a report's change gains over its steps, each rank's predicted total kept within
    [0, its baseline] as the advisor keeps its gains (``whatif_ms``)."""
    total = StepGains()
    ranks = sorted({s.rank for s in report.steps})
    for rank in ranks:  # a loop over ranks
        mine = [s for s in report.steps if s.rank == rank]
        baseline = sum(s.baseline_ns for s in mine)
        predicted = sum(s.predicted_ns for s in mine)
        slower = int(predicted > baseline)
        total = total + StepGains(len(mine), baseline, min(max(predicted, 0), baseline), slower)
    return total
