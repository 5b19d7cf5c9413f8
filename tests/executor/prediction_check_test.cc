// The prediction check: the rows `headroom run` compares come from the Plan's
// prediction (planner::Prediction::allocated), which holds what the planner's
// model states and step profile give in allocated accounting, and the
// calibration scales the time model by predicted / measured step time.
#include <doctest/doctest.h>

#include <string>

#include "executor/prediction_check.h"
#include "planner/time/block_profile.h"
#include "planner/memory/model_states.h"
#include "planner/predict/planner.h"

namespace headroom::executor {
namespace {

planner::Plan plan_for(const std::string& model, planner::CheckpointPolicy checkpointing) {
  planner::RunSettings settings;
  settings.model = model;
  settings.gpu = "a6000";
  settings.precision = planner::Precision::kBf16Mixed;
  settings.checkpointing = checkpointing;
  settings.micro_batch = 2;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  return answer->as_given;
}

const CategoryCheck* find(const RunResult& r, const std::string& name) {
  for (const CategoryCheck& c : r.categories) {
    if (c.category == name) return &c;
  }
  return nullptr;
}

RunResult first_step(int64_t peak_allocated) {
  RunResult r;
  r.measured.steps.push_back(planner::MeasuredStep{1, peak_allocated, peak_allocated, 10.0, 5.0});
  return r;
}

}  // namespace

TEST_CASE("the plan's allocated categories are the planner's states and saved activations, allocated accounting") {
  for (const char* model : {"tiny-llama", "tiny-flux"}) {
    INFO(model);
    planner::Plan plan = plan_for(model, planner::CheckpointPolicy::kEveryBlock);
    REQUIRE(plan.blocks.size() > 2);
    plan.blocks[1] = planner::BlockChoice::kOffload;
    plan.blocks[2] = planner::BlockChoice::kKeep;
    Result<planner::ModelContext> context = planner::prepare_context(plan.settings);
    REQUIRE(context.is_ok());
    plan.prediction = planner::predict(context.value(), plan.settings, plan.config, plan.blocks, false);
    const planner::ModelStates states = planner::model_states(context->graph, plan.settings, plan.config,
                                                              planner::Accounting::kAllocated);
    const planner::StepProfile profile =
        planner::profile_step(context->graph, context->analysis, context->compute_dtype, plan.config.micro_batch,
                              plan.seq_len, planner::Accounting::kAllocated, context->gpu);
    int64_t activations = profile.persistent;
    for (size_t b = 0; b < plan.blocks.size(); ++b) {
      if (plan.blocks[b] == planner::BlockChoice::kKeep) activations += profile.blocks[b].keep;
      if (plan.blocks[b] == planner::BlockChoice::kCheckpoint) activations += profile.blocks[b].checkpoint;
    }
    const planner::MeasurableMemory& a = plan.prediction.allocated;
    CHECK(a.parameters == states.params);
    CHECK(a.optimizer_states == states.optimizer);
    CHECK(a.master_weights == states.master);
    CHECK(a.gradients == states.grads_full);
    CHECK(a.activations == activations);
    CHECK(a.offloaded_activations == profile.blocks[1].keep);
    CHECK(a.offloaded_activations > 0);
  }
}

TEST_CASE("the category rows read the plan's prediction") {
  planner::Plan plan = plan_for("tiny-llama", planner::CheckpointPolicy::kNone);
  planner::Prediction& p = plan.prediction;
  p.allocated = planner::MeasurableMemory{100, 20, 30, 40, 50, 0};
  p.peak_allocated = 1000;
  p.peak.workspaces = 300;
  const MeasuredCategories measured{101, 52, 41, 49, 0};

  RunResult gpu = first_step(990);
  add_category_checks(plan, measured, /*on_cuda=*/true, gpu);
  REQUIRE(gpu.categories.size() == 5);
  CHECK(find(gpu, "parameters")->predicted == 100);
  CHECK(find(gpu, "parameters")->measured == 101);
  CHECK(find(gpu, "optimizer states + master weights")->predicted == 50);
  CHECK(find(gpu, "optimizer states + master weights")->measured == 52);
  CHECK(find(gpu, "gradients")->predicted == 40);
  CHECK(find(gpu, "activations")->predicted == 50);
  CHECK(find(gpu, "offloaded activations") == nullptr);  // the plan offloads nothing
  CHECK(find(gpu, "peak allocated (step 1)")->predicted == 1000);
  CHECK(find(gpu, "peak allocated (step 1)")->measured == 990);
  CHECK(gpu.notes.empty());

  // A CPU run: no cuBLAS workspace in the peak; optimizer offload shares the memory, so no state rows.
  plan.config.offload_optimizer = planner::Offload::kCpu;
  p.allocated.offloaded_activations = 70;
  RunResult cpu = first_step(650);
  add_category_checks(plan, MeasuredCategories{101, 0, 0, 49, 68}, /*on_cuda=*/false, cpu);
  CHECK(find(cpu, "optimizer states + master weights") == nullptr);
  CHECK(find(cpu, "gradients") == nullptr);
  CHECK(find(cpu, "offloaded activations")->predicted == 70);
  CHECK(find(cpu, "offloaded activations")->measured == 68);
  CHECK(find(cpu, "peak allocated less cuBLAS workspace (step 1)")->predicted == 700);
  CHECK(cpu.notes.size() == 2);
}

TEST_CASE("a GPU run calibrates the time model by predicted over measured step time") {
  planner::Plan plan = plan_for("tiny-llama", planner::CheckpointPolicy::kNone);
  plan.prediction.time.step_ms = 50;
  planner::MeasuredRun run;
  run.device = "NVIDIA H100";
  CHECK_FALSE(calibrate(plan, 0.6, run, 1 << 20).has_value());  // no steps
  for (int s = 1; s <= 3; ++s) run.steps.push_back(planner::MeasuredStep{s, 0, 0, 100.0, 1.0});
  const std::optional<planner::Calibration> c = calibrate(plan, 0.6, run, int64_t{1} << 20);
  REQUIRE(c.has_value());
  CHECK(c->gpu == "a6000");
  CHECK(*c->matmul_efficiency == doctest::Approx(0.3));
  CHECK(*c->cuda_context_bytes == int64_t{1} << 20);
  CHECK(c->source.find("headroom run on NVIDIA H100") == 0);
  plan.prediction.time.step_ms = 0;
  CHECK_FALSE(calibrate(plan, 0.6, run, std::nullopt).has_value());
}

TEST_CASE("the host offload a plan needs is its host RAM beyond the processes' own") {
  planner::Plan plan = plan_for("tiny-llama", planner::CheckpointPolicy::kNone);
  plan.prediction.host_ram = planner::kHostBytesPerRank * plan.settings.gpus_per_node + 12345;
  CHECK(predicted_host_offload(plan) == 12345);
  plan.prediction.host_ram = 0;
  CHECK(predicted_host_offload(plan) == 0);
}

}  // namespace headroom::executor
