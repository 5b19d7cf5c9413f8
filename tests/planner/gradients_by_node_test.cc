// A block's own parameter gradients appear node by node as its backward walks it in
// reverse: autograd runs a parameter's AccumulateGrad as soon as the node that makes
// its gradient is done (torch 2.11 torch/csrc/autograd/function.h, NOTE [ Sequence
// Number]: AccumulateGrad's sequence_nr is UINT64_MAX; engine.h CompareNodeTaskTime),
// so a peak inside a block's backward holds only the gradients of the nodes already
// run (StepModel::grads_by_node, BlockProfile::bwd_points; docs/memory-model.md,
// section 3).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "planner/memory/model_states.h"
#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"
#include "tests/planner/two_node_block.h"

namespace headroom::planner {
namespace {

TEST_CASE("a peak inside a block's backward holds the gradients of the nodes already run only") {
  StepModel step = two_node_block();
  const std::vector<BlockChoice> keep(1, BlockChoice::kKeep);
  const StepPeak whole = walk_step(step, keep, 0);
  CHECK(whole.bytes == 1400);  // every gradient of the block at its largest node
  step.grads_by_node = true;
  const StepPeak by_node = walk_step(step, keep, 0);
  CHECK(by_node.bytes == 1100);  // the first node's own 100 only
  CHECK(by_node.gradients == 100);
  CHECK(by_node.activations == 500);
  // Heavier gradients move the peak to the second node, with all 400 made.
  step.blocks[0].bwd_points[1].bytes = 900;
  const StepPeak later = walk_step(step, keep, 0);
  CHECK(later.bytes == 1300);
  CHECK(later.gradients == 400);
  CHECK(later.activations == 200);
}

TEST_CASE("a block's gradients node by node add up to what its backward makes, in reverse forward order") {
  RunSettings s = hf_vit_b16(TrainMode::kFull);
  s.optimizer_impl = OptimizerImpl::kFused;
  const ModelContext context = prepared_context(s);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 32,
                                           context.seq_len, Accounting::kAllocated, context.gpu);
  const ModelStates states = model_states(context.graph, s, GlobalConfig{}, Accounting::kAllocated);
  for (size_t k = 0; k < profile.blocks.size(); ++k) {
    CAPTURE(k);
    CHECK(profile.blocks[k].own_grads == states.block_grads[k]);
  }
  // The last layer's backward starts at its output dense (3072 -> 768), whose weight
  // and bias gradients (bf16) are the first of the layer's to exist. Its point ties with
  // the activation's after it (the out_grad the residual add passes on is the dense's,
  // vit_head_backward_test.cc), which is kept: at most those gradients before it.
  const BlockProfile& last = profile.blocks[profile.blocks.size() - 2];
  REQUIRE(!last.bwd_points.empty());
  const int64_t output_dense = account(int64_t{768} * 3072 * 2, Accounting::kAllocated) +
                               account(768 * 2, Accounting::kAllocated);
  CHECK(last.bwd_points.front().made_before <= output_dense);
  CHECK(last.bwd_points.front().made_through <= 2 * output_dense);
  CHECK(last.bwd_points.back().made_through <= last.own_grads);
}

TEST_CASE("TRL reward Qwen2.5-0.5B at 2 x 1024: the last layer's backward peaks with its first gradients only") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kFull;
  s.micro_batch = 2;
  s.seq_len = 1024;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.recipe = Recipe::kReward;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  const Prediction p = predict_as_given(s);
  // The oracle (bench/oracle grid, trl-reward[trl]/qwen2.5-0.5b/full/none/b2s1024):
  // 8,703,719,384 bytes in model.layers.23's backward, 8,719,872 of them gradients
  // (the score head and the layer's down_proj); the whole layer's made it 28.4 MiB.
  CHECK(p.where.block_name == "model.layers.23");
  CHECK(p.where.phase == "backward");
  MESSAGE("gradients at the peak " << p.peak_as_allocated.gradients << " B, peak " << p.peak_allocated << " B");
  CHECK(std::abs(p.peak_as_allocated.gradients - 8719872) <= 8719872 * 3 / 100);
  CHECK(std::abs(static_cast<double>(p.peak_allocated - p.peak.workspaces) - 8703719384.0) < 8703719384.0 * 0.002);
}

}  // namespace
}  // namespace headroom::planner
