// FSDP's mixed precision gathers PEFT's fp32 adapters in 16 bits
// (planner/mechanisms/fsdp_16_bit_gather.h): the Trainer's bf16=True under
// Accelerate's FSDP gives the plugin MixedPrecisionPolicy(param_dtype=bf16), so the
// forward computes on 16-bit unsharded adapters, with no cast of them or of the
// layer's input, and the all-gather moves 2 bytes an element. The figures are the
// meta-device oracle's (bench/oracle: hf-trainer/qwen3-moe-2l/lora/b1s512/experts-fsdp2).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/mechanisms/fsdp_16_bit_gather.h"
#include "planner/memory/state_bytes.h"
#include "planner/predict/model_context.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// LoRA on Qwen3-MoE's attention and fused experts under the Trainer's bf16, as the
// oracle's row runs it; `sharding` empty: one GPU.
RunSettings moe_experts_lora(std::optional<Sharding> sharding) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen3-moe-2l";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kLora;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.lora.rank = 16;
  s.lora.dropout = 0;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  s.versions = {{"transformers", "5.23.0"}, {"peft", "0.21.2"}, {"accelerate", "1.15.0"}, {"torch", "2.11.0"}};
  if (sharding) {
    s.gpus_per_node = 2;
    s.zero_stage = 3;
    s.sharding = sharding;
  }
  return s;
}

graph::LayerGraph graph_of(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  return context.value().graph;
}

int block_index(const graph::LayerGraph& graph, const std::string& name) {
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].name == name) return static_cast<int>(b);
  }
  FAIL("no block " << name);
  return -1;
}

const std::vector<std::string> kAdapterCasts = {
    "model.layers.0.self_attn.q_proj.adapter_cast_a", "model.layers.0.self_attn.q_proj.adapter_cast_b",
    "model.layers.0.self_attn.q_proj.adapter_input_cast", "model.layers.0.mlp.experts.gate_up_proj.lora_A_cast",
    "model.layers.0.mlp.experts.gate_up_proj.lora_B_cast", "model.layers.0.mlp.experts.down_proj.lora_A_cast"};

}  // namespace

TEST_CASE("Accelerate's FSDP2 under the Trainer's bf16 computes PEFT's fp32 adapters in bf16, uncast") {
  const RunSettings sharded = moe_experts_lora(Sharding::kFsdp2);
  CHECK(fsdp_gathers_in_16_bits(sharded));
  const graph::LayerGraph g = graph_of(sharded);
  // The oracle saves no 16-bit copy of an adapter or of an adapted linear's input.
  for (const std::string& cast : kAdapterCasts) CHECK_MESSAGE(g.find_tensor(cast) == nullptr, cast);
  // They are still stored and trained in fp32 (fp32 shards, gradients and AdamW states).
  const graph::Param* lora_a = find_param(g, "model.layers.0.mlp.experts.gate_up_proj.lora_A.weight");
  REQUIRE(lora_a != nullptr);
  CHECK(lora_a->dtype == graph::DType::kF32);
  // The all-gather is 16-bit: the oracle's flat all-gather output of a layer at world
  // size 2 is (643846400,) bfloat16, adapters included (every dim 0 even: no padding).
  CHECK(block_gathered_bytes(g, sharded)[block_index(g, "model.layers.0")] == int64_t{643846400} * 2);
  // One GPU: the Trainer's autocast casts the fp32 adapters, PEFT the input.
  const graph::LayerGraph single = graph_of(moe_experts_lora(std::nullopt));
  for (const std::string& cast : kAdapterCasts) CHECK_MESSAGE(single.find_tensor(cast) != nullptr, cast);
}

TEST_CASE("FSDP gathers in 16 bits under mixed precision or the Trainer's bf16, not without autocast") {
  RunSettings settings = moe_experts_lora(Sharding::kFsdp1);
  CHECK(fsdp_gathers_in_16_bits(settings));  // FSDP1's MixedPrecision, from the same mixed precision
  settings.autocast = false;                 // bf16=False: accelerate's mixed_precision "no"
  CHECK_FALSE(fsdp_gathers_in_16_bits(settings));
  RunSettings torchtune = moe_experts_lora(Sharding::kFsdp2);
  torchtune.stack = Stack::kTorchtune;  // fully_shard over its bf16 model, no policy
  CHECK_FALSE(fsdp_gathers_in_16_bits(torchtune));
  torchtune.precision = Precision::kBf16Mixed;  // MixedPrecisionPolicy(param_dtype=bf16)
  CHECK(fsdp_gathers_in_16_bits(torchtune));
  CHECK_FALSE(fsdp_gathers_in_16_bits(moe_experts_lora(std::nullopt)));
}

}  // namespace headroom::planner
