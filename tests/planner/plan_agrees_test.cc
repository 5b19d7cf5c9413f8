// One pricing path (issue 36): the plan `plan` finds, written to a plan file and
// read back as `simulate`, `report` and `run` read it (prepare_plan), and the same
// settings given to `fit`, are priced to the byte as the search priced them. The
// search once priced every candidate in the context of the run as given: a ZeRO-3
// plan for a LoRA run was declared to fit at 74.2 GiB, and its own simulation ran
// out of memory at 92.0 GiB.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/predict/plan_file.h"
#include "planner/predict/planner.h"
#include "planner/settings/settings_json.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

RunSettings settings_of(const json& fields) {
  Result<RunSettings> settings = settings_from_json(fields, "grid");
  REQUIRE_MESSAGE(settings.is_ok(), settings.message());
  return settings.value();
}

// What every command shows of a prediction, compared exactly.
void check_same(const Prediction& found, const Prediction& again, const std::string& what) {
  INFO(what);
  CHECK(again.gpu_total == found.gpu_total);
  CHECK(again.gpu_total_bottom == found.gpu_total_bottom);
  CHECK(again.peak_reserved == found.peak_reserved);
  CHECK(again.peak_allocated == found.peak_allocated);
  CHECK(again.fits_gpu == found.fits_gpu);
  CHECK(again.fits_gpu_bottom == found.fits_gpu_bottom);
  CHECK(again.simulated_out_of_memory == found.simulated_out_of_memory);
  CHECK(again.host_ram == found.host_ram);
  CHECK(again.disk == found.disk);
  CHECK(again.fits() == found.fits());
  CHECK(again.time.step_ms == found.time.step_ms);
  CHECK(again.band_unknowns == found.band_unknowns);
}

// Plans the run and checks the plan file and `fit` of its settings against it.
// Returns whether a plan that fits was found.
bool plan_agrees(const json& fields) {
  const RunSettings settings = settings_of(fields);
  Result<PlanResult> planned = plan(settings);
  REQUIRE_MESSAGE(planned.is_ok(), planned.message());
  const Plan& best = planned->best;
  if (best.model.empty()) return false;
  const std::string what = fields.dump();
  // Through the plan file's text, as `plan -o` writes it and `simulate` reads it.
  Result<Plan> read = plan_from_json(json::parse(plan_to_json(best).dump()), "plan.json");
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  Result<PreparedPlan> prepared = prepare_plan(std::move(read.value()), "plan.json");
  REQUIRE_MESSAGE(prepared.is_ok(), prepared.message());
  check_same(best.prediction, prepared->plan.prediction, "simulate of the plan file: " + what);
  Result<FitAnswer> fitted = fit(best.settings);
  REQUIRE_MESSAGE(fitted.is_ok(), fitted.message());
  check_same(best.prediction, fitted->as_given.prediction, "fit of the plan's settings: " + what);
  return planned->found;
}

}  // namespace

TEST_CASE("plan = simulate = fit: the reproducer, a LoRA run the search moves to ZeRO-3 (issue 36)") {
  CHECK(plan_agrees({{"model", "llama-3-8b"}, {"gpu", "h100-sxm"}, {"mode", "lora"}, {"seq_len", 8192},
                     {"precision", "bf16"}}));
}

TEST_CASE("plan = simulate = fit: one GPU, LoRA and QLoRA under several stacks") {
  const json runs[] = {
      {{"model", "mistral-7b"}, {"gpu", "4090"}, {"mode", "qlora"}, {"seq_len", 4096}, {"precision", "bf16"}},
      {{"model", "mistral-7b"}, {"gpu", "a6000"}, {"mode", "lora"}, {"seq_len", 2048}, {"precision", "bf16"},
       {"stack", "hf-trainer"}, {"global_batch", 8}},
      {{"model", "llama-3-8b"}, {"gpu", "a100-80g"}, {"mode", "lora"}, {"seq_len", 4096}, {"precision", "bf16"},
       {"stack", "torchtune"}, {"global_batch", 4}},
  };
  for (const json& run : runs) CHECK_MESSAGE(plan_agrees(run), run.dump());
}

TEST_CASE("plan = simulate = fit: one GPU, full fine-tunes") {
  const json runs[] = {
      {{"model", "gpt2"}, {"gpu", "4090"}, {"mode", "full"}, {"seq_len", 1024}, {"precision", "bf16-mixed"},
       {"global_batch", 64}},
      {{"model", "bert-large-uncased"}, {"gpu", "3090"}, {"mode", "full"}, {"precision", "fp16-mixed"},
       {"global_batch", 32}, {"stack", "hf-trainer"}},
  };
  for (const json& run : runs) CHECK_MESSAGE(plan_agrees(run), run.dump());
}

TEST_CASE("plan = simulate = fit: sharded runs, DeepSpeed and FSDP") {
  const json runs[] = {
      {{"model", "mistral-7b"}, {"gpu", "3090"}, {"gpus_per_node", 4}, {"mode", "full"}, {"seq_len", 2048},
       {"precision", "bf16-mixed"}, {"global_batch", 8}},
      {{"model", "llama-3-8b"}, {"gpu", "a100-80g"}, {"gpus_per_node", 2}, {"mode", "full"}, {"seq_len", 4096},
       {"precision", "bf16-mixed"}, {"stack", "hf-trainer"}, {"sharding", "fsdp2"}, {"global_batch", 8}},
      {{"model", "llama-3-8b"}, {"gpu", "a6000"}, {"gpus_per_node", 2}, {"mode", "lora"}, {"seq_len", 4096},
       {"precision", "bf16"}, {"stack", "torchtune"}, {"sharding", "fsdp2"}, {"global_batch", 4}},
  };
  for (const json& run : runs) CHECK_MESSAGE(plan_agrees(run), run.dump());
}

TEST_CASE("plan = simulate = fit: a run that fits nowhere still writes the plan simulate reads") {
  CHECK_FALSE(plan_agrees({{"model", "llama-3-8b"}, {"gpu", "3090"}, {"mode", "full"}, {"seq_len", 2048},
                           {"precision", "bf16-mixed"}, {"max_zero_stage", 0}}));
}

}  // namespace headroom::planner
