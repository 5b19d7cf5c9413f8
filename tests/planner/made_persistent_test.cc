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

// A full fine-tune under the Trainer (transformers 5.23.0), B = 2, S = 2048, every layer
// checkpointed (non-reentrant), of the config.json folder tests/data/hf/MODEL, on an H200.
RunSettings hf_trainer_full_checkpointed(const std::string& model) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/" + model + "/config.json";
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
  return s;
}

TEST_CASE("a made persistent tensor is dead at the backward before its first reader and at the step") {
  StepModel step = embedding_and_two_layers();
  const std::vector<BlockChoice> keep(3, BlockChoice::kKeep);
  const StepPeak held = walk_step(step, keep, 1000);
  step.made_persistent = {MadePersistent{1000, 0, 1, 2}};
  const StepPeak freed = walk_step(step, keep, 1000);
  CHECK(freed.block == 0);
  CHECK(freed.phase == "backward");
  CHECK(held.bytes - freed.bytes == 1000);
  CHECK(held.activations - freed.activations == 1000);
  CHECK(made_persistent_dead_backward(step.made_persistent, 1) == 0);
  CHECK(made_persistent_dead_backward(step.made_persistent, -1) == 1000);
}

TEST_CASE("Llama-3-8B's rotary tables are made in the embeddings block and first read by layer 0") {
  RunSettings s = hf_trainer_full_checkpointed("llama-3-8b");
  const Prediction p = predict_as_given(s);
  // The oracle (bench/oracle grid, hf-trainer/llama-3-8b/full/bf16/non-reentrant/b2s2048)
  // peaks in the embeddings' backward with 65,540 bytes of activations (the batch's
  // input_ids and a scalar); cos and sin ([1, 2048, 128] bf16, 1 MiB) are dead there.
  CHECK(p.where.block_name == "embeddings");
  CHECK(p.where.phase == "backward");
  MESSAGE("activations at the peak " << p.peak_as_allocated.activations << " B");
  CHECK(p.peak_as_allocated.activations < (1 << 20));
}

// transformers 4.52.0 first checkpoints GradientCheckpointingLayers, which bind the
// tables into the partial the non-reentrant frame keeps (modeling_layers.py); 4.51.3
// passes them positionally, and _NoopSaveInputs saves them (planner/time/made_persistent.h).
TEST_CASE("the made tables are in the checkpoint frames from transformers 4.52 on") {
  CHECK_FALSE(made_tables_in_frames(Stack::kHfTrainer, {{"transformers", "4.51.3"}}));
  CHECK_FALSE(made_tables_in_frames(Stack::kHfTrainer, {{"transformers", "4.44.2"}}));
  CHECK(made_tables_in_frames(Stack::kHfTrainer, {{"transformers", "4.52.0"}}));
  CHECK(made_tables_in_frames(Stack::kHfTrainer, {{"transformers", "5.23.0"}}));
  CHECK(made_tables_in_frames(Stack::kHfTrainer, {}));
  CHECK_FALSE(made_tables_in_frames(Stack::kTorchtune, {}));
}

TEST_CASE("the framed bytes are the live tables whose readers are all checkpointed") {
  // A 1000-byte table made by block 0 and read by blocks 1 and 2; a 24-byte one read by block 2 only.
  const std::vector<MadePersistent> made = {MadePersistent{1000, 0, 1, 2}, MadePersistent{24, 0, 2, 2}};
  using enum BlockChoice;
  const std::vector<BlockChoice> layers = {kKeep, kCheckpoint, kCheckpoint, kKeep};
  CHECK(made_persistent_framed(made, layers, "forward", 0) == 1024);
  CHECK(made_persistent_framed(made, layers, "backward", 1) == 1000);  // the second is dead there
  CHECK(made_persistent_framed(made, layers, "backward", 0) == 0);
  CHECK(made_persistent_framed(made, layers, "optimizer step", -1) == 0);
  const std::vector<BlockChoice> one_kept = {kKeep, kKeep, kCheckpoint, kKeep};
  CHECK(made_persistent_framed(made, one_kept, "backward", 2) == 24);  // block 1's rotary muls save the first
}

// Mistral-7B, full, bf16, B = 2, S = 2048, non-reentrant: the oracle
// (hf-trainer/mistral-7b/full/bf16/non-reentrant/b2s2048, transformers 5.23.0) peaks in
// layer 0's backward with 33,619,968 saved bytes (the embeddings' bf16 output, layer 0's
// checkpointed input, and the batch's ids, 64 KiB; headroom holds position_ids too, 16 KiB); cos
// and sin ([1, 2048, 128] bf16, 1 MiB) are transient, held by layer 0's frame. 4.51.3
// passes them positionally and _NoopSaveInputs saves them; 4.52.0 binds them.
TEST_CASE("Mistral-7B's rotary tables are transient at layer 0's backward from transformers 4.52") {
  RunSettings s = hf_trainer_full_checkpointed("mistral-7b");
  const Prediction current = predict_as_given(s);
  CHECK(current.where.block_name == "model.layers.0");
  CHECK(current.where.phase == "backward");
  CHECK(current.peak_as_allocated.activations == 2 * 2048 * 4096 * 2 + 2 * (2 * 2048 * 8) + 2048 * 8);
  s.versions["transformers"] = "4.52.0";
  const Prediction framed = predict_as_given(s);
  s.versions["transformers"] = "4.51.3";
  const Prediction saved = predict_as_given(s);
  CHECK(framed.where.block_name == saved.where.block_name);
  CHECK(framed.peak_allocated == saved.peak_allocated);
  const int64_t tables = 2 * 2048 * 128 * 2;
  CHECK(saved.peak_as_allocated.activations - framed.peak_as_allocated.activations == tables);
  CHECK(framed.peak_as_allocated.transient - saved.peak_as_allocated.transient == tables);
}

}  // namespace
}  // namespace headroom::planner
