#include "planner/predict/planner.h"

#include "planner/predict/moe_notes.h"
#include "planner/predict/training_notes.h"
#include "planner/predict/vllm_share.h"
#include "planner/settings/may_change.h"

namespace headroom::planner {

namespace {

// The run's context, refused where vLLM would not start (no plan makes it start).
Result<ModelContext> prepare_run_context(const RunSettings& settings) {
  Result<ModelContext> context = prepare_context(settings);
  if (!context.is_ok()) return context;
  if (Status vllm = check_vllm_engine(context.value(), settings); !vllm.is_ok()) {
    return vllm.with_prefix("generation: ");
  }
  return context;
}

}  // namespace

Result<FitAnswer> fit(const RunSettings& settings) {
  Result<ModelContext> context = prepare_run_context(settings);
  if (!context.is_ok()) return context.status();
  if (Status values = check_batch_norm_values(context.value(), settings.micro_batch); !values.is_ok()) return values;
  Result<std::vector<BlockChoice>> choices = user_block_choices(context.value(), settings);
  if (!choices.is_ok()) return choices.status();
  FitAnswer answer;
  Plan& plan = answer.as_given;
  plan.model = context->graph.name;
  plan.gpu = context->gpu.id;
  plan.settings = settings_for_plan(settings);
  plan.config = user_config(settings);
  plan.blocks = choices.value();
  for (const graph::Block& block : context->graph.blocks) plan.block_names.push_back(block.name);
  plan.seq_len = context->seq_len;
  plan.prediction = with_band(context.value(), settings, plan.config, plan.blocks,
                              predict(context.value(), settings, plan.config, plan.blocks));
  answer.fits = plan.prediction.fits();
  if (!answer.fits) answer.alternative = find_plan(context.value(), settings);
  answer.warnings = input_warnings(context.value(), settings);
  for (const std::string& note : moe_notes(context->graph, settings)) answer.warnings.push_back(note);
  for (const std::string& note : training_notes(context->graph, plan.config, "the run")) answer.warnings.push_back(note);
  for (const std::string& note : reentrant_checkpointing_notes(context->graph, settings)) {
    answer.warnings.push_back(note);
  }
  for (const std::string& note : vllm_notes(context.value(), settings, plan.prediction)) {
    answer.warnings.push_back(note);
  }
  if (!answer.fits && answer.alternative.found) {
    for (const std::string& note : training_notes(context->graph, answer.alternative.best.config, "the plan found")) {
      answer.warnings.push_back(note);
    }
  }
  return answer;
}

Result<PlanResult> plan(const RunSettings& settings, const Progress& progress) {
  Result<ModelContext> context = prepare_run_context(settings);
  if (!context.is_ok()) return context.status();
  // BatchNorm's refusal at the largest micro-batch the run could take is no "does
  // not fit": no memory would help.
  const int64_t per_rank = settings.effective_global_batch() / settings.world_size();
  const int64_t largest =
      knobs_for(settings).has(Knob::kMicroBatch) ? std::min(per_rank, kMaxMicroBatch) : settings.micro_batch;
  if (Status values = check_batch_norm_values(context.value(), largest); !values.is_ok()) return values;
  PlanResult result = find_plan(context.value(), settings, progress);
  result.warnings = input_warnings(context.value(), settings);
  for (const std::string& note : moe_notes(context->graph, settings)) result.warnings.push_back(note);
  for (const std::string& note : reentrant_checkpointing_notes(context->graph, settings)) {
    result.warnings.push_back(note);
  }
  if (result.found) {
    for (const std::string& note : vllm_notes(context.value(), settings, result.best.prediction)) {
      result.warnings.push_back(note);
    }
  }
  if (result.found) {
    for (const std::string& note : training_notes(context->graph, result.best.config, "the plan")) {
      result.warnings.push_back(note);
    }
  }
  return result;
}

}  // namespace headroom::planner
