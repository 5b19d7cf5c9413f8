// The rates the time model gives a GPU's kernels (docs/memory-model.md, "Time
// model"): GEMMs at the GPU's published matmul benchmark (Bekman's MAMF table:
// A100 SXM 271.2 of 312 TFLOPS, H100 SXM 794.5 of 989), FlashAttention-2 at its
// authors' figures per architecture (A100: 73% forward, 50% backward; H100: 35%),
// and a host AdamW step at the bytes its dtypes move.
#include <doctest/doctest.h>

#include <string>

#include "planner/time/block_profile.h"
#include "planner/predict/planner.h"
#include "planner/time/step_time.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr double kLaunchMs = 0.005;

int node_named(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].name == name) return static_cast<int>(n);
  }
  FAIL("no node " << name);
  return -1;
}

// Llama 3.2 1B in pure bf16 (or fp32) at B = 2, S = 1024 on `gpu`.
ModelContext llama_1b_on(const std::string& gpu, Precision precision = Precision::kBf16Pure) {
  RunSettings s = torchtune_llama_1b();
  s.gpu = gpu;
  s.precision = precision;
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  return context.value();
}

NodeTimes times_of(const ModelContext& c, const std::string& node) {
  return node_times(c.graph, c.analysis, node_named(c.graph, node), c.compute_dtype, 2, 1024, c.gpu, c.time_options);
}

}  // namespace

TEST_CASE("a large GEMM runs at the matmul rate published for its GPU") {
  // gate_proj: 2048 tokens x 2048 -> 8192, compute-bound on every GPU here. Its
  // 2048 x 8192 output is 512 tiles of 256 x 128, run in waves of one per SM
  // (planner/time/gemm_waves.h): 512 of 540 slots on the A100's 108 SMs, of 528 on the
  // H100's 132, all 512 on the 4090's 128, 512 of 588 on the A6000's 84.
  const std::string gemm = "model.layers.3.mlp.gate_proj";
  const ModelContext a100 = llama_1b_on("a100-80g");
  const ModelContext h100 = llama_1b_on("h100-sxm");
  const NodeTimes on_a100 = times_of(a100, gemm);
  const NodeTimes on_h100 = times_of(h100, gemm);
  CHECK(on_a100.fwd_flops == doctest::Approx(2.0 * 2048 * 2048 * 8192));
  CHECK(on_a100.fwd_ms - kLaunchMs == doctest::Approx(on_a100.fwd_flops / (271.2e12 * 512 / 540) * 1e3));
  // The table's 794.5 of 989, on the catalogue's 989.4 TFLOPS.
  CHECK(on_h100.fwd_ms - kLaunchMs ==
        doctest::Approx(on_h100.fwd_flops / (989.4e12 * 794.5 / 989 * 512 / 528) * 1e3));
  // The GeForce cards run above their spec clocks: the 4090 at 164.81 of 165.2 TFLOPS.
  const NodeTimes on_4090 = times_of(llama_1b_on("4090"), gemm);
  CHECK(on_4090.fwd_ms - kLaunchMs == doctest::Approx(on_4090.fwd_flops / (164.81e12) * 1e3));
  // No published benchmark for the A6000: the default 0.6 of its peak.
  const NodeTimes on_a6000 = times_of(llama_1b_on("a6000"), gemm);
  CHECK(on_a6000.fwd_ms - kLaunchMs == doctest::Approx(on_a6000.fwd_flops / (154.8e12 * 0.6 * 512 / 588) * 1e3));
}

TEST_CASE("the published matmul rate is for 16-bit GEMMs: fp32 training keeps the default") {
  const ModelContext fp32 = llama_1b_on("a100-80g", Precision::kFp32);
  CHECK(fp32.time_options.matmul_efficiency == 0.6);
  CHECK(fp32.time_options.attention_forward_efficiency == 0.0);
  CHECK(llama_1b_on("a100-80g").time_options.matmul_efficiency == doctest::Approx(271.2 / 312));
}

TEST_CASE("FlashAttention-2 reaches 73% of an A100 forward and 50% backward, 35% of an H100") {
  const std::string sdpa = "model.layers.3.self_attn.sdpa";
  const NodeTimes a100 = times_of(llama_1b_on("a100-80g"), sdpa);
  const NodeTimes h100 = times_of(llama_1b_on("h100-sxm"), sdpa);
  // Causal: half of 4 * S^2 * heads * head_dim per sample; backward 2.5x forward.
  CHECK(a100.fwd_flops == doctest::Approx(2.0 * 2 * 1024.0 * 1024 * 32 * 64));
  CHECK(a100.fwd_ms - kLaunchMs == doctest::Approx(a100.fwd_flops / (312e12 * 0.73) * 1e3));
  CHECK(a100.bwd_ms - 2 * kLaunchMs == doctest::Approx(a100.bwd_flops / (312e12 * 0.50) * 1e3));
  CHECK(h100.fwd_ms - kLaunchMs == doctest::Approx(h100.fwd_flops / (989.4e12 * 0.35) * 1e3));
  CHECK(h100.bwd_ms - 2 * kLaunchMs == doctest::Approx(h100.bwd_flops / (989.4e12 * 0.35) * 1e3));
}

TEST_CASE("a host AdamW step moves 28 B per parameter in fp32 and 14 B for torchao on a pure-bf16 model") {
  RunSettings zero_offload;
  zero_offload.precision = Precision::kBf16Mixed;
  zero_offload.offload_optimizer = Offload::kCpu;
  CHECK(host_adam_bytes_per_param(zero_offload) == 28);
  RunSettings torchao = zero_offload;
  torchao.cpu_offload = CpuOffloadImpl::kTorchao;
  torchao.precision = Precision::kBf16Pure;
  CHECK(host_adam_bytes_per_param(torchao) == 14);
  torchao.cpu_offload = CpuOffloadImpl::kTorchaoGradients;
  CHECK(host_adam_bytes_per_param(torchao) == 14);
  torchao.precision = Precision::kBf16Amp;  // fp32 weights under autocast: fp32 host copies
  CHECK(host_adam_bytes_per_param(torchao) == 28);

  // The step itself: 1e9 parameters at 14 B over 28 GB/s, plus their 16-bit copies
  // back over the host link.
  torchao.precision = Precision::kBf16Pure;
  torchao.gpu = "4090";
  GlobalConfig config;
  config.offload_optimizer = Offload::kCpu;
  ModelStates states;
  states.trainable_params = states.total_params = 1'000'000'000;
  const GpuSpec gpu = find_gpu("4090").value();
  const TimeBreakdown t = step_time(torchao, config, gpu, states, StepTimeInputs{});
  CHECK(t.optimizer_ms == doctest::Approx(14e9 / 28e9 * 1e3 + 2e9 / (gpu.host_link_gbps * 1e9) * 1e3));
}

}  // namespace headroom::planner
