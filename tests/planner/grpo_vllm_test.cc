// GRPO with vLLM (TRL 1.16.0's use_vllm; trl/generation/vllm_generation.py) against vLLM
// 0.31.0's arithmetic (docs/stacks.md, "GRPO with vLLM"): colocated, the engine takes
// ceil(total x gpu_memory_utilization) (vllm/v1/worker/utils.py request_memory), all step
// or, in sleep mode, for generation only; it will not start when the free memory is below
// that, or when its KV cache cannot hold one max_model_len request in 16-token blocks plus
// the null block (v1/core/kv_cache_utils.py check_enough_kv_cache_memory). A server holds
// nothing on the trainer's GPU. With vLLM the old policy's no-grad log-prob pass runs.
#include <doctest/doctest.h>

#include <cmath>

#include "planner/mechanisms/vllm_engine.h"
#include "planner/predict/grpo_phases.h"
#include "planner/settings/stack.h"
#include "planner/settings/validate_settings.h"
#include "predict_as_given.h"

namespace headroom::planner {
namespace {

// Llama 3.2 1B (its config.json: 1,235,814,400 parameters with the tied head, 16 layers
// of 8 KV heads of 64, max_position_embeddings 131072) with LoRA in bf16 on an H200.
RunSettings grpo_vllm(Generation generation, double utilization) {
  RunSettings s;
  s.model = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/llama-3.2-1b/config.json";
  s.gpu = "h200";
  s.precision = Precision::kBf16Pure;
  s.stack = Stack::kHfTrainer;
  s.mode = TrainMode::kLora;
  s.lora.dropout = 0;
  s.micro_batch = 4;
  s.seq_len = 768;
  s.versions = {{"transformers", "5.23.0"}, {"torch", "2.11.0"}, {"peft", "0.21.2"}, {"trl", "1.16.0"}};
  s.recipe = Recipe::kGrpo;
  s.completion_tokens = 256;
  s.num_generations = 4;
  s.generation = generation;
  if (generation == Generation::kVllmColocate || generation == Generation::kVllmColocateSleep) {
    s.vllm_gpu_memory_utilization = utilization;
  }
  return s;
}

constexpr int64_t kH200Bytes = 143771LL << 20;          // nvidia-smi's 143771 MiB
constexpr int64_t kLlama1bBf16 = 1235814400LL * 2;      // vLLM's own copy of the weights
constexpr int64_t kKvBytesPerToken = 16 * 2 * 8 * 64 * 2;  // 16 layers' K and V, bf16

int64_t share_of(double utilization) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(kH200Bytes) * utilization));
}

}  // namespace

TEST_CASE("vllm_engine takes ceil(total x utilization) and needs one max_model_len request plus the null block") {
  RunSettings s = grpo_vllm(Generation::kVllmColocate, 0.3);
  s.vllm_max_model_len = 1000;
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const VllmEngine engine = vllm_engine(context->graph, s, 1000000, 200000, 10);
  CHECK(engine.colocated);
  CHECK_FALSE(engine.sleeps);
  CHECK(engine.share_bytes == 300000);
  CHECK(engine.weights_bytes == kLlama1bBf16);
  // 1000 tokens: 63 blocks of 16, and the null block.
  CHECK(engine.kv_needed_bytes == (63 + 1) * 16 * 10);
  CHECK(engine.free_at_start_bytes == 800000);
  // Without a max_model_len vLLM takes the model's maximum positions.
  s.vllm_max_model_len.reset();
  CHECK(vllm_engine(context->graph, s, 1000000, 0, 10).max_model_len == 131072);
}

TEST_CASE("vLLM will not start when the trainer leaves less free than its share") {
  VllmEngine engine;
  engine.colocated = true;
  engine.utilization = 0.5;
  engine.share_bytes = 500;
  engine.free_at_start_bytes = 500;
  engine.kv_at_most_bytes = 100;
  engine.kv_needed_bytes = 100;
  CHECK(check_vllm_starts(engine, 1000, 1).is_ok());
  engine.free_at_start_bytes = 499;
  const Status short_free = check_vllm_starts(engine, 1000, 1);
  REQUIRE_FALSE(short_free.is_ok());
  CHECK(short_free.message().find("request_memory") != std::string::npos);
  CHECK(short_free.message().find("at most 0.499") != std::string::npos);
  engine.free_at_start_bytes = 500;
  engine.kv_at_most_bytes = 99;
  const Status short_kv = check_vllm_starts(engine, 1000, 1);
  REQUIRE_FALSE(short_kv.is_ok());
  CHECK(short_kv.message().find("check_enough_kv_cache_memory") != std::string::npos);
  CHECK(short_kv.message().find("99 tokens") != std::string::npos);
}

TEST_CASE("a colocated GRPO run is refused with vLLM's numbers when vLLM cannot start") {
  // 0.99 of the H200: the trainer's context and weights leave less free.
  const Result<FitAnswer> greedy = fit(grpo_vllm(Generation::kVllmColocate, 0.99));
  REQUIRE_FALSE(greedy.is_ok());
  CHECK(greedy.message().find("vLLM will not start") != std::string::npos);
  CHECK(greedy.message().find("request_memory") != std::string::npos);
  // 0.02: 3,015,100,335 bytes less the weights leave 543,471,535 bytes, 16585 tokens, below
  // the 131072 the model's maximum positions need.
  const Result<PlanResult> small = plan(grpo_vllm(Generation::kVllmColocate, 0.02), Progress{});
  REQUIRE_FALSE(small.is_ok());
  CHECK(small.message().find("16585 tokens") != std::string::npos);
  RunSettings short_context = grpo_vllm(Generation::kVllmColocate, 0.02);
  short_context.vllm_max_model_len = 8192;  // 513 blocks of 16 tokens: 268,959,744 bytes
  const Result<FitAnswer> fits = fit(short_context);
  CHECK_MESSAGE(fits.is_ok(), fits.message());
  CHECK(share_of(0.02) - kLlama1bBf16 >= (8192 / 16 + 1) * 16 * kKvBytesPerToken);
}

TEST_CASE("colocated vLLM holds its share through every phase, a server nothing") {
  const Prediction server = predict_as_given(grpo_vllm(Generation::kVllmServer, 0));
  const Prediction colocated = predict_as_given(grpo_vllm(Generation::kVllmColocate, 0.3));
  CHECK(server.peak_as_allocated.vllm == 0);
  CHECK(colocated.peak_as_allocated.vllm == share_of(0.3));
  CHECK(colocated.peak.vllm == share_of(0.3));
  CHECK(colocated.where.phase == server.where.phase);
  CHECK(colocated.peak_allocated - server.peak_allocated == share_of(0.3));
  CHECK(colocated.peak_allocated == colocated.peak_as_allocated.total());
}

TEST_CASE("in sleep mode vLLM's share is taken for generation only") {
  const Prediction server = predict_as_given(grpo_vllm(Generation::kVllmServer, 0));
  const Prediction woken = predict_as_given(grpo_vllm(Generation::kVllmColocateSleep, 0.3));
  CHECK(woken.where.phase == "generation");
  CHECK(woken.peak_as_allocated.vllm == share_of(0.3));
  CHECK(woken.peak_as_allocated.transient == 0);  // the trainer runs nothing while vLLM generates
  CHECK(woken.peak_allocated == woken.peak_as_allocated.total());
  // A share smaller than the training step's peak: freed (level 2) for training, the peak is the server's.
  RunSettings small = grpo_vllm(Generation::kVllmColocateSleep, 0.02);
  small.vllm_max_model_len = 1024;
  const Prediction slept = predict_as_given(small);
  CHECK(slept.where.phase != "generation");
  CHECK(slept.peak_as_allocated.vllm == 0);
  CHECK(slept.peak_allocated == server.peak_allocated);
}

TEST_CASE("with vLLM generate does not run on the trainer, and the old policy's log-prob pass does") {
  RunSettings s = grpo_vllm(Generation::kVllmServer, 0);
  Result<ModelContext> context = prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  const StepProfile profile = profile_step(context->graph, context->analysis, context->compute_dtype, s.micro_batch,
                                           context->seq_len, Accounting::kAllocated, context->gpu,
                                           context->time_options, context->checkpoint_saves, 2);
  const GrpoPhases vllm = grpo_phases(context.value(), s, profile, Accounting::kAllocated);
  CHECK(vllm.generation == 0);
  CHECK(vllm.kv_cache == 0);
  CHECK(vllm.logprob_pass > 0);
  s.generation = Generation::kGenerate;
  const GrpoPhases generate = grpo_phases(context.value(), s, profile, Accounting::kAllocated);
  CHECK(generate.generation > 0);
  CHECK(generate.logprob_pass == 0);  // beta 0, no vLLM: no log-prob pass
}

TEST_CASE("vLLM settings out of place or out of range are refused by name") {
  auto refused = [](const RunSettings& bad, const char* field) {
    const Status status = validate_settings(bad, "test");
    CHECK_FALSE(status.is_ok());
    CHECK(status.message().find(field) != std::string::npos);
  };
  RunSettings s = grpo_vllm(Generation::kVllmColocate, 0.3);
  REQUIRE(validate_settings(s, "test").is_ok());
  RunSettings bad = s;
  bad.vllm_gpu_memory_utilization = 1.5;
  refused(bad, "vllm_gpu_memory_utilization");
  bad = grpo_vllm(Generation::kVllmServer, 0);
  bad.vllm_max_model_len = 2048;
  refused(bad, "vllm_max_model_len");
  bad = s;
  bad.mode = TrainMode::kQlora;
  refused(bad, "generation");
  bad = s;
  bad.recipe.reset();
  bad.completion_tokens.reset();
  refused(bad, "generation");
}

}  // namespace headroom::planner
