// T5 under the Trainer's gradient checkpointing: the decoder's zero cross-attention
// position_bias is a leaf that requires grad (transformers 5.23.0 modeling_t5.py,
// T5Attention.forward), which its AccumulateGrad node holds, with its gradient, to the
// backward's end; the encoder's output, which only the decoder layers' checkpoints keep,
// is gone once the decoder's first layer has run backward (mechanisms/t5_position_bias.h,
// planner/time/made_persistent.h; docs/memory-model.md, "Encoder-decoders").
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>

#include "planner/mechanisms/input_require_grads.h"
#include "planner/mechanisms/t5_position_bias.h"
#include "planner/predict/model_context.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

// The oracle's row hf-trainer/flan-t5-xl-2l/lora/bf16/non-reentrant/s1024t256/t5.
RunSettings t5_checkpointed() {
  RunSettings s = flan_t5_xl_lora(256);
  s.seq_len = 1024;
  s.micro_batch = 4;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"accelerate", "1.15.0"}};
  return s;
}

TEST_CASE("T5 under checkpointing: the zero cross-attention bias is a leaf held through the whole backward") {
  const ModelContext c = prepared_context(t5_checkpointed());
  const std::vector<int> leaves = t5_bias_leaves(c.graph);
  REQUIRE(leaves.size() == 1);
  const int first = block_ending(c.graph, "decoder.block.0");
  const int last = block_ending(c.graph, "decoder.block.1");
  CHECK(t5_bias_gradient_block(c.graph, c.analysis, leaves[0]) == last);
  // The leaf with the first decoder layer's checkpoint, and through every earlier
  // block's backward; its gradient from the last decoder layer's backward on.
  REQUIRE(c.ctx_held.size() == c.graph.blocks.size());
  CHECK(c.checkpoint_saves[static_cast<size_t>(first)] == std::vector<int>{leaves[0]});
  CHECK(c.ctx_held[static_cast<size_t>(first)] == std::vector<int>{leaves[0]});
  CHECK(c.ctx_held[static_cast<size_t>(last)] == std::vector<int>{leaves[0]});
}

TEST_CASE("T5 under checkpointing: the decoder's embedding output is a leaf, held with its gradient past its block") {
  // enable_input_require_grads hooks each T5Stack's get_input_embeddings(), the shared
  // embedding both stacks call (transformers 5.23.0 modeling_utils.py, modeling_t5.py):
  // the decoder's lookup is a leaf too, and lives with its `.grad` through the encoder's
  // backward (the oracle: an `embedding` and a `native_dropout_backward` of [4, 256, 2048]).
  const ModelContext c = prepared_context(t5_checkpointed());
  const int decoder = graph::tensor_index(c.graph, "decoder.embed_tokens");
  const std::vector<int> leaves = input_grad_leaves(c.graph);
  CHECK(leaves.size() == 2);
  const int block = block_ending(c.graph, "decoder.embed");
  REQUIRE(c.ctx_held.size() == c.graph.blocks.size());
  CHECK(c.ctx_held[static_cast<size_t>(block)] == std::vector<int>{decoder, decoder});
}

TEST_CASE("T5 without checkpointing: the zero bias needs no gradient") {
  RunSettings s = t5_checkpointed();
  s.checkpointing = CheckpointPolicy::kNone;
  const ModelContext c = prepared_context(s);
  CHECK(t5_bias_leaves(c.graph).empty());
  const int t = graph::tensor_index(c.graph, "decoder.block.0.layer.1.EncDecAttention.zero_bias");
  CHECK_FALSE(c.analysis.requires_grad[static_cast<size_t>(t)]);
}

TEST_CASE("Flan-T5-XL-2L LoRA, checkpointed, S = 1024, T = 256: the encoder's backward holds the bias and its gradient") {
  const Prediction p = predict_as_given(t5_checkpointed());
  // The oracle: 1,729,753,216 bytes at encoder block 1's gated mul, recomputed; among
  // them the zeros (16 MiB, saved) and their gradient (16 MiB, transient), not the
  // encoder's output; activations 125,870,080 (with the batch), transient 1,007,714,336.
  CHECK(p.where.block_name == "encoder.block.1");
  CHECK(p.where.phase == "backward");
  MESSAGE("activations " << p.peak_as_allocated.activations << ", transient " << p.peak_as_allocated.transient);
  CHECK(std::abs(p.peak_as_allocated.activations - 125870080) <= int64_t{125870080} * 3 / 100);
  CHECK(std::abs(p.peak_as_allocated.transient - 1007714336) <= int64_t{1007714336} * 3 / 100);
}

TEST_CASE("Flan-T5-base LoRA, checkpointed: the later layers' checkpoints save the position bias") {
  // T5Stack.forward hands position_bias to each layer positionally (transformers 5.23.0
  // modeling_t5.py, "as a positional argument for gradient checkpointing"), so each
  // checkpointed layer's _NoopSaveInputs saves it: an activation, not a frame's hold.
  // The oracle (hf-trainer/flan-t5-base/lora/non-reentrant/s512t128/t5): at encoder
  // layer 11's backward 86,548,480 bytes of activations (with the batch), the bf16
  // [512, 512, 12] `embedding` (6 MiB) among them; 371,261,472 transient.
  RunSettings s = flan_t5_xl_lora(128);
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/flan-t5-base";
  s.micro_batch = 8;
  s.lora.rank = 16;
  s.lora.dropout = 0.05;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.optimizer_impl = OptimizerImpl::kFused;
  s.versions["accelerate"] = "1.15.0";
  const Prediction p = predict_as_given(s);
  CHECK(p.where.block_name == "encoder.block.11");
  CHECK(p.where.phase == "backward");
  CHECK(std::abs(p.peak_as_allocated.activations - 86548480) < 64 * 1024);
  CHECK(std::abs(p.peak_as_allocated.transient - 371261472) < 64 * 1024);
  // In full, the peak is in encoder layer 0's backward, the layer that makes the bias:
  // the copy there is its recompute's, in flight (hf-trainer/flan-t5-base/full/
  // non-reentrant/s512t128/t5: 11,051,008 activations, 425,492,512 transient).
  s.mode = TrainMode::kFull;
  const Prediction full = predict_as_given(s);
  CHECK(full.where.block_name == "encoder.block.0");
  CHECK(std::abs(full.peak_as_allocated.activations - 11051008) < 64 * 1024);
  CHECK(std::abs(full.peak_as_allocated.transient - 425492512) < 64 * 1024);
}

}  // namespace
}  // namespace headroom::planner
