// GRPO as TRL's GRPOTrainer runs it (trl/trainer/grpo_trainer.py, 1.16.0; docs/stacks.md,
// "Recipes"; docs/memory-model.md, "GRPO's generation"): the policy scores the completion
// only through the fused head, and before the step's forward a generation (its KV cache,
// prefill and sampling) and, with a reference, a no-grad log-prob pass.
#include <doctest/doctest.h>

#include "planner/mechanisms/kv_cache.h"
#include "planner/mechanisms/trl_fused_head.h"
#include "planner/predict/grpo_phases.h"
#include "planner/search/block_solver.h"
#include "planner/settings/grpo_settings.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

// Llama 3.2 1B (its config.json) in pure bf16 on an H200, as TRL 1.16 runs it: 16 layers,
// 8 KV heads of 64, vocabulary 128256, hidden 2048.
RunSettings grpo_llama_1b(TrainMode mode, int64_t micro_batch, int64_t seq, int64_t completion) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = mode;
  s.lora.dropout = 0;
  s.micro_batch = micro_batch;
  s.seq_len = seq;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  s.recipe = Recipe::kGrpo;
  s.completion_tokens = completion;
  s.num_generations = 4;
  return s;
}

ModelContext context_of(const RunSettings& s) {
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  return std::move(context.value());
}

GrpoPhases phases_of(const ModelContext& context, const RunSettings& s) {
  const StepProfile profile = profile_step(context.graph, context.analysis, context.compute_dtype, s.micro_batch,
                                           context.seq_len, Accounting::kAllocated, context.gpu, context.time_options,
                                           context.checkpoint_saves, 2);
  return grpo_phases(context, s, profile, Accounting::kAllocated);
}

constexpr int64_t kLayers = 16;
constexpr int64_t kKvPerToken = 8 * 64;  // one layer's K (or V) a token
constexpr int64_t kVocab = 128256;

}  // namespace

TEST_CASE("the KV cache holds each layer's K and V as the attention reads them, before repeat_kv") {
  RunSettings s = grpo_llama_1b(TrainMode::kLora, 4, 384, 256);
  const Result<std::vector<int64_t>> plain = kv_cache_elements_per_token(context_of(s).graph);
  REQUIRE(plain.is_ok());
  CHECK(plain.value() == std::vector<int64_t>(2 * kLayers, kKvPerToken));
  s.repeat_kv = true;  // the graph copies K and V per query head: the cache keeps the grouped ones
  const Result<std::vector<int64_t>> repeated = kv_cache_elements_per_token(context_of(s).graph);
  REQUIRE(repeated.is_ok());
  CHECK(repeated.value() == std::vector<int64_t>(2 * kLayers, kKvPerToken));
  s.repeat_kv.reset();
  s.attention = models::AttentionImpl::kEager;  // no one attention op to read K and V from: refused by name
  const Result<ModelContext> eager = prepare_context(s);
  REQUIRE_FALSE(eager.is_ok());
  CHECK(eager.message().find("sdpa") != std::string::npos);
}

TEST_CASE("the fused head scores the completion's positions only") {
  const RunSettings s = grpo_llama_1b(TrainMode::kLora, 4, 384, 128);
  const ModelContext context = context_of(s);
  const graph::Node* head = nullptr;
  for (const graph::Node& node : context.graph.nodes) {
    if (node.op == kTrlFusedLogprobOp) head = &node;
  }
  REQUIRE(head != nullptr);
  // The compact hidden copy and two fp32 values a scored token: 4 x 128 rows, not 4 x 384.
  const graph::Tensor* out = context.graph.find_tensor(head->outputs.front());
  REQUIRE(out != nullptr);
  CHECK(out->elements.at(4, 384) == 4 * 128 * (2048 + 4));
}

TEST_CASE("the generation peaks at the last decode step over the cache at prompt + completion - 1") {
  const RunSettings s = grpo_llama_1b(TrainMode::kLora, 16, 8 + 1024, 1024);
  const ModelContext context = context_of(s);
  const GrpoPhases phases = phases_of(context, s);
  const int64_t longest = 8 + 1024 - 1;
  const int64_t tensor = 16 * longest * kKvPerToken * 2;  // bf16; a multiple of 512 already
  CHECK(phases.kv_cache == 2 * kLayers * tensor);
  CHECK(phases.generation_at == "decode");
  // One layer's old K or V beside its new one, and the previous step's fp32 logits and softmax.
  const int64_t old_copy = 16 * (longest - 1) * kKvPerToken * 2;
  CHECK(phases.generation == phases.kv_cache + old_copy + 2 * 16 * kVocab * 4);
  CHECK(phases.logprob_pass == 0);  // beta 0: no reference
}

TEST_CASE("a long prompt peaks in the prefill, a layer's no-grad forward over every prompt") {
  const RunSettings s = grpo_llama_1b(TrainMode::kLora, 16, 2048 + 64, 64);
  const GrpoPhases phases = phases_of(context_of(s), s);
  CHECK(phases.generation_at == "prefill");
  // At least the MLP's three [rows x prompt x 8192] bf16 tensors beside the cache at the prompt.
  CHECK(phases.generation > 3 * 16 * 2048 * 8192 * 2LL);
}

TEST_CASE("the generation is the step's peak when its batch outgrows the micro-batch's") {
  RunSettings s = grpo_llama_1b(TrainMode::kLora, 2, 64 + 2048, 2048);
  s.num_generations = 2;
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  const Prediction one = predict_as_given(s);
  s.steps_per_generation = 32;  // 64 completions a generation, 2 a micro-step
  const Prediction many = predict_as_given(s);
  CHECK(many.where.phase == "generation");
  CHECK(many.peak_allocated > one.peak_allocated);
  // A generation inside the accumulation (32 micro-steps a generation, 64 a step) holds the gradients.
  s.grad_accum = 64;
  const Prediction held = predict_as_given(s);
  CHECK(held.peak_allocated > many.peak_allocated);
}

TEST_CASE("a generation misaligned with the optimizer step adds the old policy's no-grad log-prob pass") {
  // grpo_trainer.py 1.16.0: old_per_token_logps when gradient_accumulation_steps %
  // (steps_per_generation x num_iterations) != 0, even at beta 0 and without vLLM.
  RunSettings s = grpo_llama_1b(TrainMode::kLora, 2, 64 + 256, 256);
  s.num_generations = 2;
  s.grad_accum = 4;
  const ModelContext context = context_of(s);
  CHECK(phases_of(context, s).logprob_pass == 0);  // steps_per_generation defaults to the accumulation
  s.steps_per_generation = 2;
  CHECK(phases_of(context, s).logprob_pass == 0);  // 4 % 2 == 0: aligned
  s.steps_per_generation = 8;
  CHECK(phases_of(context, s).logprob_pass > 0);  // 4 % 8 != 0: a generation outlives the step
}

TEST_CASE("a reference adds the no-grad log-prob pass, and a frozen copy its weights") {
  const RunSettings none = grpo_llama_1b(TrainMode::kFull, 4, 512, 256);
  RunSettings copy = none;
  copy.reference = Reference::kCopy;
  const ModelContext context = context_of(copy);
  CHECK(phases_of(context, copy).logprob_pass > 0);
  const Prediction without = predict_as_given(none);
  const Prediction with = predict_as_given(copy);
  const int64_t weights = with.allocated.parameters - without.allocated.parameters;
  CHECK(weights >= 2 * 1235814400LL);
  CHECK(weights < 2 * 1235814400LL + 512 * 200);
}

TEST_CASE("walk_step prices the generation and the log-prob pass before the forward, gradients as held") {
  StepModel model;
  model.base = 1000;
  BlockProfile block;
  block.keep = 300;
  block.fwd_peak = 350;
  block.bwd_peak = 400;
  block.on_autograd = true;
  model.blocks = {block};
  model.grads_bwd = {0};
  model.copy_ms = {0};
  const std::vector<BlockChoice> keep = {BlockChoice::kKeep};
  CHECK(walk_step(model, keep, 0).phase == "backward");
  model.generation = 800;
  model.grads_generation = 50;
  const StepPeak generation = walk_step(model, keep, 0);
  CHECK(generation.phase == "generation");
  CHECK(generation.bytes == 1000 + 50 + 800);
  CHECK(generation.gradients == 50);
  model.logprob_pass = 900;
  CHECK(walk_step(model, keep, 0).phase == "log-prob pass");
  // No block choice makes room for it: the solver finds nothing below it.
  CHECK_FALSE(solve_blocks(model, 1000 + 50 + 850, SolverOptions{}).feasible);
  CHECK(solve_blocks(model, 1000 + 50 + 900, SolverOptions{}).feasible);
}

TEST_CASE("GRPO settings that are not modelled are refused by name") {
  RunSettings s = grpo_llama_1b(TrainMode::kLora, 4, 512, 256);
  REQUIRE(validate_settings(s, "test").is_ok());
  auto refused = [](RunSettings bad, const char* field) {
    const Status status = validate_settings(bad, "test");
    CHECK_FALSE(status.is_ok());
    CHECK(status.message().find(field) != std::string::npos);
  };
  RunSettings bad = s;
  bad.completion_tokens = 512;
  refused(bad, "seq_len");
  bad = s;
  bad.num_generations = 3;
  refused(bad, "num_generations");
  bad = s;
  bad.precision = Precision::kBf16Amp;
  refused(bad, "precision");
  bad = s;
  bad.zero_stage = 3;
  refused(bad, "recipe");
  bad = s;
  bad.reference = Reference::kPrecomputed;
  refused(bad, "reference");
  RunSettings given_copy = s;  // beta != 0 under LoRA: the adapter-disabled base, as TRL takes it
  given_copy.reference = Reference::kCopy;
  CHECK(validate_settings(given_copy, "test").is_ok());
  CHECK(resolve_stack(given_copy).top.reference == Reference::kAdapterDisabled);
  bad = s;
  bad.recipe.reset();
  refused(bad, "completion_tokens");
}

TEST_CASE("GRPO resolves TRL's defaults: the fused head, no reference, the completion's default") {
  RunSettings s = grpo_llama_1b(TrainMode::kLora, 4, 1024, 256);
  s.completion_tokens.reset();
  const ResolvedStack stack = resolve_stack(s);
  CHECK(stack.top.loss.impl == LossImpl::kTrlFusedHead);
  CHECK(stack.top.reference == Reference::kNone);
  CHECK(grpo_completion_tokens(s) == 512);
  CHECK(grpo_generation_rows(s) == 4);
}

}  // namespace headroom::planner
