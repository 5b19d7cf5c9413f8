// What is live while transformers 4.x's expert loop runs, recomputed under a
// non-reentrant checkpoint, against the meta-device oracle's Mixtral-2L rows
// (bench/oracle grid, hf-trainer[hf4bnb43]/mixtral-2l/.../non-reentrant/.../tf4-experts;
// transformers 4.44.2, PEFT 0.12.0, bitsandbytes 0.43.1):
// - the block's argument `hidden_states` is bound until MixtralSparseMoeBlock.forward
//   returns, and `current_state` (an expert's routed rows) until the next expert's
//   replaces it (models/moe_loop.cc);
// - PEFT's Linear.forward binds its fp32 copy of a 16-bit input (x.to(lora_A.weight.dtype))
//   until it returns, beside the base result, lora_B's output and the scaled product
//   (mechanisms/autocast.cc hold_fp32_adapter_input);
// - bitsandbytes 0.43.1's MatMul4Bit keeps ctx.tensors = (A, B) only where A needs grad,
//   and a non-reentrant recompute makes those tensors again beside the first forward's
//   (StepModel::ctx_recomputed).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "planner/predict/ctx_recomputed.h"
#include "planner/predict/model_context.h"
#include "planner/predict/prediction.h"
#include "planner/predict/simulator.h"
#include "planner/predict/step_model.h"
#include "tests/planner/predict_as_given.h"

namespace headroom::planner {
namespace {

constexpr int64_t kMixtralHidden = 4096;
constexpr int64_t kMixtralFfn = 14336;

RunSettings mixtral_2l(TrainMode mode, int64_t batch, int64_t seq) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/mixtral-2l/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3"};
  s.lora.dropout = 0.0;
  if (mode == TrainMode::kQlora) s.kbit_prep = KbitPrep::kNone;
  s.micro_batch = batch;
  s.seq_len = seq;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.recompute = Recompute::kBlock;
  s.optimizer_impl = OptimizerImpl::kForeach;
  s.versions = {{"transformers", "4.44.2"}, {"torch", "2.11.0"}, {"peft", "0.12.0"}, {"accelerate", "0.34.2"},
                {"bitsandbytes", "0.43.1"}};
  return s;
}

bool holds(const graph::Node& node, const std::string& tensor) {
  return std::find(node.holds.begin(), node.holds.end(), tensor) != node.holds.end();
}

bool in_block_held(const ModelContext& c, int block, const std::string& tensor) {
  const int t = graph::tensor_index(c.graph, tensor);
  const std::vector<int>& held = c.ctx_held[static_cast<size_t>(block)];
  return std::find(held.begin(), held.end(), t) != held.end();
}

// The oracle's peak less headroom's workspaces (compare.py leaves them out).
double error_pct(const Prediction& p, double oracle) {
  return (static_cast<double>(p.peak_allocated - p.peak.workspaces) - oracle) / oracle * 100.0;
}

}  // namespace

TEST_CASE("the 4.x expert loop binds hidden_states to the block's end and each routed copy to the next expert's") {
  const ModelContext c = prepared_context(mixtral_2l(TrainMode::kLora, 1, 512));
  const std::string moe = "model.layers.0.block_sparse_moe";
  const graph::Node* out = c.graph.find_node(moe + ".experts_output");
  REQUIRE(out != nullptr);
  CHECK(holds(*out, "model.layers.0.post_attention_layernorm"));
  CHECK(holds(*out, moe + ".experts.7.routed_states"));
  const graph::Node* second = c.graph.find_node(moe + ".experts.1.routed_states");
  REQUIRE(second != nullptr);
  CHECK(holds(*second, moe + ".experts.0.routed_states"));
}

TEST_CASE("PEFT's fp32 copy of a 16-bit input and the base result live through an adapted linear's forward") {
  const ModelContext c = prepared_context(mixtral_2l(TrainMode::kLora, 1, 512));
  const graph::Node* w2 = c.graph.find_node("model.layers.0.block_sparse_moe.experts.7.w2");
  REQUIRE(w2 != nullptr);
  REQUIRE(c.graph.find_node(w2->name + ".adapter_input_cast") != nullptr);
  const int64_t rows = 512 * 2 / 8;  // tokens x k / E
  // x.to(float32) [rows, in] (two 16-bit elements each), and beside the node's output
  // the base result and lora_B's output (or the scaled product) [rows, out].
  const int64_t extra = rows * kMixtralFfn * 2 + rows * kMixtralHidden * 2;
  CHECK(w2->workspace_elements.at(1, 512) - w2->backward_workspace().at(1, 512) == extra);
}

TEST_CASE("a non-reentrant recompute holds the first forward's ctx tensors beside its own") {
  StepModel step;
  step.blocks.resize(1);
  BlockProfile& block = step.blocks[0];
  block.on_autograd = true;
  block.checkpoint = 150;  // inputs 50, ctx tensors 100
  block.recompute_peak = 400;
  block.bwd_peak = 300;
  block.out_grad = 10;
  const int64_t without = local_parts(step, 0, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint).backward;
  step.ctx_recomputed = {100};
  const LocalPeak with = local_parts(step, 0, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint);
  CHECK(with.backward - without == 100);
  CHECK(with.backward_saved == 250);  // both copies: no saved-tensor hook sees ctx.tensors
  // A reentrant checkpoint's first forward runs under no_grad and keeps none.
  step.reentrant_recompute = true;
  step.blocks[0].reentrant_recompute_peak = 400;
  CHECK(local_parts(step, 0, BlockChoice::kCheckpoint, BlockChoice::kCheckpoint).backward == without);
}

TEST_CASE("MatMul4Bit keeps no input on ctx where the input needs no grad") {
  const ModelContext c = prepared_context(mixtral_2l(TrainMode::kQlora, 1, 512));
  const int layer0 = block_ending(c.graph, ".layers.0");
  const int layer1 = block_ending(c.graph, ".layers.1");
  // Layer 0's q/k/v_proj read the norm of the frozen embeddings (no input_require_grads
  // without prepare_model_for_kbit_training): ctx.tensors = (None, None).
  CHECK_FALSE(in_block_held(c, layer0, "model.layers.0.input_layernorm"));
  CHECK(in_block_held(c, layer0, "model.layers.0.post_attention_layernorm"));
  CHECK(in_block_held(c, layer1, "model.layers.1.input_layernorm"));
}

TEST_CASE("Mixtral-2L under the 4.x expert loop, recomputed, against the oracle") {
  // QLoRA b1 s512: 2,688,784,540 B in layer 0's recompute at its last expert's w2, with
  // layer 0's 4-bit linears' inputs live three times (its first forward's, layer 1's
  // and the recompute's: `mul` [128, 14336] and `index` [1, 128, 4096] x 24 each);
  // activations 146,812,928 B.
  const Prediction qlora = predict_as_given(mixtral_2l(TrainMode::kQlora, 1, 512));
  MESSAGE("QLoRA b1 s512: " << error_pct(qlora, 2688784540.0) << " %");
  CHECK(std::abs(error_pct(qlora, 2688784540.0)) < 0.2);
  CHECK(std::abs(qlora.peak_as_allocated.activations - 146812928) < 146812928 * 3 / 100);
  // LoRA b2 s2048: 8,478,824,996 B in layer 1's recompute at its last expert's w2,
  // with the fp32 copy of w2's input (`_to_copy` f32 [1024, 14336]) and the norm output.
  const Prediction lora = predict_as_given(mixtral_2l(TrainMode::kLora, 2, 2048));
  MESSAGE("LoRA b2 s2048: " << error_pct(lora, 8478824996.0) << " %");
  CHECK(std::abs(error_pct(lora, 8478824996.0)) < 0.2);
}

TEST_CASE("Qwen2-MoE-2L under 4.44.2 at micro-batch 1 makes no shifted copy of the logits") {
  // The oracle (hf-trainer[hf4bnb43]/qwen2-moe-2l/lora/bf16/non-reentrant/b1s512/tf4-experts):
  // 4,729,387,020 B in the loss's backward; its forward holds the fp32 logits and the
  // log-probabilities [511, 151936] and no third copy (`logits[..., :-1, :].contiguous()`
  // of a contiguous [1, 512, V]). Priced with the copy, headroom peaked in the head's
  // forward, +0.98%.
  RunSettings s = mixtral_2l(TrainMode::kLora, 1, 512);
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/qwen2-moe-2l/config.json";
  s.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  const Prediction p = predict_as_given(s);
  MESSAGE("Qwen2-MoE LoRA b1 s512: " << error_pct(p, 4729387020.0) << " %");
  CHECK(p.where.block_name == "head");
  CHECK(p.where.phase == "backward");
  CHECK(std::abs(error_pct(p, 4729387020.0)) < 0.2);
}

// The allocator simulation holds the recompute's second ctx copies too, from the walk's
// own list (planner/predict/ctx_recomputed.h). It found the first forward's copies alive
// and made none: 2.5% under the walk and the oracle at layer 0's backward.
TEST_CASE("simulator and walk agree on a non-reentrant recompute's second ctx copies") {
  const RunSettings settings = mixtral_2l(TrainMode::kQlora, 1, 512);
  Result<ModelContext> context = prepare_context(settings);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  CHECK_FALSE(ctx_recomputed_tensors(context.value(), 1).empty());
  const auto choices = user_block_choices(context.value(), settings);
  REQUIRE(choices.is_ok());
  const GlobalConfig config = user_config(settings);
  const Prediction walk = predict(context.value(), settings, config, choices.value(), false);
  const Simulation simulation = simulate(context.value(), settings, config, choices.value());
  CHECK(static_cast<double>(simulation.peak_live) == doctest::Approx(walk.peak_allocated).epsilon(0.01));
}

}  // namespace headroom::planner
