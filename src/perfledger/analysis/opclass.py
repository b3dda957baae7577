"""Vendor-neutral operator classes, so that a GPU run can be compared with an NPU run.

Kernel names differ between vendors (``ampere_sgemm_128x64_nn``, ``cutlass::Kernel<...gemm...>``,
``aclnnMm_MatMulCommon_MatMulV2``) but the work they do falls into a few classes: matmul, conv,
attention, elementwise, reduction, layout/copy, communication, memcpy (plus memset and other).

A task is classified by its kind first (comm, memcpy and memset tasks need no name), then by the
first class whose name pattern matches, trying in turn: the op type of an Ascend ``aclnn`` kernel
name (its last ``_`` segment: ``aclnnMm_MatMulCommon_MatMulV2`` -> ``MatMulV2``), the task name,
and the host op that launched it (``aten::native_layer_norm_backward`` names what
``GammaBetaBackwardCUDAKernel`` does). Classification runs once per distinct name, never per event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

import numpy as np
import numpy.typing as npt

from perfledger.model import schema

MATMUL: Final = "matmul"
CONV: Final = "conv"
ATTENTION: Final = "attention"
ELEMENTWISE: Final = "elementwise"
REDUCTION: Final = "reduction"
LAYOUT_COPY: Final = "layout_copy"
COMMUNICATION: Final = "communication"
MEMCPY: Final = "memcpy"
MEMSET: Final = "memset"
OTHER: Final = "other"
OP_CLASSES: Final = (
    MATMUL,
    CONV,
    ATTENTION,
    ELEMENTWISE,
    REDUCTION,
    LAYOUT_COPY,
    COMMUNICATION,
    MEMCPY,
    MEMSET,
    OTHER,
)

_BY_KIND: Final = {schema.COMM: COMMUNICATION, schema.MEMCPY: MEMCPY, schema.MEMSET: MEMSET}

# Vendor knowledge as data: (class, pattern searched in the lower-cased name), first match wins.
# The order settles names that fit several classes: a cuDNN "implicit_convolve_sgemm" is a
# convolution, a flash-attention kernel runs GEMMs, a cuBLAS "splitKreduce" finishes a GEMM, and
# "direct_copy" inside an elementwise kernel is a copy. FBGEMM's name holds "gemm" but its
# kernels are mostly embedding lookups and permutations.
_NAME_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    (
        COMMUNICATION,
        r"nccl|rccl|hccl|hcom|c10d::|gloo|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
        r"|broadcast|sendrecv|record_param_comms",
    ),
    (MEMCPY, r"memcpy|memory_?copy|copy(device|host)to(device|host)"),
    (MEMSET, r"memset"),
    (
        ATTENTION,
        r"attention|attn|fmha|flash|sdpa|scaled_dot_product|\bmha\b|xformers",
    ),
    (
        CONV,
        r"conv(?!ert)|winograd|im2col|col2im|(^|[_ ]|\d{4})(fprop|dgrad|wgrad)|depthwise"
        r"|implicit_gemm",
    ),
    (
        MATMUL,
        r"(?<!fb)gemm|gemv|matmul|cublas|cutlass|nvjet|\bmm\b|\bbmm\b|addmm|addbmm|addmv"
        r"|aclnnmm\b"
        r"|\blinear\b|einsum|\bdot\b|triton_tem_",
    ),
    (
        REDUCTION,
        r"reduce|reduction|\bsum\b|\bmean\b|norm\b|norm_|_norm|batchnorm|\bbn_|softmax"
        r"|logsumexp|argmax|argmin|\bamax|\bamin|\bmax\b|\bmin\b|\bvar\b|\bstd\b|welford"
        r"|nll_?loss|cross_?entropy|max_?pool|avg_?pool|adaptive_?avg|gamma[_ ]?beta"
        r"|adaptive_?max|pooling|triton_red_|triton_per_|devicescan|cumsum|cumprod",
    ),
    (
        LAYOUT_COPY,
        r"copy|transpose|permute|contiguous|\bcat\b|catarray|concat|\bstack|split|slice"
        r"|index|gather|scatter|reshape|\bview\b|transdata|tensormove|\bpad\b|constant_pad"
        r"|clone|expand|flip|\broll\b|narrow|\bselect\b|unfold|repeat|\btile\b|embedding"
        r"|\bchunk\b|nchw_?to_?nhwc|nhwc_?to_?nchw",
    ),
    (
        ELEMENTWISE,
        r"elementwise|pointwise|triton_poi_|\badd|\bmul|\bsub(_|\b)|\bdiv|relu|gelu|silu|swish"
        r"|sigmoid|tanh|\bexp|\blog\b|sqrt|\bpow|\bwhere\b|fill|zero|\bones?\b|dropout"
        r"|clamp|\babs\b|\bneg|cast|threshold|foreach|multi_tensor|adam|\bsgd|lamb\b"
        r"|\bmuls\b|\bdivs\b|\badds\b|\beq\b|\bne\b|\blt\b|\bgt\b|\ble\b|\bge\b|mask"
        r"|nan_to_num|bias|\bscale|axpy|lerp|addcmul|addcdiv|reciprocal|\bsign\b|floor|ceil"
        r"|round|maximum|minimum|inplaceone|\bone\b",
    ),
)
_COMPILED: Final = tuple((name, re.compile(pattern)) for name, pattern in _NAME_PATTERNS)
_STD: Final = re.compile(r"\bstd::(array\b)?")
# Ascend kernel names are "<aclnn API>_<kernel>_<op type>"; the op type says most.
_ASCEND_KERNEL: Final = re.compile(r"^aclnn[A-Za-z0-9]+_.+_([A-Za-z][A-Za-z0-9]*)$")


@lru_cache(maxsize=65_536)
def class_of_name(name: str) -> str:
    """The op class a name alone implies (``other`` when none fits)."""
    # The C++ standard library's names in template arguments say nothing of the work: every
    # PyTorch elementwise kernel carries a "std::array<char*, 3ul>" (not a "std" reduction).
    name = _STD.sub("", name)
    text = name.lower()
    # Separate CamelCase words and strip instance numbers ("Conv2DBackpropFilter10",
    # "ReduceSum7") so that word boundaries in the patterns see "reduce sum", not "reducesum7".
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()
    spaced = re.sub(r"\d+$", "", spaced)
    for op_class, pattern in _COMPILED:
        if pattern.search(text) or pattern.search(spaced):
            return op_class
    return OTHER


@lru_cache(maxsize=65_536)
def op_class(name: str, kind: str, host_op: str | None = None) -> str:
    """The class of one device task (or host op of a CPU run) given its kind and names."""
    by_kind = _BY_KIND.get(kind)
    if by_kind is not None:
        return by_kind
    candidates: list[str] = []
    match = _ASCEND_KERNEL.match(name)
    if match:
        candidates.append(match.group(1))
    candidates.append(name)
    if host_op:
        candidates.append(host_op)
    for candidate in candidates:
        found = class_of_name(candidate)
        if found != OTHER:
            return found
    return OTHER


def op_classes(
    names: Sequence[str | None],
    kinds: Sequence[str | None],
    host_ops: Sequence[str | None] | None = None,
) -> npt.NDArray[np.object_]:
    """The class of every row; rows are given as distinct (name, kind, host op) groups."""
    hosts: Sequence[str | None] = host_ops if host_ops is not None else [None] * len(names)
    return np.array(
        [
            op_class(str(name or ""), str(kind or ""), host)
            for name, kind, host in zip(names, kinds, hosts, strict=True)
        ],
        dtype=object,
    )
