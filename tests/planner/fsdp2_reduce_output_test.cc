// FSDP2's foreach_reduce frees a layer's unsharded gradients before it allocates the
// reduce output that becomes the layer's sharded gradient (torch 2.11
// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, unsharded_grads.clear()
// before reduce_scatter_comm.allocate): the walk holds the reduce-scatter input with the
// larger of the two, not both; and it keeps that input alive until the next group's
// post_backward (comm_ctx.reduce_scatter_state), so a layer's backward holds the input of
// the layer reduced before it (docs/memory-model.md, "FSDP2's unsharded gradients").
#include <doctest/doctest.h>

#include <vector>

#include "planner/predict/model_context.h"
#include "planner/predict/step_builder.h"
#include "tests/planner/fsdp_test_support.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kLayer = kSmallLlm.layer;
constexpr int64_t kHead = kSmallLlm.head;

}  // namespace

TEST_CASE("FSDP2 frees a layer's unsharded gradients before its reduce output exists") {
  for (int gpus : {2, 8}) {
    CAPTURE(gpus);
    const BuiltStep step = trainer_sharded_step(Sharding::kFsdp2, gpus);
    const int64_t unsharded = kLayer * 2;       // bf16
    const int64_t input = kLayer * 2;           // reduce_dtype = param_dtype, bf16
    const int64_t sharded = kLayer * 4 / gpus;  // fp32 shard
    REQUIRE(step.states.sharded_block_grads[1] == sharded);
    REQUIRE(step.states.reduce_scatter_block[1] == unsharded + input);
    const int64_t head = kHead * 2;  // the root's unsharded gradient, held to the final callback
    // layers.0: layers.1's sharded gradient and reduce-scatter input (held, below) beside
    // the larger of its own unsharded and sharded gradients, never both.
    CHECK(step.model.grads_bwd[1] == head + sharded + input + std::max(unsharded, sharded));
  }
}

TEST_CASE("FSDP2 holds the reduce-scatter input of the layer reduced before, not its own") {
  for (int gpus : {2, 8}) {
    CAPTURE(gpus);
    const BuiltStep step = trainer_sharded_step(Sharding::kFsdp2, gpus);
    const int64_t unsharded = kLayer * 2;
    const int64_t input = kLayer * 2;
    const int64_t sharded = kLayer * 4 / gpus;
    const int64_t head = kHead * 2;
    // layers.1 runs backward first: no reduce-scatter input is alive yet.
    CHECK(step.model.grads_bwd[2] == head + std::max(unsharded, sharded));
    CHECK(step.model.grads_bwd_before[2] == head);  // its own unsharded gradients not made yet
    // Each block holds the input of the layer above it; the embeddings' backward holds
    // layers.0's until the final callback, whose root reduce comes after it.
    const int64_t root = step.states.fsdp2_root_reduce_scatter;
    CHECK(step.model.reduce_input_bwd == std::vector<int64_t>{std::max(input, root), input, 0, 0});
  }
}

}  // namespace headroom::planner

namespace headroom::planner {
namespace {

// torchtitan's Llama 3.1 8B on 8 ranks (FSDP2, bf16 parameters, fp32 reduce).
RunSettings torchtitan_llama_8b() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/bench/accuracy/models/llama-3.1-8b/config.json";
  s.gpu = "h100-sxm";
  s.precision = Precision::kBf16Mixed;
  s.micro_batch = 1;
  s.seq_len = 2048;
  s.gpus_per_node = 8;
  s.zero_stage = 3;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.stack = Stack::kTorchtitan;
  return s;
}

// The first sample under `label` and the one before it.
std::pair<int64_t, int64_t> around_first(const Simulation& simulation, const std::string& label) {
  for (size_t i = 1; i < simulation.memory.size(); ++i) {
    if (simulation.memory[i].label == label) return {simulation.memory[i - 1].allocated, simulation.memory[i].allocated};
  }
  FAIL("no sample labelled " << label);
  return {0, 0};
}

}  // namespace

TEST_CASE("the simulator holds FSDP2's reduce-scatter input until the next group's reduce, as the walk does") {
  const Simulation simulation = simulate_as_given(torchtitan_llama_8b());
  const int64_t layer = 218'112'000;  // Llama 3.1 8B: one decoder layer's parameters
  // layers.0's reduce first drops layers.1's fp32 input, held since layers.1's backward.
  const auto [before, dropped] = around_first(simulation, "reduce-scatter model.layers.0");
  CHECK(before - dropped == layer * 4);
}

}  // namespace headroom::planner
