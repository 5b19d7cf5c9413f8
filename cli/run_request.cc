#include "cli/run_request.h"

#include <string>

#include "executor/run.h"
#include "planner/predict/plan_file.h"

namespace headroom::cli {

RunRequest check_run_request(const CliOptions& options, Terminal& terminal, bool gpu_available) {
  RunRequest out;
  auto refuse = [&](const Status& status) {
    out.exit_code = fail(terminal, status);
    return out;
  };
  // As simulate and report read it: the same loader and preparation, so the
  // same message and exit status.
  Result<planner::PreparedPlan> prepared = planner::load_prepared_plan(options.plan_path);
  if (!prepared.is_ok()) return refuse(prepared.status().with_prefix("PLAN: "));
  const executor::RunOptions& run = options.run;
  if (Status s = executor::validate_run_options(run, "command line"); !s.is_ok()) return refuse(s);
  if (Status s = executor::check_executable(prepared->plan, options.plan_path); !s.is_ok())
    return refuse(s);
  // Outputs that cannot be written are refused before hours of training.
  if (!options.calibration_out.empty() && (run.device == "cpu" || !gpu_available)) {
    return refuse(Status::invalid_input(
        "--write-calibration " + options.calibration_out +
        ": a calibration needs a run on a GPU, and this one would run on the CPU"));
  }
  out.plan = std::move(prepared->plan);
  return out;
}

}  // namespace headroom::cli
