// What a reentrant checkpoint (use_reentrant=True) keeps as saved activations and what it
// holds in its backward (torch 2.11 torch/utils/checkpoint.py, CheckpointFunction):
// - forward saves every tensor input with ctx.save_for_backward under the outer hooks, and
//   backward reads them back before the recompute and the inner backward, so an input no
//   recomputed node saves (BERT's fp32 layer input, cast and added only) is an activation
//   at the block's peaks (step_model.cc reentrant_saved);
// - the recompute's autocast cache makes query, key and value's casts of that input one
//   tensor, saved once (BlockProfile::reentrant_backward's keep);
// - backward's `args`, the gradients it was handed, stay bound while
//   torch.autograd.backward runs over the block, so BERT's output LayerNorm does not use
//   up the layer's out_grad (BackwardGradients::of_reentrant_block).
// And transformers' input-embeddings hook makes CLIP's patch conv output an AccumulateGrad
// leaf whether the conv reads pixel_values' 16-bit copy or autocast's cast of it.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/mechanisms/input_require_grads.h"
#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

RunSettings bert_reentrant(TrainMode mode, int64_t batch, int64_t seq) {
  RunSettings s = hf_bert_base(mode);
  s.micro_batch = batch;
  s.seq_len = seq;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlockReentrant;
  return s;
}

TEST_CASE("a reentrant block's inputs that no recomputed node saves are saved activations at its peak") {
  StepModel model;
  model.base = 1000;
  model.grads_bwd = {0};
  model.copy_ms = {0};
  model.reentrant_recompute = true;
  BlockProfile block;
  block.on_autograd = true;
  block.checkpoint = 40;
  block.checkpoint_unsaved = 30;
  block.reentrant_recompute_peak = 200;
  block.reentrant_recompute_peak_saved = 120;
  block.bwd_peak = 100;
  block.out_grad = 10;
  model.blocks = {block};
  // The recompute's peak: its own saved tensors and the input the checkpoint alone keeps.
  CHECK(local_parts(model, 0, BlockChoice::kKeep, BlockChoice::kCheckpoint).backward_saved == 120 + 30);
  // A block whose saves are fewer than its inputs keeps at least those.
  model.blocks[0].reentrant_recompute_peak_saved = 5;
  CHECK(local_parts(model, 0, BlockChoice::kKeep, BlockChoice::kCheckpoint).backward_saved == 40);
}

TEST_CASE("BERT LoRA reentrant at 8 x 128: layer 11's input is an activation at the recompute's peak") {
  const Prediction p = predict_as_given(bert_reentrant(TrainMode::kLora, 8, 128));
  REQUIRE(p.where.phase == "backward");
  // The oracle's record of hf-trainer/bert-base-uncased/lora/bf16/reentrant/b8s128:
  // 67,127,384 B of activations, 20,455,440 B transient; with the fp32 input transient
  // headroom gave 3 MiB fewer and more.
  CHECK(static_cast<double>(p.peak_as_allocated.activations) / kMiB == doctest::Approx(64.02).epsilon(0.01));
  CHECK(static_cast<double>(p.peak_as_allocated.transient) / kMiB == doctest::Approx(19.51).epsilon(0.02));
}

TEST_CASE("a reentrant BERT layer's backward saves the cached input cast once") {
  const int64_t batch = 8;
  const int64_t seq = 128;
  const ModelContext context = prepared_context(bert_reentrant(TrainMode::kFull, batch, seq));
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, batch, seq,
                                           Accounting::kAllocated, context.gpu);
  const BlockProfile& layer = profile.blocks[static_cast<size_t>(block_ending(context.graph, ".layer.5"))];
  REQUIRE(layer.reentrant_backward != nullptr);
  // Full fine-tuning: query, key and value each save their bf16 input; one cached tensor.
  CHECK(layer.keep - layer.reentrant_backward->keep == 2 * batch * seq * 768 * 2);
}

TEST_CASE("BERT full reentrant at 32 x 512: layer 11's backward holds its out_grad and its input as saved") {
  const Prediction p = predict_as_given(bert_reentrant(TrainMode::kFull, 32, 512));
  REQUIRE(p.where.phase == "backward");
  // The oracle's record of hf-trainer/bert-base-uncased/full/bf16/reentrant/b32s512:
  // 1033.4 MiB of activations (12 checkpointed layer inputs), 264.0 MiB transient
  // (select_backward's fp32 out_grad beside native_layer_norm_backward's).
  CHECK(static_cast<double>(p.peak_as_allocated.activations) / kMiB == doctest::Approx(1033.4).epsilon(0.01));
  CHECK(static_cast<double>(p.peak_as_allocated.transient) / kMiB == doctest::Approx(264.0).epsilon(0.01));
}

// CLIPModel LoRA under the Trainer, every layer checkpointed (the hook on both towers).
RunSettings clip_lora(Precision precision) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/clip-vit-base-patch32/config.json";
  s.gpu = "h200";
  s.precision = precision;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.micro_batch = 32;
  s.resolution = 224;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlockReentrant;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

TEST_CASE("CLIP's patch conv output is an AccumulateGrad leaf behind autocast's cast of the pixels") {
  for (const Precision precision : {Precision::kBf16Pure, Precision::kBf16Amp}) {
    const ModelContext clip = prepared_context(clip_lora(precision));
    std::vector<std::string> names;
    for (int t : input_grad_leaves(clip.graph)) names.push_back(clip.graph.tensors[static_cast<size_t>(t)].name);
    CHECK(names.size() == 2);
    CHECK(std::find(names.begin(), names.end(), "vision_model.embeddings.patch_embedding") != names.end());
  }
}

}  // namespace
}  // namespace headroom::planner
