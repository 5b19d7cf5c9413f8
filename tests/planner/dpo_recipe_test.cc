// DPO as TRL's DPOTrainer runs it (trl/trainer/dpo_trainer.py, 1.16.0;
// docs/stacks.md, "Recipes"): chosen and rejected rows in one batch of twice the
// micro-batch, a reference model that is a frozen copy, the LoRA policy's base with
// its adapters disabled, or precomputed log-probs, and its no-grad forward between
// the policy's forward and backward.
#include <doctest/doctest.h>

#include <cstdlib>

#include "models/gpt_stack.h"
#include "planner/mechanisms/preference_pairs.h"
#include "planner/search/block_solver.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

// Llama 3.2 1B (its config.json) in pure bf16 on an H200, as TRL 1.16 runs it.
RunSettings trl_llama_1b(Recipe recipe, TrainMode mode, int64_t micro_batch) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.lora.dropout = 0;
  s.micro_batch = micro_batch;
  s.seq_len = 512;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  if (recipe == Recipe::kDpo) s.recipe = recipe;
  return s;
}

RunSettings with_reference(RunSettings s, Reference reference) {
  s.reference = reference;
  return s;
}

// Two blocks; every number a round figure so the walk's terms can be read off.
StepModel two_blocks() {
  StepModel model;
  model.base = 1000;
  for (int k = 0; k < 2; ++k) {
    BlockProfile block;
    block.keep = 300;
    block.checkpoint = 10;
    block.fwd_peak = 350;
    block.fwd_peak_nograd = 120 + 40 * k;
    block.recompute_peak = 350;
    block.bwd_peak = 400;
    block.out_grad = 20;
    block.on_autograd = true;
    block.fwd_ms = 1;
    block.bwd_ms = 2;
    block.recompute_ms = 1;
    model.blocks.push_back(block);
  }
  model.grads_bwd = {0, 0};
  model.copy_ms = {0, 0};
  model.allow_offload = false;
  return model;
}

}  // namespace

TEST_CASE("DPO pairs: every term in the batch doubles, parameters and fixed sizes do not") {
  const graph::LayerGraph plain = models::build_gpt_layer_stack(2, 256, 4, 8192, models::AttentionImpl::kEager, 0.0);
  graph::LayerGraph paired = plain;
  apply_preference_pairs(paired);
  REQUIRE(paired.tensors.size() == plain.tensors.size());
  bool any_grows = false;
  for (size_t i = 0; i < plain.tensors.size(); ++i) {
    // A pair at B is the plain graph at 2B: B, B*S and B*S^2 terms twice, S, S^2 and constants once.
    CHECK(paired.tensors[i].elements.at(3, 128) == plain.tensors[i].elements.at(6, 128));
    CHECK(paired.tensors[i].elements.c == plain.tensors[i].elements.c);
    any_grows = any_grows || plain.tensors[i].elements.bss > 0;
  }
  CHECK(any_grows);  // eager attention's scores: the B*S^2 term
  for (size_t n = 0; n < plain.nodes.size(); ++n) {
    CHECK(paired.nodes[n].fwd_flops.at(3, 128) == plain.nodes[n].fwd_flops.at(6, 128));
    CHECK(paired.nodes[n].workspace_elements.at(3, 128) == plain.nodes[n].workspace_elements.at(6, 128));
    CHECK(paired.nodes[n].params.size() == plain.nodes[n].params.size());
    if (plain.nodes[n].linear) CHECK(paired.nodes[n].linear->rows.at(3, 128) == plain.nodes[n].linear->rows.at(6, 128));
  }
}

TEST_CASE("DPO with precomputed log-probs is the policy over 2 x micro-batch rows, nothing more") {
  const Prediction dpo = predict_as_given(with_reference(trl_llama_1b(Recipe::kDpo, TrainMode::kFull, 1),
                                                         Reference::kPrecomputed));
  const Prediction sft = predict_as_given(trl_llama_1b(Recipe::kSupervised, TrainMode::kFull, 2));
  CHECK(dpo.peak_allocated == sft.peak_allocated);
  CHECK(dpo.allocated.activations == sft.allocated.activations);
  CHECK(dpo.allocated.parameters == sft.allocated.parameters);
  CHECK(dpo.where.phase != "reference forward");
  // The same rows in the same time: a pair is one sample of two rows' tokens.
  CHECK(dpo.time.step_ms == doctest::Approx(sft.time.step_ms));
  CHECK(dpo.time.samples_per_s == doctest::Approx(sft.time.samples_per_s / 2));
  CHECK(dpo.time.tokens_per_s == doctest::Approx(sft.time.tokens_per_s));
}

TEST_CASE("DPO's frozen copy holds the model's weights twice, in the policy's dtype") {
  const RunSettings full = trl_llama_1b(Recipe::kDpo, TrainMode::kFull, 1);
  const Prediction copy = predict_as_given(with_reference(full, Reference::kCopy));
  const Prediction precomputed = predict_as_given(with_reference(full, Reference::kPrecomputed));
  // Llama 3.2 1B: 1,235,814,400 parameters (tied embeddings counted once), 2 bytes each;
  // each tensor rounded up to the allocator's 512 bytes.
  const int64_t weights = copy.allocated.parameters - precomputed.allocated.parameters;
  CHECK(weights >= 2 * 1235814400LL);
  CHECK(weights < 2 * 1235814400LL + 512 * 200);
  CHECK(copy.peak_allocated - precomputed.peak_allocated >= weights);
  // The reference forward runs every block once more, without backward.
  CHECK(copy.time.step_ms > precomputed.time.step_ms);
}

TEST_CASE("DPO with the adapter-disabled base adds no weights, only the reference forward") {
  const RunSettings lora = trl_llama_1b(Recipe::kDpo, TrainMode::kLora, 2);
  const Prediction base = predict_as_given(with_reference(lora, Reference::kAdapterDisabled));
  const Prediction precomputed = predict_as_given(with_reference(lora, Reference::kPrecomputed));
  CHECK(base.allocated.parameters == precomputed.allocated.parameters);
  CHECK(base.peak_allocated >= precomputed.peak_allocated);
  CHECK(base.time.step_ms > precomputed.time.step_ms);
}

TEST_CASE("the reference forward peaks over everything the policy's forward stored") {
  StepModel model = two_blocks();
  const std::vector<BlockChoice> keep = {BlockChoice::kKeep, BlockChoice::kKeep};
  const StepPeak without = walk_step(model, keep, 0);
  CHECK(without.phase == "backward");
  CHECK(without.bytes == 1000 + 300 + 400);
  model.reference_forward = true;
  model.grads_fwd = 5;
  const StepPeak with = walk_step(model, keep, 0);
  // base + both blocks' saves + the gradients held + the larger no-grad forward (160)
  CHECK(with.phase == "reference forward");
  CHECK(with.bytes == 1000 + 600 + 5 + 160);
  CHECK(reference_forward_local(model) == 165);
  // It runs each block's forward once more.
  CHECK(block_ms(model, 0, BlockChoice::kKeep) == doctest::Approx(1 + 1 + 2));
}

// The reference forward is the model's forward again, without grad: what that forward's
// frame holds into its later blocks (LlamaModel.forward's inputs_embeds, to the final
// norm: BlockProfile::forward_frame) is live beside each block's no-grad peak.
TEST_CASE("the reference forward runs each block beside what its forward's frame holds") {
  StepModel model = two_blocks();
  model.reference_forward = true;
  model.grads_fwd = 5;
  model.blocks[0].forward_frame = 50;
  // Block 1's no-grad forward (160) beside block 0's frame (50); block 0 runs without it.
  CHECK(reference_forward_local(model) == 5 + 160 + 50);
  const std::vector<BlockChoice> keep = {BlockChoice::kKeep, BlockChoice::kKeep};
  const StepPeak with = walk_step(model, keep, 0);
  CHECK(with.phase == "reference forward");
  CHECK(with.bytes == 1000 + 600 + 5 + 160 + 50);
}

// trl-dpo[trl]/llama-3-8b/lora/none/b2s1024 in bench/oracle/grid.json: TRL's DPO over
// Llama 3 8B's config.json, LoRA r16 on q_proj and v_proj, the adapter-disabled base as
// the reference, pure bf16, two pairs of 1024 tokens. The oracle's peak is in the
// reference forward with 487,158,240 bytes in flight (recorded grid-rows.json.gz), the
// 32 MiB [4, 1024, 4096] inputs_embeds of that forward among them.
TEST_CASE("DPO's reference forward holds its inputs_embeds, as the oracle's Llama 3 8B row") {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3-8b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.rank = 16;
  s.lora.targets = {"q_proj", "v_proj"};
  s.lora.dropout = 0.05;
  s.micro_batch = 2;
  s.seq_len = 1024;
  s.recipe = Recipe::kDpo;
  s.reference = Reference::kAdapterDisabled;
  const Prediction dpo = predict_as_given(s);
  CHECK(dpo.where.phase == "reference forward");
  const int64_t oracle_transient = 487158240;
  // In flight as bench/oracle/compare.py counts it: with the module buffers not saved.
  const MemoryBreakdown& at = dpo.peak_as_allocated;
  const int64_t transient = at.transient + at.zero_buffers + at.buffers - at.saved_buffers;
  CHECK(std::abs(transient - oracle_transient) <= 3 * 1024 * 1024);
}

TEST_CASE("the block solver leaves room for the reference forward") {
  StepModel model = two_blocks();
  model.reference_forward = true;
  // Keeping both blocks peaks at 1760 in the reference forward (1700 in backward).
  const int64_t budget = 1740;
  SolverOptions exact;
  exact.unit_bytes = 1;
  const BlockSolution solved = solve_blocks(model, budget, exact);
  REQUIRE(solved.feasible);
  CHECK(solved.peak <= budget);
  CHECK(solved.choices != std::vector<BlockChoice>{BlockChoice::kKeep, BlockChoice::kKeep});
  const BlockSolution brute = brute_force_blocks(model, budget);
  CHECK(brute.micro_step_ms == doctest::Approx(solved.micro_step_ms));
}

TEST_CASE("DPO resolves TRL's defaults: the fused head, the reference by mode") {
  RunSettings s = trl_llama_1b(Recipe::kDpo, TrainMode::kLora, 1);
  s.versions.clear();
  ResolvedStack stack = resolve_stack(s);
  CHECK(stack.top.recipe == Recipe::kDpo);
  CHECK(stack.top.loss.impl == LossImpl::kTrlFusedHead);
  CHECK(stack.top.reference == Reference::kAdapterDisabled);
  s.mode = TrainMode::kFull;
  CHECK(resolve_stack(s).top.reference == Reference::kCopy);
  CHECK(resolve_stack(trl_llama_1b(Recipe::kSupervised, TrainMode::kFull, 1)).top.recipe == Recipe::kSupervised);
}

TEST_CASE("DPO settings that are not modelled are refused by name") {
  const RunSettings lora = trl_llama_1b(Recipe::kDpo, TrainMode::kLora, 1);
  CHECK(validate_settings(lora, "run").is_ok());
  const auto refused = [](const RunSettings& s, const std::string& words) {
    const Status status = validate_settings(s, "run");
    CHECK_FALSE(status.is_ok());
    CHECK_MESSAGE(status.message().find(words) != std::string::npos, status.message());
  };
  refused(with_reference(lora, Reference::kCopy), "reference: a second model beside a LoRA policy");
  refused(with_reference(trl_llama_1b(Recipe::kDpo, TrainMode::kFull, 1), Reference::kAdapterDisabled),
          "reference: adapter-disabled needs adapters");
  refused(with_reference(trl_llama_1b(Recipe::kSupervised, TrainMode::kFull, 1), Reference::kCopy),
          "reference: the reference model is DPO's");
  RunSettings old = lora;
  old.versions["trl"] = "0.19.1";
  refused(old, "recipe: TRL before 1.15");
  RunSettings torchtune = lora;
  torchtune.stack = Stack::kTorchtune;
  refused(torchtune, "recipe: DPO is modelled as TRL's DPOTrainer");
  RunSettings zero3 = lora;
  zero3.gpus_per_node = 2;
  zero3.zero_stage = 3;
  refused(zero3, "recipe: DPO's reference model under ZeRO-3");
}

}  // namespace headroom::planner
