// Two things a Llama decoder layer's forward holds or skips, on Llama-3-8B's dimensions
// (tests/data/hf/llama-3-8b) with LoRA on q_proj and v_proj, bf16, B = 1, S = 512:
// - LlamaMLP.forward holds its argument x (the post-attention norm's output) until
//   down_proj returns, and the decoder layer's name hidden_states holds it until the MLP
//   returns (transformers 5.23.0 modeling_llama.py), though under LoRA on q, v nothing
//   saves it: it is live at the MLP's peak in every forward (the meta-device oracle's
//   trl-dpo llama-3-8b reference forward: the `mul` [2, 512, 4096] among the transients);
// - a non-reentrant checkpoint's recompute stops once it has packed as many tensors as
//   the first forward saved (torch 2.11 utils/checkpoint.py, _StopRecomputationError;
//   early_stop is the default): the layer's last save is act_mul_up's inputs, packed
//   before the product is made, so the recompute never makes the product nor runs
//   down_proj. A reentrant checkpoint (CheckpointFunction.backward) runs the whole layer.
#include <doctest/doctest.h>

#include <string>

#include "planner/predict/model_context.h"
#include "planner/time/block_profile.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kTokens = 512;
constexpr int64_t kHidden = 4096;
constexpr int64_t kFfn = 14336;

RunSettings llama_8b_lora() {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3-8b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.targets = {"q_proj", "v_proj"};
  s.lora.dropout = 0;
  s.micro_batch = 1;
  s.seq_len = kTokens;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}};
  return s;
}

BlockProfile layer_profile(const ModelContext& c, const std::string& layer) {
  const StepProfile profile =
      profile_step(c.graph, c.analysis, c.compute_dtype, 1, kTokens, Accounting::kAllocated, c.gpu);
  return profile.blocks[static_cast<size_t>(block_ending(c.graph, layer))];
}

}  // namespace

TEST_CASE("a Llama layer's no-grad forward peaks at its MLP product with the MLP input held") {
  const ModelContext c = prepared_context(llama_8b_lora());
  const BlockProfile layer = layer_profile(c, "model.layers.5");
  const int64_t hidden = kTokens * kHidden * 2;  // bf16 [B, S, 4096]
  const int64_t ffn = kTokens * kFfn * 2;        // bf16 [B, S, 14336]
  // act_fn(gate), up and their product; the layer's input (the checkpoint's, or the
  // model's loop in a plain no_grad forward), the attention residual and the MLP input.
  CHECK(layer.fwd_peak_nograd == 3 * ffn + 3 * hidden);
}

TEST_CASE("a non-reentrant recompute of a Llama layer stops before the MLP's product") {
  const ModelContext c = prepared_context(llama_8b_lora());
  const BlockProfile layer = layer_profile(c, "model.layers.5");
  const int64_t hidden = kTokens * kHidden * 2;
  const int64_t ffn = kTokens * kFfn * 2;
  // Both peak in the MLP: the whole recompute at down_proj, its output made beside the
  // product (act and up saved, the MLP input held); the early stop at up_proj, the
  // product's factors about to be packed and nothing after.
  CHECK(layer.reentrant_recompute_peak - layer.recompute_peak == ffn + hidden);
}

}  // namespace headroom::planner
