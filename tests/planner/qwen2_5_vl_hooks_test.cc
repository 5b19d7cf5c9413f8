// Qwen2.5-VL under transformers 5.x's enable_input_require_grads: with LoRA on the
// language model and every layer checkpointed, the hook on the vision tower's
// patch_embed (its _input_embed_layer, a Conv3d reading the cast pixel_values) makes
// the frozen tower record its graph (the oracle's qwen2.5-vl rows, bench/oracle).
#include <doctest/doctest.h>

#include <string>

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
  const StepProfile profile = profile_step(context->graph, context->analysis, context->compute_dtype, 1, 2048,
                                           Accounting::kAllocated, context->gpu);
  // The first vision block, checkpointed, keeps its input: the window-ordered patches
  // (1024 x 1280 in bf16), which the leaf's permute made.
  CHECK(profile.blocks[block_ending(context->graph, "model.visual.blocks.0")].keep == 1024 * 1280 * 2);
}

}  // namespace headroom::planner
