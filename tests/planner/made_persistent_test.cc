// Persistent tensors the model makes (RoPE's cos/sin tables: transformers 5.x
// LlamaModel.forward computes position_embeddings once, models/llama/modeling_llama.py,
// and hands them to every decoder layer) live only to the backward of the earliest
// layer reading them: the layers' saves and the checkpoint frames holding them are
// released there (torch 2.11 torch/csrc/autograd/engine.cpp, release_variables), and
// the model's forward frame is long gone. At the embeddings' backward and at the
// optimizer step they are dead (planner/time/made_persistent.h; docs/memory-model.md,
// "Made persistent tensors").
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/predict/step_model.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// Three blocks: an embedding that makes a 1000-byte table, read by blocks 1 and 2; the
// embedding's backward is the largest.
StepModel embedding_and_two_layers() {
  StepModel step;
  step.blocks.resize(3);
  for (BlockProfile& block : step.blocks) {
    block.on_autograd = true;
    block.bwd_peak = 300;
  }
  step.blocks[0].bwd_peak = 5000;
  step.grads_bwd = {0, 0, 0};
  step.base = 1000;  // the table, among the persistent bytes
  return step;
}

TEST_CASE("a made persistent tensor is dead at the backward before its first reader and at the step") {
  StepModel step = embedding_and_two_layers();
  const std::vector<BlockChoice> keep(3, BlockChoice::kKeep);
  const StepPeak held = walk_step(step, keep, 1000);
  step.made_persistent = {MadePersistent{1000, 0, 1}};
  const StepPeak freed = walk_step(step, keep, 1000);
  CHECK(freed.block == 0);
  CHECK(freed.phase == "backward");
  CHECK(held.bytes - freed.bytes == 1000);
  CHECK(held.activations - freed.activations == 1000);
  CHECK(made_persistent_dead_backward(step.made_persistent, 1) == 0);
  CHECK(made_persistent_dead_backward(step.made_persistent, -1) == 1000);
}

TEST_CASE("Llama-3-8B's rotary tables are made in the embeddings block and first read by layer 0") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3-8b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kFull;
  s.micro_batch = 2;
  s.seq_len = 2048;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  const Prediction p = predict_as_given(s);
  // The oracle (bench/oracle grid, hf-trainer/llama-3-8b/full/bf16/non-reentrant/b2s2048)
  // peaks in the embeddings' backward with 65,540 bytes of activations (the batch's
  // input_ids and a scalar); cos and sin ([1, 2048, 128] bf16, 1 MiB) are dead there.
  CHECK(p.where.block_name == "embeddings");
  CHECK(p.where.phase == "backward");
  MESSAGE("activations at the peak " << p.peak_as_allocated.activations << " B");
  CHECK(p.peak_as_allocated.activations < (1 << 20));
}

}  // namespace
}  // namespace headroom::planner
