"""memory_bound_ops: operators limited by memory bandwidth, not by math.

Every operator call whose inputs were recorded (shapes and types) is placed on the roofline of
the device it ran on (:mod:`perfledger.analysis.roofline`, :mod:`perfledger.model.devices`): below
the ridge point it cannot go faster than its bytes allow. The msprof guides' case 2 is a
transpose and a cast taking 30% of the step: pure data movement that a better layout or dtype
choice removes. On Ascend, the kernel's pipeline ratios (``aic_mte2_ratio``, ``aiv_vec_ratio`` ...)
decide when the trace has them: a kernel whose busiest pipe is a memory transfer engine
(MTE2 loads from global memory, MTE3 stores to it) is memory-bound.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import encode, offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.kernel_names import short_kernel_name
from perfledger.analysis.roofline.arguments import is_packed_layout
from perfledger.analysis.roofline.estimates import estimate_table
from perfledger.analysis.roofline.families import DATA_MOVEMENT_FAMILIES, op_family
from perfledger.duck import duck
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct, us

ID: Final = "memory_bound_ops"

# Ascend pipeline ratio columns (msprof PipeUtilization metrics) and whether each pipe moves
# data between global memory and the core (MTE2 in, MTE3 out).
ASCEND_PIPES: Final = (
    ("aic_mac_ratio", False),
    ("aic_scalar_ratio", False),
    ("aic_mte1_ratio", False),
    ("aic_mte2_ratio", True),
    ("aic_fixpipe_ratio", False),
    ("aiv_vec_ratio", False),
    ("aiv_scalar_ratio", False),
    ("aiv_mte2_ratio", True),
    ("aiv_mte3_ratio", True),
)

# Rows of the events searched at a time for an operator's recorded dimensions.
_SHAPES_SLICE: Final = 1 << 16

UNITS_SCHEMA: Final = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("step", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("shapes", pa.string()),
        pa.field("dtypes", pa.string()),
        pa.field("output_shapes", pa.string()),
        pa.field("output_dtypes", pa.string()),
        pa.field("ascend", pa.bool_()),
        pa.field("packed_layout", pa.bool_()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("time_ns", pa.int64()),
        pa.field("tasks", pa.int64()),
        pa.field("bound_pipe", pa.string()),
    ]
)


def operator_units(ctx: AdvisorContext) -> pa.Table:
    """One row per operator call that ran kernels (:data:`UNITS_SCHEMA`).

    An Ascend kernel records its own operator type, shapes and pipeline ratios: it is its own
    unit. Elsewhere the unit is the host operator that launched the kernels (its recorded
    input shapes), and a kernel with no known operator stands alone without shapes.
    """
    tasks = ctx.tasks
    is_kernel = np.asarray(ctx.task_kind == "kernel", dtype=bool)
    if ctx.basis.annotated:
        is_kernel &= np.asarray(tasks["step"], dtype=np.int64) >= 0
    ratios = ", ".join(
        f"TRY_CAST(json_extract_string(valid_args, '$.{name}') AS DOUBLE) AS {name}"
        for name, _ in ASCEND_PIPES
    )
    # Only Ascend kernels carry these keys in their args: the args of the others are not
    # parsed (a dozen keys from every kernel's args would be the largest cost of the rule)
    recorded = np.zeros(tasks.num_rows, dtype=bool)
    recorded[ctx.ascend_task_positions] = True
    recorded &= is_kernel
    positions = np.flatnonzero(is_kernel)
    if not recorded.any():
        return _launching_operators(tasks, positions)
    args = np.full(tasks.num_rows, None, dtype=object)
    if recorded.any():
        args[recorded] = ctx.task_args(np.flatnonzero(recorded)).to_numpy(zero_copy_only=False)
    valid_args = "CASE WHEN json_valid(args) THEN args END"
    query = f"""
        WITH parsed AS (
            SELECT *, {valid_args} AS valid_args FROM kernels
        ),
        kernel AS (
            SELECT *, json_extract_string(valid_args, '$.op_type') AS op_type,
                   json_extract_string(valid_args, '$.output_shapes') AS out_shapes,
                   json_extract_string(valid_args, '$.output_dtypes') AS out_dtypes,
                   json_extract_string(valid_args, '$.input_formats') AS formats,
                   {ratios}
            FROM parsed
        ),
        keyed AS (
            SELECT *,
                   CASE WHEN op_type IS NOT NULL OR shapes IS NOT NULL OR op_row < 0
                        THEN -1 - row ELSE op_row END AS unit,
                   op_type IS NOT NULL AS ascend
            FROM kernel
        )
        SELECT unit, any_value(rank) AS rank, min(step) AS step,
               any_value(CASE WHEN ascend THEN op_type
                              WHEN unit < 0 THEN name ELSE op_name END) AS name,
               any_value(CASE WHEN unit < 0 THEN shapes ELSE op_shapes END) AS shapes,
               any_value(CASE WHEN unit < 0 THEN dtypes ELSE op_dtypes END) AS dtypes,
               any_value(out_shapes) AS output_shapes, any_value(out_dtypes) AS output_dtypes,
               bool_or(ascend) AS ascend, any_value(formats) AS formats,
               min(start_ns) AS start_ns, max(start_ns + dur_ns) AS end_ns,
               sum(dur_ns)::BIGINT AS time_ns, count(*) AS tasks,
               {", ".join(f"max({name}) AS {name}" for name, _ in ASCEND_PIPES)}
        FROM keyed GROUP BY unit ORDER BY unit
    """
    used = ["row", "rank", "step", "name", "shapes", "dtypes", "start_ns", "dur_ns"]
    used += ["op_row", "op_name", "op_shapes", "op_dtypes"]
    take = pa.array(positions, pa.int64())
    # only the columns the query reads, of the kernels only: its CTEs select * and may be
    # materialised
    kernels = tasks.select(used).take(take)
    index = kernels.schema.get_field_index("name")  # the names as text for the query
    kernels = kernels.set_column(index, "name", pc.cast(kernels["name"], pa.string()))
    kernels = kernels.append_column(
        "args", pa.array(args[positions], pa.string(), from_pandas=True)
    )
    with duck() as con:
        con.register("kernels", kernels)
        units = con.sql(query).to_arrow_table()
    formats = units["formats"].to_pylist()
    ratio_matrix = (
        np.stack(
            [np.nan_to_num(np.asarray(units[name], dtype=np.float64)) for name, _ in ASCEND_PIPES],
            axis=1,
        )
        if units.num_rows
        else np.zeros((0, len(ASCEND_PIPES)))
    )
    busiest = np.argmax(ratio_matrix, axis=1) if units.num_rows else np.zeros(0, dtype=np.int64)
    has_ratios = ratio_matrix.max(axis=1) > 0 if units.num_rows else np.zeros(0, dtype=bool)
    pipe_names = np.array([name.removesuffix("_ratio") for name, _ in ASCEND_PIPES], dtype=object)
    bound_pipe = np.where(has_ratios, pipe_names[busiest], None)
    return pa.table(
        {
            "rank": units["rank"],
            "step": units["step"],
            "name": units["name"],
            "shapes": units["shapes"],
            "dtypes": units["dtypes"],
            "output_shapes": units["output_shapes"],
            "output_dtypes": units["output_dtypes"],
            "ascend": units["ascend"],
            "packed_layout": pa.array([is_packed_layout(f) for f in formats], pa.bool_()),
            "start_ns": units["start_ns"],
            "end_ns": units["end_ns"],
            "time_ns": units["time_ns"],
            "tasks": units["tasks"],
            "bound_pipe": pa.array(list(bound_pipe), pa.string()),
        }
    ).cast(UNITS_SCHEMA)


def _launching_operators(tasks: pa.Table, positions: np.ndarray) -> pa.Table:
    """:func:`operator_units` where no kernel records Ascend args: the unit of a kernel is the
    operator that launched it (``op_row``), or the kernel alone when it has shapes of its own
    or no operator. Grouped by sorts, not by a query: what every row of a unit shares (the
    operator's name, shapes and types) is read at its first row."""
    row = np.asarray(tasks["row"], dtype=np.int64)[positions]
    op_row = np.asarray(tasks["op_row"], dtype=np.int64)[positions]
    own = np.asarray(tasks["shapes"].is_valid(), dtype=bool)[positions]
    unit = np.where(own | (op_row < 0), -1 - row, op_row)
    _, first, inverse = np.unique(unit, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    count = first.size
    step = np.asarray(tasks["step"], dtype=np.int64)[positions]
    start = np.asarray(tasks["start_ns"], dtype=np.int64)[positions]
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)[positions]
    first_step = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_step, inverse, step)
    first_start = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_start, inverse, start)
    last_end = np.full(count, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_end, inverse, start + dur)
    time_ns = np.zeros(count, dtype=np.int64)
    np.add.at(time_ns, inverse, dur)
    at = positions[first]
    alone = unit[first] < 0

    def either(mine: str, operators: str) -> pa.Array:
        # each column taken only where it is the one read: taking both whole and choosing
        # would copy every kernel name of the units launched by an operator for nothing
        own = pc.cast(tasks[mine].take(pa.array(at, pa.int64(), mask=~alone)), pa.string())
        launching = tasks[operators].take(pa.array(at, pa.int64(), mask=alone))
        return pc.coalesce(own, launching)

    return pa.table(
        {
            "rank": tasks["rank"].take(pa.array(at, pa.int64())),
            "step": pa.array(first_step),
            "name": either("name", "op_name"),
            "shapes": either("shapes", "op_shapes"),
            "dtypes": either("dtypes", "op_dtypes"),
            "output_shapes": pa.nulls(count, pa.string()),
            "output_dtypes": pa.nulls(count, pa.string()),
            "ascend": pa.array(np.zeros(count, dtype=bool)),
            "packed_layout": pa.array(np.zeros(count, dtype=bool)),
            "start_ns": pa.array(first_start),
            "end_ns": pa.array(last_end),
            "time_ns": pa.array(time_ns),
            "tasks": pa.array(np.bincount(inverse, minlength=count).astype(np.int64)),
            "bound_pipe": pa.nulls(count, pa.string()),
        }
    ).cast(UNITS_SCHEMA)


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Memory-bound operators take more than min_step_pct of the step."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    units = operator_units(ctx)
    if units.num_rows == 0:
        return Skipped(ID, "no kernel in the profiled steps")
    estimates = estimate_table(units)
    estimated = np.asarray(estimates["flops"].is_valid(), dtype=bool)
    estimated &= ~np.asarray(
        estimates["family"].to_numpy(zero_copy_only=False) == "view", dtype=bool
    )
    bound_pipe = units["bound_pipe"].to_numpy(zero_copy_only=False)
    by_pipes = np.asarray([b is not None for b in bound_pipe], dtype=bool)
    if not estimated.any() and not by_pipes.any():
        if bool(np.asarray(units["shapes"].is_valid()).any()):
            reason = "no operator with recorded shapes has a FLOPs/bytes model"
        elif _operators_have_shapes(ctx):
            reason = "kernels are not linked to the operators whose shapes were recorded"
        else:
            reason = "no input shapes recorded (profile with record_shapes=True)"
        return Skipped(ID, reason)
    rank = np.asarray(units["rank"], dtype=np.int64)
    time = np.asarray(units["time_ns"], dtype=np.float64)
    flops = np.nan_to_num(np.asarray(estimates["flops"], dtype=np.float64))
    nbytes = np.nan_to_num(
        np.asarray(estimates["read_bytes"], dtype=np.float64)
        + np.asarray(estimates["write_bytes"], dtype=np.float64)
    )
    precision = np.asarray(estimates["precision"].to_numpy(zero_copy_only=False), dtype=object)
    peak = np.full(units.num_rows, np.nan)
    bandwidth = np.full(units.num_rows, np.nan)
    for r in np.unique(rank):
        spec = ctx.device(int(r))
        if spec is None:
            continue
        mine = rank == r
        bandwidth[mine] = spec.memory_bytes_per_ns
        for prec in set(precision[mine].tolist()):
            peak[mine & (precision == prec)] = spec.peak_flops_per_ns(prec)
    device_known = np.isfinite(bandwidth)
    if not by_pipes.any() and not (estimated & device_known).any():
        names = ", ".join(ctx.device_names()) or "not recorded"
        return Skipped(
            ID,
            f"device peaks unknown (device: {names}): give --device-model, or --peak-tflops "
            "and --peak-bandwidth",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(nbytes > 0, flops / nbytes, np.where(flops > 0, np.inf, 0.0))
        ridge = peak / bandwidth
        bound_ns = np.maximum(flops / peak, nbytes / bandwidth)
    # The family by name too: an Ascend kernel judged by its pipes has no estimate, but a
    # TransData or a Cast is data movement whatever its shapes.
    family = np.asarray(estimates["family"].to_numpy(zero_copy_only=False), dtype=object)
    names = units["name"].to_numpy(zero_copy_only=False)
    ascend = np.asarray(units["ascend"], dtype=bool)
    missing = np.flatnonzero(family == None)  # noqa: E711 - elementwise on an object array
    if missing.size:
        name_code, distinct_names = encode(names[missing])
        key = name_code * 2 + ascend[missing]
        keys, inverse = np.unique(key, return_inverse=True)
        by_key = np.array(
            [op_family(str(distinct_names[k // 2]), ascend=bool(k % 2)) for k in keys], object
        )
        family[missing] = by_key[inverse.reshape(-1)]
    on_roofline = estimated & device_known & ~by_pipes
    memory_pipes = [name.removesuffix("_ratio") for name, moves in ASCEND_PIPES if moves]
    memory_pipe = np.isin(np.asarray(bound_pipe, dtype=object), memory_pipes)
    memory_bound = np.where(by_pipes, memory_pipe, on_roofline & (intensity < ridge))
    data_movement = np.isin(family, list(DATA_MOVEMENT_FAMILIES))

    kernel_time = float(time.sum())
    bound_time = float(time[memory_bound].sum())
    share = pct(bound_time, kernel_time)
    step_share = pct(bound_time, ctx.basis.wall_ns)
    if step_share <= p["min_step_pct"]:
        return None
    # Data movement (layout, casts, gathers, fills) is avoidable as a whole; other memory-bound
    # work only down to its roofline time (when bytes are known).
    above_roofline = np.where(np.isfinite(bound_ns), np.maximum(time - bound_ns, 0.0), 0.0)
    recoverable_each = np.where(data_movement, time, above_roofline)
    recoverable = float(recoverable_each[memory_bound].sum())

    signatures = _signatures(units, estimates, family, memory_bound, time, recoverable_each, ctx)
    rows = signatures[:TOP_OFFENDERS]
    severity_ms, severity_pct = ctx.severity(recoverable)
    windows = ctx.basis.windows
    evidence: dict[str, Any] = {
        "steps": ctx.basis.describe(),
        "device": [spec.to_dict() for spec in _devices_of(ctx, rank)],
        "method": "Ascend pipeline ratios"
        if by_pipes.all()
        else (
            "roofline from recorded shapes"
            if not by_pipes.any()
            else "Ascend pipeline ratios, roofline where the kernel has none"
        ),
        "kernel_time_ms_per_step": ms(kernel_time / windows),
        "memory_bound_ms_per_step": ms(bound_time / windows),
        "memory_bound_pct_of_kernel_time": share,
        "memory_bound_pct_of_step": step_share,
        "data_movement_ms_per_step": ms(float(time[memory_bound & data_movement].sum()) / windows),
        "coverage": {
            "operator_calls": int(units.num_rows),
            "placed": int((on_roofline | by_pipes).sum()),
            "placed_time_pct": pct(float(time[on_roofline | by_pipes].sum()), kernel_time),
        },
        "top_memory_bound_ops": rows,
    }
    if not evidence["device"]:
        evidence["device"] = ctx.device_names()
    top = rows[0] if rows else None
    return Finding(
        id=ID,
        title=(
            f"Memory-bound operators take {step_share:.0f}% of the step ({share:.0f}% of "
            "kernel time)"
            + (
                f" (largest: {short_kernel_name(top['op'])}, {top['ms_per_step']:g} ms per step)"
                if top
                else ""
            )
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Move fewer bytes: remove layout and dtype conversions from the hot path (keep "
            "tensors in the layout and precision the next op wants: channels_last end to end, "
            "cast weights once, not per step; on Ascend avoid TransData between private and ND "
            "formats), fuse chains of elementwise ops into their producer (torch.compile, fused "
            "kernels), and run memory-bound work in bf16/fp16 to halve its bytes."
        ),
        verify=(
            "Re-profile the same steps: the listed operators' time per step must fall (or "
            "they disappear); memory_bound_pct_of_kernel_time and the step time drop. Check "
            "with perfledger diff that no other operator grew by the same amount."
        ),
        estimate=(
            "Per memory-bound call: its whole time for pure data movement (layout, cast, "
            "gather, fill: removable), else its time above the roofline "
            "(max(flops / peak, bytes / bandwidth)); summed per step. Ascend kernels judged by "
            "pipeline ratios without bytes count as data movement only when they are one."
        ),
        spans=spans_of(rows),
    )


def _operators_have_shapes(ctx: AdvisorContext) -> bool:
    events = ctx.analysis.events
    is_op = columns.isin(events, "kind", ["cpu_op"])
    shapes = events.column("shapes")
    # slice by slice, up to the first operator with a dimension (the first slice, on traces
    # recorded with shapes): "[[], []]" and ";;" record arguments but no tensor dimension
    for begin in range(0, events.num_rows, _SHAPES_SLICE):
        piece = pc.cast(shapes.slice(begin, _SHAPES_SLICE), pa.string())
        if piece.null_count == len(piece):
            continue  # none recorded here: nothing to search
        with_dims = pc.fill_null(pc.match_substring_regex(piece, r"\d"), False)
        found = np.asarray(with_dims.to_numpy(zero_copy_only=False), dtype=bool)
        if (found & is_op[begin : begin + _SHAPES_SLICE]).any():
            return True
    return False


def _devices_of(ctx: AdvisorContext, rank: np.ndarray) -> list[Any]:
    found = {}
    for r in np.unique(rank):
        spec = ctx.device(int(r))
        if spec is not None:
            found[spec.name] = spec
    return [found[name] for name in sorted(found)]


def _signatures(
    units: pa.Table,
    estimates: pa.Table,
    family: np.ndarray,
    memory_bound: np.ndarray,
    time: np.ndarray,
    recoverable_each: np.ndarray,
    ctx: AdvisorContext,
) -> list[dict[str, Any]]:
    """Memory-bound calls grouped by operator, shapes and types, largest time first."""
    rows = np.flatnonzero(memory_bound)
    if rows.size == 0:
        return []
    take = pa.array(rows, pa.int64())
    flops = np.nan_to_num(np.asarray(estimates["flops"], dtype=np.float64))[rows]
    nbytes = np.nan_to_num(
        np.asarray(estimates["read_bytes"], dtype=np.float64)
        + np.asarray(estimates["write_bytes"], dtype=np.float64)
    )[rows]
    calls = pa.table(
        {
            "unit": take,
            "name": units["name"].take(take),
            "shapes": units["shapes"].take(take),
            "dtypes": units["dtypes"].take(take),
            "family": pa.array(family[rows].tolist(), pa.string()),
            "bound_pipe": units["bound_pipe"].take(take),
            "time_ns": pa.array(time[rows]),
            "flops": pa.array(flops),
            "bytes": pa.array(nbytes),
            "recoverable_ns": pa.array(recoverable_each[rows]),
        }
    )
    query = f"""
        SELECT name, shapes, dtypes, any_value(family) AS family,
               any_value(bound_pipe) AS bound_pipe, count(*) AS calls,
               sum(time_ns) AS time_ns, sum(flops) AS flops, sum(bytes) AS bytes,
               sum(recoverable_ns) AS recoverable_ns, arg_max(unit, time_ns) AS worst
        FROM calls GROUP BY name, shapes, dtypes
        ORDER BY time_ns DESC, name, shapes, dtypes LIMIT {TOP_OFFENDERS}
    """
    with duck() as con:
        con.register("calls", calls)
        groups = con.sql(query).to_arrow_table().to_pylist()
    kernel_time = float(time.sum())
    windows = ctx.basis.windows
    result: list[dict[str, Any]] = []
    for g in groups:
        worst = int(g["worst"])
        rank = int(units["rank"][worst].as_py())
        spec = ctx.device(rank)
        total_time, total_bytes = float(g["time_ns"]), float(g["bytes"])
        achieved = total_bytes / total_time if total_time > 0 and total_bytes > 0 else None
        result.append(
            offender(
                rank,
                int(units["step"][worst].as_py()),
                int(units["start_ns"][worst].as_py()),
                int(units["end_ns"][worst].as_py()),
                op=g["name"],
                shapes=g["shapes"],
                dtypes=g["dtypes"],
                family=g["family"],
                bound_pipe=g["bound_pipe"],
                calls=int(g["calls"]),
                ms_per_step=ms(total_time / windows),
                share_of_kernel_time_pct=pct(total_time, kernel_time),
                mean_us=us(total_time / int(g["calls"])),
                flops_per_byte=round(float(g["flops"]) / total_bytes, 3) if total_bytes else None,
                achieved_gbps=round(achieved, 1) if achieved else None,
                bandwidth_pct=(
                    round(100.0 * achieved / spec.memory_gbps, 1) if achieved and spec else None
                ),
                recoverable_ms_per_step=ms(float(g["recoverable_ns"]) / windows),
            )
        )
    return result


RULE: Final = Rule(
    id=ID,
    title="operators limited by memory bandwidth take a large share of the step",
    checks="roofline of every operator call with recorded shapes; Ascend pipeline ratios",
    thresholds=(
        Threshold(
            "min_step_pct",
            10.0,
            "%",
            "memory-bound operators' share of the step that flags",
            "the msprof guides' case 2 (a transpose+cast taking 30% of the step)",
        ),
    ),
    check=check,
)
