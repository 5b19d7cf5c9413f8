#include "cli/answers.h"

#include <utility>

#include "cli/resolve_settings.h"
#include "planner/settings/run_gpu.h"
#include "reports/fit_report.h"
#include "reports/units.h"

namespace headroom::cli {
namespace {

template <typename T>
Answered<T> refuse(Status status, std::vector<std::string> notes) {
  Answered<T> answered;
  answered.status = std::move(status);
  answered.notes = std::move(notes);
  return answered;
}

}  // namespace

Answered<PreparedRun> prepare_run(const std::string& model, const SettingsFlags& flags) {
  std::vector<std::string> notes;
  std::vector<NamedFile> files_read;
  Result<planner::RunSettings> settings = resolve_settings(model, flags, &notes, &files_read);
  // The command line shows the notes only of settings that resolved.
  if (!settings.is_ok()) return refuse<PreparedRun>(settings.status(), {});
  PreparedRun run;
  run.settings = std::move(settings.value());
  const planner::RunSettings& s = run.settings;

  Result<planner::GpuSpec> gpu = planner::run_gpu(s);
  if (!gpu.is_ok()) return refuse<PreparedRun>(gpu.status(), std::move(notes));
  run.gpu = gpu.value();

  // Below the context size every plan is nonsense: nothing of the model fits
  // beside the memory CUDA and PyTorch's kernels take before the first tensor.
  const int64_t context = s.cuda_context_bytes.value_or(run.gpu.cuda_context_bytes);
  const auto budget =
      static_cast<int64_t>(static_cast<double>(run.gpu.memory_bytes) * (1.0 - s.safety_margin));
  if (budget <= context) {
    return refuse<PreparedRun>(
        Status::invalid_input(
            "--gpu-mem: " + reports::format_gib(run.gpu.memory_bytes) + " of GPU memory (" +
            reports::format_gib(budget) + " after the " + reports::format_percent(s.safety_margin) +
            " safety margin) does not exceed the CUDA context alone (" +
            reports::format_gib(context) + " on " + run.gpu.name +
            "); expected GPU memory larger than the context size, e.g. --gpu-mem 24GiB"),
        std::move(notes));
  }
  Answered<PreparedRun> answered;
  answered.value = std::move(run);
  answered.notes = std::move(notes);
  answered.files_read = std::move(files_read);
  return answered;
}

Answered<FitOutcome> answer_fit(const std::string& model, const SettingsFlags& flags) {
  Answered<PreparedRun> prepared = prepare_run(model, flags);
  if (!prepared.is_ok()) return refuse<FitOutcome>(prepared.status, prepared.notes);
  Result<planner::FitAnswer> answer = planner::fit(prepared->settings);
  if (!answer.is_ok()) return refuse<FitOutcome>(answer.status(), prepared.notes);
  Answered<FitOutcome> answered;
  answered.value = FitOutcome{std::move(*prepared.value), std::move(answer.value())};
  answered.notes = std::move(prepared.notes);
  answered.files_read = std::move(prepared.files_read);
  return answered;
}

Answered<PlanOutcome> answer_plan(const std::string& model, const SettingsFlags& flags,
                                  const planner::Progress& progress) {
  Answered<PreparedRun> prepared = prepare_run(model, flags);
  if (!prepared.is_ok()) return refuse<PlanOutcome>(prepared.status, prepared.notes);
  Result<planner::PlanResult> result = planner::plan(prepared->settings, progress);
  if (!result.is_ok()) return refuse<PlanOutcome>(result.status(), prepared.notes);
  Answered<PlanOutcome> answered;
  answered.value = PlanOutcome{std::move(*prepared.value), std::move(result.value())};
  answered.notes = std::move(prepared.notes);
  answered.files_read = std::move(prepared.files_read);
  return answered;
}

nlohmann::json fit_document(const FitOutcome& fit) {
  return reports::fit_to_json(fit.answer, fit.run.gpu);
}

nlohmann::json plan_document(const PlanOutcome& plan, const std::string& output_path) {
  nlohmann::json document = reports::plan_document_to_json(plan.result, plan.run.gpu);
  document["output_file"] = plan.result.found && !output_path.empty() ? nlohmann::json(output_path)
                                                                      : nlohmann::json(nullptr);
  return document;
}

}  // namespace headroom::cli
