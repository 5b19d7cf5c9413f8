// Where a block's first parameter hook fires, for gradients a hook makes (DeepSpeed
// ZeRO-1/2: setup_buckets at the first hook, deepspeed/runtime/zero/stage_1_and_2.py,
// 0.19.8): once the first node with a parameter gradient has run backward, or, for
// PEFT's ParamWrapper on fused experts, once every wrapped grouped GEMM of the block
// has (_LoraFactorsProxy views the factors as the experts' forward starts: autograd
// reaches them last). StepModel::grads_made_by_hooks, BackwardStages::
// through_first_param_grads; docs/stacks.md, "DeepSpeed's ZeRO buffers".
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/predict/step_model.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

TEST_CASE("hooked gradients join a block's backward only after its first parameter's hook") {
  StepModel step;
  step.blocks.resize(1);
  BlockProfile& block = step.blocks[0];
  block.on_autograd = true;
  block.bwd_peak = 1000;
  block.bwd_peak_before_param_grads = 100;   // the loss
  block.bwd_peak_from_param_grads = 1000;    // the first GEMM with a gradient and the rest
  block.bwd_peak_through_first_param_grads = 1000;
  block.bwd_peak_after_first_param_grads = 200;
  step.grads_bwd = {500};
  step.grads_bwd_before = {0};
  const std::vector<BlockChoice> keep(1, BlockChoice::kKeep);
  CHECK(walk_step(step, keep, 0).bytes == 1500);  // autograd's own gradients: made in that GEMM
  step.grads_made_by_hooks = true;
  const StepPeak hooked = walk_step(step, keep, 0);
  CHECK(hooked.bytes == 1000);  // the GEMM runs before its hook: without the 500
  CHECK(hooked.gradients == 0);
}

// The oracle's run (bench/oracle/grid.json, hf-trainer[ds] experts-zero2): Qwen3-MoE
// with 2 layers, LoRA on attention and, through ParamWrapper, on the experts.
RunSettings qwen3_moe_zero2() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen3-moe-2l";
  s.gpu = "h200";
  s.stack = Stack::kHfTrainer;
  s.precision = Precision::kBf16Pure;
  s.micro_batch = 1;
  s.seq_len = 512;
  s.mode = TrainMode::kLora;
  s.lora.rank = 16;
  s.lora.dropout = 0;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  s.optimizer_impl = OptimizerImpl::kFused;
  s.gpus_per_node = 2;
  s.zero_stage = 2;
  s.checkpointing = CheckpointPolicy::kNone;
  return s;
}

TEST_CASE("ZeRO-2's buckets appear after every ParamWrapper GEMM of the last layer has run backward") {
  const Prediction p = predict_as_given(qwen3_moe_zero2());
  // Each layer's recomposed experts W' (gate_up and down, bf16), kept for their input
  // gradients: 128 x (1536 x 2048 + 2048 x 768) x 2 bytes.
  const int64_t recomposed = int64_t{128} * (1536 * 2048 + 2048 * 768) * 2;
  const int64_t buckets = int64_t{2} * 500'000'000 * 2;
  // The peak the oracle finds: layers.0's experts' backward, both buckets made by then
  // (one holding `.grad`s) and layers.1's W' released. Holding layers.1's W' beside the
  // buckets put it at +16.7%.
  CHECK(p.where.block_name == "model.layers.0");
  CHECK(p.where.phase == "backward");
  CHECK(p.peak_as_allocated.gradients + p.peak_as_allocated.zero_buffers >= buckets);
  CHECK(p.peak_as_allocated.activations < 2 * recomposed);
}

}  // namespace
}  // namespace headroom::planner
