"""The kernel-name table (``analysis/kernel_classes.py``) on kernel names of the libraries the
real-trace corpus does not hold, each with what the kernel is (read from the library's naming
scheme or source); the corpus itself is checked against its raw files in
tests/real_traces/test_kernel_classes.py. And a real CPU profile's classes: each op's time in
its op's class."""

from __future__ import annotations

import pytest
import torch

import neuronscope as ns
from neuronscope.analysis.kernel_classes import kernel_class, op_class

NAMES = [
    # cuBLAS / cuBLASLt (Hopper xmma, Ampere tensor-core and SIMT GEMMs, GEMV, split-K's reduction)
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x5_tn", "gemm"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float const*, float*)", "gemm"),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, float*)", "gemm"),
    # CK (mangled), vLLM's ROCm skinny GEMM, vLLM's Triton fused MoE
    ("_ZN2ck27tensor_operation6device31kernel_gemm_xdl_cshuffle_v3INS_4GridwiseGemm", "gemm"),
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(int, int, int, __hip_bfloat16 const*)", "gemm"),
    ("fused_moe_kernel", "gemm"),
    # flash attention 2, cuDNN's SDPA, FlashInfer
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true>(Flash_fwd_params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "attention"),
    # torch's own kernels: softmax, layer norm, a fill (copy), a copy through casts, an add
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)", "softmax"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*)", "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>)", "copy"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}, std::array<char*, 2ul>, 4, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int)", "copy"),
    ("void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>, 4, at::native::memory::LoadWithoutCast, at::native::memory::StoreWithoutCast>(int, at::native::CUDAFunctor_add<c10::BFloat16>)", "elementwise"),
    ("Memcpy DtoH (Device -> Pinned)", "copy"),
    # Inductor: templates, persistent/loop reductions, pointwise copies
    ("triton_tem_fused_mm_0", "gemm"),
    ("triton_tem_fused_convolution_1", "conv"),
    ("triton_per_fused__softmax_0", "softmax"),
    ("triton_red_fused_native_layer_norm_0", "norm"),
    ("triton_red_fused_sum_2", "reduction"),
    ("triton_poi_fused_cat_clone_0", "copy"),
    ("triton_poi_fused_add_mul_sigmoid_3", "elementwise"),
    ("graph_0_cpp_fused_add_relu_0", "elementwise"),
    # collectives: RCCL/NCCL, vLLM's custom all-reduce (a "reduce" that is communication)
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)", "communication"),
    # NKI kernels are named after their Python functions
    ("nki_matmul_tiled_", "gemm"),
    ("flash_fwd", "attention"),
    ("allocated_fused_rms_norm_qkv", "norm"),
    # a sort says none of the classes
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int>(int*)", "other"),
]


@pytest.mark.parametrize("name, cls", NAMES, ids=[n[:48] for n, _ in NAMES])
def test_a_kernel_name_says_its_class(name, cls):
    assert kernel_class(name) == cls


def test_ops_take_their_work_models_family_and_wrappers_theirs():
    assert [op_class(n) for n in ("aten::addmm", "aten::linear", "aten::cudnn_convolution_backward_weight")] == [
        "gemm",
        "gemm",
        "conv",
    ]
    assert [op_class(n) for n in ("aten::_to_copy", "aten::cat", "record_param_comms", "vllm::moe_forward")] == [
        "copy",
        "copy",
        "communication",
        None,
    ]


def test_a_cpu_profile_puts_each_ops_time_in_its_class():
    lin = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    with ns.profile_neuron(name="classes") as run:
        for _ in range(3):
            torch.softmax(torch.relu(lin(x)), dim=-1).sum()
    s = run.summary
    dc = s.device_classes
    by_row = {r.name: r.self_device_time_us for r in s.rows}
    assert dc.total_us == pytest.approx(s.total_device_time_us)
    assert dc.by_class_us["gemm"] == pytest.approx(by_row["aten::addmm"] + by_row.get("aten::linear", 0.0))
    assert dc.by_class_us["elementwise"] == pytest.approx(by_row["aten::relu"] + by_row.get("aten::clamp_min", 0.0))
    assert dc.by_class_us["softmax"] == pytest.approx(by_row["aten::_softmax"] + by_row.get("aten::softmax", 0.0))
    assert dc.by_class_us["reduction"] == pytest.approx(by_row["aten::sum"])
    assert dc.outside_ops_us == {} and dc.graph_us == 0.0
    assert run.diagnosis.finding("device_time_by_class") is None  # a CPU op table names every op already
    assert "Device time by class: " in str(s)
