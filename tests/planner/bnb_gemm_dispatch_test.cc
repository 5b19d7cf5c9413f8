// bitsandbytes' CUDA gemm_4bit dispatch (planner/mechanisms/bnb_gemm_dispatch.h): from 0.50.0
// MatMul4Bit.forward runs torch.ops.bitsandbytes.gemm_4bit, whose CUDA kernel
// (backends/cuda/ops.py) runs a fused kernel, allocating only its output, or
// _dequant_linear_fallback with a 16-bit [N, K] weight; backward dequantizes in every release.
// docs/stacks.md, "bitsandbytes releases".
#include <doctest/doctest.h>

#include <string>

#include "planner/mechanisms/bnb_gemm_dispatch.h"
#include "planner/settings/gpu_compute_capability.h"
#include "planner/settings/hardware.h"
#include "planner/settings/versions.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

using graph::DType;

// torch.cuda.get_device_properties' (major, minor, multi_processor_count).
constexpr GemmArch kH200{9, 0, 132};
constexpr GemmArch kA100{8, 0, 108};
constexpr GemmArch k3090{8, 6, 82};
constexpr GemmArch k4090{8, 9, 128};
constexpr GemmArch kB200{10, 0, 148};
constexpr GemmArch kT4{7, 5, 40};

bool fused(const GemmArch& arch, DType dtype, int64_t m, int64_t n, int64_t k) {
  return bnb_gemm_4bit_fused(arch, dtype, GemmShape{m, n, k, 64});
}

}  // namespace

// Each answer is bitsandbytes 0.50.2's own: _gemm_4bit_use_custom_cuda run with
// _gpu_dispatch_props answering for the GPU (1,119,744 (GPU, dtype, M, N, K) cases, 18 archs,
// all agreeing with this port when it was written).
TEST_CASE("gemm_4bit dispatch: known answers of bitsandbytes 0.50.2 per arch") {
  // Up to 4 rows the fused kernel always runs; past 1536 the fallback always does.
  CHECK(fused(kH200, DType::kBF16, 4, 14336, 4096));
  CHECK_FALSE(fused(k4090, DType::kBF16, 1537, 128, 128));
  // K not a multiple of the blocksize: the fallback.
  CHECK_FALSE(fused(k4090, DType::kBF16, 8, 4096, 4100));
  // Llama 3 8B's gate_proj (N 14336, K 4096): sm90 takes M <= 32 at >= 1 wave, sm89 M <= 128 at 224 blocks.
  CHECK(fused(kH200, DType::kBF16, 32, 14336, 4096));
  CHECK_FALSE(fused(kH200, DType::kBF16, 33, 14336, 4096));
  CHECK(fused(k4090, DType::kBF16, 128, 14336, 4096));
  CHECK_FALSE(fused(k4090, DType::kBF16, 129, 14336, 4096));
  CHECK(fused(kA100, DType::kBF16, 64, 14336, 4096));
  CHECK_FALSE(fused(kA100, DType::kBF16, 65, 14336, 4096));
  CHECK(fused(k3090, DType::kBF16, 128, 14336, 4096));
  CHECK_FALSE(fused(k3090, DType::kBF16, 129, 14336, 4096));
  // Its down_proj (N 4096, K 14336): sm90 falls back at every M past 4's floor but 5.
  CHECK(fused(kH200, DType::kBF16, 5, 4096, 14336));
  CHECK_FALSE(fused(kH200, DType::kBF16, 8, 4096, 14336));
  // fp32 input: SIMT only, M < 8. sm75 runs bf16 as SIMT too, fp16 on its tiers.
  CHECK(fused(k4090, DType::kF32, 7, 14336, 4096));
  CHECK_FALSE(fused(k4090, DType::kF32, 8, 14336, 4096));
  CHECK_FALSE(fused(kT4, DType::kBF16, 8, 14336, 4096));
  CHECK(fused(kT4, DType::kF16, 8, 14336, 4096));
  // sm100 exits first: >= 3 waves M <= 32.
  CHECK(fused(kB200, DType::kBF16, 32, 28672, 4096));
  CHECK_FALSE(fused(kB200, DType::kBF16, 33, 28672, 4096));
  // A small weight (N*K < 4M) with short K on HBM: the low-wave cap.
  CHECK(fused(kH200, DType::kBF16, 512, 2048, 256));
  CHECK_FALSE(fused(kH200, DType::kBF16, 513, 2048, 256));
}

TEST_CASE("every catalogued GPU has a compute capability, and the ids it holds are the catalogue's") {
  for (const GpuSpec& gpu : gpu_catalogue()) {
    CAPTURE(gpu.id);
    CHECK(compute_capability(gpu.id).has_value());
  }
  CHECK_FALSE(compute_capability("my-gpu").has_value());
  CHECK(compute_capability("h200")->major == 9);
  CHECK(compute_capability("4090")->minor == 9);
}

namespace {

// Llama 3.2 1B (H 2048, MLP 8192), QLoRA on q and v, bf16, B = 1, S = 64: M = 64.
RunSettings qlora_at_m64(const std::string& gpu, const std::string& bitsandbytes) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b";
  s.gpu = gpu;
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kQlora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 1;
  s.seq_len = 64;
  s.kbit_prep = KbitPrep::kNone;
  REQUIRE(parse_versions("transformers=5.23.0,torch=2.11.0,peft=0.21.2,bitsandbytes=" + bitsandbytes, "test",
                         s.versions).is_ok());
  return s;
}

const graph::Node& node_named(const graph::LayerGraph& graph, const std::string& name) {
  for (const graph::Node& node : graph.nodes) {
    if (node.name == name) return node;
  }
  FAIL("no node " << name);
  return graph.nodes.front();
}

constexpr int64_t kGateWeight = int64_t{2048} * 8192;  // gate_proj: N 8192, K 2048
// _dequant_linear_fallback's two fp32 absmax copies (absmax_dq and absmax_dq + offset), one
// value per 64 weights: 8 bytes each, as bf16 workspace elements 4.
constexpr int64_t kFallbackAbsmaxElements = kGateWeight / 64 * 8 / 2;
constexpr const char* kGate = "model.layers.4.mlp.gate_proj";
constexpr const char* kDown = "model.layers.4.mlp.down_proj";

}  // namespace

TEST_CASE("from 0.50 a forward the GPU runs fused holds no dequantized weight, its backward still does") {
  // (The fallback also holds its two fp32 absmax copies: kFallbackAbsmaxElements.)
  // RTX 4090 (sm89, 128 SMs), gate_proj at M = 64: 128 blocks at >= 0.8 wave, K < N: M <= 64 fused.
  const ModelContext fused_4090 = prepared_context(qlora_at_m64("4090", "0.50.2"));
  const graph::Node& gate = node_named(fused_4090.graph, kGate);
  CHECK(gate.workspace_elements.at(1, 64) == 0);
  CHECK(gate.backward_workspace().at(1, 64) == kGateWeight);
  // down_proj (N 2048, K 8192, 32 blocks, K >= 3N): SIMT wins only to M 12: the fallback's weight.
  CHECK(node_named(fused_4090.graph, kDown).workspace_elements.at(1, 64) == kGateWeight + kFallbackAbsmaxElements);
  // 0.49.2 dequantizes in every forward (and no fp32 absmax copies outlive its dequantize).
  const ModelContext old = prepared_context(qlora_at_m64("4090", "0.49.2"));
  CHECK(node_named(old.graph, kGate).workspace_elements.at(1, 64) == kGateWeight);
  // H200 (sm90, 132 SMs): 128 blocks are under one wave, K < N: M <= 16, so the fallback.
  const ModelContext h200 = prepared_context(qlora_at_m64("h200", "0.50.2"));
  CHECK(node_named(h200.graph, kGate).workspace_elements.at(1, 64) == kGateWeight + kFallbackAbsmaxElements);
  CHECK(node_named(h200.graph, kGate).backward_workspace().at(1, 64) == kGateWeight);
  // The peak: the 4090's forward lost the gate/up weights it no longer dequantizes.
  CHECK(predict_as_given(qlora_at_m64("4090", "0.50.2")).peak_allocated <=
        predict_as_given(qlora_at_m64("4090", "0.49.2")).peak_allocated);
}

TEST_CASE("a --gpu-mem or --gpu-file GPU takes the conservative answer: the dequantized weight") {
  RunSettings resized = qlora_at_m64("4090", "0.50.2");
  resized.gpu_memory_bytes = int64_t{24} << 30;
  CHECK(node_named(prepared_context(resized).graph, kGate).workspace_elements.at(1, 64) ==
        kGateWeight + kFallbackAbsmaxElements);
  RunSettings own = qlora_at_m64("4090", "0.50.2");
  own.gpu_spec = find_gpu("4090").value();
  CHECK(node_named(prepared_context(own).graph, kGate).workspace_elements.at(1, 64) ==
        kGateWeight + kFallbackAbsmaxElements);
}

}  // namespace headroom::planner
