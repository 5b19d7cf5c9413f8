// The plan's space follows the stack (issue 36, planner/settings/may_change.h):
// the Trainer checkpoints every layer or none, torchtitan every N-th, litgpt's
// scripts change the micro-batch only; may_change widens or narrows that, and
// what lies beyond it is listed with its numbers, never planned silently.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "planner/predict/planner.h"
#include "planner/settings/may_change.h"
#include "planner/settings/validate_settings.h"

namespace headroom::planner {
namespace {

// Mistral 7B QLoRA on a 4090 at 4096 tokens, two samples per step: per-block
// checkpointing fits with 16 blocks checkpointed.
RunSettings qlora_run(Stack stack) {
  RunSettings s;
  s.model = "mistral-7b";
  s.gpu = "4090";
  s.mode = TrainMode::kQlora;
  s.precision = Precision::kBf16Pure;
  s.seq_len = 4096;
  s.global_batch = 2;
  s.stack = stack;
  return s;
}

PlanResult plan_of(const RunSettings& settings) {
  Result<PlanResult> result = plan(settings);
  REQUIRE_MESSAGE(result.is_ok(), result.message());
  return result.value();
}

std::vector<int> checkpointed(const Plan& plan) {
  std::vector<int> out;
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    if (plan.blocks[b] == BlockChoice::kCheckpoint) out.push_back(static_cast<int>(b));
  }
  return out;
}

bool lists(const std::vector<Suggestion>& suggestions, const std::string& change) {
  return std::any_of(suggestions.begin(), suggestions.end(),
                     [&](const Suggestion& s) { return s.change == change; });
}

}  // namespace

TEST_CASE("the Trainer's plan checkpoints every layer or none, and per-block checkpointing is an alternative") {
  const PlanResult trainer = plan_of(qlora_run(Stack::kHfTrainer));
  REQUIRE(trainer.found);
  const size_t count = checkpointed(trainer.best).size();
  CHECK((count == 0 || count == 32));
  CHECK(std::count(trainer.best.blocks.begin(), trainer.best.blocks.end(), BlockChoice::kOffload) == 0);
  CHECK(trainer.space_is_stack);
  CHECK(trainer.space.find("every block or none") != std::string::npos);
  // Beyond the Trainer's space: per-block checkpointing, faster, with its numbers.
  REQUIRE(lists(trainer.alternatives, "--may-change all"));
  RunSettings wider = qlora_run(Stack::kHfTrainer);
  wider.may_change = {"all"};
  const PlanResult all = plan_of(wider);
  REQUIRE(all.found);
  const size_t partial = checkpointed(all.best).size();
  CHECK(partial > 0);
  CHECK(partial < 32);
  CHECK(all.best.prediction.time.step_ms < trainer.best.prediction.time.step_ms);
  CHECK_FALSE(all.space_is_stack);
}

TEST_CASE("torchtitan's plan checkpoints every N-th block, counted from 1 as selective_ac_option does") {
  RunSettings s = qlora_run(Stack::kTorchtitan);
  s.gpu_memory_bytes = int64_t{60} << 30;
  s.allow_micro_batch_change = false;
  s.micro_batch = 2;
  const PlanResult result = plan_of(s);
  REQUIRE(result.found);
  const std::vector<int> blocks = checkpointed(result.best);
  // Blocks 0 (embeddings) and 33 (head) are not layers: layer i is block i + 1.
  REQUIRE(blocks.size() == 16);
  for (size_t i = 0; i < blocks.size(); ++i) CHECK(blocks[i] == 2 + 2 * static_cast<int>(i));
}

TEST_CASE("litgpt's scripts change the micro-batch only: the run's own ZeRO, offload and checkpointing stay") {
  const PlanResult result = plan_of(qlora_run(Stack::kLitgpt));
  CHECK_FALSE(result.found);
  REQUIRE_FALSE(result.best.model.empty());
  CHECK(result.best.config.zero_stage == 0);
  CHECK(result.best.config.offload_optimizer == Offload::kNone);
  CHECK(checkpointed(result.best).empty());
  CHECK(lists(result.suggestions, "--may-change all"));
}

TEST_CASE("may_change narrows the space: only the micro-batch, the run's checkpointing kept") {
  RunSettings s = qlora_run(Stack::kUnspecified);
  s.checkpointing = CheckpointPolicy::kEveryBlock;
  s.may_change = {"micro-batch"};
  const PlanResult result = plan_of(s);
  REQUIRE(result.found);
  CHECK(result.best.config.zero_stage == 0);
  CHECK(result.best.config.offload_optimizer == Offload::kNone);
  CHECK(checkpointed(result.best).size() == 32);
  CHECK(result.space == "micro-batch and accumulation (the global batch kept)");
}

TEST_CASE("may_change: an unknown name is refused with the field and the names it takes") {
  RunSettings s = qlora_run(Stack::kUnspecified);
  s.may_change = {"checkpoint", "zero"};
  const Status status = validate_settings(s, "settings.json");
  CHECK(status.message().find("settings.json: may_change: unknown \"checkpoint\" (expected stack, all, "
                              "checkpointing,") == 0);
  s.may_change = {"stack", "activation-offload"};
  CHECK(validate_settings(s, "settings.json").is_ok());
}

TEST_CASE("stack_knobs: per stack, the granularity of checkpointing the plan may choose") {
  CHECK(checkpoint_granularity(stack_knobs(Stack::kHfTrainer)) == CheckpointGranularity::kAllOrNone);
  CHECK(checkpoint_granularity(stack_knobs(Stack::kTorchtune)) == CheckpointGranularity::kAllOrNone);
  CHECK(checkpoint_granularity(stack_knobs(Stack::kTorchtitan)) == CheckpointGranularity::kEveryNth);
  CHECK(checkpoint_granularity(stack_knobs(Stack::kLitgpt)) == CheckpointGranularity::kAsGiven);
  CHECK(checkpoint_granularity(stack_knobs(Stack::kUnspecified)) == CheckpointGranularity::kPerBlock);
  CHECK_FALSE(stack_knobs(Stack::kHfTrainer).has(Knob::kActivationOffload));
  CHECK(stack_knobs(Stack::kTorchAmp).has(Knob::kActivationOffload));
}

TEST_CASE("short of host RAM only: fewer trainable parameters are offered beside the budget (issue 36)") {
  RunSettings s;
  s.model = "mistral-7b";
  s.gpu = "4090";
  s.seq_len = 1024;
  s.precision = Precision::kBf16Mixed;
  s.host_ram_bytes = int64_t{64} << 30;
  s.disk_free_bytes = int64_t{4000} * 1000 * 1000 * 1000;
  const PlanResult result = plan_of(s);
  CHECK_FALSE(result.found);
  CHECK(result.short_of == std::vector<std::string>{"host RAM"});
  CHECK(lists(result.suggestions, "lora (rank 16)"));
}

}  // namespace headroom::planner
