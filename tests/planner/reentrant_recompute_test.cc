// What a reentrant checkpoint (use_reentrant=True, torch 2.11 utils/checkpoint.py
// CheckpointFunction.backward) holds that a non-reentrant one does not:
// - autocast's cached 16-bit cast of a block input that requires grad: the recompute
//   runs on detach_variable's leaves, and cached_cast caches a leaf's cast until the
//   recompute's autocast context exits (planner/mechanisms/reentrant_checkpoint.h);
// - the recompute's outputs, bound while torch.autograd.backward runs over them
//   (BlockProfile::outputs).
// The meta-device oracle's reentrant BERT LoRA run at 32 x 512 peaks 24 MiB above
// the non-reentrant one: one bf16 [B, S, 768].
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/mechanisms/reentrant_checkpoint.h"
#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// BERT-base under the Trainer's bf16 (autocast over 16-bit weights), every layer
// checkpointed, transformers 5.23 (its input-embeddings hook makes the layers' inputs
// require grad).
RunSettings bert_checkpointed(TrainMode mode, Recompute recompute, int64_t batch, int64_t seq) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/bert-base-uncased/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.lora.targets = {"query", "value"};
  s.train_patterns = {"classifier"};
  s.micro_batch = batch;
  s.seq_len = seq;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = recompute;
  s.versions["transformers"] = "5.23.0";
  return s;
}

TEST_CASE("a reentrant recompute casts a BERT layer's fp32 input once and holds the cast") {
  const ModelContext context = prepared_context(bert_checkpointed(TrainMode::kLora, Recompute::kBlockReentrant, 8, 128));
  const int layer = block_ending(context.graph, ".layer.5");
  const RecomputeCastCache cache = reentrant_cast_cache(context.graph, context.analysis, layer);
  // query, key and value each cast the LayerNorm's fp32 output: one cached copy.
  CHECK(cache.held.size() == 1);
  CHECK(cache.shared.size() == 2);
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 8, 128,
                                           Accounting::kAllocated, context.gpu);
  const BlockProfile& block = profile.blocks[static_cast<size_t>(layer)];
  // LoRA: the frozen bases keep none of their casts, so the held one is new bytes at
  // the recompute's end and the two repeats were already gone by then.
  CHECK(block.reentrant_recompute_peak - block.recompute_peak == 8 * 128 * 768 * 2);
}

TEST_CASE("BERT LoRA at 32 x 512: the reentrant peak is one bf16 hidden state above the non-reentrant") {
  const Prediction reentrant = predict_as_given(bert_checkpointed(TrainMode::kLora, Recompute::kBlockReentrant, 32, 512));
  const Prediction plain = predict_as_given(bert_checkpointed(TrainMode::kLora, Recompute::kBlock, 32, 512));
  CHECK(reentrant.peak_allocated - plain.peak_allocated == 32 * 512 * 768 * 2);
}

TEST_CASE("a 16-bit block input gets no cached cast") {
  // ViT over bf16 weights: its layers take the bf16 residual stream (their LayerNorms'
  // casts are fp32 upcasts, which autocast never caches).
  const ModelContext vit = prepared_context(hf_vit_b16(TrainMode::kLora));
  const RecomputeCastCache none = reentrant_cast_cache(vit.graph, vit.analysis, block_ending(vit.graph, ".layer.5"));
  CHECK(none.held.empty());
  CHECK(none.shared.empty());
}

TEST_CASE("BERT's layer output is what the recompute's frame holds through the layer's backward") {
  const ModelContext context = prepared_context(bert_checkpointed(TrainMode::kFull, Recompute::kBlockReentrant, 8, 128));
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, 8, 128,
                                           Accounting::kAllocated, context.gpu);
  // The output LayerNorm under autocast writes fp32.
  CHECK(profile.blocks[static_cast<size_t>(block_ending(context.graph, ".layer.5"))].outputs == 8 * 128 * 768 * 4);
}

TEST_CASE("the held outputs count beside a checkpointed block's backward only when reentrant") {
  StepModel model;
  model.base = 1000;
  model.grads_bwd = {0};
  model.copy_ms = {0};
  BlockProfile block;
  block.on_autograd = true;
  block.checkpoint = 5;
  block.fwd_peak_nograd = 20;
  block.recompute_peak = 50;
  block.reentrant_recompute_peak = 50;
  block.bwd_peak = 100;
  block.out_grad = 10;
  block.outputs = 30;
  model.blocks = {block};
  const std::vector<BlockChoice> checkpointed = {BlockChoice::kCheckpoint};
  CHECK(walk_step(model, checkpointed, 0).bytes == 1000 + 100);
  model.reentrant_recompute = true;
  CHECK(walk_step(model, checkpointed, 0).bytes == 1000 + 100 + 30);
  // A block that runs normally holds no recompute.
  CHECK(walk_step(model, {BlockChoice::kKeep}, 0).bytes == 1000 + 100);
}

}  // namespace
}  // namespace headroom::planner
