"""Op classes of real kernel and operator names from CUDA, ROCm, Ascend and CPU traces."""

from __future__ import annotations

import pytest

from perfledger.analysis import opclass


@pytest.mark.parametrize(
    ("name", "kind", "host_op", "expected"),
    [
        # CUDA (Kineto traces of A100 / V100)
        ("ampere_sgemm_128x64_nn", "kernel", "aten::mm", "matmul"),
        ("volta_sgemm_32x32_sliced1x4_tn", "kernel", "CompiledFunction", "matmul"),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>(Params)",
            "kernel",
            "aten::bmm",
            "matmul",
        ),
        (
            "void splitKreduce_kernel<float, float, float, float, true, false, false>"
            "(cublasSplitKParams<float>, float const*, float const*, float*)",
            "kernel",
            "aten::mm",
            "matmul",
        ),
        (
            "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int*)",
            "kernel",
            "fbgemm::permute_sparse_features",
            "layout_copy",
        ),
        ("implicit_convolve_sgemm", "kernel", "aten::cudnn_convolution", "conv"),
        ("sm80_xmma_fprop_implicit_gemm_tf32f32", "kernel", None, "conv"),
        ("flash_fwd_kernel", "kernel", "aten::_flash_attention_forward", "attention"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
            " at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>)",
            "kernel",
            "aten::add",
            "elementwise",
        ),
        (
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, "
            "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>>>>",
            "kernel",
            "aten::sum",
            "reduction",
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::(anonymous namespace)::"
            "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}>",
            "kernel",
            "aten::copy_",
            "layout_copy",
        ),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2>",
            "kernel",
            "aten::cat",
            "layout_copy",
        ),
        # the kernel name says nothing: the host op does
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>",
            "kernel",
            "aten::native_layer_norm_backward",
            "reduction",
        ),
        ("triton_poi_fused_add_relu_0", "kernel", "CompiledFunction", "elementwise"),
        ("triton_red_fused_sum_1", "kernel", "CompiledFunction", "reduction"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "comm", None, "communication"),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", "aten::copy_", "memcpy"),
        ("Memset (Device)", "memset", None, "memset"),
        # CUDA 13 on an H200 (tests/data/kineto/h200): PyTorch 2.11's kernels carry
        # "std::array<char*, N>" (no "std" reduction), cuBLAS's Hopper GEMMs are "nvjet"
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
            " std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*,"
            " 3ul>)",
            "kernel",
            "aten::add_",
            "elementwise",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
            "kernel",
            None,
            "elementwise",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::"
            "bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
            "std::array<char*, 2ul> >(int, "
            "at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
            "std::array<char*, 2ul>)",
            "kernel",
            "aten::copy_",
            "layout_copy",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
            "(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::"
            "BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>",
            "kernel",
            None,
            "elementwise",
        ),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "kernel", None, "matmul"),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", "kernel", None, "matmul"),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, "
            "float, 32u, 32u, 256u, false, true, false>(long, long, float const*, float const*, "
            "float const*, float const*, float*, float*)",
            "kernel",
            None,
            "reduction",
        ),
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(int, "
            "float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, "
            "float*, long*)",
            "kernel",
            None,
            "reduction",
        ),
        (
            "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
            "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, "
            "float const*, float*)",
            "kernel",
            None,
            "layout_copy",
        ),
        (
            "void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, "
            "float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int,"
            " float, int, int, int, int)",
            "kernel",
            None,
            "conv",
        ),
        (
            "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_256x64_16x4"
            "_nhwc_unity_stride_align4>",
            "kernel",
            None,
            "conv",
        ),
        # part of cuDNN's attention backward: "convert" is no convolution; the host op says
        (
            "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)",
            "kernel",
            "aten::_cudnn_attention_backward",
            "attention",
        ),
        ("aten::std", "cpu_op", None, "reduction"),
        # Ascend (torch_npu kernel_details names: <aclnn API>_<kernel>_<op type>)
        ("aclnnMm_MatMulCommon_MatMulV2", "kernel", "aclnnMm", "matmul"),
        ("aclnnMm_MatMulCommon_MemSet", "kernel", "aclnnMm", "memset"),
        ("Conv2DBackpropFilter10", "kernel", "Conv2DBackpropFilter", "conv"),
        (
            "aclnnInplaceCopy_TensorMoveAiCore_TensorMove",
            "kernel",
            "aclnnInplaceCopy",
            "layout_copy",
        ),
        ("trans_TransData_12", "kernel", "Conv2DBackpropInput", "layout_copy"),
        (
            "aclnnAdaptiveAvgPool2d_TransposeAiCore_Transpose",
            "kernel",
            "aclnnAdaptiveAvgPool2d",
            "layout_copy",
        ),
        (
            "aclnnMaxPool2dWithMask_MaxPoolWithArgmaxV1AiCore_MaxPoolWithArgmaxV1",
            "kernel",
            "aclnnMaxPool2dWithMask",
            "reduction",
        ),
        ("ReduceSum7", "kernel", "ReduceSum", "reduction"),
        (
            "aclnnAdaptiveAvgPool2dBackward_AdaptiveAvgPool3dGradAiCore_AdaptiveAvgPool3dGrad",
            "kernel",
            "aclnnAdaptiveAvgPool2dBackward",
            "reduction",
        ),
        ("sm80_xmma_dgrad_implicit_gemm_indexed_tf32f32", "kernel", None, "conv"),
        ("aclnnMuls_MulAiCore_Mul", "kernel", "aclnnMuls", "elementwise"),
        ("aclnnThresholdBackward_ReluGrad_ReluGrad", "kernel", None, "elementwise"),
        ("aclnnLogSoftmax_LogSoftmaxAiCore_LogSoftmaxV2", "kernel", None, "reduction"),
        ("FlashAttentionScore", "kernel", None, "attention"),
        ("hcom_allReduce__586_0_1", "comm", "HcclAllreduce", "communication"),
        ("aclnnForeachAddListV2", "kernel", None, "elementwise"),
        # CPU operators
        ("aten::linear", "cpu_op", None, "matmul"),
        ("aten::mkldnn_convolution", "cpu_op", None, "conv"),
        ("aten::scaled_dot_product_attention", "cpu_op", None, "attention"),
        ("aten::relu_", "cpu_op", None, "elementwise"),
        ("aten::sub_", "cpu_op", None, "elementwise"),
        ("aten::native_batch_norm", "cpu_op", None, "reduction"),
        ("aten::max_pool2d_with_indices", "cpu_op", None, "reduction"),
        ("aten::_to_copy", "cpu_op", None, "layout_copy"),
        ("Optimizer.step#Adam.step", "cpu_op", None, "elementwise"),
        ("aten::empty", "cpu_op", None, "other"),
        ("void cub::DeviceRadixSortOnesweepKernel<long, int>", "kernel", None, "other"),
    ],
)
def test_op_class(name: str, kind: str, host_op: str | None, expected: str) -> None:
    assert opclass.op_class(name, kind, host_op) == expected


def test_vectorised_over_distinct_rows() -> None:
    classes = opclass.op_classes(["aclnnMm_MatMulCommon_MatMulV2", "x"], ["kernel", "memcpy"])
    assert classes.tolist() == ["matmul", "memcpy"]
    assert set(classes.tolist()) <= set(opclass.OP_CLASSES)
