"""FLOPs/bytes estimator op by op against hand calculations, the roofline and the device table."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis.roofline import (
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
    OpCost,
    Tensor,
    dtype_size,
    estimate_op,
    estimate_table,
    op_family,
    parse_arguments,
    precision_of,
    roofline,
)
from perfledger.model import devices


def cost(
    name: str,
    shapes: str,
    dtypes: str,
    out_shapes: str | None = None,
    out_dtypes: str | None = None,
    **kw: bool,
) -> OpCost | None:
    arguments = parse_arguments(shapes, dtypes)
    assert arguments is not None
    outputs = parse_arguments(out_shapes, out_dtypes) if out_shapes else ()
    return estimate_op(name, arguments, outputs or (), **kw)


def check(c: OpCost | None, family: str, flops: float, read: float, write: float) -> OpCost:
    assert c is not None
    assert (c.family, c.flops, c.read_bytes, c.write_bytes) == (family, flops, read, write)
    return c


# --- parsing ---------------------------------------------------------------------------------


def test_parse_pytorch_arguments() -> None:
    args = parse_arguments(
        "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [[2, 3], [4, 3]], []]",
        '["float", "c10::BFloat16", "", "Scalar", "TensorList", "float"]',
    )
    assert args == (
        Tensor((32, 3, 224, 224), "float"),
        Tensor((64, 3, 7, 7), "c10::BFloat16"),
        None,  # absent optional
        None,  # a scalar
        (Tensor((2, 3)), Tensor((4, 3))),  # tensor list: element type not recorded
        Tensor((), "float"),  # a 0-d tensor: empty dims but a tensor type
    )
    assert args[5].numel == 1  # type: ignore[union-attr]
    assert parse_arguments(None, None) is None
    assert parse_arguments("not json [", "[]") is None


def test_parse_ascend_arguments() -> None:
    args = parse_arguments('32,1,224,224,8;121,4,16,8;;"64"', "FLOAT;FLOAT16;;DT_BF16")
    assert args == (
        Tensor((32, 1, 224, 224, 8), "FLOAT"),
        Tensor((121, 4, 16, 8), "FLOAT16"),
        None,
        Tensor((64,), "DT_BF16"),
    )
    assert parse_arguments("NULL", "NULL") is None
    assert parse_arguments("a,b", "FLOAT") is None


def test_dtype_sizes_and_precisions() -> None:
    assert [dtype_size(d) for d in ("float", "c10::Half", "c10::BFloat16", "long int", "bool")] == [
        4,
        2,
        2,
        8,
        1,
    ]
    assert [dtype_size(d) for d in ("FLOAT", "FLOAT16", "INT64", "DT_BF16", "Scalar", None)] == [
        4,
        2,
        8,
        2,
        None,
        None,
    ]
    # PyTorch spells a non-tensor argument's type capitalised, a tensor's in lower case
    assert (dtype_size("Int"), dtype_size("int"), dtype_size("Bool")) == (None, 4, None)
    assert precision_of("float") == devices.FP32
    assert precision_of("c10::BFloat16") == devices.BF16
    assert precision_of("FLOAT16") == devices.FP16
    assert precision_of("long int") is None


def test_families() -> None:
    assert op_family("aten::add_") == ELEMENTWISE
    assert op_family("aten::addmm") == MATMUL
    assert op_family("aten::transpose") == VIEW  # a view in PyTorch: no kernel, no bytes
    assert op_family("Transpose", ascend=True) == LAYOUT  # a kernel on Ascend
    assert op_family("MatMulV2", ascend=True) == MATMUL
    assert op_family("SoftmaxV2", ascend=True) == NORMALIZATION
    assert op_family("triton_poi_fused_add_cos_sin_0") == ELEMENTWISE
    assert op_family("triton_red_fused_sum_1") == REDUCTION
    assert op_family("aten::copy_") == LAYOUT
    assert op_family("aten::zero_") == FILL
    assert op_family("aten::_softmax") == NORMALIZATION
    assert op_family("my_custom::op") is None


# --- matmul family ---------------------------------------------------------------------------


def test_mm() -> None:
    c = cost("aten::mm", "[[64, 128], [128, 256]]", '["float", "float"]')
    # 2·M·K·N; reads A (M·K) and B (K·N), writes M·N, 4 bytes each
    check(c, MATMUL, 2 * 64 * 128 * 256, (64 * 128 + 128 * 256) * 4, 64 * 256 * 4)
    assert c is not None and c.precision == devices.FP32


def test_addmm_adds_the_bias() -> None:
    c = cost(
        "aten::addmm",
        "[[256], [64, 128], [128, 256], [], []]",
        '["float", "float", "float", "Scalar", "Scalar"]',
    )
    check(c, MATMUL, 2 * 64 * 128 * 256 + 64 * 256, (256 + 64 * 128 + 128 * 256) * 4, 64 * 256 * 4)


def test_bmm_bf16() -> None:
    c = cost("aten::bmm", "[[8, 32, 64], [8, 64, 16]]", '["c10::BFloat16", "c10::BFloat16"]')
    check(c, MATMUL, 2 * 8 * 32 * 64 * 16, (8 * 32 * 64 + 8 * 64 * 16) * 2, 8 * 32 * 16 * 2)
    assert c is not None and c.precision == devices.BF16


def test_matmul_broadcasts_batch_dims() -> None:
    c = cost("aten::matmul", "[[4, 1, 10, 20], [3, 20, 5]]", '["float", "float"]')
    batch = 4 * 3  # (4, 1) and (3,) broadcast to (4, 3)
    check(c, MATMUL, 2 * batch * 10 * 20 * 5, (4 * 10 * 20 + 3 * 20 * 5) * 4, batch * 10 * 5 * 4)


def test_matmul_vector_operand() -> None:
    c = cost("aten::matmul", "[[10, 20], [20]]", '["float", "float"]')
    check(c, MATMUL, 2 * 10 * 20, (200 + 20) * 4, 10 * 4)


def test_linear_folds_leading_dims() -> None:
    c = cost(
        "aten::linear",
        "[[32, 16, 128], [64, 128], [64]]",
        '["c10::Half", "c10::Half", "c10::Half"]',
    )
    rows = 32 * 16
    check(
        c, MATMUL, 2 * rows * 128 * 64 + rows * 64, (rows * 128 + 64 * 128 + 64) * 2, rows * 64 * 2
    )


def test_ascend_matmul_with_transposed_operand() -> None:
    # B stored as [N, K]: K is the dimension the operands share
    c = cost("MatMulV2", "1024,512;256,512", "FLOAT16;FLOAT16", "1024,256", "FLOAT16", ascend=True)
    check(c, MATMUL, 2 * 1024 * 512 * 256, (1024 * 512 + 256 * 512) * 2, 1024 * 256 * 2)


def test_matmul_shapes_that_do_not_fit() -> None:
    assert cost("aten::mm", "[[64, 128], [100, 256]]", '["float", "float"]') is None
    assert (
        cost("MatMulV2", "64,128;128,256", "FLOAT16;FLOAT16", ascend=True, packed_layout=True)
        is None
    )


# --- convolution -----------------------------------------------------------------------------


def test_conv2d_without_output_size_assumes_same_size() -> None:
    c = cost(
        "aten::conv2d",
        "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], []]",
        '["float", "float", "", "GenericList", "GenericList", "GenericList", "Int"]',
    )
    flops = 2 * 32 * 64 * (224 * 224) * 3 * (7 * 7)
    check(c, CONV, flops, (32 * 3 * 224 * 224 + 64 * 3 * 49) * 4, 32 * 64 * 224 * 224 * 4)
    assert c is not None and c.assumption is not None and "stride" in c.assumption


def test_conv_with_recorded_output_and_bias() -> None:
    c = cost(
        "Conv2D", "8,16,32,32;32,4,3,3;32", "FLOAT;FLOAT;FLOAT", "8,32,16,16", "FLOAT", ascend=True
    )
    # grouped: the weight's second dim (C / groups = 4) is what each output reads
    flops = 2 * 8 * 32 * (16 * 16) * 4 * 9 + 8 * 32 * (16 * 16)
    check(c, CONV, flops, (8 * 16 * 32 * 32 + 32 * 4 * 9 + 32) * 4, 8 * 32 * 16 * 16 * 4)
    assert c is not None and c.assumption is None


def test_convolution_backward() -> None:
    c = cost(
        "aten::convolution_backward",
        "[[8, 16, 10, 10], [8, 4, 20, 20], [16, 4, 3, 3], [], [], [], []]",
        '["float", "float", "float", "", "", "", ""]',
    )
    forward = 2 * 8 * 16 * 100 * 4 * 9
    check(
        c,
        CONV,
        2 * forward,
        (8 * 16 * 100 + 8 * 4 * 400 + 16 * 4 * 9) * 4,
        (8 * 4 * 400 + 16 * 4 * 9) * 4,
    )


def test_cudnn_backward_weight_is_not_estimable() -> None:
    # the kernel size is an int list, recorded as []
    assert (
        cost(
            "aten::cudnn_convolution_backward_weight",
            "[[], [8, 16, 10, 10], [8, 4, 20, 20], [], [], []]",
            '["GenericList", "float", "float", "", "", ""]',
        )
        is None
    )


def test_packed_ascend_conv_is_not_estimable() -> None:
    assert (
        cost(
            "Conv2D",
            "32,1,224,224,8;121,4,16,8;64",
            "FLOAT;FLOAT;FLOAT",
            ascend=True,
            packed_layout=True,
        )
        is None
    )


# --- attention -------------------------------------------------------------------------------


def test_sdpa() -> None:
    c = cost(
        "aten::_scaled_dot_product_flash_attention",
        "[[2, 8, 128, 64], [2, 8, 256, 64], [2, 8, 256, 32], [], []]",
        '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]',
    )
    batch = 16
    flops = 2 * batch * 128 * 256 * 64 + 2 * batch * 128 * 256 * 32
    read = (2 * 8 * 128 * 64 + 2 * 8 * 256 * 64 + 2 * 8 * 256 * 32) * 2
    check(c, ATTENTION, flops, read, batch * 128 * 32 * 2)


def test_flash_forward_takes_batch_length_heads_embed() -> None:
    c = cost(
        "aten::_flash_attention_forward",
        "[[2, 128, 8, 64], [2, 256, 8, 64], [2, 256, 8, 32]]",
        '["c10::Half", "c10::Half", "c10::Half"]',
    )
    flops = 2 * 16 * 128 * 256 * 64 + 2 * 16 * 128 * 256 * 32
    check(
        c,
        ATTENTION,
        flops,
        (2 * 128 * 8 * 64 + 2 * 256 * 8 * 64 + 2 * 256 * 8 * 32) * 2,
        16 * 128 * 32 * 2,
    )


def test_attention_backward() -> None:
    c = cost(
        "aten::_scaled_dot_product_flash_attention_backward",
        "[[1, 2, 16, 8], [1, 2, 16, 8], [1, 2, 16, 8], [1, 2, 16, 8], [1, 2, 16, 8]]",
        '["float", "float", "float", "float", "float"]',
    )
    forward = 2 * 2 * 16 * 16 * 8 * 2  # two matmuls of 2·batch·L·S·E
    qkv = 3 * 2 * 16 * 8 * 4
    output = 2 * 16 * 8 * 4
    check(c, ATTENTION, 2.5 * forward, qkv + 2 * output, qkv)


# --- memory-bound families -------------------------------------------------------------------


def test_elementwise_broadcast() -> None:
    c = cost("aten::add", "[[32, 1, 64], [1, 16, 64], []]", '["float", "float", "Scalar"]')
    out = 32 * 16 * 64
    check(c, ELEMENTWISE, out, (32 * 64 + 16 * 64) * 4, out * 4)


def test_inplace_elementwise() -> None:
    c = cost("aten::add_", "[[1024], [1024], []]", '["c10::BFloat16", "c10::BFloat16", "Scalar"]')
    check(c, ELEMENTWISE, 1024, 2 * 1024 * 2, 1024 * 2)


def test_fill_only_writes() -> None:
    check(cost("aten::fill_", "[[100, 100], []]", '["float", "Scalar"]'), FILL, 0, 0, 40_000)


def test_reduction_output_not_recorded() -> None:
    c = cost("aten::sum", "[[64, 1000], [], [], []]", '["float", "", "Scalar", ""]')
    check(c, REDUCTION, 64_000, 256_000, 0)
    assert c is not None and c.assumption is not None
    c = cost("ReduceSum", "64,1000", "FLOAT", "64", "FLOAT", ascend=True)
    check(c, REDUCTION, 64_000, 256_000, 256)


def test_softmax() -> None:
    c = cost("aten::_softmax", "[[16, 1024], [], []]", '["c10::Half", "Scalar", "Scalar"]')
    check(c, NORMALIZATION, 5 * 16 * 1024, 16 * 1024 * 2, 16 * 1024 * 2)


def test_copy_casts_into_the_destination_type() -> None:
    c = cost("aten::copy_", "[[1000], [1000], []]", '["c10::BFloat16", "float", "Scalar"]')
    check(c, LAYOUT, 0, 4000, 2000)


def test_ascend_cast_and_transdata_use_recorded_outputs() -> None:
    check(
        cost("Cast", "1,2049", "INT64", "1,2049", "INT32", ascend=True),
        LAYOUT,
        0,
        2049 * 8,
        2049 * 4,
    )
    # NCHW to NC1HWC0 pads the channels from 3 to 8: the padded output is what is written
    check(
        cost("TransData", "32,3,224,224", "FLOAT", "32,1,224,224,8", "FLOAT", ascend=True),
        LAYOUT,
        0,
        32 * 3 * 224 * 224 * 4,
        32 * 224 * 224 * 8 * 4,
    )


def test_contiguous_and_cast_without_target() -> None:
    check(cost("aten::contiguous", "[[128, 64], []]", '["float", ""]'), LAYOUT, 0, 32768, 32768)
    c = cost("aten::_to_copy", "[[128, 64], [], []]", '["float", "Scalar", ""]')
    check(c, LAYOUT, 0, 32768, 32768)
    assert c is not None and c.assumption is not None


def test_cat_of_untyped_tensor_list_is_not_estimable() -> None:
    assert cost("aten::cat", "[[[2, 3], [4, 3]], []]", '["TensorList", "Int"]') is None


def test_cat_reads_and_writes_every_input() -> None:
    c = cost("ConcatD", "2,3;4,3", "FLOAT;FLOAT", ascend=True)
    check(c, LAYOUT, 0, 18 * 4, 18 * 4)


def test_embedding() -> None:
    c = cost(
        "aten::embedding",
        "[[1000, 64], [32, 10], [], [], []]",
        '["float", "long int", "Scalar", "Scalar", "Scalar"]',
    )
    rows = 320 * 64 * 4
    check(c, GATHER, 0, rows + 320 * 8, rows)


def test_views_move_nothing_and_unknown_ops_have_no_estimate() -> None:
    check(
        cost("aten::transpose", "[[4, 8], [], []]", '["float", "Scalar", "Scalar"]'), VIEW, 0, 0, 0
    )
    assert cost("my::op", "[[4, 8]]", '["float"]') is None


# --- tables and the roofline -----------------------------------------------------------------


def test_estimate_table_keeps_row_order_and_estimates_each_signature() -> None:
    ops = pa.table(
        {
            "name": ["aten::mm", "my::op", "aten::mm", "aten::add", None],
            "shapes": ["[[2, 3], [3, 4]]", "[[1]]", "[[2, 3], [3, 4]]", "[[5], [5]]", None],
            "dtypes": [
                '["float", "float"]',
                '["float"]',
                '["float", "float"]',
                '["float", "float"]',
                None,
            ],
        }
    )
    table = estimate_table(ops)
    assert table.column("family").to_pylist() == [MATMUL, None, MATMUL, ELEMENTWISE, None]
    assert table.column("flops").to_pylist() == [48.0, None, 48.0, 5.0, None]
    assert table.column("read_bytes").to_pylist() == [(6 + 12) * 4, None, 72, 40, None]
    assert table.column("write_bytes").to_pylist() == [32, None, 32, 20, None]


def test_roofline_places_ops_on_either_side_of_the_ridge() -> None:
    point = roofline(
        flops=[1e6, 1e9, 0.0],
        nbytes=[1e6, 1e6, 4e6],
        time_ns=[2e5, 2e7, 8e5],
        peak_flops_per_ns=100.0,
        bytes_per_ns=10.0,
    )
    assert point.ridge.tolist() == [10.0, 10.0, 10.0]
    assert point.intensity.tolist() == [1.0, 1000.0, 0.0]
    assert point.memory_bound.tolist() == [True, False, True]
    # max(flops / peak, bytes / bandwidth)
    assert point.bound_ns.tolist() == [1e5, 1e7, 4e5]
    assert point.achieved_bytes_per_ns.tolist() == [5.0, 0.05, 5.0]
    assert np.allclose(point.achieved_flops_per_ns, [5.0, 50.0, 0.0])


# --- devices ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "memory", "units", "expected"),
    [
        ("Tesla V100-SXM2-16GB", 16 * 2**30, 80, "V100-SXM2"),
        ("Tesla V100-DGXS-32GB", 32 * 2**30, 80, "V100-SXM2"),
        ("Tesla V100-PCIE-32GB", 32 * 2**30, 80, "V100-PCIe"),
        ("NVIDIA A100-PG509-200", 42_297_524_224, 108, "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", 85_000_000_000, 108, "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", 85_000_000_000, 132, "H100-SXM"),
        ("NVIDIA H100 PCIe", 85_000_000_000, 114, "H100-PCIe"),
        ("NVIDIA H200", 150_000_000_000, 132, "H200-SXM"),
        ("AMD Radeon Graphics", 68_702_699_520, 104, "MI250-GCD"),
        ("AMD Instinct MI250X", 68_702_699_520, 110, "MI250X-GCD"),
        ("Ascend910B", None, None, "Ascend910B"),
        ("Ascend910B3", None, None, "Ascend910B"),
    ],
)
def test_device_recognition(
    name: str, memory: int | None, units: int | None, expected: str
) -> None:
    spec = devices.match_device(name, memory_bytes=memory, units=units)
    assert spec is not None and spec.name == expected


def test_unknown_devices() -> None:
    assert devices.match_device("ARTEMIS") is None
    assert devices.match_device("AMD Radeon Graphics", units=60) is None
    assert devices.match_device(None) is None


def test_device_from_meta() -> None:
    kineto = {
        "device_properties": [
            {"id": 0, "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34089730048, "numSms": 80}
        ]
    }
    spec = devices.device_from_meta(kineto)
    assert spec is not None and spec.memory_gbps == 900.0
    assert spec.peak_flops_per_ns(devices.FP16) == 125_000.0  # 125 TFLOP/s = 125e3 FLOP/ns
    assert spec.ridge_flops_per_byte(devices.FP32) == pytest.approx(15_700.0 / 900.0)
    ascend = devices.device_from_meta({"device_properties": {"name": "Ascend910B"}})
    assert ascend is not None and ascend.vendor == "ascend"
    assert devices.device_from_meta({}) is None
    assert devices.device_from_meta({"device_properties": None}) is None


def test_peak_fallbacks() -> None:
    v100 = devices.find_device("v100_sxm2")
    assert v100 is not None
    assert v100.peak_flops_per_ns(devices.BF16) == 125_000.0  # no BF16 on V100: FP16 rate
    assert v100.peak_flops_per_ns(None) == 15_700.0
    ascend = devices.find_device("ascend910b")
    assert ascend is not None
    assert ascend.peak_flops_per_ns(devices.FP32) == 313_000.0  # only the cube rate is published


def test_custom_device() -> None:
    spec = devices.custom_device(100.0, 2000.0)
    assert spec.peak_flops_per_ns(devices.FP32) == 100_000.0
    assert spec.memory_bytes_per_ns == 2000.0
    assert math.isnan(spec.host_link_gbps)
    a100 = devices.find_device("A100-40GB")
    assert a100 is not None
    only_bandwidth = devices.custom_device(math.nan, 1000.0, base=a100)
    assert only_bandwidth.peak_flops_per_ns(devices.BF16) == 312_000.0
    assert only_bandwidth.memory_gbps == 1000.0
    assert only_bandwidth.host_link_gbps == devices.PCIE4_X16
