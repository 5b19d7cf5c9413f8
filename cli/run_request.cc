#include "cli/run_request.h"

#include <string>

#include "executor/run.h"
#include "planner/plan_file.h"

namespace headroom::cli {

RunRequest check_run_request(const CliOptions& options, Terminal& terminal, bool gpu_available) {
  RunRequest out;
  auto fail = [&](int exit_code, const std::string& message) {
    terminal.err << "headroom: " << message << "\n";
    out.exit_code = exit_code;
    return out;
  };
  // As simulate and report read it: the same loader, message and exit status.
  Result<planner::Plan> plan = planner::load_plan_file(options.plan_path);
  if (!plan.is_ok()) return fail(kExitUsage, "PLAN: " + plan.message());
  const executor::RunOptions& run = options.run;
  if (Status s = executor::validate_run_options(run, "command line"); !s.is_ok()) return fail(kExitUsage, s.message());
  if (Status s = executor::check_executable(plan.value(), options.plan_path); !s.is_ok()) {
    return fail(kExitFailure, s.message());
  }
  // Outputs that cannot be written are refused before hours of training.
  if (!options.calibration_out.empty() && (run.device == "cpu" || !gpu_available)) {
    return fail(kExitUsage, "--write-calibration " + options.calibration_out +
                                ": a calibration needs a run on a GPU, and this one would run on the CPU");
  }
  out.plan = std::move(plan.value());
  return out;
}

}  // namespace headroom::cli
