// `headroom fit` and `headroom plan` as values: the settings resolved, the GPU
// looked up, the planner's answer, and the JSON document `--json` prints. The
// command line and the Python package (cli/python/) both call these, so the two
// give the same answer byte for byte (tests/python/test_api.py holds it).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/named_file.h"
#include "cli/settings_flags.h"
#include "graph/status.h"
#include "planner/settings/hardware.h"
#include "planner/predict/planner.h"
#include "planner/settings/run_settings.h"

namespace headroom::cli {

// The settings and the GPU as the planner will see them.
struct PreparedRun {
  planner::RunSettings settings;
  planner::GpuSpec gpu;  // with gpu_memory_bytes (--gpu-mem) applied
};

// A value, or the error with which `headroom` refuses (its message without
// the "headroom: " prefix; its code gives the exit status, cli/exit_status.h);
// and, either way, the notes it prints to stderr first (what an imported config
// assumed or did not read).
template <typename T>
struct Answered {
  std::optional<T> value;
  Status status;  // ok when there is a value
  std::vector<std::string> notes;
  // Files the configs named and their readers opened (a `deepspeed:` key's):
  // inputs no output may replace (cli/output_guard.h).
  std::vector<NamedFile> files_read;

  bool is_ok() const { return value.has_value(); }
  T* operator->() { return &*value; }
  const T* operator->() const { return &*value; }
};

struct FitOutcome {
  PreparedRun run;
  planner::FitAnswer answer;
};

struct PlanOutcome {
  PreparedRun run;
  planner::PlanResult result;
};

// Resolves `model` and the flags (settings file or text, imported configs,
// flags; cli/settings_flags.h), looks the GPU up and refuses budgets the CUDA
// context alone would fill.
Answered<PreparedRun> prepare_run(const std::string& model, const SettingsFlags& flags);

// The run exactly as given, and the best plan when it does not fit.
Answered<FitOutcome> answer_fit(const std::string& model, const SettingsFlags& flags);

// The fastest plan that fits; `progress` is called as configurations are searched.
Answered<PlanOutcome> answer_plan(const std::string& model, const SettingsFlags& flags,
                                  const planner::Progress& progress = {});

// The documents `headroom fit --json` and `headroom plan --json` print
// (docs/cli-json.md). `output_path` is plan's -o FILE ("" when none): it is
// named only when the plan was found, since only then is the file written.
nlohmann::json fit_document(const FitOutcome& fit);
nlohmann::json plan_document(const PlanOutcome& plan, const std::string& output_path);

}  // namespace headroom::cli
