"""Short names of real kernels (H200, V100, A100 traces of tests/data): the function and what it
runs, without namespaces, template arguments of types or parameters."""

from __future__ import annotations

import pytest

from perfledger.analysis.kernel_names import SHORT_NAME_CHARS, short_kernel_name


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()()"
            " const::{lambda(float)#1}, std::array<char*, 2ul>, 4>(int)",
            "unrolled_elementwise_kernel<direct_copy_kernel_cuda>",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
            " std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*,"
            " 3ul>)",
            "vectorized_elementwise_kernel<CUDAFunctor_add>",
        ),
        (
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, "
            "at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, "
            "float, c10::BFloat16> > > >(at::native::ReduceOp<c10::BFloat16>)",
            "reduce_kernel<ReduceOp>",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
            "(anonymous namespace)::TensorListMetadata<1>, std::multiplies<float>, float>(x)",
            "multi_tensor_apply_kernel<TensorListMetadata>",
        ),
        (
            "void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int)",
            "wgrad_alg0_engine",
        ),
        (
            "cask_cudnn::computeWgradBOffsetsKernel(cask_cudnn::ComputeWgradBOffsetsParams)",
            "computeWgradBOffsetsKernel",
        ),
        # no C++ signature: the name as it is
        (
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
        ),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        ("aten::native_layer_norm_backward", "aten::native_layer_norm_backward"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        (
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        ),
    ],
)
def test_short_kernel_names(name: str, short: str) -> None:
    assert short_kernel_name(name) == short


def test_a_long_name_is_cut_with_an_ellipsis() -> None:
    short = short_kernel_name("x" * 300)
    assert len(short) == SHORT_NAME_CHARS and short.endswith("…")
