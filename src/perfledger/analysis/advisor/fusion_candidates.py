"""fusion_candidates: memory-bound kernels that run back to back, again and again.

A chain like transpose → reshape-copy → cast writes each intermediate tensor to device memory
only for the next kernel to read it back, and pays a launch per link. When the same chain of
2-10 consecutive memory-bound kernels (same stream, nothing in between) repeats more than
``min_repeats`` times in the profile, fusing it into one kernel is worth trying. Short kernels
are launch-bound (a fused kernel runs about as long as the longest member); long ones are
bandwidth-bound, and fusion saves the time their intermediates take to be written and read back
(bytes from the recorded shapes, bandwidth from the device), so a long kernel joins a chain only
when both are known. Fusion is not always a win (register pressure, lost vectorisation, a slower
fused kernel): measure it.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import (
    coalesce_text,
    encode,
    group_ids,
    offender,
    spans_of,
)
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.kernel_names import short_kernel_name
from perfledger.analysis.roofline.estimates import estimate_table
from perfledger.analysis.roofline.families import ATTENTION, CONV, MATMUL, op_family
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, us
from perfledger.model.whatif import TaskChange, WhatIf

ID: Final = "fusion_candidates"
# Kernels that only move or combine elements, recognised by name when no operator is known.
_MEMORY_KERNEL: Final = re.compile(
    r"elementwise|reduce_kernel|copy|cast|transpose|fill|memset|concat|index|gather|scatter"
    r"|layer_?norm|softmax|dropout",
    re.IGNORECASE,
)
_COMPUTE_FAMILIES: Final = frozenset({MATMUL, CONV, ATTENTION})


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """Chains of min_chain..max_chain memory-bound kernels repeating > min_repeats."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    n = tasks.num_rows
    kind = ctx.task_kind
    op_type = ctx.task_op_types
    label = coalesce_text(op_type, tasks["op_name"], tasks["name"])
    label_id, labels = encode(label)
    ascend_label = np.zeros(labels.size, dtype=bool)
    ascend_label[label_id[np.asarray(op_type.is_valid(), dtype=bool)]] = True
    memory_label = np.array(
        [_is_memory(str(lab), bool(asc)) for lab, asc in zip(labels, ascend_label, strict=True)],
        dtype=bool,
    )
    start = np.asarray(tasks["start_ns"], dtype=np.int64)
    dur = np.asarray(tasks["dur_ns"], dtype=np.int64)
    end = start + dur
    rank = np.asarray(tasks["rank"], dtype=np.int64)
    memory = (kind == "kernel") & memory_label[label_id]
    if ctx.basis.annotated:
        memory &= np.asarray(tasks["step"], dtype=np.int64) >= 0
    # bytes each memory-bound kernel writes (NaN: inputs not recorded), the device's bandwidth
    written = np.full(n, np.nan)
    memory_rows = np.flatnonzero(memory)
    if memory_rows.size:
        take = pa.array(memory_rows, pa.int64())
        # only the columns read: a take copies every column it is given
        used = tasks.select(["shapes", "op_shapes", "dtypes", "op_dtypes"])
        written[memory_rows] = _written_bytes(
            used.take(take), pc.take(label, take), pc.is_valid(pc.take(op_type, take))
        )
    # the labels as text (every kernel name where no operator is known: tens of MB) are not
    # read again; their codes are, and the fix's replay below runs while this frame lives
    del label
    bandwidth = np.full(n, np.nan)
    for r in np.unique(rank).tolist():  # a loop over ranks
        bandwidth[rank == r] = _bandwidth(ctx, int(r))
    traffic_known = np.isfinite(written) & np.isfinite(bandwidth)
    # a short kernel is launch-bound; a longer one joins a chain when its traffic is known
    candidate = memory & ((dur < p["max_task_us"] * 1e3) | traffic_known)

    lane = (
        np.asarray(tasks["rank"], dtype=np.int64) * (1 << 40)
        + np.asarray(tasks["device"], dtype=np.int64) * (1 << 24)
        + np.asarray(tasks["stream"], dtype=np.int64)
    )
    link = np.zeros(n, dtype=bool)  # link[i]: task i and task i + 1 belong to one chain
    if n > 1:
        link[:-1] = (
            candidate[:-1]
            & candidate[1:]
            & (lane[:-1] == lane[1:])
            & (start[1:] - end[:-1] <= p["max_gap_us"] * 1e3)
        )
    chains = _chains(link, candidate, int(p["max_chain"]))
    if chains is None:
        return None
    members, chain_of, position, length = chains
    max_chain = int(p["max_chain"])
    matrix = np.full((length.size, max_chain), -1, dtype=np.int64)
    matrix[chain_of, position] = label_id[members]
    keep = length >= int(p["min_chain"])
    if not keep.any():
        return None
    # the distinct chains of labels (in the rows' order, as np.unique over rows gives them),
    # column by column: a unique over rows of ten columns costs several times more
    kept = matrix[keep]
    signature_of = group_ids([kept[:, j] + 1 for j in range(max_chain)], kept.shape[0])
    repeats = np.bincount(signature_of)
    first_of = np.full(repeats.size, signature_of.size, dtype=np.int64)
    np.minimum.at(first_of, signature_of, np.arange(signature_of.size, dtype=np.int64))
    signatures = kept[first_of]
    frequent = np.flatnonzero(repeats > p["min_repeats"])
    if frequent.size == 0:
        return None

    # Per chain: total time, the gaps inside it, and the longest member.
    kept_chain = np.flatnonzero(keep)
    chain_sum = np.zeros(length.size, dtype=np.int64)
    np.add.at(chain_sum, chain_of, dur[members])
    chain_max = np.zeros(length.size, dtype=np.int64)
    np.maximum.at(chain_max, chain_of, dur[members])
    chain_start = np.full(length.size, np.iinfo(np.int64).max)
    np.minimum.at(chain_start, chain_of, start[members])
    chain_end = np.zeros(length.size, dtype=np.int64)
    np.maximum.at(chain_end, chain_of, end[members])
    chain_first = np.full(length.size, n, dtype=np.int64)
    np.minimum.at(chain_first, chain_of, members)
    internal_gaps = chain_end - chain_start - chain_sum
    is_last = np.zeros(members.size, dtype=bool)
    is_last[position == length[chain_of] - 1] = True
    intermediate = np.zeros(length.size)
    np.add.at(intermediate, chain_of[~is_last], np.nan_to_num(written[members[~is_last]]))
    intermediate_known = np.ones(length.size, dtype=bool)
    unknown = ~np.isfinite(written[members]) & ~is_last
    intermediate_known[chain_of[unknown]] = False
    # The kernels' saving: the short members' time (launch-bound: one fused kernel runs about
    # as long as the longest member) or the time the intermediates take to be written and
    # read back (2 x bytes / bandwidth), whichever is larger; at most every member's time but
    # the longest's.
    short_time = np.zeros(length.size, dtype=np.int64)
    is_short = dur[members] < p["max_task_us"] * 1e3
    np.add.at(short_time, chain_of[is_short], dur[members][is_short])
    longest_short = np.zeros(length.size, dtype=np.int64)
    np.maximum.at(longest_short, chain_of[is_short], dur[members][is_short])
    short_time -= np.where(chain_max == longest_short, longest_short, 0)
    chain_bandwidth = np.full(length.size, np.nan)
    chain_bandwidth[chain_of] = bandwidth[members]
    traffic_ns = np.where(
        intermediate_known & np.isfinite(chain_bandwidth),
        2.0 * intermediate / np.where(np.isfinite(chain_bandwidth), chain_bandwidth, 1.0),
        0.0,
    )
    kernel_saving = np.minimum(
        chain_sum - chain_max, np.maximum(short_time, np.rint(traffic_ns).astype(np.int64))
    )
    saving = np.maximum(internal_gaps, 0) + kernel_saving

    windows = ctx.basis.windows
    step = np.asarray(tasks["step"], dtype=np.int64)
    floor_ns = p["min_saving_pct"] / 100.0 * ctx.basis.mean_step_ns * windows
    total_saving = 0
    fused_chains: list[np.ndarray] = []
    found: list[dict[str, Any]] = []
    for s in frequent[np.argsort(-repeats[frequent], kind="stable")]:
        chains_of_s = kept_chain[signature_of == s]
        if saving[chains_of_s].sum() < floor_ns:
            continue  # not worth a fusion attempt
        total_saving += int(saving[chains_of_s].sum())
        fused_chains.append(chains_of_s)
        example = chains_of_s[np.argmax(saving[chains_of_s])]
        first = chain_first[example]
        ops = [str(labels[i]) for i in signatures[s] if i >= 0]
        known = bool(intermediate_known[chains_of_s].all())
        found.append(
            offender(
                rank[first],
                step[first],
                chain_start[example],
                chain_end[example],
                ops=ops,
                occurrences=int(chains_of_s.size),
                per_step=round(chains_of_s.size / windows, 1),
                mean_chain_us=us(chain_sum[chains_of_s].mean()),
                mean_internal_gaps_us=us(np.maximum(internal_gaps[chains_of_s], 0).mean()),
                intermediate_mb_per_occurrence=(
                    round(float(intermediate[chains_of_s].mean()) / 1e6, 3) if known else None
                ),
                intermediate_traffic_us_per_occurrence=(
                    us(traffic_ns[chains_of_s].mean()) if known else None
                ),
                saving_us_per_occurrence=us(saving[chains_of_s].mean()),
                saving_ms_per_step=ms(saving[chains_of_s].sum() / windows),
            )
        )
    if not found:
        return None
    found.sort(key=lambda f: (-f["saving_ms_per_step"], f["ops"]))
    top = found[:TOP_OFFENDERS]
    severity_ms, severity_pct = ctx.severity(total_saving)
    evidence = {
        "steps": ctx.basis.describe(),
        "candidates": len(found),
        "chains": top,
        "intermediate_traffic_note": (
            "intermediate_mb_per_occurrence: bytes the chain writes to device memory only for "
            "the next kernel to read them back (twice that in traffic); null when the inputs "
            "were not recorded"
        ),
    }
    best = top[0]
    return Finding(
        id=ID,
        title=(
            f"{len(found)} chain(s) of memory-bound kernels repeat; the largest, "
            f"{' → '.join(map(short_kernel_name, best['ops']))}, runs {best['per_step']:g} "
            "times per step"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "Fuse each chain into one kernel: torch.compile the region (Inductor fuses "
            "pointwise chains and layout copies), use the fused operator where one exists "
            "(fused optimizer, fused bias+activation, fused layernorm), or write the chain as a "
            "single Triton kernel. Fusion is not always a win: a fused kernel can be slower "
            "(register pressure, lost vectorisation) — keep it only if the diff says so."
        ),
        verify=(
            "Profile before and after and compare with perfledger diff: the chain's kernels "
            "must disappear or shrink into one, and the step time must fall by about the "
            "estimated saving; if the fused kernel is slower than the chain, revert."
        ),
        estimate=(
            "Per occurrence: the idle gaps inside the chain plus the larger of the short "
            "members' time but the longest's (launch-bound: one fused kernel runs about as long "
            "as the longest member) and the time the intermediates take to be written and read "
            "back (2 x bytes / device bandwidth), at most every member's time but the longest's; "
            "summed per step."
        ),
        spans=spans_of(top),
        whatif_ms=ctx.whatif_ms(
            ID,
            _fused(
                np.asarray(tasks["row"], dtype=np.int64),
                members,
                chain_of,
                position,
                np.concatenate(fused_chains),
                (chain_sum - kernel_saving) / np.maximum(chain_sum, 1),
            ),
        ),
    )


def _fused(
    rows: np.ndarray,
    members: np.ndarray,
    chain_of: np.ndarray,
    position: np.ndarray,
    chains: np.ndarray,
    factor: np.ndarray,
) -> WhatIf:
    """The fix replayed: each of ``chains`` one fused kernel: its members' times scaled to the
    fused estimate (``factor`` per chain), every member after the first without a launch of
    its own nor a gap before it."""
    chosen = np.isin(chain_of, chains)
    return WhatIf(
        tasks=(
            TaskChange(
                rows=tuple(rows[members[chosen]].tolist()),
                factors=tuple(factor[chain_of[chosen]].tolist()),
                fused=tuple((position[chosen] > 0).tolist()),
            ),
        )
    )


def _bandwidth(ctx: AdvisorContext, rank: int) -> float:
    """A rank's device memory bandwidth, bytes per ns (NaN when the device is unknown)."""
    spec = ctx.device(rank)
    return spec.memory_gbps if spec is not None and spec.memory_gbps > 0 else math.nan


def _is_memory(label: str, ascend: bool) -> bool:
    family = op_family(label, ascend=ascend)
    if family is not None:
        return family not in _COMPUTE_FAMILIES and family != "view"
    return _MEMORY_KERNEL.search(label) is not None


def _written_bytes(tasks: pa.Table, label: pa.Array, ascend: pa.Array) -> np.ndarray:
    """Bytes each task's operator writes (NaN when its inputs were not recorded)."""
    ops = pa.table(
        {
            "name": label,
            "shapes": pc.coalesce(tasks["shapes"], tasks["op_shapes"]),
            "dtypes": pc.coalesce(tasks["dtypes"], tasks["op_dtypes"]),
            "ascend": ascend,
        }
    )
    written = estimate_table(ops)["write_bytes"]
    return np.asarray(written.to_numpy(zero_copy_only=False), dtype=np.float64)


def _chains(
    link: np.ndarray, candidate: np.ndarray, max_chain: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Split linked runs into chains of at most max_chain tasks.

    Returns (member task index, chain of each member, position in the chain, chain lengths),
    or None when no two tasks are linked.
    """
    in_run = candidate & (link | np.concatenate([[False], link[:-1]]))
    members = np.flatnonzero(in_run)
    if members.size == 0:
        return None
    # a run starts where the previous task is not linked to this one
    starts_run = np.ones(members.size, dtype=bool)
    starts_run[1:] = ~link[members[1:] - 1] | (members[1:] - members[:-1] != 1)
    run_of = np.cumsum(starts_run) - 1
    run_start = members[starts_run]
    offset = members - run_start[run_of]
    chunk = run_of * (members.size + 1) + offset // max_chain
    _, chain_of = np.unique(chunk, return_inverse=True)
    chain_of = chain_of.reshape(-1)
    position = offset % max_chain
    length = np.bincount(chain_of)
    return members, chain_of, position, length


RULE: Final = Rule(
    id=ID,
    title="repeated chains of memory-bound kernels could be fused",
    checks="consecutive memory-bound kernels on one stream, repeating chains, their traffic",
    thresholds=(
        Threshold(
            "max_task_us",
            50.0,
            "µs",
            "a kernel shorter than this can be a chain member (any length when its bytes and "
            "the device bandwidth are known)",
            "perfledger",
        ),
        Threshold(
            "max_gap_us",
            50.0,
            "µs",
            "idle time allowed between two members",
            "perfledger",
        ),
        Threshold(
            "min_chain", 2.0, "count", "shortest chain", "perfledger: chains of 2-10 kernels"
        ),
        Threshold(
            "max_chain", 10.0, "count", "longest chain", "perfledger: chains of 2-10 kernels"
        ),
        Threshold(
            "min_repeats",
            5.0,
            "count",
            "a chain must repeat more often than this",
            "perfledger: repeats more than 5 times per profile",
        ),
        Threshold(
            "min_saving_pct",
            0.5,
            "%",
            "a chain whose estimated saving is a smaller share of the step is not reported",
            "perfledger",
        ),
    ),
    check=check,
    replays=True,
)
