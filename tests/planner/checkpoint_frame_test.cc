// What torch's checkpoint holds beside a recomputed block's backward, and what it frees
// early (torch 2.11 torch/utils/checkpoint.py). Two mechanisms, on Flan-T5-XL's
// dimensions (tests/data/hf/flan-t5-xl-2l) under the Trainer's bf16, where the
// meta-device oracle (env hf5, hf-trainer/flan-t5-xl-2l/lora/bf16/non-reentrant/s1024t256)
// peaks in encoder.block.1's backward:
// - the relative position bias made by layer 0 is layer 1's input, and only its
//   contiguous copy is saved by layer 1's nodes: the checkpoint holds it all the same
//   (BlockProfile::checkpoint_unsaved; the oracle: the [S, S, heads] embedding live);
// - the non-reentrant unpack hook hands each recomputed tensor over once, so the gated
//   mul's saved factors die before the engine casts its promoted gradient back to bf16
//   (BlockProfile::unpacked_backward; the oracle: three fp32 products live, no cast).
#include <doctest/doctest.h>

#include "planner/predict/model_context.h"
#include "planner/predict/step_model.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 512;
constexpr int64_t kHeads = 32;   // flan-t5-xl's num_heads
constexpr int64_t kFfn = 5120;   // flan-t5-xl's d_ff

StepProfile t5_profile(const ModelContext& c) {
  return profile_step(c.graph, c.analysis, c.compute_dtype, kBatch, kSeq, Accounting::kAllocated, c.gpu);
}

// A walk of the profile's blocks alone (no parameters, gradients or states).
StepModel bare_model(const StepProfile& profile, bool reentrant) {
  StepModel model;
  model.blocks = profile.blocks;
  model.reentrant_recompute = reentrant;
  return model;
}

}  // namespace

TEST_CASE("a checkpointed T5 layer holds the position bias it reads but does not save") {
  const ModelContext c = prepared_context(flan_t5_xl_lora(128));
  const StepProfile profile = t5_profile(c);
  const int k = block_ending(c.graph, "encoder.block.1");
  const BlockProfile& block = profile.blocks[static_cast<size_t>(k)];
  const int64_t bias = kSeq * kSeq * kHeads * 2;  // [1, heads, S, S] in bf16
  CHECK(block.checkpoint_unsaved == bias);
  // The backward of the checkpointed layer holds it beside what its nodes save.
  StepModel model = bare_model(profile, false);
  const int64_t with_bias = local_parts(model, k, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint).backward;
  model.blocks[static_cast<size_t>(k)].checkpoint_unsaved = 0;
  const int64_t without = local_parts(model, k, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint).backward;
  REQUIRE(block.unpacked_backward != nullptr);
  CHECK(with_bias == block.unpacked_backward->bwd_peak + bias);
  CHECK(without < with_bias);
  // Kept, the layer's nodes alone decide: the bias is its producer's to hold.
  CHECK(local_parts(bare_model(profile, false), k, BlockChoice::kKeep, BlockChoice::kKeep).backward ==
        local_parts(model, k, BlockChoice::kKeep, BlockChoice::kKeep).backward);
}

TEST_CASE("a non-reentrant recompute frees the gated mul's saved factors before its promoted cast") {
  const ModelContext c = prepared_context(flan_t5_xl_lora(128));
  const StepProfile profile = t5_profile(c);
  const int k = block_ending(c.graph, "encoder.block.1");
  const BlockProfile& block = profile.blocks[static_cast<size_t>(k)];
  REQUIRE(block.unpacked_backward != nullptr);
  // wi_1's gradient in bf16 (the cast) is made once gelu's fp32 output (80) and wi_1's
  // output (40) are gone: the peak is the mul's own backward, without the cast.
  const int64_t cast = kBatch * kSeq * kFfn * 2;
  CHECK(block.bwd_peak - block.unpacked_backward->bwd_peak == cast);
  // Only the non-reentrant checkpoint runs it so; a reentrant one's recompute saves as usual.
  const StepModel plain = bare_model(profile, false);
  const StepModel reentrant = bare_model(profile, true);
  const LocalPeak unpacked = local_parts(plain, k, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint);
  CHECK(unpacked.backward ==
        std::max(block.recompute_peak + block.out_grad, block.unpacked_backward->bwd_peak + block.checkpoint_unsaved));
  const LocalPeak saved = local_parts(reentrant, k, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint);
  CHECK(saved.backward >= block.bwd_peak + block.checkpoint_unsaved);
  CHECK(local_parts(plain, k, BlockChoice::kKeep, BlockChoice::kKeep).backward == block.bwd_peak);
}

}  // namespace headroom::planner
