// Qwen2.5-VL under transformers 5.x's enable_input_require_grads: with LoRA on the
// language model and every layer checkpointed, the hook on the vision tower's
// patch_embed (its _input_embed_layer, a Conv3d reading the cast pixel_values) makes
// the frozen tower record its graph (the oracle's qwen2.5-vl rows, bench/oracle).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/mechanisms/input_require_grads.h"
#include "planner/predict/model_context.h"
#include "planner/settings/stack.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

RunSettings qwen_vl_lora_checkpointed() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2.5-vl-7b-2l/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  s.resolution = 448;
  s.seq_len = 2048;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.versions["transformers"] = "5.23.0";
  return s;
}

}  // namespace

TEST_CASE("Qwen2.5-VL: the input-grad hook goes on the vision tower's Conv3d patch embedding") {
  const Result<ModelContext> context = prepare_context(qwen_vl_lora_checkpointed());
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const graph::Tensor* patches = context->graph.find_tensor("model.visual.patch_embed.proj");
  REQUIRE(patches != nullptr);
  CHECK(patches->requires_grad);
  const auto keep_of = [](const ModelContext& c) {
    const StepProfile profile =
        profile_step(c.graph, c.analysis, c.compute_dtype, 1, 2048, Accounting::kAllocated, c.gpu);
    return profile.blocks[block_ending(c.graph, "model.visual.blocks.0")].keep;
  };
  // What the frozen block keeps for its input's gradient (1024 patches, h 1280, MLP
  // 3420, 16 heads; the f32 cos and sin are the embeddings block's): both norms' f32
  // input and rstd, SDPA's rotated q and k, qkv's whole output (v), its output and
  // f32 logsumexp, silu's input and the product's two factors. Weighted norm outputs
  // and the linears' inputs are kept only for weight gradients.
  const int64_t r = 1024, h = 1280, m = 3420;
  const int64_t norms = 2 * (r * h * 4 + r * 4);
  const int64_t attention = 2 * r * h * 2 + r * 3 * h * 2 + r * h * 2 + 16 * r * 4;
  const int64_t mlp = 3 * r * m * 2;
  CHECK(keep_of(context.value()) == norms + attention + mlp);
  RunSettings without = qwen_vl_lora_checkpointed();
  without.input_require_grads = false;
  const Result<ModelContext> off = prepare_context(without);
  REQUIRE(off.is_ok());
  CHECK(keep_of(off.value()) == 0);  // frozen, nothing requires grad: no graph
}

TEST_CASE("Qwen2.5-VL: the hooked token embedding is a leaf only its AccumulateGrad holds") {
  // The lookup runs before the tower (models/qwen2_5_vl.cc) and masked_scatter reads its
  // output in the merger's block, after the tower: no checkpoint wraps that block and
  // masked_scatter keeps only its mask, so no pack hook sees the leaf, which is transient
  // at a later peak (input_grad_leaves), not a saved activation.
  const Result<ModelContext> context = prepare_context(qwen_vl_lora_checkpointed());
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const int leaf = graph::tensor_index(context->graph, "model.language_model.embed_tokens");
  REQUIRE(leaf >= 0);
  CHECK(context->graph.tensors[static_cast<size_t>(leaf)].requires_grad);
  const std::vector<int> leaves = input_grad_leaves(context->graph);
  CHECK(std::find(leaves.begin(), leaves.end(), leaf) != leaves.end());
}

TEST_CASE("Qwen2.5-VL full fine-tune with the tower frozen: the hook applies there too") {
  // transformers 5.23.0 _activation_checkpointing_enable calls enable_input_require_grads
  // whatever trains (main_input_name "input_ids"): the frozen tower's patch_embed is hooked.
  RunSettings s = qwen_vl_lora_checkpointed();
  s.mode = TrainMode::kFull;
  s.freeze_patterns = {"model.visual.*"};
  const Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  CHECK(context->graph.find_tensor("model.visual.patch_embed.proj")->requires_grad);
  s.freeze_patterns.clear();  // a trained tower: its conv's output is no leaf
  const Result<ModelContext> trained = prepare_context(s);
  REQUIRE(trained.is_ok());
  CHECK_FALSE(trained->graph.find_tensor("model.visual.patch_embed.proj")->requires_grad);
}

}  // namespace headroom::planner
