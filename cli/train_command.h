// `headroom-train run PLAN`: trains with a plan through the LibTorch executor and
// prints predicted vs measured memory per category (docs/executor.md). Linked
// only into headroom-train; the planner binary `headroom` execs that binary for
// `headroom run` and never loads LibTorch itself (cli/trainer_launch.h).
#pragma once

#include "cli/commands.h"

namespace headroom::cli {

int run_training(const CliOptions& options, Terminal& terminal);

}  // namespace headroom::cli
