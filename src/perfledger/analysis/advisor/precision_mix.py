"""precision_mix: matrix math running in fp32 where bf16/fp16 could run (informational).

Tensor cores and Ascend cube units run half-precision matrix math several times faster than
fp32 and move half the bytes. The rule measures the share of matmul and convolution time whose
inputs are fp32 (from the recorded input types); whether lower precision is acceptable is the
model owner's call, so the estimate is a plain ``speedup`` factor, configurable.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.advisor.base import Outcome, Params, Rule
from perfledger.analysis.advisor.common import encode, offender, spans_of
from perfledger.analysis.advisor.context import AdvisorContext
from perfledger.analysis.roofline.arguments import precision_of
from perfledger.analysis.roofline.families import CONV, MATMUL, op_family
from perfledger.model import devices
from perfledger.model.findings import TOP_OFFENDERS, Finding, Skipped, Threshold, ms, pct

ID: Final = "precision_mix"
# Kernels that run fp32 inputs as TF32 on tensor cores (cuBLAS/CUTLASS m16n8k8 and
# m16n8k16 tensor-op GEMMs, cuDNN tf32 kernels).
_TF32_KERNEL: Final = re.compile(r"tf32|1688gemm|16816gemm", re.IGNORECASE)


def check(ctx: AdvisorContext, p: Params) -> Outcome:
    """fp32 share of matmul/conv time >= fp32_share_pct, matmul/conv >= min_matmul_pct."""
    if not ctx.step_windows or not ctx.has_device_tasks:
        return Skipped(ID, "no device activity: host-only profile")
    tasks = ctx.tasks
    is_kernel = np.asarray(ctx.task_kind == "kernel", dtype=bool)
    if ctx.basis.annotated:
        is_kernel &= np.asarray(tasks["step"], dtype=np.int64) >= 0
    if not is_kernel.any():
        return None
    # the kernels' rows of the few columns read (a filter copies every column it is given)
    kernel_rows = np.flatnonzero(is_kernel)
    take = pa.array(kernel_rows, pa.int64())
    # the kernels' names are read as codes of the tasks' names, not copied (tens of MB)
    kernels = tasks.select(
        ["rank", "step", "start_ns", "dur_ns", "op_name", "shapes", "op_shapes"]
        + ["dtypes", "op_dtypes"]
    ).take(take)
    op_type = pc.take(ctx.task_op_types, take)
    labelled = pa.table(
        {
            "rank": kernels["rank"],
            "step": kernels["step"],
            "start_ns": kernels["start_ns"],
            "dur_ns": kernels["dur_ns"],
            "op": pc.coalesce(op_type, kernels["op_name"]),
            "ascend": pc.is_valid(op_type),
            "types": pc.coalesce(kernels["dtypes"], kernels["op_dtypes"]),
            "op_shapes_any": pc.coalesce(kernels["shapes"], kernels["op_shapes"]),
        }
    )
    ascend = np.asarray(labelled["ascend"], dtype=bool)
    if labelled["op"].null_count == labelled.num_rows:
        return Skipped(ID, "kernels are not linked to the operators that launched them")
    op_index, ops = encode(labelled["op"])
    op_is_ascend = np.bincount(op_index, weights=ascend, minlength=ops.size) > 0
    is_math = np.array(
        [
            name != "None" and op_family(str(name), ascend=bool(asc)) in (MATMUL, CONV)
            for name, asc in zip(ops, op_is_ascend, strict=True)
        ],
        dtype=bool,
    )
    math_task = is_math[op_index]
    if not math_task.any():
        return None
    type_index, distinct_types = encode(labelled["types"])
    precision_of_type = np.array(
        [(_first_precision(t) or "") if t != "None" else "" for t in distinct_types], dtype=object
    )
    precision = precision_of_type[type_index]
    # fp32 inputs on tensor cores in TF32 already run at the TF32 rate: not plain fp32
    name_index, names = encode(tasks["name"])
    tf32_name = np.array([_TF32_KERNEL.search(k) is not None for k in names], bool)
    precision[(precision == devices.FP32) & tf32_name[name_index[kernel_rows]]] = devices.TF32
    known = math_task & (precision != "")
    if not known.any():
        return Skipped(
            ID, "no input types recorded for matmul/convolution operators (record_shapes=True)"
        )
    dur = np.asarray(labelled["dur_ns"], dtype=np.int64)
    kernel_time = int(dur.sum())
    math_time = int(dur[math_task].sum())
    fp32 = known & (precision == devices.FP32)
    fp32_time = int(dur[fp32].sum())
    fp32_share = pct(fp32_time, int(dur[known].sum()))
    math_share = pct(math_time, kernel_time)
    if fp32_share < p["fp32_share_pct"] or math_share < p["min_matmul_pct"]:
        return None

    recoverable = fp32_time * (1.0 - 1.0 / max(p["speedup"], 1.0))
    windows = ctx.basis.windows
    by_precision: dict[str, float] = {}
    for prec in sorted({str(x) for x in precision[known]}):
        by_precision[prec] = ms(dur[known & (precision == prec)].sum() / windows)
    offenders = _top_fp32(labelled, fp32, dur, windows)
    severity_ms, severity_pct = ctx.severity(recoverable)
    peaks: list[dict[str, Any]] = []
    for r in sorted({w.rank for w in ctx.step_windows}):
        spec = ctx.device(r)
        if spec is not None:
            peaks.append(
                {
                    "rank": r,
                    "device": spec.name,
                    "fp32_tflops": spec.peak_tflops.get(devices.FP32),
                    "tf32_tflops": spec.peak_tflops.get(devices.TF32),
                    "bf16_tflops": spec.peak_tflops.get(devices.BF16),
                    "fp16_tflops": spec.peak_tflops.get(devices.FP16),
                }
            )
    evidence = {
        "steps": ctx.basis.describe(),
        "matmul_conv_ms_per_step": ms(math_time / windows),
        "matmul_conv_pct_of_kernel_time": math_share,
        "fp32_pct_of_matmul_conv_time": fp32_share,
        "ms_per_step_by_precision": by_precision,
        "device_peaks": peaks,
        "top_fp32_ops": offenders,
    }
    return Finding(
        id=ID,
        title=(
            f"{fp32_share:.0f}% of matmul/convolution time runs in fp32 "
            f"({math_share:.0f}% of kernel time is matmul/convolution)"
        ),
        severity_ms=severity_ms,
        severity_pct=severity_pct,
        evidence=evidence,
        suggestion=(
            "If the model tolerates it, run the matrix math in lower precision: "
            "torch.autocast(dtype=torch.bfloat16) (or fp16 with a GradScaler), or at least "
            "TF32 (torch.backends.cuda.matmul.allow_tf32 = True / "
            "torch.set_float32_matmul_precision('high')); on Ascend allow HF32 where eligible. "
            "Validate accuracy: this is informational."
        ),
        verify=(
            "Re-profile: the matmul/convolution kernels should switch to half-precision "
            "(tensor-core) variants and their time per step fall; check the loss curve."
        ),
        estimate=(
            f"fp32 matmul/convolution time x (1 - 1/speedup) with speedup = {p['speedup']:g} "
            "(half the bytes and at least twice the math peak on every device of the table)."
        ),
        spans=spans_of(offenders),
    )


def _first_precision(types: str) -> str | None:
    for part in _split_types(types):
        prec = precision_of(part)
        if prec is not None:
            return prec
    return None


def _split_types(types: str) -> list[str]:
    text = types.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            return []
        return [str(t) for t in parsed] if isinstance(parsed, list) else []
    return [t.strip() for t in text.split(";")]


def _top_fp32(
    labelled: pa.Table, fp32: np.ndarray, dur: np.ndarray, windows: int
) -> list[dict[str, Any]]:
    rows = np.flatnonzero(fp32)
    taken = labelled.take(pa.array(rows, pa.int64()))
    op_code, ops = encode(taken["op"])
    shape_code, shapes = encode(taken["op_shapes_any"])
    pair = op_code * shapes.size + shape_code
    pairs, index = np.unique(pair, return_inverse=True)
    index = index.reshape(-1)
    total = np.zeros(pairs.size, dtype=np.int64)
    np.add.at(total, index, dur[rows])
    rank = np.asarray(labelled["rank"], dtype=np.int64)
    step = np.asarray(labelled["step"], dtype=np.int64)
    start = np.asarray(labelled["start_ns"], dtype=np.int64)
    result = []
    for g in np.argsort(-total, kind="stable")[:TOP_OFFENDERS]:
        members = rows[index == g]
        worst = members[np.argmax(dur[members])]
        shape = str(shapes[pairs[g] % shapes.size])
        result.append(
            offender(
                rank[worst],
                step[worst],
                start[worst],
                start[worst] + dur[worst],
                op=str(ops[pairs[g] // shapes.size]),
                shapes=None if shape == "None" else shape,
                calls=int(members.size),
                ms_per_step=ms(total[g] / windows),
            )
        )
    return result


RULE: Final = Rule(
    id=ID,
    title="matrix math runs in fp32 (informational)",
    checks="input types of matmul and convolution operators, their share of kernel time",
    thresholds=(
        Threshold(
            "fp32_share_pct",
            50.0,
            "%",
            "fp32 share of matmul/convolution time that flags",
            "perfledger (most of the matrix math)",
        ),
        Threshold(
            "min_matmul_pct",
            10.0,
            "%",
            "matmul/convolution share of kernel time to bother",
            "perfledger",
        ),
        Threshold(
            "speedup",
            2.0,
            "x",
            "assumed speed-up of bf16/fp16 over fp32 matrix math",
            "vendor datasheets (peak ratios of 2x to 16x)",
        ),
    ),
    check=check,
)
