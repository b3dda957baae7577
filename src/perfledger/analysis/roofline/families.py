"""Operator families: which cost formula an operator name calls for.

PyTorch's ``aten::`` names, Ascend operator types and the Triton kernels torch.compile generates,
each mapped to one family (:mod:`perfledger.analysis.roofline.estimates` has the formulas).
Vendor knowledge kept as data: one table of names per family.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

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


def _family_tables() -> tuple[dict[str, str], dict[str, str]]:
    """(aten name -> family, Ascend operator type -> family).

    An aten name wins over an Ascend type of the same spelling: aten's ``transpose``,
    ``slice``, ``select`` and ``split`` are views, Ascend's are kernels. Ascend types are
    recognised by their capitalised spelling (:func:`op_family` with ``ascend=True``).
    """
    aten: dict[str, str] = {}
    ascend: dict[str, str] = {}
    for family, names in _FAMILY_NAMES.items():
        for name in names:
            ascend.setdefault(name, family)
            if family == VIEW or name not in aten:
                aten[name] = family
    for kernel in ("transpose", "slice", "select", "split", "expand"):
        ascend[kernel] = ELEMENTWISE if kernel == "select" else LAYOUT
    return aten, ascend


_ATEN_FAMILY, _ASCEND_FAMILY = _family_tables()

# Triton kernels generated by torch.compile: pointwise, reduction and persistent reduction.
_TRITON: Final = re.compile(r"^triton_(poi|red|per)_")


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
