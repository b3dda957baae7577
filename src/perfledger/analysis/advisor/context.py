"""What every rule reads: the profile's analysis, the step basis of severities, device tasks
linked to the host calls and operators that issued them, and the device each rank ran on.

Built once per profile the rules run on (on a profile of several ranks: once per rank, and once
more for the rules that read the whole run); every derived table is computed on first use
(vectorised) and shared by the rules that need it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.critical_path import RankReplay, predicted_gains, prepare_rank
from perfledger.analysis.intervals import IntervalSet, union
from perfledger.analysis.ops import launch_config, link_device_tasks, take_rows
from perfledger.analysis.replay import effective_change
from perfledger.duck import duck
from perfledger.memory import arrow_maps, drop_mapped_pages
from perfledger.model import devices, schema
from perfledger.model.accounts import HostWindowAccount, WindowAccount
from perfledger.model.findings import AdvisorConfig, StepBasis
from perfledger.model.schema import SPAN_STEP
from perfledger.model.whatif import NO_CHANGE, StepGains, WhatIf
from perfledger.sources import kineto_scan

# The runtime calls that launch a captured CUDA (or HIP) graph.
GRAPH_LAUNCHES: Final = ("cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch")

if TYPE_CHECKING:
    from perfledger.model.profile import ProfileAnalysis

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Columns of :attr:`AdvisorContext.tasks`, one row per device task (kernel, comm, memcpy,
# memset), sorted by rank, device, stream, start_ns. The args text is not among them (the
# largest column by far): what the rules read in it is derived once, below.
TASKS_SCHEMA: Final = pa.schema(
    [
        pa.field("row", pa.int64()),  # row in ProfileAnalysis.events
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int16()),
        pa.field("stream", pa.int64()),
        pa.field("step", pa.int32()),
        pa.field("kind", pa.string()),
        # codes into the tasks' distinct names: a few dozen kernel names, not a text per task
        pa.field("name", pa.dictionary(pa.int32(), pa.string())),
        pa.field("start_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("shapes", pa.string()),  # the task's own (Ascend kernels), else null
        pa.field("dtypes", pa.string()),
        pa.field("launch_row", pa.int64()),  # the runtime/sync call that issued it (-1)
        pa.field("launch_ns", pa.int64()),
        pa.field("launch_dur_ns", pa.int64()),
        pa.field("op_row", pa.int64()),  # the cpu_op that issued it (-1)
        pa.field("op_name", pa.string()),
        pa.field("op_shapes", pa.string()),
        pa.field("op_dtypes", pa.string()),
    ]
)

# The keys of an Ascend kernel's args the rules read (operator type, outputs, formats, the
# pipeline ratios), as they appear in the args text:
ASCEND_ARG_KEYS: Final = r'"(op_type|output_shapes|output_dtypes|input_formats|[a-z0-9_]+_ratio)"'


def _named_keys(chunk: pa.Array, rows: IntArray) -> BoolArray:
    """Whether the args of each of ``rows`` of ``chunk`` name an :data:`ASCEND_ARG_KEYS` key
    (searched in place by the compiled scanner where it is built)."""
    if kineto_scan.AVAILABLE and pa.types.is_string(chunk.type):
        return kineto_scan.named_key_rows(chunk, rows)
    taken = chunk.take(pa.array(rows, pa.int64()))
    found = pc.match_substring_regex(pc.cast(taken, pa.string()), ASCEND_ARG_KEYS)
    return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=bool)


class AdvisorContext:
    """The profile as the rules see it (see the module docstring)."""

    def __init__(
        self,
        analysis: ProfileAnalysis,
        config: AdvisorConfig,
        overhead_pct: float | None = None,
        replays: Sequence[RankReplay] | None = (),
        *,
        overhead_noise_pct: float | None = None,
    ) -> None:
        self.analysis = analysis
        self.config = config
        self.overhead_pct = overhead_pct
        # the half-width of overhead_pct's interval from the steps' own variation
        self.overhead_noise_pct = overhead_noise_pct
        # None: no replay here (the gains come from the rank tasks' advice)
        self.replays_allowed = replays is not None
        self._replays: dict[int, RankReplay | None] = {r.rank: r for r in replays or ()}
        self.fixes: dict[str, WhatIf] = {}  # rule id -> the graph change of its fix
        self.gains: dict[str, StepGains] = {}  # rule id -> what that change gains
        # (rank, change) -> gains; a rank -> its prepared replay: made once, by the first
        # rule (of those checked side by side) that asks, the others waiting for it
        self._replayed: dict[tuple[int, WhatIf], Future[StepGains]] = {}
        self._prepared: dict[int, Future[RankReplay | None]] = {}
        self._made = threading.Lock()

    # --- replay (docs/whatif.md) -----------------------------------------------------------

    def replay_of(self, rank: int) -> RankReplay | None:
        """The rank's step graph and baseline replay (prepared on first use when the rank task
        did not hand it over); None for a rank without events."""
        if rank in self._replays:
            return self._replays[rank]

        def prepared() -> RankReplay | None:
            found = next((r for r in self.analysis.ranks if r.rank == rank), None)
            return (
                prepare_rank(found.events) if found is not None and found.events.num_rows else None
            )

        made: RankReplay | None = self._once(self._prepared, rank, prepared)
        return made

    def _once(self, made: dict[Any, Future[Any]], key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, called once for ``key`` whatever the threads asking: the first makes
        it, the others wait for its result (or its error)."""
        with self._made:
            future = made.get(key)
            mine = future is None
            if future is None:
                future = made[key] = Future()
        if mine:
            try:
                future.set_result(make())
            except BaseException as error:
                future.set_exception(error)
        return future.result()

    def step_gains(self, change: WhatIf, ranks: Sequence[int] | None = None) -> StepGains:
        """What ``change`` gains on the replayed steps of ``ranks`` (default: every rank).
        Each rank replays a change once: two fixes of the same change (or a combination that
        is one of them) share its replay; a change of nothing is the baseline."""
        total = StepGains()
        change = effective_change(change)
        for rank in ranks if ranks is not None else [r.rank for r in self.analysis.ranks]:
            prepared = self.replay_of(rank)
            if prepared is None:
                continue
            gains = self._once(
                self._replayed, (rank, change), partial(predicted_gains, prepared, change)
            )
            total = total + gains
        return total

    def baseline(self) -> StepGains:
        """The replayed steps unchanged (from the profile's replay when it has one)."""
        replay = self.analysis.replay
        if replay is not None:
            total = sum(s.baseline_ns for s in replay.steps)
            return StepGains(len(replay.steps), total, total)
        if not self.replays_allowed:
            return StepGains()
        return self.step_gains(NO_CHANGE)

    def whatif_ms(self, rule_id: str, change: WhatIf) -> float | None:
        """The replayed gain per step of a rule's fix (``change``), kept for combining fixes;
        None when nothing can be replayed here."""
        if not self.replays_allowed:
            return None
        gains = self.step_gains(change)
        if gains.steps == 0:
            return None
        self.fixes[rule_id] = change
        self.gains[rule_id] = gains
        return gains.gain_ms

    def in_rule_order(self, rule_ids: Sequence[str]) -> None:
        """The fixes and gains the rules kept, in the rules' order (as when checked one after
        the other), whatever order the rules checked side by side kept them in."""
        position = {rule_id: i for i, rule_id in enumerate(rule_ids)}

        def ordered(kept: dict[str, Any]) -> dict[str, Any]:
            return dict(sorted(kept.items(), key=lambda item: position.get(item[0], len(position))))

        self.fixes = ordered(self.fixes)
        self.gains = ordered(self.gains)

    # --- windows ---------------------------------------------------------------------------

    @cached_property
    def step_windows(self) -> tuple[WindowAccount, ...]:
        """Device accounts of the step windows (every rank and device), empty windows left out."""
        return tuple(
            w
            for r in self.analysis.ranks
            for w in r.accounting.windows
            if w.step != SPAN_STEP and w.wall_ns > 0
        )

    @cached_property
    def span_windows(self) -> tuple[WindowAccount, ...]:
        """Device accounts of each device's whole span (step -1 rows)."""
        return tuple(
            w
            for r in self.analysis.ranks
            for w in r.accounting.windows
            if w.step == SPAN_STEP and w.wall_ns > 0
        )

    @cached_property
    def host_windows(self) -> tuple[HostWindowAccount, ...]:
        """Main-thread accounts of host-only ranks' step windows."""
        return tuple(
            w
            for r in self.analysis.ranks
            for w in r.accounting.host
            if w.step != SPAN_STEP and w.wall_ns > 0
        )

    @cached_property
    def basis(self) -> StepBasis:
        """Step windows of the devices, or of the host threads on host-only profiles."""
        annotated = self.analysis.step_count > 0
        if self.step_windows:
            walls = [w.wall_ns for w in self.step_windows]
            lanes = len({(w.rank, w.device) for w in self.step_windows})
        else:
            walls = [w.wall_ns for w in self.host_windows]
            lanes = len({w.rank for w in self.host_windows})
        median = float(np.median(walls)) if walls else None
        return StepBasis(len(walls), int(sum(walls)), annotated, lanes, median)

    @property
    def has_device_tasks(self) -> bool:
        return bool(self.tasks.num_rows > 0)

    @cached_property
    def data_loading(self) -> dict[int, IntervalSet]:
        """Per rank, the host's time inside the data loader (its ``enumerate(DataLoader)``
        slices)."""
        events = self.analysis.events
        is_loader = columns.isin(events, "kind", [schema.DATALOADER])
        rows = np.flatnonzero(is_loader & (columns.int64(events, "device") < 0))
        if rows.size == 0:
            return {}
        start = columns.int64_at(events, "start_ns", rows)
        end = start + np.maximum(columns.int64_at(events, "dur_ns", rows), 0)
        rank = columns.int64_at(events, "rank", rows)
        drop_mapped_pages(events)
        return {int(r): union(start[rank == r], end[rank == r]) for r in np.unique(rank)}

    def idle_in_loader(self, causes: Sequence[str]) -> int:
        """Of the device's idle gaps of ``causes`` in the step windows, the time the host was
        in the data loader before the task that ends each gap was launched (to the gap's end
        where its launch is unknown), ns. Whatever cause the accounting gives a gap (a sync
        running as the device went idle wins, DESIGN's first match), this is the device's
        wait for data within it."""
        gaps = self.analysis.gaps
        if not self.data_loading or gaps.num_rows == 0:
            return 0
        chosen = np.flatnonzero(columns.isin(gaps, "cause", causes))
        rank = np.asarray(gaps["rank"], dtype=np.int64)[chosen]
        g0 = np.asarray(gaps["start_ns"], dtype=np.int64)[chosen]
        g1 = np.asarray(gaps["end_ns"], dtype=np.int64)[chosen]
        launch = np.asarray(gaps["launch_start_ns"], dtype=np.int64)[chosen]
        stop = np.where(launch >= 0, np.clip(launch, g0, g1), g1)
        total = 0
        for r, loading in self.data_loading.items():  # a loop over ranks
            mine = rank == r
            if mine.any():
                total += int(loading.covered(g0[mine], stop[mine]).sum())
        return total

    @cached_property
    def graph_launches(self) -> int:
        """How many CUDA (or HIP) graph launches the ranks' hosts made: their steps already
        replay captured graphs."""
        events = self.analysis.events
        if events.num_rows == 0:
            return 0
        launches = int(columns.isin(events, "name", GRAPH_LAUNCHES).sum())
        drop_mapped_pages(events)
        return launches

    def severity(self, recoverable_ns: float) -> tuple[float, float]:
        """(ms per step, % of step) of a recoverable time summed over every step window."""
        return self.basis.severity(recoverable_ns)

    # --- devices ---------------------------------------------------------------------------

    def device(self, rank: int) -> devices.DeviceSpec | None:
        """The device a rank ran on (the user's override applied), None when unknown."""
        return self._devices.get(rank)

    @cached_property
    def _devices(self) -> dict[int, devices.DeviceSpec | None]:
        override = self.config.device
        named = devices.find_device(override.model) if override.model else None
        found: dict[int, devices.DeviceSpec | None] = {}
        for rank_analysis in self.analysis.ranks:
            recognised = named or devices.device_from_meta(rank_analysis.trace.meta)
            peak = override.peak_tflops
            bandwidth = override.bandwidth_gbps
            if peak is not None or bandwidth is not None or override.host_link_gbps is not None:
                if recognised is None and (peak is None or bandwidth is None):
                    spec = None  # half a device: the other peak is unknown
                else:
                    spec = devices.custom_device(
                        math.nan if peak is None else peak,
                        math.nan if bandwidth is None else bandwidth,
                        base=recognised,
                        host_link_gbps=override.host_link_gbps,
                    )
            else:
                spec = recognised
            found[rank_analysis.rank] = spec
        return found

    def device_names(self) -> list[str]:
        """What the traces say the devices are (for evidence when none is recognised)."""
        names: set[str] = set()
        for rank_analysis in self.analysis.ranks:
            properties = rank_analysis.trace.meta.get("device_properties")
            entries = properties if isinstance(properties, list) else [properties]
            for entry in entries:
                if isinstance(entry, dict) and entry.get("name"):
                    names.add(str(entry["name"]))
        return sorted(names)

    # --- device tasks ----------------------------------------------------------------------

    @cached_property
    def tasks(self) -> pa.Table:
        """Device tasks with the call and the operator that issued them (:data:`TASKS_SCHEMA`)."""
        return device_tasks(self.analysis.events, self.analysis.device_links)

    @cached_property
    def task_kind(self) -> npt.NDArray[np.str_]:
        """Each task's kind (a column of :attr:`tasks`) as a numpy array of text."""
        return columns.texts(self.tasks, "kind")

    @cached_property
    def task_rows(self) -> IntArray:
        """Each task's row in ProfileAnalysis.events (a column of :attr:`tasks`)."""
        return np.asarray(self.tasks["row"], dtype=np.int64)

    def task_args(self, positions: IntArray) -> pa.Array:
        """The args text of the tasks at ``positions`` (of :attr:`tasks`), taken chunk by chunk
        from the events (the args of every task are tens of MB on a large trace)."""
        rows = self.task_rows[np.asarray(positions, dtype=np.int64)]
        return pc.cast(take_rows(self.analysis.events.column("args"), rows), pa.string())

    @cached_property
    def ascend_task_positions(self) -> IntArray:
        """Positions in :attr:`tasks` of the tasks whose args name a key of an Ascend
        kernel's (:data:`ASCEND_ARG_KEYS`): the only args the rules need to parse. Other
        tasks have none of those values, so their args are searched but never parsed."""
        # the tasks' args taken chunk by chunk and searched: the whole column holds every
        # host event's args too, and searching it costs more than the takes
        rows = self.task_rows
        order = np.argsort(rows, kind="stable")
        wanted = rows[order]
        column = self.analysis.events.column("args")
        bounds = np.cumsum([0, *(len(chunk) for chunk in column.chunks)])
        cuts = np.searchsorted(wanted, bounds)
        hit = np.zeros(rows.size, dtype=bool)
        maps = arrow_maps()  # read once: the args' maps stay while the events are held
        for i, chunk in enumerate(column.chunks):
            if cuts[i + 1] == cuts[i]:
                continue
            hit[order[cuts[i] : cuts[i + 1]]] = _named_keys(
                chunk, wanted[cuts[i] : cuts[i + 1]] - bounds[i]
            )
            # nearly every page of the chunk was read: where the args are mapped from a
            # file, let them go before the next (read again from the file cache if needed)
            drop_mapped_pages(chunk, maps=maps)
        return np.flatnonzero(hit)

    @cached_property
    def task_op_types(self) -> pa.Array:
        """The operator type an Ascend kernel records in its args (``op_type``), per task;
        null elsewhere (and for args that are not valid JSON)."""
        values = np.full(self.tasks.num_rows, None, dtype=object)
        positions = self.ascend_task_positions
        if positions.size:
            with duck() as con:
                con.register("tasks", pa.table({"args": self.task_args(positions)}))
                found = con.sql(
                    "SELECT CASE WHEN json_valid(args) THEN json_extract_string(args, "
                    "'$.op_type') END AS op_type FROM tasks"
                ).to_arrow_table()
            values[positions] = found["op_type"].to_numpy(zero_copy_only=False)
        return pa.array(values, pa.string(), from_pandas=True)

    @cached_property
    def launch_dimensions(self) -> tuple[pa.Array, pa.Array]:
        """Each task's grid and block as kernel_details states them (null when absent, and
        for copies): taken from the profile's kernel_details, whose rows are the kernel and
        comm tasks in another order, else read from the tasks' args the same way
        (:func:`perfledger.analysis.ops.launch_config`)."""
        tasks = self.tasks
        kind = self.task_kind
        launched = np.flatnonzero((kind == schema.KERNEL) | (kind == schema.COMM))
        keys = {
            name: np.asarray(tasks[name], dtype=np.int64)[launched]
            for name in ("rank", "start_ns", "device", "stream", "dur_ns")
        }
        # kernel_details' order: rank, start_ns, device, stream, then the task's row
        order = np.lexsort(
            (
                self.task_rows[launched],
                keys["stream"],
                keys["device"],
                keys["start_ns"],
                keys["rank"],
            )
        )
        positions = launched[order]
        details = self.analysis.kernel_details
        same = details.num_rows == positions.size and all(
            np.array_equal(np.asarray(details[name], dtype=np.int64), keys[name][order])
            for name in keys
        )
        if same:
            grid, block = details["grid"], details["block"]
        else:
            config = launch_config(self.task_args(positions))
            grid, block = config["grid"], config["block"]
        at = np.full(tasks.num_rows, -1, dtype=np.int64)
        at[positions] = np.arange(positions.size, dtype=np.int64)
        index = pa.array(at, mask=at < 0)
        return (
            pc.cast(pc.take(grid, index), pa.string()),
            pc.cast(pc.take(block, index), pa.string()),
        )

    @cached_property
    def gap_task_rows(self) -> IntArray:
        """For each row of ProfileAnalysis.gaps, the row in ProfileAnalysis.events of the task
        that ends the gap (-1: none). ``next_task`` counts within the rank's own events."""
        parts = []
        position = 0
        for rank_analysis in self.analysis.ranks:
            local = np.asarray(rank_analysis.accounting.gaps["next_task"], dtype=np.int64)
            parts.append(np.where(local >= 0, local + position, -1))
            position += rank_analysis.events.num_rows
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def device_tasks(events: pa.Table, linked: pa.Table | None = None) -> pa.Table:
    """Each device task with the host call and the operator that issued them.

    The linkage is op_summary's (``linked``: :func:`perfledger.analysis.ops.link_device_tasks`
    of ``events``, made here when not given): the call is the runtime/sync row with the task's
    (rank, correlation) (the earliest when a source repeats an id); the operator is the shortest
    cpu_op of the rank carrying the call's external id (the task's own when the call has none),
    else, for traces that link operators only by time, the innermost cpu_op running on the
    calling thread when the call began.
    """
    if events.num_rows == 0 or not columns.isin(events, "kind", schema.DEVICE_TASK_KINDS).any():
        return TASKS_SCHEMA.empty_table()
    frame = link_device_tasks(events) if linked is None else linked
    coded = pa.types.is_dictionary(events.schema.field("name").type)
    if coded:  # the names come from the events' codes: the frame's texts are not taken
        frame = frame.drop_columns(["name"])
    order = np.lexsort(
        tuple(
            np.asarray(frame[name], dtype=np.int64)
            for name in ("row", "start_ns", "stream", "device", "rank")
        )
    )
    take = pa.array(order, pa.int64())
    frame = frame.take(take)
    rows = np.asarray(frame["row"], dtype=np.int64)

    def text(column: str, at: IntArray) -> pa.Array:
        # chunk by chunk: a take on the whole column would first join its chunks
        return pc.cast(take_rows(events.column(column), at), pa.string())

    tasks = pa.table(
        {
            "row": frame["row"],
            "rank": frame["rank"],
            "device": frame["device"],
            "stream": frame["stream"],
            "step": frame["step"],
            "kind": frame["kind"],
            "name": names_at(events, rows) if coded else pc.dictionary_encode(frame["name"]),
            "start_ns": frame["start_ns"],
            "dur_ns": frame["dur_ns"],
            "bytes": frame["bytes"],
            "shapes": text("shapes", rows),
            "dtypes": text("dtypes", rows),
            "launch_row": frame["launch_row"],
            "launch_ns": frame["launch_ns"],
            "launch_dur_ns": frame["launch_dur_ns"],
            "op_row": frame["op_row"],
            "op_name": frame["host_op"],
            "op_shapes": frame["shapes"],
            "op_dtypes": frame["dtypes"],
        }
    ).cast(TASKS_SCHEMA)
    return tasks


def names_at(events: pa.Table, rows: IntArray) -> pa.DictionaryArray:
    """The events' (dictionary) names at ``rows`` as codes into their distinct names, in
    the order the chunks' dictionaries first give them: a kernel name per device task as
    its text would be over a hundred MB on a large trace."""
    codes, names = columns.codes_at(events, "name", np.asarray(rows, dtype=np.int64))
    null = ~np.ones(codes.size, dtype=bool)
    if None in names:  # null names: masked, not a value of the dictionary
        at = names.index(None)
        null = codes == at
        codes = codes - (codes > at)
        names = [n for n in names if n is not None]
    return pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int32), pa.int32(), mask=null if null.any() else None),
        pa.array(names, pa.string()),
    )


def thread_ids(events: pa.Table, rows: IntArray) -> IntArray:
    """A dense id per host thread (rank, pid, thread) for the given rows, numbered in the
    order of (rank, pid, thread)."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    # column by column: 1-D uniques cost far less than a unique over rows, and the dense id
    # of (id so far, next column) keeps the order of the tuples
    group = np.zeros(rows.size, dtype=np.int64)
    for column in ("rank", "pid", "stream"):
        # read at the rows only: no whole column copied to int64
        values, inverse = np.unique(columns.int64_at(events, column, rows), return_inverse=True)
        combined = group * values.size + inverse.reshape(-1)
        group = np.unique(combined, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return group
