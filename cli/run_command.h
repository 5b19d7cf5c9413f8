// `headroom run PLAN`: trains with a plan through the LibTorch executor and
// prints predicted vs measured memory per category (docs/executor.md).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace headroom::cli {

// The flags of `headroom run` (steps, data, checkpoints, resume, outputs).
void add_run_flags(CLI::App& command, CliOptions& options);

int run_training(const CliOptions& options, Terminal& terminal);

}  // namespace headroom::cli
