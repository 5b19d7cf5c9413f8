// Test support for the FSDP suites: a graph shaped like a causal LM (embeddings, two
// layers, a head that is the largest block), and a run simulated exactly as given with
// every memory sample kept, to read the allocated bytes after a labelled event.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/predict/model_context.h"
#include "planner/predict/planner.h"
#include "planner/predict/simulator.h"
#include "planner/predict/step_builder.h"
#include "planner/time/block_profile.h"

namespace headroom::planner {

// Element counts of the four blocks of llm_shaped().
struct LlmShape {
  int64_t embed = int64_t{1} << 26;
  int64_t layer = int64_t{1} << 27;
  int64_t head = int64_t{1} << 28;
};
// The state-accounting suites' smaller shape: embeddings and head 2^24, layers 2^25.
inline constexpr LlmShape kSmallLlm{int64_t{1} << 24, int64_t{1} << 25, int64_t{1} << 24};

// embeddings (2^26 elements), two layers of 2^27 and a head of 2^28 by default, as a
// 128k-vocabulary head is next to a Llama layer; `tied`: the head's weight is the
// embeddings'; `lora_adapter` > 0: every weight frozen and each layer with a trainable
// fp32 adapter of that many elements.
inline graph::LayerGraph llm_shaped(bool tied = false, const LlmShape& shape = {}, int64_t lora_adapter = 0) {
  graph::LayerGraph graph;
  graph.name = "llm-shaped";
  graph.blocks = {{"embeddings", "embedding", false},
                  {"layers.0", "dense", true},
                  {"layers.1", "dense", true},
                  {"head", "lm_head", false}};
  const int64_t elements[] = {shape.embed, shape.layer, shape.layer, shape.head};
  for (int b = 0; b < 4; ++b) {
    graph::Node node;
    node.name = graph.blocks[b].name + ".w";
    node.op = "linear";
    node.block = b;
    const std::string tied_to = tied && b == 3 ? "embeddings.w.weight" : "";
    node.params.push_back({node.name + ".weight", {elements[b]}, graph::DType::kBF16, lora_adapter == 0, tied_to});
    if (lora_adapter > 0 && graph.blocks[b].checkpointable) {
      node.params.push_back({node.name + ".lora_A.weight", {lora_adapter}, graph::DType::kF32, true, ""});
    }
    graph.nodes.push_back(node);
  }
  return graph;
}

inline Simulation simulate_as_given(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  Result<std::vector<BlockChoice>> blocks = user_block_choices(context.value(), settings);
  REQUIRE(blocks.is_ok());
  SimulatorOptions options;
  options.record_events = false;
  options.max_memory_samples = 1 << 20;  // keep every sample
  return simulate(context.value(), settings, user_config(settings), blocks.value(), options);
}

// The Trainer's step over llm_shaped(false, kSmallLlm), a full fine-tune in pure bf16
// (Accelerate upcasts the shards to fp32; the all-gather, the unsharded gradients and
// the reduce stay bf16), sharded at ZeRO-3 by `sharding` over `gpus` ranks.
inline BuiltStep trainer_sharded_step(Sharding sharding, int gpus) {
  RunSettings settings;
  settings.stack = Stack::kHfTrainer;
  settings.precision = Precision::kBf16Pure;
  settings.mode = TrainMode::kFull;
  settings.gpus_per_node = gpus;
  settings.zero_stage = 3;
  settings.sharding = sharding;
  ModelContext context;
  context.graph = llm_shaped(false, kSmallLlm);
  context.gpu.cublas_workspace_bytes = 0;
  StepProfile profile;
  profile.blocks.resize(context.graph.blocks.size());
  GlobalConfig config;
  config.zero_stage = 3;
  return build_step(context, settings, config, profile, Accounting::kAllocated);
}

// The allocated bytes after the last sample labelled `label`.
inline int64_t allocated_after(const Simulation& simulation, const std::string& label) {
  int64_t last = -1;
  for (const MemorySample& sample : simulation.memory) {
    if (sample.label == label) last = sample.allocated;
  }
  REQUIRE_MESSAGE(last >= 0, "no sample labelled " << label);
  return last;
}

}  // namespace headroom::planner
