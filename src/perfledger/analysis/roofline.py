"""FLOPs and bytes of an operator from its input shapes and types, and where it sits on a roofline.

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

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from perfledger.model import devices

Shape = tuple[int, ...]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Operator families.
MATMUL: Final = "matmul"
CONV: Final = "conv"
ATTENTION: Final = "attention"
ELEMENTWISE: Final = "elementwise"
FILL: Final = "fill"
REDUCTION: Final = "reduction"
NORMALIZATION: Final = "normalization"
LAYOUT: Final = "layout"
GATHER: Final = "gather"
VIEW: Final = "view"
FAMILIES: Final = (
    MATMUL,
    CONV,
    ATTENTION,
    ELEMENTWISE,
    FILL,
    REDUCTION,
    NORMALIZATION,
    LAYOUT,
    GATHER,
    VIEW,
)
# Families whose work is only moving data: no math to speak of.
DATA_MOVEMENT_FAMILIES: Final = frozenset({LAYOUT, GATHER, FILL})
NORMALIZATION_FLOPS_PER_ELEMENT: Final = 5.0
ATTENTION_BACKWARD_FACTOR: Final = 2.5

# Element sizes, keyed by the lower-cased type names PyTorch (``Input type``), torch_npu and
# msprof write.
DTYPE_SIZES: Final[Mapping[str, int]] = {
    "float": 4,
    "float32": 4,
    "torch.float32": 4,
    "fp32": 4,
    "dt_float": 4,
    "double": 8,
    "float64": 8,
    "dt_double": 8,
    "c10::half": 2,
    "half": 2,
    "float16": 2,
    "fp16": 2,
    "dt_float16": 2,
    "c10::bfloat16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "dt_bf16": 2,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
    "c10::float8_e4m3fnuz": 1,
    "c10::float8_e5m2fnuz": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "hifloat8": 1,
    "long int": 8,
    "long": 8,
    "int64": 8,
    "dt_int64": 8,
    "unsigned long": 8,
    "uint64": 8,
    "int": 4,
    "int32": 4,
    "dt_int32": 4,
    "unsigned int": 4,
    "uint32": 4,
    "short int": 2,
    "short": 2,
    "int16": 2,
    "uint16": 2,
    "signed char": 1,
    "int8": 1,
    "dt_int8": 1,
    "unsigned char": 1,
    "uint8": 1,
    "dt_uint8": 1,
    "bool": 1,
    "dt_bool": 1,
    "c10::complex<float>": 8,
    "complex64": 8,
    "c10::complex<double>": 16,
    "complex128": 16,
}
# Math precision of a type (for the peak to compare with).
_PRECISION: Final[Mapping[str, str]] = {
    **dict.fromkeys(("float", "float32", "torch.float32", "fp32", "dt_float"), devices.FP32),
    **dict.fromkeys(("double", "float64", "dt_double"), devices.FP64),
    **dict.fromkeys(("c10::half", "half", "float16", "fp16", "dt_float16"), devices.FP16),
    **dict.fromkeys(("c10::bfloat16", "bfloat16", "bf16", "dt_bf16"), devices.BF16),
    **dict.fromkeys(
        (
            "c10::float8_e4m3fn",
            "c10::float8_e5m2",
            "c10::float8_e4m3fnuz",
            "c10::float8_e5m2fnuz",
            "float8_e4m3fn",
            "float8_e5m2",
            "hifloat8",
        ),
        devices.FP8,
    ),
    **dict.fromkeys(("signed char", "int8", "dt_int8"), devices.INT8),
}


# Operator names (namespace, case, a trailing in-place "_" and Ascend version suffixes
# removed: see :func:`op_key`) per family. Vendor knowledge as data.
def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_FAMILY_NAMES: Final[Mapping[str, tuple[str, ...]]] = {
    MATMUL: _words(
        """
        mm addmm bmm baddbmm addbmm matmul linear _addmm_activation addmv mv dot batchmatmul
        gemm _scaled_mm fused_linear
        """
    ),
    CONV: _words(
        """
        conv1d conv2d conv3d convolution _convolution cudnn_convolution miopen_convolution
        mkldnn_convolution _convolution_mode convolution_backward cudnn_convolution_backward
        cudnn_convolution_backward_input cudnn_convolution_backward_weight
        miopen_convolution_backward conv2dbackpropinput conv2dbackpropfilter
        conv3dbackpropinput conv3dbackpropfilter
        """
    ),
    ATTENTION: _words(
        """
        scaled_dot_product_attention _scaled_dot_product_flash_attention
        _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
        _flash_attention_forward _efficient_attention_forward
        _scaled_dot_product_flash_attention_backward
        _scaled_dot_product_efficient_attention_backward
        _scaled_dot_product_cudnn_attention_backward _flash_attention_backward
        _efficient_attention_backward
        """
    ),
    ELEMENTWISE: _words(
        """
        add sub rsub mul div neg abs relu relu6 gelu silu sigmoid tanh exp exp2 expm1 log log1p
        log2 sqrt rsqrt pow reciprocal sign floor ceil round trunc sin cos erf erfinv clamp
        clamp_min clamp_max clip threshold threshold_backward sigmoid_backward tanh_backward
        gelu_backward silu_backward hardtanh hardtanh_backward leaky_relu leaky_relu_backward
        elu elu_backward softplus mish hardswish hardsigmoid where masked_fill addcmul addcdiv
        lerp maximum minimum eq ne lt le gt ge logical_and logical_or logical_not bitwise_and
        bitwise_or bitwise_not nan_to_num native_dropout dropout native_dropout_backward square
        fmod remainder true_divide floor_divide mul_scalar muls adds realdiv divnonan relugrad
        gelugrad sigmoidgrad tanhgrad fastgelu fastgelugrad swish swishgrad silugrad axpy
        select greater less equal notequal lessequal greaterequal logicaland logicalor
        logicalnot neg powtensor dropoutdomask dropoutgenmask maskedfill onehot addcmul addcdiv
        applyadamw applyadam applyadamd
        """
    ),
    FILL: _words(
        """
        fill zero zeros_like ones_like full_like zeroslike oneslike memset tril triu
        """
    ),
    REDUCTION: _words(
        """
        sum mean amax amin max min prod norm linalg_vector_norm var std var_mean std_mean
        argmax argmin any all logsumexp reducesum reducemean reducemax reducemin reduceprod
        reduceall reduceany reducesumd reducemeand reducemaxd argmaxwithvalue argminwithvalue
        lpnorm
        """
    ),
    NORMALIZATION: _words(
        """
        softmax _softmax log_softmax _log_softmax _softmax_backward_data
        _log_softmax_backward_data layer_norm native_layer_norm native_layer_norm_backward
        batch_norm native_batch_norm native_batch_norm_backward cudnn_batch_norm
        cudnn_batch_norm_backward miopen_batch_norm miopen_batch_norm_backward
        _batch_norm_impl_index group_norm native_group_norm native_group_norm_backward rms_norm
        _fused_rms_norm _fused_rms_norm_backward softmaxgrad logsoftmaxgrad layernorm
        layernormgrad layernormbetagammabackprop layernormxbackprop rmsnorm rmsnormgrad
        bntrainingreduce bntrainingupdate bntrainingreducegrad bntrainingupdategrad batchnorm
        groupnorm softmaxcrossentropywithlogits nll_loss nll_loss_forward nll_loss_backward
        cross_entropy_loss
        """
    ),
    LAYOUT: _words(
        """
        copy _to_copy to contiguous clone cat _cat stack _copy_from _copy_from_and_resize
        index_put _index_put_impl narrow_copy slice_scatter select_scatter flip roll repeat
        cast transdata transpose transposed concat concatd pack tensormove identity viewcopy
        asstrided stridedslice stridedsliced slice sliced split splitd splitv splitvd tile
        broadcastto expand permute_copy transpose_copy unpack pad padd constant_pad_nd
        """
    ),
    GATHER: _words(
        """
        embedding embedding_dense_backward index_select gather gatherv gatherelements
        embeddingdensegrad index
        """
    ),
    VIEW: _words(
        """
        view reshape _reshape_alias _unsafe_view transpose permute t expand expand_as
        as_strided slice select narrow unsqueeze squeeze detach alias unflatten flatten split
        split_with_sizes chunk unbind view_as unfold diagonal numpy_t lift_fresh _view
        resolve_conj resolve_neg
        """
    ),
}

# An aten name wins over an Ascend type of the same spelling: aten's ``transpose``, ``slice``,
# ``select`` and ``split`` are views, Ascend's are kernels. Ascend types are recognised by
# their capitalised spelling (:func:`op_family` with ``ascend=True``).
_ATEN_FAMILY: Final[dict[str, str]] = {}
_ASCEND_FAMILY: Final[dict[str, str]] = {}
for _family, _names in _FAMILY_NAMES.items():
    for _name in _names:
        _ASCEND_FAMILY.setdefault(_name, _family)
        if _family == VIEW or _name not in _ATEN_FAMILY:
            _ATEN_FAMILY[_name] = _family
for _ascend_kernel in ("transpose", "slice", "select", "split", "expand"):
    _ASCEND_FAMILY[_ascend_kernel] = ELEMENTWISE if _ascend_kernel == "select" else LAYOUT

# Triton kernels generated by torch.compile: pointwise, reduction and persistent reduction.
_TRITON: Final = re.compile(r"^triton_(poi|red|per)_")
# Storage layouts of Ascend tensors whose shapes are not the logical ones (5-D and fractal
# formats): matmul and convolution formulas cannot use them.
_PACKED_FORMATS: Final = re.compile(r"NC1HWC0|FRACTAL|C1HWNCOC0|NDC1HWC0|FRACTAL_NZ", re.I)


@dataclass(frozen=True)
class Tensor:
    """One tensor argument: its shape and element type (None when not recorded)."""

    shape: Shape
    dtype: str | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def size(self) -> int | None:
        """Bytes per element, or None when the type is unknown."""
        return dtype_size(self.dtype)


Argument = Tensor | tuple[Tensor, ...] | None  # a tensor, a tensor list, or not a tensor


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


# PyTorch writes the type of a non-tensor argument capitalised ("Int", "Bool", "Double"),
# a tensor's element type in lower case ("int", "bool", "double"): the case matters there.
_SCALAR_TYPES: Final = frozenset(
    {"Int", "Bool", "Double", "Float", "Long", "Complex", "SymInt", "Scalar", "String"}
)


def dtype_size(dtype: str | None) -> int | None:
    """Bytes per element of a recorded type name, or None when it is not a tensor type."""
    if dtype is None or dtype.strip() in _SCALAR_TYPES:
        return None
    return DTYPE_SIZES.get(dtype.strip().lower())


def precision_of(dtype: str | None) -> str | None:
    """The math precision of a recorded type name (None for integer and unknown types)."""
    if dtype is None:
        return None
    return _PRECISION.get(dtype.strip().lower())


def op_key(name: str) -> str:
    """An operator name reduced for lookup: ``aten::add_`` → ``add``, ``MatMulV2`` → ``matmul``."""
    key = name.rsplit("::", 1)[-1].strip().lower()
    if key.endswith(".out"):
        key = key[: -len(".out")]
    if key.endswith("_") and not key.endswith("__"):
        key = key[:-1]  # in-place variant: add_ is add
    # Ascend operator versions: MatMulV2, SoftmaxV2, LayerNormV3, AddV2.
    return re.sub(r"v\d+$", "", key) if re.search(r"[a-z]v\d+$", key) else key


def op_family(name: str, *, ascend: bool = False) -> str | None:
    """The family of an operator name (PyTorch's ``aten::`` names, Ascend operator types)."""
    if _TRITON.match(name):
        return ELEMENTWISE if name.startswith("triton_poi_") else REDUCTION
    key = op_key(name)
    table = _ASCEND_FAMILY if ascend else _ATEN_FAMILY
    family = table.get(key)
    if family is None and key.startswith("_foreach_"):
        return None
    return family


def parse_arguments(shapes: str | None, dtypes: str | None) -> tuple[Argument, ...] | None:
    """The positional arguments of an operator from its recorded shapes and types.

    Accepts PyTorch's JSON lists and Ascend's ``;``-separated text. Returns None when the
    shapes are missing or unreadable.
    """
    if shapes is None:
        return None
    text = shapes.strip()
    if not text or text.upper() in ("NULL", "N/A"):
        return None
    types = _parse_dtypes(dtypes)
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            return None
        if not isinstance(parsed, list):
            return None
        return tuple(
            _json_argument(item, types[i] if i < len(types) else None)
            for i, item in enumerate(parsed)
        )
    arguments: list[Argument] = []
    for i, part in enumerate(text.split(";")):
        dtype = types[i] if i < len(types) else None
        part = part.strip().strip('"')
        if not part:
            arguments.append(None)
            continue
        try:
            dims = tuple(int(d) for d in part.split(","))
        except ValueError:
            return None
        arguments.append(Tensor(dims, dtype if dtype_size(dtype) else None))
    return tuple(arguments)


def _parse_dtypes(dtypes: str | None) -> list[str | None]:
    if dtypes is None:
        return []
    text = dtypes.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            return []
        return (
            [str(d) if d is not None else None for d in parsed] if isinstance(parsed, list) else []
        )
    return [part.strip().strip('"') or None for part in text.split(";")]


def _is_dims(item: object) -> bool:
    return isinstance(item, list) and all(isinstance(d, int) for d in item)


def _json_argument(item: object, dtype: str | None) -> Argument:
    known = dtype if dtype_size(dtype) else None
    if not isinstance(item, list):
        return None
    if _is_dims(item):
        dims = tuple(int(d) for d in item)
        if not dims and known is None:
            return None  # a scalar or an absent argument, not a 0-d tensor
        return Tensor(dims, known)
    if item and all(_is_dims(x) for x in item):
        # a tensor list: its element type is written once as "TensorList", so unknown
        return tuple(Tensor(tuple(int(d) for d in x), None) for x in item)
    return None


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
    frame = pa.table(columns).append_column(
        "position", pa.array(np.arange(ops.num_rows, dtype=np.int64))
    )
    order = ", ".join(f"{c} NULLS FIRST" for c in _SIGNATURE_COLUMNS)
    with duckdb.connect() as con:
        con.register("frame", frame)
        ranked = con.sql(
            f"SELECT position, dense_rank() OVER (ORDER BY {order}) - 1 AS signature "
            "FROM frame ORDER BY position"
        ).to_arrow_table()
    signature = np.asarray(ranked.column("signature"), dtype=np.int64)
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


def is_packed_layout(formats: str | None) -> bool:
    """Whether an Ascend ``Input Formats`` cell names a 5-D or fractal storage layout."""
    return bool(formats) and _PACKED_FORMATS.search(formats or "") is not None


@dataclass(frozen=True)
class Roofline:
    """Where each operator sits against a device's roofline (arrays aligned with the input).

    Attributes:
        intensity: flops per byte.
        ridge: the intensity where the device turns compute-bound, for each op's precision.
        memory_bound: intensity below the ridge.
        bound_ns: the shortest time the device allows, max(flops / peak, bytes / bandwidth).
        achieved_flops_per_ns, achieved_bytes_per_ns: what the measured time gives.
    """

    intensity: FloatArray
    ridge: FloatArray
    memory_bound: BoolArray
    bound_ns: FloatArray
    achieved_flops_per_ns: FloatArray
    achieved_bytes_per_ns: FloatArray


def roofline(
    flops: npt.ArrayLike,
    nbytes: npt.ArrayLike,
    time_ns: npt.ArrayLike,
    peak_flops_per_ns: npt.ArrayLike,
    bytes_per_ns: float,
) -> Roofline:
    """Place operators on the roofline of a device (vectorised over operators).

    ``peak_flops_per_ns`` may differ per operator (its math precision).
    """
    flops_a = np.asarray(flops, dtype=np.float64)
    bytes_a = np.asarray(nbytes, dtype=np.float64)
    time_a = np.asarray(time_ns, dtype=np.float64)
    peak = np.broadcast_to(np.asarray(peak_flops_per_ns, dtype=np.float64), flops_a.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(bytes_a > 0, flops_a / bytes_a, np.where(flops_a > 0, np.inf, 0.0))
        ridge = peak / bytes_per_ns
        bound_ns = np.maximum(flops_a / peak, bytes_a / bytes_per_ns)
        achieved_flops = np.where(time_a > 0, flops_a / time_a, np.nan)
        achieved_bytes = np.where(time_a > 0, bytes_a / time_a, np.nan)
    return Roofline(
        intensity=intensity,
        ridge=ridge,
        memory_bound=intensity < ridge,
        bound_ns=bound_ns,
        achieved_flops_per_ns=achieved_flops,
        achieved_bytes_per_ns=achieved_bytes,
    )
