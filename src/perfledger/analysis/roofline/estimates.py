"""FLOPs and bytes of an operator from its input shapes and types: one formula per op family.

The estimate is what the operator must do at least: the floating-point operations of its math
and the bytes it must read from and write to device memory once (caches and re-reads are not
modelled). It is built from what profilers record: PyTorch's ``Input Dims`` / ``Input type``
(``shapes`` ``[[32, 3, 224, 224], [64, 3, 7, 7], []]``, ``dtypes`` ``["float", "float", ""]``)
or Ascend's ``Input Shapes`` / ``Input Data Types`` (``"32,3,224,224;64,3,7,7;"``,
``"FLOAT;FLOAT;"``), with the output shapes and types when the source gives them (Ascend).

Formulas (N elements of a tensor = product of its dims; size = bytes per element):
- matmul family (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, Ascend
  ``MatMul*`` / ``BatchMatMul*``): A [..., M, K] x B [..., K, N] with batch dims broadcast:
  flops = 2·batch·M·K·N, plus batch·M·N when a bias is added; reads A, B (and the bias), writes
  batch·M·N. ``linear`` takes its weight as [N, K]. Ascend operands may be stored transposed,
  so K is the dimension the two operands share.
- convolution forward: input [N, C, *spatial], weight [O, C/groups, *kernel]:
  flops = 2·N·O·prod(out spatial)·(C/groups)·prod(kernel), plus N·O·prod(out spatial) with a
  bias. The output size comes from the source when given; PyTorch does not record stride and
  padding, so the output is then assumed as large as the input (an upper bound for strided
  convolutions, stated in ``assumption``).
- convolution backward (``convolution_backward``, ``cudnn_convolution_backward``): both the
  input and the weight gradients, 2x the forward flops computed from the gradient's spatial
  size; ``cudnn_convolution_backward_input``: 1x, its written size assumed N·C·prod(grad
  spatial) (stride 1, one group).
- attention (``scaled_dot_product_attention`` and its flash / efficient / cudnn kernels):
  Q [B..., L, E], K [B..., S, E], V [B..., S, Ev] (``_flash_attention_forward`` and
  ``_efficient_attention_forward`` take [B, L, H, E]): flops = 2·batch·L·S·E + 2·batch·L·S·Ev
  (the two matmuls; softmax not counted); reads Q, K, V, writes batch·L·Ev. Backward kernels:
  2.5x the forward flops (five matmuls of the same size, as FlashAttention counts).
- elementwise (``add``, ``mul``, ``relu``, ``gelu``, ``where``, Triton pointwise kernels, Ascend
  ``Add`` / ``Mul`` / ``Relu`` ...): one flop per output element; reads every tensor input,
  writes the broadcast output (in-place variants write their first input: the same bytes).
- fill (``fill_``, ``zero_``, ``ZerosLike`` ...): no flop, no read, writes the tensor.
- reductions (``sum``, ``mean``, ``amax``, Ascend ``ReduceSum`` ...): one flop per input
  element; reads the input; writes the output only when the source gives its size.
- normalisations (``softmax``, ``layer_norm``, ``batch_norm``, ``group_norm``, ``rms_norm`` and
  their backward): five flops per element of the first input; reads every tensor input,
  writes a tensor like the first input.
- layout and copies (``copy_``, ``_to_copy``, ``to``, ``contiguous``, ``clone``, ``cat``,
  ``stack``, Ascend ``Cast``, ``TransData``, ``Transpose``, ``ConcatD`` ...): no flop; reads the
  inputs, writes the output (``copy_`` writes its destination in the destination's type; casts
  whose target type is not recorded are assumed to keep the size).
- gathers (``embedding``, ``index_select`` on the first dim): no flop; reads the indices and the
  gathered rows, writes them.
- views (``view``, ``reshape``, ``transpose``, ``permute``, ``t``, ``expand`` ...): no data moved.
Anything else, or shapes that do not fit the formula, has no estimate (None): it is left out
of the roofline and counted as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis.roofline.arguments import (
    Argument,
    Shape,
    Tensor,
    parse_arguments,
    precision_of,
)
from perfledger.analysis.roofline.families import (
    ATTENTION,
    CONV,
    ELEMENTWISE,
    FILL,
    GATHER,
    LAYOUT,
    MATMUL,
    NORMALIZATION,
    REDUCTION,
    VIEW,
    op_family,
    op_key,
)

NORMALIZATION_FLOPS_PER_ELEMENT: Final = 5.0
ATTENTION_BACKWARD_FACTOR: Final = 2.5


@dataclass(frozen=True)
class OpCost:
    """What one operator call must do: flops, bytes read and written, and how it was modelled.

    ``precision`` is the math precision (:data:`perfledger.model.devices.PRECISIONS`) of the inputs,
    None when unknown; ``assumption`` says what had to be assumed, None when nothing.
    """

    family: str
    flops: float
    read_bytes: float
    write_bytes: float
    precision: str | None = None
    assumption: str | None = None

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, flops per byte (0 when nothing moves)."""
        return self.flops / self.bytes if self.bytes > 0 else 0.0


def _tensors(arguments: Sequence[Argument]) -> list[Tensor]:
    """Every tensor of the arguments, tensor lists flattened, in order."""
    found: list[Tensor] = []
    for argument in arguments:
        if isinstance(argument, Tensor):
            found.append(argument)
        elif isinstance(argument, tuple):
            found.extend(argument)
    return found


def _common_size(tensors: Sequence[Tensor]) -> int | None:
    """The element size shared by tensors whose type is not recorded: the first one known."""
    for tensor in tensors:
        if tensor.size is not None:
            return tensor.size
    return None


def _nbytes(tensor: Tensor, fallback: int | None) -> float | None:
    size = tensor.size if tensor.size is not None else fallback
    return None if size is None else float(tensor.numel * size)


def _sum_bytes(tensors: Sequence[Tensor], fallback: int | None) -> float | None:
    total = 0.0
    for tensor in tensors:
        nbytes = _nbytes(tensor, fallback)
        if nbytes is None:
            return None
        total += nbytes
    return total


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(rank):
        sizes = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def estimate_op(
    name: str,
    arguments: Sequence[Argument],
    outputs: Sequence[Argument] = (),
    *,
    ascend: bool = False,
    packed_layout: bool = False,
) -> OpCost | None:
    """FLOPs and bytes of one operator call (module docstring); None when not estimable.

    Args:
        name: the operator (``aten::addmm``) or Ascend operator type (``MatMulV2``).
        arguments: its positional inputs (:func:`parse_arguments`).
        outputs: its outputs when the source records them.
        ascend: the name is an Ascend operator type.
        packed_layout: inputs are stored in a 5-D or fractal layout (Ascend): the matmul and
            convolution formulas do not apply.
    """
    family = op_family(name, ascend=ascend)
    if family is None:
        return None
    tensors = _tensors(arguments)
    out_tensors = _tensors(outputs)
    fallback = _common_size([*tensors, *out_tensors])
    if family == VIEW:
        return OpCost(VIEW, 0.0, 0.0, 0.0, None)
    if family in (MATMUL, CONV, ATTENTION) and packed_layout:
        return None
    key = op_key(name)
    if family == MATMUL:
        return _matmul(key, arguments, out_tensors, fallback)
    if family == CONV:
        return _convolution(key, arguments, out_tensors, fallback)
    if family == ATTENTION:
        return _attention(key, arguments, fallback)
    if not tensors and not out_tensors:
        return None
    precision = precision_of(tensors[0].dtype) if tensors else None
    if family == FILL:
        target = out_tensors or tensors[:1]
        written = _sum_bytes(target, fallback)
        return None if written is None else OpCost(FILL, 0.0, 0.0, written, precision)
    read = _sum_bytes(tensors, fallback)
    if read is None:
        return None
    if family == ELEMENTWISE:
        return _elementwise(tensors, out_tensors, read, fallback, precision)
    if family == REDUCTION:
        written = _sum_bytes(out_tensors, fallback) if out_tensors else 0.0
        assumption = None if out_tensors else "output size not recorded: not counted"
        return OpCost(
            REDUCTION, float(tensors[0].numel), read, written or 0.0, precision, assumption
        )
    if family == NORMALIZATION:
        first = tensors[0]
        written = _sum_bytes(out_tensors, fallback) if out_tensors else _nbytes(first, fallback)
        flops = NORMALIZATION_FLOPS_PER_ELEMENT * first.numel
        return OpCost(NORMALIZATION, flops, read, written or 0.0, precision)
    if family == GATHER:
        return _gather(key, tensors, out_tensors, fallback)
    return _layout(key, tensors, out_tensors, read, fallback)


def _elementwise(
    tensors: Sequence[Tensor],
    outputs: Sequence[Tensor],
    read: float,
    fallback: int | None,
    precision: str | None,
) -> OpCost | None:
    if outputs:
        written = _sum_bytes(outputs, fallback)
        elements = float(sum(t.numel for t in outputs))
    else:
        shape = _broadcast([t.shape for t in tensors])
        if shape is None:
            return None
        elements = float(math.prod(shape))
        size = tensors[0].size or fallback
        written = None if size is None else elements * size
    if written is None:
        return None
    return OpCost(ELEMENTWISE, elements, read, written, precision)


def _layout(
    key: str,
    tensors: Sequence[Tensor],
    outputs: Sequence[Tensor],
    read: float,
    fallback: int | None,
) -> OpCost | None:
    precision = precision_of(tensors[0].dtype)
    if outputs:
        written = _sum_bytes(outputs, fallback)
        return None if written is None else OpCost(LAYOUT, 0.0, read, written, precision)
    if key in ("copy", "_copy_from", "_copy_from_and_resize") and len(tensors) >= 2:
        # copy_(destination, source): reads the source, writes the destination in its type.
        destination, source = tensors[0], tensors[1]
        read_source = _nbytes(source, fallback)
        written = _nbytes(destination, source.size or fallback)
        if read_source is None or written is None:
            return None
        return OpCost(LAYOUT, 0.0, read_source, written, precision_of(source.dtype))
    if key in ("cat", "_cat", "stack", "concat", "concatd", "pack"):
        return OpCost(LAYOUT, 0.0, read, read, precision)
    # One input, one output like it (contiguous, clone, casts whose target is not recorded).
    first = _nbytes(tensors[0], fallback)
    if first is None:
        return None
    assumption = (
        "target type not recorded: output assumed the size of the input"
        if key in ("_to_copy", "to", "cast")
        else None
    )
    return OpCost(LAYOUT, 0.0, first, first, precision, assumption)


def _gather(
    key: str, tensors: Sequence[Tensor], outputs: Sequence[Tensor], fallback: int | None
) -> OpCost | None:
    if outputs:
        read = _sum_bytes(tensors[1:], fallback)
        written = _sum_bytes(outputs, fallback)
        if read is None or written is None:
            return None
        return OpCost(GATHER, 0.0, read + written, written, precision_of(tensors[0].dtype))
    if key == "embedding" and len(tensors) >= 2 and len(tensors[0].shape) == 2:
        weight, indices = tensors[0], tensors[1]
        size = weight.size or fallback
        if size is None:
            return None
        rows = float(indices.numel * weight.shape[1] * size)
        return OpCost(
            GATHER,
            0.0,
            rows + indices.numel * (indices.size or 8),
            rows,
            precision_of(weight.dtype),
        )
    return None


def _matmul_dims(a: Shape, b: Shape) -> tuple[int, int, int] | None:
    """(M, K, N) of A x B where the operands may be stored transposed (K is shared)."""
    (m, k), (k2, n) = a[-2:], b[-2:]
    if k == k2:
        return m, k, n
    if k == n:  # B stored as [N, K]
        return m, k, k2
    if m == k2:  # A stored as [K, M]
        return k, m, n
    if m == n:  # both transposed
        return k, m, k2
    return None


def _matmul(
    key: str, arguments: Sequence[Argument], outputs: Sequence[Tensor], fallback: int | None
) -> OpCost | None:
    tensors = [a for a in arguments if isinstance(a, Tensor)]
    bias: Tensor | None = None
    if key in ("addmm", "baddbmm", "addbmm", "_addmm_activation", "addmv"):
        if len(tensors) < 3:
            return None
        bias, a, b = tensors[0], tensors[1], tensors[2]
    elif key == "linear":
        if len(tensors) < 2 or len(tensors[1].shape) != 2:
            return None
        a, weight = tensors[0], tensors[1]
        b = Tensor((weight.shape[1], weight.shape[0]), weight.dtype)
        bias = tensors[2] if len(tensors) > 2 else None
    else:
        if len(tensors) < 2:
            return None
        a, b = tensors[0], tensors[1]
        bias = tensors[2] if len(tensors) > 2 and key in ("matmul", "batchmatmul", "gemm") else None
    if not a.shape or not b.shape:
        return None
    a_shape = a.shape if len(a.shape) >= 2 else (1, a.shape[0])
    b_shape = b.shape if len(b.shape) >= 2 else (b.shape[0], 1)
    dims = (
        _matmul_dims(a_shape, b_shape)
        if key != "linear"
        else ((a_shape[-2], a_shape[-1], b_shape[-1]) if a_shape[-1] == b_shape[-2] else None)
    )
    if dims is None:
        return None
    m, k, n = dims
    batch_shape = _broadcast([a_shape[:-2], b_shape[:-2]])
    if batch_shape is None:
        return None
    # linear folds every leading dim of its input into the rows
    batch = math.prod(batch_shape)
    flops = 2.0 * batch * m * k * n
    inputs = [a, b] if key != "linear" else [a, tensors[1]]
    if bias is not None:
        flops += batch * m * n
        inputs.append(bias)
    read = _sum_bytes(inputs, fallback)
    size = (outputs[0].size if outputs else None) or a.size or fallback
    if read is None or size is None:
        return None
    written = float(batch * m * n * size)
    return OpCost(MATMUL, flops, read, written, precision_of(a.dtype))


def _conv_flops(batch: int, out_channels: int, out_spatial: Shape, weight: Shape) -> float:
    return 2.0 * batch * out_channels * math.prod(out_spatial) * weight[1] * math.prod(weight[2:])


def _convolution(
    key: str, arguments: Sequence[Argument], outputs: Sequence[Tensor], fallback: int | None
) -> OpCost | None:
    slots = list(arguments) + [None] * 3

    def tensor(i: int) -> Tensor | None:
        slot = slots[i]
        return slot if isinstance(slot, Tensor) else None

    if key in ("convolution_backward", "cudnn_convolution_backward", "miopen_convolution_backward"):
        first, second, weight = tensor(0), tensor(1), tensor(2)
        if first is None or second is None or weight is None:
            return None
        grad, inputs = (first, second) if key == "convolution_backward" else (second, first)
        if not _conv_shapes_fit(grad.shape, weight.shape):
            return None
        flops = 2.0 * _conv_flops(grad.shape[0], weight.shape[0], grad.shape[2:], weight.shape)
        read = _sum_bytes([grad, inputs, weight], fallback)
        written = _sum_bytes([inputs, weight], fallback)
        if read is None or written is None:
            return None
        return OpCost(
            CONV,
            flops,
            read,
            written,
            precision_of(grad.dtype),
            "input and weight gradients both computed",
        )
    if key == "cudnn_convolution_backward_input":
        out_grad, kernel = tensor(1), tensor(2)
        if out_grad is None or kernel is None or not _conv_shapes_fit(out_grad.shape, kernel.shape):
            return None
        flops = _conv_flops(out_grad.shape[0], kernel.shape[0], out_grad.shape[2:], kernel.shape)
        read = _sum_bytes([out_grad, kernel], fallback)
        size = out_grad.size or fallback
        if read is None or size is None:
            return None
        written = float(out_grad.shape[0] * kernel.shape[1] * math.prod(out_grad.shape[2:]) * size)
        return OpCost(
            CONV,
            flops,
            read,
            written,
            precision_of(out_grad.dtype),
            "input gradient assumed stride 1 and one group",
        )
    if key == "cudnn_convolution_backward_weight" or "backprop" in key:
        # the kernel size (or the input size) is passed as a list, not recorded as a shape
        return None
    activation, kernel = tensor(0), tensor(1)
    if activation is None or kernel is None or not _conv_shapes_fit(activation.shape, kernel.shape):
        return None
    bias = tensor(2)
    if bias is not None and bias.shape != (kernel.shape[0],):
        bias = None
    assumption = None
    if outputs and len(outputs[0].shape) == len(activation.shape):
        out_spatial = outputs[0].shape[2:]
    else:
        out_spatial = activation.shape[2:]
        assumption = "stride and padding not recorded: output assumed as large as the input"
    flops = _conv_flops(activation.shape[0], kernel.shape[0], out_spatial, kernel.shape)
    read_tensors = [activation, kernel] + ([bias] if bias is not None else [])
    if bias is not None:
        flops += activation.shape[0] * kernel.shape[0] * math.prod(out_spatial)
    read = _sum_bytes(read_tensors, fallback)
    size = activation.size or fallback
    if read is None or size is None:
        return None
    written = float(activation.shape[0] * kernel.shape[0] * math.prod(out_spatial) * size)
    return OpCost(CONV, flops, read, written, precision_of(activation.dtype), assumption)


def _conv_shapes_fit(activation: Shape, weight: Shape) -> bool:
    return len(activation) >= 3 and len(weight) == len(activation)


def _attention(key: str, arguments: Sequence[Argument], fallback: int | None) -> OpCost | None:
    tensors = [a for a in arguments if isinstance(a, Tensor)]
    backward = key.endswith("_backward")
    offset = 1 if backward else 0  # backward kernels take the output gradient first
    if len(tensors) < offset + 3:
        return None
    q, k, v = tensors[offset], tensors[offset + 1], tensors[offset + 2]
    if len(q.shape) < 3 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
        return None
    if key.startswith(("_flash_attention", "_efficient_attention")):
        if len(q.shape) != 4:
            return None
        batch = q.shape[0] * q.shape[2]  # [B, L, H, E]
        length, embed, source, value_embed = q.shape[1], q.shape[3], k.shape[1], v.shape[3]
    else:
        batch = math.prod(q.shape[:-2])  # [B, H, L, E]
        length, embed, source, value_embed = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    flops = 2.0 * batch * length * source * embed + 2.0 * batch * length * source * value_embed
    output = float(batch * length * value_embed)
    size = q.size or fallback
    read = _sum_bytes([q, k, v], fallback)
    if size is None or read is None:
        return None
    if backward:
        flops *= ATTENTION_BACKWARD_FACTOR
        written = read  # dQ, dK, dV
        read += 2 * output * size  # the output gradient and the output
    else:
        written = output * size
    return OpCost(ATTENTION, flops, read, written, precision_of(q.dtype))


# --- tables -------------------------------------------------------------------------------

ESTIMATES_SCHEMA: Final = pa.schema(
    [
        pa.field("family", pa.string()),
        pa.field("flops", pa.float64()),
        pa.field("read_bytes", pa.float64()),
        pa.field("write_bytes", pa.float64()),
        pa.field("precision", pa.string()),
        pa.field("assumption", pa.string()),
    ]
)
_SIGNATURE_COLUMNS: Final = (
    "name",
    "shapes",
    "dtypes",
    "output_shapes",
    "output_dtypes",
    "ascend",
    "packed_layout",
)


def estimate_table(ops: pa.Table) -> pa.Table:
    """:data:`ESTIMATES_SCHEMA` for each row of ``ops`` (row order kept; nulls: no estimate).

    ``ops`` has the columns ``name``, ``shapes``, ``dtypes`` and optionally ``output_shapes``,
    ``output_dtypes`` (strings), ``ascend`` and ``packed_layout`` (booleans). Each distinct
    signature is estimated once: profiles repeat the same few hundred calls many times.
    """
    columns = {}
    for column in _SIGNATURE_COLUMNS:
        if column in ops.column_names:
            columns[column] = ops.column(column)
        elif column in ("ascend", "packed_layout"):
            columns[column] = pa.array(np.zeros(ops.num_rows, dtype=bool))
        else:
            columns[column] = pa.nulls(ops.num_rows, pa.string())
    frame = pa.table(columns)
    # a dense id per distinct signature (nulls alike), column by column: each column's values
    # hashed to codes, the codes so far and the column's combined and made dense again
    # (hashes, not sorts: only which rows share a signature matters, not the ids' order)
    signature = np.zeros(ops.num_rows, dtype=np.int64)
    for column in frame.columns:
        values = column
        if isinstance(column, pa.ChunkedArray):
            # one chunk is used as it is: joining would copy the column (kernel names: MBs)
            values = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        encoded = pc.dictionary_encode(values, null_encoding="encode")
        codes = np.asarray(encoded.indices, dtype=np.int64)
        combined = signature * (int(codes.max(initial=0)) + 1) + codes
        signature = np.asarray(
            pc.dictionary_encode(pa.array(combined, pa.int64())).indices, dtype=np.int64
        )
    _, first_row = np.unique(signature, return_index=True)
    distinct = frame.take(pa.array(first_row, pa.int64()))
    costs = [_estimate_row(row) for row in distinct.select(list(_SIGNATURE_COLUMNS)).to_pylist()]
    per_signature = pa.table(
        {
            "family": [c.family if c else None for c in costs],
            "flops": [c.flops if c else None for c in costs],
            "read_bytes": [c.read_bytes if c else None for c in costs],
            "write_bytes": [c.write_bytes if c else None for c in costs],
            "precision": [c.precision if c else None for c in costs],
            "assumption": [c.assumption if c else None for c in costs],
        },
        schema=ESTIMATES_SCHEMA,
    )
    return per_signature.take(pa.array(signature, pa.int64()))


def _estimate_row(row: Mapping[str, object]) -> OpCost | None:
    name = row.get("name")
    if not isinstance(name, str):
        return None
    shapes, dtypes = row.get("shapes"), row.get("dtypes")
    arguments = parse_arguments(
        shapes if isinstance(shapes, str) else None, dtypes if isinstance(dtypes, str) else None
    )
    if arguments is None:
        return None
    out_shapes, out_dtypes = row.get("output_shapes"), row.get("output_dtypes")
    outputs = parse_arguments(
        out_shapes if isinstance(out_shapes, str) else None,
        out_dtypes if isinstance(out_dtypes, str) else None,
    )
    return estimate_op(
        name,
        arguments,
        outputs or (),
        ascend=bool(row.get("ascend")),
        packed_layout=bool(row.get("packed_layout")),
    )
