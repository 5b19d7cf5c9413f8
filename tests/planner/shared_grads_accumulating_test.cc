// A tied weight's first partial held beside its `.grad` while micro-steps accumulate
// (planner/predict/shared_grads_accumulating.h; torch/csrc/autograd/input_buffer.cpp,
// functions/accumulate_grad.h). The oracle's optim2-accum rows: Llama-3.2-1B's tied
// 128256 x 2048 embedding, 0.49 GiB more at the embedding's backward.

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "models/zoo.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/model_states.h"
#include "planner/predict/prediction.h"
#include "planner/predict/shared_grads_accumulating.h"
#include "planner/predict/simulator.h"
#include "tests/planner/deepspeed_test_support.h"

namespace headroom::planner {

TEST_CASE("accumulating, a tied embedding's first partial is held from the head down to the embedding") {
  const graph::LayerGraph graph = models::build_zoo_model("gpt2", models::ZooOptions{}).value();
  int last_block = 0;
  for (const graph::Node& node : graph.nodes) last_block = std::max(last_block, node.block);
  const size_t n = static_cast<size_t>(last_block) + 1;
  RunSettings s;
  s.model = "gpt2";
  s.precision = Precision::kBf16Pure;
  GlobalConfig config;
  config.grad_accum = 4;
  const ModelStates states = model_states(graph, s, config, Accounting::kAllocated);
  const std::vector<int64_t> held = shared_grads_held_accumulating(graph, s, config, states, Accounting::kAllocated, n);
  const int64_t embedding = allocated_bytes(int64_t{50257} * 768 * 2);  // wte, bf16
  REQUIRE(held.size() == n);
  CHECK(held[0] == embedding);              // the embedding's own backward: buffer beside .grad
  CHECK(held[n / 2] == embedding);          // every block between
  CHECK(held[n - 1] == 0);                  // the head's block makes the partial at its end
  config.grad_accum = 1;                    // the buffer is the .grad to be
  const std::vector<int64_t> single = shared_grads_held_accumulating(graph, s, config, states, Accounting::kAllocated, n);
  CHECK(std::all_of(single.begin(), single.end(), [](int64_t b) { return b == 0; }));
}

}  // namespace headroom::planner

namespace headroom::planner {

// The oracle's hf-trainer/llama-3.2-1b/full/adamw_torch_fused/4/optim2-accum row: 10.68 GiB at
// the embedding's backward, 0.49 GiB (the tied 128256 x 2048 bf16 head partial) over the
// same run without accumulation; the allocator simulation holds the same buffer.
TEST_CASE("accumulating, Llama-3.2-1B's tied head partial adds to the walk and the simulation alike") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.mode = TrainMode::kFull;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  const auto walk_and_simulation = [](const RunSettings& settings) {
    Result<ModelContext> context = prepare_context(settings);
    REQUIRE_MESSAGE(context.is_ok(), context.message());
    const auto choices = user_block_choices(context.value(), settings);
    REQUIRE(choices.is_ok());
    const GlobalConfig config = user_config(settings);
    const Prediction walk = predict(context.value(), settings, config, choices.value(), false);
    const Simulation simulation = simulate(context.value(), settings, config, choices.value());
    return std::pair<int64_t, int64_t>{walk.peak_allocated, simulation.peak_live};
  };
  const auto [single_walk, single_simulation] = walk_and_simulation(s);
  s.grad_accum = 4;
  const auto [walk, simulation] = walk_and_simulation(s);
  CHECK(walk - single_walk == allocated_bytes(int64_t{128256} * 2048 * 2));
  CHECK(simulation - single_simulation == allocated_bytes(int64_t{128256} * 2048 * 2));
  CHECK(simulation - walk == single_simulation - single_walk);  // (128 KiB apart either way)
}

}  // namespace headroom::planner
