// What an autograd Function keeps on ctx outside save_for_backward lives as long as
// its node, which the graph holds until the whole backward is done: bitsandbytes
// 0.43.1's MatMul4Bit.forward sets ctx.tensors = (A, B)
// (bitsandbytes/autograd/_functions.py), and torch 2.11's PyNode::release_variables
// (torch/csrc/autograd/python_function.cpp) clears saved_variables only. A later
// block's 4-bit linears' inputs are still live while an earlier block runs backward
// (StepModel::ctx_held; docs/memory-model.md, "Categories at the peak": "A tensor autograd keeps for
// backward").
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "planner/predict/step_model.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// Two blocks; the first's backward is the larger.
StepModel two_blocks() {
  StepModel step;
  step.blocks.resize(2);
  for (BlockProfile& block : step.blocks) {
    block.on_autograd = true;
    block.keep = 100;
    block.bwd_peak_saved = 100;
  }
  step.blocks[0].bwd_peak = 450;
  step.blocks[1].bwd_peak = 300;
  step.grads_bwd = {0, 0};
  return step;
}

TEST_CASE("a later block's ctx-held inputs stay through an earlier block's backward") {
  StepModel step = two_blocks();
  const std::vector<BlockChoice> keep(2, BlockChoice::kKeep);
  const StepPeak without = walk_step(step, keep, 0);
  step.ctx_held = {30, 50};
  const StepPeak with = walk_step(step, keep, 0);
  CHECK(with.block == 0);
  CHECK(with.phase == "backward");
  // The second block's 50 only: the first block's own are among its saved bytes.
  CHECK(with.bytes - without.bytes == 50);
  CHECK(with.activations - without.activations == 50);
}

TEST_CASE("Mixtral-2L QLoRA under bitsandbytes 0.43.1 peaks in layer 0's backward with layer 1's inputs held") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/mixtral-2l/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kQlora;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3"};
  s.lora.dropout = 0.0;
  s.kbit_prep = KbitPrep::kNone;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlock;
  s.optimizer_impl = OptimizerImpl::kForeach;
  s.versions = {{"transformers", "4.44.2"}, {"torch", "2.11.0"}, {"peft", "0.12.0"}, {"accelerate", "0.34.2"},
                {"bitsandbytes", "0.43.1"}};
  const Prediction p = predict_as_given(s);
  // The oracle (bench/oracle grid, hf-trainer[hf4bnb43]/mixtral-2l/qlora/bf16/non-reentrant/
  // b1s512/tf4-experts): 2,688,784,540 bytes in layer 0's backward, with layer 1's LoRA
  // gradients (30,015,488) and its 4-bit linears' inputs (8 experts' w2 and w1/w3
  // inputs) live. Without them held headroom peaked in layer 1's backward, 2.4% under.
  CHECK(p.where.block_name == "model.layers.0");
  CHECK(p.where.phase == "backward");
  MESSAGE("gradients at the peak " << p.peak_as_allocated.gradients << " B, peak " << p.peak_allocated << " B");
  CHECK(std::abs(p.peak_as_allocated.gradients - 30015488) <= 30015488 * 3 / 100);
  CHECK(std::abs(static_cast<double>(p.peak_allocated - p.peak.workspaces) - 2688784540.0) < 2688784540.0 * 0.02);
}

}  // namespace
}  // namespace headroom::planner
