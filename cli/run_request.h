// What `headroom run` refuses before any training, in every build (with or
// without LibTorch, in `headroom` before it execs the trainer and in
// headroom-train itself): the plan file (read and prepared as simulate and
// report do), the run options, a plan the executor cannot apply, and outputs
// that could not be written. Torch-free.
#pragma once

#include "cli/commands.h"
#include "graph/status.h"
#include "planner/predict/plan.h"

namespace headroom::cli {

// The plan when the run may start; otherwise the exit status (of the error's
// kind, cli/exit_status.h), with the message already written to terminal.err.
// `gpu_available`: whether the run would train on a GPU (a calibration needs one).
struct RunRequest {
  int exit_code = 0;
  planner::Plan plan;
};
RunRequest check_run_request(const CliOptions& options, Terminal& terminal, bool gpu_available);

}  // namespace headroom::cli
